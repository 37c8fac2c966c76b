#!/usr/bin/env python3
"""Rounds of small-file work against one server, to see whether the namespace slows as it ages: each round makes
N files of 3 KiB in a fresh directory through `rfos mount`, reads each whole, and unlinks them all.

  bench/namespace_rounds.py [--build build] [--files 2000] [--rounds 6] [--provider ucx+shm]

Prints each round's create, read and unlink rates (operations per second).
"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rfos_setup  # noqa: E402


def main():
    p = rfos_setup.parser(__doc__)
    p.add_argument("--files", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="rfos-rounds-", dir=args.dir)
    payload = b"x" * 3072
    try:
        with rfos_setup.Server(args.build, work, args.provider) as server, \
                server.mount(os.path.join(work, "mnt")) as root:
            for r in range(args.rounds):
                d = os.path.join(root, "d%d" % r)
                os.mkdir(d)
                names = [os.path.join(d, "f%d" % i) for i in range(args.files)]
                t0 = time.perf_counter()
                for n in names:
                    fd = os.open(n, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                    os.write(fd, payload)
                    os.close(fd)
                t1 = time.perf_counter()
                for n in names:
                    fd = os.open(n, os.O_RDONLY)
                    os.read(fd, 65536)
                    os.close(fd)
                t2 = time.perf_counter()
                for n in names:
                    os.unlink(n)
                t3 = time.perf_counter()
                n = args.files
                print("round %d: create %.0f/s  read %.0f/s  unlink %.0f/s" % (r, n / (t1 - t0), n / (t2 - t1),
                                                                            n / (t3 - t2)), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
