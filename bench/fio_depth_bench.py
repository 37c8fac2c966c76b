#!/usr/bin/env python3
"""fio with io_uring at depth through `rfos mount`, beside ext4 and bindfs (a FUSE passthrough over ext4) on the same
disk, and `rfos bench` over the same server with the same pattern: the cells of issue 29's table, in one run.

  bench/fio_depth_bench.py [--build build] [--runtime 5] [--reps 1] [--provider ucx+shm] [--dir /var/tmp]
                           [--cells write-1m-buffered,...] [--keep-cache]

Each cell runs one fio job on a 512 MiB file (written first, outside the measured time). Write cells end with
fsync (every byte stored inside the measured time), as `rfos bench` updates are durable when acknowledged.
With --reps N the file systems alternate N times per cell and the medians are shown. fio drops the file's pages
from the page cache (fadvise DONTNEED) as it opens the file, and over a time-based run they do not stay (seen
through the mount); --keep-cache (fio's --invalidate=0) keeps them, so the page-cache cells show each file
system's cache in the kernel rather than what serves its misses. Needs root, /dev/fuse, fio and bindfs.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rfos_setup  # noqa: E402

# name, rw, bs, depth, direct
CELLS = [
    ("write-1m-buffered", "write", "1m", 4, False),
    ("read-1m-buffered", "read", "1m", 4, False),
    ("write-1m-direct", "write", "1m", 4, True),
    ("read-1m-direct", "read", "1m", 4, True),
    ("randread-4k-direct", "randread", "4k", 16, True),
    ("randread-4k-buffered", "randread", "4k", 16, False),
]
SIZE = "512m"


def fio(directory, rw, bs, depth, direct, runtime, size=SIZE, keep_cache=False):
    cmd = ["fio", "--name=depth", "--directory=" + directory, "--filename=depth.dat", "--rw=" + rw, "--bs=" + bs,
           "--iodepth=%d" % depth, "--ioengine=io_uring", "--size=" + size, "--runtime=%g" % runtime,
           "--time_based", "--output-format=json", "--direct=%d" % (1 if direct else 0)]
    if keep_cache:
        cmd.append("--invalidate=0")
    if "write" in rw:
        cmd.append("--end_fsync=1")
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("fio_depth_bench: %s failed: %s" % (" ".join(cmd), out.stderr[-2000:]))
    side = json.loads(out.stdout)["jobs"][0]["write" if "write" in rw else "read"]
    return side["iops"], side["bw_bytes"]


def prepare(directory):
    """The file every cell works on, written whole and synced."""
    subprocess.run(["fio", "--name=prep", "--directory=" + directory, "--filename=depth.dat", "--rw=write",
                    "--bs=1m", "--size=" + SIZE, "--end_fsync=1", "--output=/dev/null"], check=True)


def native(server, rw, bs, depth, runtime):
    out = server.cli("bench", "--pool", "p", "--cont", "c", "--rw", rw, "--bs", bs, "--numjobs", "1", "--iodepth",
                     str(depth), "--size", SIZE, "--runtime", str(runtime), "--output-format", "json")
    if out.returncode != 0:
        sys.exit("fio_depth_bench: rfos bench failed: %s" % out.stderr)
    side = json.loads(out.stdout)["jobs"][0]["write" if "write" in rw else "read"]
    return side["iops"], side["bw_bytes"]


def main():
    p = rfos_setup.parser(__doc__)
    p.add_argument("--runtime", type=float, default=5)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--cells", default="", help="only these cells (names as in CELLS)")
    p.add_argument("--keep-cache", action="store_true",
                   help="fio's --invalidate=0: the page cache is not dropped before each pass over the file")
    args = p.parse_args()
    if shutil.which("fio") is None:
        sys.exit("fio_depth_bench: fio is not installed")
    chosen = set(c for c in args.cells.split(",") if c)
    work = tempfile.mkdtemp(prefix="rfos-fio-depth-", dir=args.dir)
    results = {}
    try:
        with rfos_setup.bindfs_over(work) as (ext4, bind_point), \
                rfos_setup.Server(args.build, work, args.provider, target_bytes=3 << 30) as server, \
                server.mount(os.path.join(work, "rfos")) as rfos_point:
            systems = (("ext4", ext4), ("bindfs", bind_point), ("rfos", rfos_point))
            prepare(ext4)
            prepare(rfos_point)
            for name, rw, bs, depth, direct in CELLS:
                if chosen and name not in chosen:
                    continue
                for _ in range(args.reps):
                    for sysname, root in systems:
                        r = fio(root, rw, bs, depth, direct, args.runtime, keep_cache=args.keep_cache)
                        results.setdefault((name, sysname), []).append(r)
                    results.setdefault((name, "native"), []).append(native(server, rw, bs, depth, args.runtime))
                    print("%-22s %s" % (name, "  ".join("%s %.0f IOPS %.0f MiB/s" % (
                        s, results[(name, s)][-1][0], results[(name, s)][-1][1] / 2**20)
                        for s in ("ext4", "bindfs", "rfos", "native"))), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("\nfio io_uring, one job, %s file, provider %s, %d rep(s), medians; MiB/s (IOPS for 4 KiB cells)\n"
          % (SIZE, args.provider, args.reps))
    print("| cell | ext4 | bindfs | rfos mount | rfos bench (same pattern) | mount / bindfs | mount / rfos bench |")
    print("|---|---|---|---|---|---|---|")
    for name, rw, bs, depth, direct in CELLS:
        if (name, "rfos") not in results:
            continue
        med = {s: [statistics.median(x[i] for x in results[(name, s)]) for i in (0, 1)]
               for s in ("ext4", "bindfs", "rfos", "native")}
        k = 0 if bs == "4k" else 1
        fmt = (lambda v: "%.1fk" % (v / 1000)) if k == 0 else (lambda v: "%.0f" % (v / 2**20))
        print("| %s qd%d | %s | %s | %s | %s | %.2f | %.2f |" % (
            name, depth, fmt(med["ext4"][k]), fmt(med["bindfs"][k]), fmt(med["rfos"][k]), fmt(med["native"][k]),
            med["rfos"][k] / med["bindfs"][k], med["rfos"][k] / med["native"][k]))


if __name__ == "__main__":
    main()
