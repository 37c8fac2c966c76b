#!/usr/bin/env python3
"""A server killed and started again under a mount: how long the mount takes to go on, per provider.

  bench/restart_bench.py [--build build] [--providers ucx+tcp,ucx+shm,ofi+tcp,ofi+shm] [--outage 3] [--reps 3]
                         [--dir /var/tmp]

Through `rfos mount` (ucx+... or ofi+..., one server with 2 targets), a file is written and fsync'ed; then the
server is killed (SIGKILL), left down for --outage seconds while a reader keeps reading the file through the
mount (each read an open, a read and a close), and started again on the same data. Reported per provider, the
medians over the reps: the reads made during the outage and how each ended; the reads that failed after the
restart (`rfos pool list` answering again); and the time from then to the first read that returned the file's
bytes: the mount's look at the control plane (docs/control-plane.md, "A server that restarts"). Needs root and
/dev/fuse.
"""
import errno
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rfos_setup  # noqa: E402


def one_restart(server, point, outage):
    path = os.path.join(point, "f")
    data = os.urandom(100_000)
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    during = []
    stop = threading.Event()

    def reader():  # during the outage: each read returns or fails as the mount answers it
        while not stop.is_set():
            try:
                with open(path, "rb") as inp:
                    inp.read()
                during.append("ok")
            except OSError as e:
                during.append(errno.errorcode.get(e.errno, str(e.errno)))

    server.kill()
    t = threading.Thread(target=reader)
    t.start()
    time.sleep(outage)  # the outage itself: how long the server stays down
    stop.set()
    server.start_again()
    back = time.monotonic()
    t.join()  # a read of the outage may still be waiting for its deadline
    failures = 0
    while True:
        try:
            with open(path, "rb") as inp:
                if inp.read() != data:
                    sys.exit("restart_bench: the file read back wrong after the restart")
            break
        except OSError:
            failures += 1
    return during, failures, time.monotonic() - back


def main():
    p = rfos_setup.parser(__doc__)
    p.add_argument("--providers", default="ucx+tcp,ucx+shm,ofi+tcp,ofi+shm")
    p.add_argument("--outage", type=float, default=3.0, help="seconds the server stays down")
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    rows = []
    for provider in args.providers.split(","):
        work = tempfile.mkdtemp(prefix="rfos-restart-", dir=args.dir)
        os.chmod(work, 0o755)
        try:
            with rfos_setup.Server(args.build, work, provider) as server, \
                    server.mount(os.path.join(work, "mnt")) as point:
                runs = [one_restart(server, point, args.outage) for _ in range(args.reps)]
        finally:
            shutil.rmtree(work, ignore_errors=True)
        for during, failures, secs in runs:
            print("%-8s outage %.0f s: %d reads during (%s), %d failed after, first read %.3f s after the restart"
                  % (provider, args.outage, len(during), ", ".join(sorted(set(during))), failures, secs), flush=True)
        rows.append((provider, statistics.median(len(r[0]) for r in runs), sorted({x for r in runs for x in r[0]}),
                     statistics.median(r[1] for r in runs), statistics.median(r[2] for r in runs)))
    print("\n%d reps, outage %.0f s, medians\n" % (args.reps, args.outage))
    print("| provider | reads during the outage | how they ended | reads failed after the restart | first read after |")
    print("|---|---|---|---|---|")
    for provider, n, ends, failures, secs in rows:
        print("| %s | %.0f | %s | %.0f | %.3f s |" % (provider, n, ", ".join(ends), failures, secs))


if __name__ == "__main__":
    main()
