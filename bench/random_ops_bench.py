#!/usr/bin/env python3
"""Small random operations through `rfos mount` beside bindfs (a FUSE passthrough over ext4) on the same disk, in
one run: the issue-29 cells a file-system exerciser would stress.

  bench/random_ops_bench.py [--build build] [--ops 20000] [--procs 4] [--stress-ops 5000] [--reps 3] [--by-op]

- one file: `--ops` random operations on one file, each checked against a model of its bytes as it goes (pwrite of
  1 B .. 64 KiB, pread of a random range compared with the model, truncate, and a read through mmap compared
  with the model), the fsx pattern;
- namespace stress: `--procs` processes, `--stress-ops` each, in two shared directories: create with a few bytes,
  rename (within and across the directories), unlink, mkdir and rmdir, stat, readdir; errors that races make
  (ENOENT, EEXIST, ENOTEMPTY) count as done, any other fails the run.

Prints seconds per cell for each file system (medians, alternating) and rfos / bindfs (time ratio; the issue
asks within 2x); with --by-op, also the one-file cell's seconds in each kind of call (summed over the reps).
Needs root, /dev/fuse and bindfs.
"""
import errno
import mmap
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rfos_setup  # noqa: E402

MAX_SIZE = 1 << 20


def one_file(root, ops, seed, times=None):
    """With `times` (a dict), adds each kind of operation's seconds to it (the call alone, checks left out)."""
    rng = random.Random(seed)
    clock = time.perf_counter

    def timed(kind, t0):
        if times is not None:
            times[kind] = times.get(kind, 0.0) + clock() - t0

    path = os.path.join(root, "fsx-%d" % seed)
    model = bytearray()
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    try:
        for i in range(ops):
            op = rng.random()
            if op < 0.40:  # write
                off = rng.randrange(0, MAX_SIZE - 1)
                n = min(rng.randrange(1, 64 * 1024), MAX_SIZE - off)
                data = rng.randbytes(n)
                t0 = clock()
                os.pwrite(fd, data, off)
                timed("pwrite", t0)
                if off > len(model):
                    model.extend(bytes(off - len(model)))
                model[off:off + n] = data
            elif op < 0.80:  # read
                off = rng.randrange(0, MAX_SIZE)
                n = rng.randrange(1, 64 * 1024)
                t0 = clock()
                got = os.pread(fd, n, off)
                timed("pread", t0)
                if got != bytes(model[off:off + n]):
                    raise AssertionError("op %d: read %d at %d differs from the model" % (i, n, off))
            elif op < 0.90:  # truncate
                size = rng.randrange(0, MAX_SIZE)
                t0 = clock()
                os.ftruncate(fd, size)
                timed("ftruncate", t0)
                if size < len(model):
                    del model[size:]
                else:
                    model.extend(bytes(size - len(model)))
            else:  # a read through mmap
                if not model:
                    continue
                t0 = clock()
                with mmap.mmap(fd, len(model), prot=mmap.PROT_READ) as m:
                    off = rng.randrange(0, len(model))
                    n = min(rng.randrange(1, 64 * 1024), len(model) - off)
                    got = m[off:off + n]
                timed("mmap read", t0)
                if got != bytes(model[off:off + n]):
                    raise AssertionError("op %d: mmap read %d at %d differs from the model" % (i, n, off))
            t0 = clock()
            seen = os.fstat(fd).st_size
            timed("fstat", t0)
            if seen != len(model):
                raise AssertionError("op %d: size %d, model %d" % (i, seen, len(model)))
    finally:
        os.close(fd)
        os.unlink(path)


RACES = (errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR)


def stress(job):
    root, ops, seed = job
    rng = random.Random(seed)
    dirs = [os.path.join(root, "s0"), os.path.join(root, "s1")]
    name = lambda: os.path.join(rng.choice(dirs), "n%d" % rng.randrange(200))  # noqa: E731
    for _ in range(ops):
        op = rng.random()
        try:
            if op < 0.30:
                fd = os.open(name(), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(fd, b"x" * rng.randrange(1, 3000))
                os.close(fd)
            elif op < 0.45:
                os.rename(name(), name())
            elif op < 0.60:
                os.unlink(name())
            elif op < 0.65:
                os.mkdir(name())
            elif op < 0.70:
                os.rmdir(name())
            elif op < 0.90:
                os.stat(name())
            else:
                for e in os.scandir(rng.choice(dirs)):
                    try:
                        e.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        pass
        except OSError as e:
            if e.errno not in RACES:
                raise
    return ops


def run_cells(root, args, pool, rep, times):
    out = {}
    t0 = time.perf_counter()
    one_file(root, args.ops, rep, times)
    out["one file"] = time.perf_counter() - t0
    for d in ("s0", "s1"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    t0 = time.perf_counter()
    pool.map(stress, [(root, args.stress_ops, 1000 * rep + p) for p in range(args.procs)])
    out["stress"] = time.perf_counter() - t0
    for d in ("s0", "s1"):
        shutil.rmtree(os.path.join(root, d))
    return out


def main():
    p = rfos_setup.parser(__doc__)
    p.add_argument("--ops", type=int, default=20000)
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--stress-ops", type=int, default=5000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--by-op", action="store_true", help="also the one-file cell's time in each kind of call")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="rfos-randomops-", dir=args.dir)
    results = {}
    times = {"bindfs": {}, "rfos": {}}
    try:
        with rfos_setup.bindfs_over(work) as (_, bind_point), \
                rfos_setup.Server(args.build, work, args.provider) as server, \
                server.mount(os.path.join(work, "rfos")) as rfos_point, \
                multiprocessing.Pool(args.procs) as pool:
            for rep in range(args.reps):
                for name, root in (("bindfs", bind_point), ("rfos", rfos_point)):
                    r = run_cells(root, args, pool, rep, times[name] if args.by_op else None)
                    for cell, s in r.items():
                        results.setdefault((name, cell), []).append(s)
                    print("%-6s rep %d: %s" % (name, rep, "  ".join("%s %.2f s" % kv for kv in r.items())),
                          flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| cell | bindfs (s) | rfos mount (s) | rfos / bindfs (time) |")
    print("|---|---|---|---|")
    for cell, what in (("one file", "%d random operations on one file, checked" % args.ops),
                       ("stress", "%d processes x %d mixed namespace operations" % (args.procs, args.stress_ops))):
        b = statistics.median(results[("bindfs", cell)])
        r = statistics.median(results[("rfos", cell)])
        print("| %s | %.2f | %.2f | %.2f |" % (what, b, r, r / b))
    if args.by_op:
        print("\n| one-file call (all reps) | bindfs (s) | rfos mount (s) |")
        print("|---|---|---|")
        for kind in sorted(times["rfos"]):
            print("| %s | %.2f | %.2f |" % (kind, times["bindfs"].get(kind, 0.0), times["rfos"][kind]))


if __name__ == "__main__":
    main()
