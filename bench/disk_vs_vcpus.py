#!/usr/bin/env python3
"""Does the disk slow down when the virtual CPUs are busy? fio alone, then beside one and two busy loops.

On a virtual machine whose disk is emulated by host threads that share the host CPUs of its vCPUs, a vCPU that
spins (a polling transport, or anything else) leaves less to the disk, even when the spinning threads run at the
lowest priority and fio gets its vCPU whenever it wants it. Each case runs fio (io_uring, O_DIRECT, the
provider matrix's settings) with 0, 1 and 2 `nice -n 19` busy loops beside it, the three taking turns --reps
times, and prints the medians. docs/BENCHMARKS.md ("The disk runs on the host CPUs of the vCPUs") has the figures.

  bench/disk_vs_vcpus.py [--dir /var/tmp] [--runtime 3] [--reps 3]
"""
import argparse
import os
import subprocess
import sys
import shutil
import tempfile
from statistics import median

from provider_matrix import fio_cmd, fio_layout, fio_run

CASES = [("randread", 4096, 1, "64m"), ("randread", 4096, 16, "64m"), ("read", 1 << 20, 4, "256m"),
         ("write", 1 << 20, 4, "256m")]


def with_busy_loops(n, cmd, rw):
    """fio's IOPS with n busy loops at the lowest priority running beside it."""
    loops = [subprocess.Popen(["nice", "-n", "19", "sh", "-c", "while :; do :; done"]) for _ in range(n)]
    try:
        return fio_run(cmd, rw)
    finally:
        for p in loops:
            p.kill()
            p.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--runtime", type=float, default=3)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    if shutil.which("fio") is None:
        sys.exit("disk_vs_vcpus: fio is not installed (scripts/install-deps installs it)")
    work = tempfile.mkdtemp(prefix="rfos-disk-", dir=args.dir)
    print("| pattern | bs | depth | fio alone IOPS | beside 1 busy loop | beside 2 busy loops |\n" + "|---" * 6 + "|")
    try:
        for rw, bs, depth, size in CASES:
            fio_layout(work, size)
            cmd = fio_cmd(work, rw, bs, depth, args.runtime, size)
            runs = {n: [] for n in (0, 1, 2)}
            for _ in range(args.reps):
                for n in runs:
                    runs[n].append(with_busy_loops(n, cmd, rw))
            alone = median(runs[0])
            print("| %s | %s | %d | %.0f (%s) | %s | %s |" % (
                rw, "4k" if bs == 4096 else "1m", depth, alone, "/".join("%.0f" % x for x in runs[0]),
                *("%.0f (%.2f)" % (median(runs[n]), median(runs[n]) / alone) for n in (1, 2))), flush=True)
            shutil.rmtree(os.path.join(work, "fio"), ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
