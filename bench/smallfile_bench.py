#!/usr/bin/env python3
"""Small files through `rfos mount` beside ext4 and bindfs (a FUSE passthrough over ext4) on the same disk, in one
run: the mdtest-style phases of issue 29, in the same order on each file system.

  bench/smallfile_bench.py [--build build] [--files 2000] [--size 3072] [--procs 1,4] [--reps 1]
                           [--provider ucx+shm] [--dir /var/tmp] [--mount-args "..."]

Each phase runs over N files of SIZE bytes: create+write+close, stat, open+read whole+close, readdir (a listing of
each directory with the attributes of every entry, as `ls -l` does), unlink. With P processes each works in a
directory of its own and the rate is the aggregate. Prints one Markdown table: operations per second on each file
system and rfos / bindfs. With --tree N, also `tar x` of an archive of N such files (in directories of 100) and
`cp -r` of the same tree from ext4 into each file system, synced (seconds, and files/s). Needs root, /dev/fuse
and bindfs (apt install bindfs).
"""
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rfos_setup  # noqa: E402

PHASES = ("create", "stat", "read", "readdir", "unlink")


_start = None  # each pool process's barrier: the processes of a phase start together


def _init(barrier):
    global _start
    _start = barrier


def _phase(job):
    """One process's part of a phase: (start, end, count), the times on the clock every process shares, so that the
    pool's dispatch of the jobs and the gathering of their answers stay out of the measured span; each process
    waits for the others before it starts (a phase of fast operations lasts tens of milliseconds, about what a
    process of the pool can take to be scheduled)."""
    phase, d, n, size = job
    names = ["f%06d" % i for i in range(n)]
    payload = os.urandom(size)
    _start.wait()
    t0 = time.clock_gettime(time.CLOCK_MONOTONIC)
    if phase == "create":
        for name in names:
            fd = os.open(os.path.join(d, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.write(fd, payload)
            os.close(fd)
    elif phase == "stat":
        for name in names:
            if os.stat(os.path.join(d, name)).st_size != size:
                raise RuntimeError("%s/%s: wrong size" % (d, name))
    elif phase == "read":
        for name in names:
            fd = os.open(os.path.join(d, name), os.O_RDONLY)
            got = os.read(fd, size + 1)
            os.close(fd)
            if len(got) != size:
                raise RuntimeError("%s/%s: read %d bytes" % (d, name, len(got)))
    elif phase == "readdir":
        seen = 0
        for e in os.scandir(d):
            e.stat(follow_symlinks=False)
            seen += 1
        if seen != n:
            raise RuntimeError("%s: listed %d entries, expected %d" % (d, seen, n))
    else:
        for name in names:
            os.unlink(os.path.join(d, name))
    return t0, time.clock_gettime(time.CLOCK_MONOTONIC), n


def run_phases(root, files, size, procs, pool):
    """Rates (ops/s, aggregate) of each phase for `procs` processes, each in a directory of its own under root."""
    base = os.path.join(root, "sf-%d-%d" % (procs, random.randint(0, 1 << 30)))
    os.mkdir(base)
    dirs = [os.path.join(base, "d%d" % p) for p in range(procs)]
    for d in dirs:
        os.mkdir(d)
    per = files // procs
    rates = {}
    for phase in PHASES:
        parts = pool.map(_phase, [(phase, d, per, size) for d in dirs])
        # From the first process's start to the last one's end: the aggregate, however skewed their starts.
        span = max(p[1] for p in parts) - min(p[0] for p in parts)
        rates[phase] = sum(p[2] for p in parts) / span
    for d in dirs:
        if os.listdir(d):
            sys.exit("smallfile_bench: %s is not empty after the unlinks" % d)
        os.rmdir(d)
    os.rmdir(base)
    return rates


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def tree_phases(systems, work, n, size, server):
    """Seconds for `tar x` and `cp -r` of an n-file tree into each file system and `cp -r` out of it to ext4, each
    followed by a sync; and for rfos, `rfos fs copy` in and out (no mount: the native API's batches)."""
    src = os.path.join(work, "tree-src")
    payload = os.urandom(size)
    for i in range(n):
        d = os.path.join(src, "d%03d" % (i // 100))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%06d" % i), "wb") as f:
            f.write(payload)
    archive = os.path.join(work, "tree.tar")
    with tarfile.open(archive, "w") as t:
        t.add(src, arcname="tree")
    out = {}
    for name, root in systems:
        for what, cmd in (("tar x", ["tar", "-xf", archive, "-C"]), ("cp -r", ["cp", "-r", src])):
            dst = os.path.join(root, "tree-" + what.replace(" ", ""))
            os.mkdir(dst)
            t0 = time.perf_counter()
            subprocess.run(cmd + [dst], check=True)
            # Durable, as the table's other file systems would be after sync (a FUSE mount has no syncfs: the
            # last file's fsync makes rfos's whole namespace durable, see docs/posix.md).
            fd = os.open(dst, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            out[(name, what)] = time.perf_counter() - t0
            if what == "cp -r":  # and back out to ext4, synced
                back = os.path.join(work, "tree-back")
                out[(name, "cp -r out")] = timed(lambda: subprocess.run(
                    ["sh", "-c", 'cp -r "$0" "$1" && sync -f "$1"', os.path.join(dst, "tree-src"), back], check=True))
                shutil.rmtree(back)
            subprocess.run(["rm", "-rf", dst], check=True)
        print("%-6s tar x %.1f s, cp -r %.1f s, cp -r out %.1f s" % (
            name, out[(name, "tar x")], out[(name, "cp -r")], out[(name, "cp -r out")]), flush=True)
    # rfos fs copy syncs what it wrote before it says done, in either direction.
    back = os.path.join(work, "tree-back")
    fs = ["fs", "copy", "--pool", "p", "--cont", "c"]
    out[("rfos", "fs copy")] = timed(lambda: server.cli(*fs, src, "rfos:/tree-fscopy", check=True))
    out[("rfos", "fs copy out")] = timed(lambda: server.cli(*fs, "rfos:/tree-fscopy", back, check=True))
    if subprocess.run(["diff", "-r", "-q", src, back]).returncode != 0:
        sys.exit("smallfile_bench: rfos fs copy did not copy the tree back as it was")
    shutil.rmtree(back)
    print("rfos   fs copy in %.1f s, out %.1f s" % (out[("rfos", "fs copy")], out[("rfos", "fs copy out")]), flush=True)
    return out


def main():
    p = rfos_setup.parser(__doc__)
    p.add_argument("--files", type=int, default=2000)
    p.add_argument("--size", type=int, default=3072)
    p.add_argument("--procs", default="1,4", help="process counts to run, comma-separated")
    p.add_argument("--reps", type=int, default=1, help="runs per file system and process count (medians)")
    p.add_argument("--mount-args", default="", help="more arguments for rfos mount")
    p.add_argument("--tree", type=int, default=0, help="also tar x and cp -r of a tree of this many files")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="rfos-smallfile-", dir=args.dir)
    procs_list = [int(x) for x in args.procs.split(",") if x]
    results = {}
    tree = {}
    try:
        with rfos_setup.bindfs_over(work) as (ext4, bind_point), \
                rfos_setup.Server(args.build, work, args.provider) as server, \
                server.mount(os.path.join(work, "rfos"), args.mount_args.split()) as rfos_point:
            systems = (("ext4", ext4), ("bindfs", bind_point), ("rfos", rfos_point))
            for procs in procs_list:
                # One job per process: each waits at the barrier, so none can take a second job of the phase.
                with multiprocessing.Pool(procs, initializer=_init, initargs=(multiprocessing.Barrier(procs),)) as pool:
                    for _ in range(args.reps):
                        for name, root in systems:  # alternating, so drift hits each alike
                            r = run_phases(root, args.files, args.size, procs, pool)
                            results.setdefault((name, procs), []).append(r)
                            print("%-6s procs %d: %s" % (name, procs, "  ".join(
                                "%s %.0f/s" % (ph, r[ph]) for ph in PHASES)), flush=True)
            tree = tree_phases(systems, work, args.tree, args.size, server) if args.tree else {}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("\n%d files of %d bytes, provider %s, %d rep(s), medians (ops/s; readdir in entries/s)\n"
          % (args.files, args.size, args.provider, args.reps))
    print("| procs | operation | ext4 | bindfs | rfos mount | rfos / bindfs |")
    print("|---|---|---|---|---|---|")
    for procs in procs_list:
        med = {name: {ph: statistics.median(r[ph] for r in results[(name, procs)]) for ph in PHASES}
               for name in ("ext4", "bindfs", "rfos")}
        for ph in PHASES:
            print("| %d | %s | %.0f | %.0f | %.0f | %.2f |" % (procs, ph, med["ext4"][ph], med["bindfs"][ph],
                                                             med["rfos"][ph], med["rfos"][ph] / med["bindfs"][ph]))
    if len(procs_list) > 1:  # the issue's scaling: the most processes' aggregate over one process's rate
        lo, hi = min(procs_list), max(procs_list)
        print("\n| operation | %d processes over %d: ext4 | bindfs | rfos |" % (hi, lo))
        print("|---|---|---|---|")
        for ph in PHASES:
            print("| %s | %s |" % (ph, " | ".join("%.2f" % (
                statistics.median(r[ph] for r in results[(name, hi)]) /
                statistics.median(r[ph] for r in results[(name, lo)])) for name in ("ext4", "bindfs", "rfos"))))
    for what in ("tar x", "cp -r", "cp -r out"):
        if tree:
            print("| tree | %s of %d files (files/s) | %.0f | %.0f | %.0f | %.2f |" % (
                what, args.tree, args.tree / tree[("ext4", what)], args.tree / tree[("bindfs", what)],
                args.tree / tree[("rfos", what)], tree[("bindfs", what)] / tree[("rfos", what)]))
    # The native API against the same ceiling as the mount: bindfs's cp -r in the same direction.
    for what, like in (("fs copy", "cp -r"), ("fs copy out", "cp -r out")):
        if tree:
            print("| tree | rfos %s of %d files, no mount (files/s) | | %.0f (%s) | %.0f | %.2f |" % (
                what, args.tree, args.tree / tree[("bindfs", like)], like, args.tree / tree[("rfos", what)],
                tree[("bindfs", like)] / tree[("rfos", what)]))


if __name__ == "__main__":
    main()
