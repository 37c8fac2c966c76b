#!/usr/bin/env python3
"""fio on `rfos mount` against `rfos bench` on the native client: same server, same provider, same pattern,
jobs and depth, in one run; then an mdtest-like metadata run through the mount.

  bench/mount_bench.py [--build build] [--runtime 5] [--reps 1] [--provider ucx+tcp] [--files 2000]
                       [--bigdir 100000 --procs 8] [--no-fio] [--cells buffered-write,...]

Needs root and /dev/fuse (FUSE), fio. Prints a Markdown table: each mount figure beside the native one and
their ratio (with --reps N, native and mount runs alternate N times per cell and the medians are compared; the
range of the N pairs' ratios is shown); then creates / stats / unlinks per second for N files in one directory and spread over many
(one process); with --bigdir, one directory grown to that many entries by --procs processes at once, listed
whole (every name exactly once), stat'ed, and emptied again.
"""
import argparse
import json
import multiprocessing
import statistics
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

# mode (how fio reaches the mount), rw, bs, numjobs, iodepth, size per job. Modes: "buffered" (page cache,
# the default mount), "direct" (fio --direct=1), "writeback" (a mount with --writeback-cache). Write cells fsync
# at the end, so every byte reached the store inside the measured time.
CASES = [
    ("buffered", "read", "1m", 1, 4, "256m"),
    ("direct", "read", "1m", 1, 4, "256m"),
    ("buffered", "write", "1m", 1, 4, "256m"),
    ("direct", "write", "1m", 1, 4, "256m"),
    ("writeback", "write", "1m", 1, 4, "256m"),
    ("buffered", "randread", "4k", 4, 1, "64m"),
    ("buffered", "randwrite", "4k", 4, 1, "64m"),
]


def fio_on_mount(mnt, mode, rw, bs, jobs, depth, size, runtime):
    cmd = ["fio", "--name=mount", "--directory=" + mnt, "--rw=" + rw, "--bs=" + bs, "--numjobs=%d" % jobs,
           "--iodepth=%d" % depth, "--ioengine=io_uring" if depth > 1 else "--ioengine=psync", "--size=" + size,
           "--runtime=%g" % runtime, "--time_based", "--group_reporting", "--output-format=json"]
    if mode == "direct":
        cmd.append("--direct=1")
    if "write" in rw:
        # Every byte stored before the time stops, as rfos bench's acknowledged (durable) updates are.
        cmd.append("--end_fsync=1")
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("mount_bench: %s failed: %s" % (" ".join(cmd), out.stderr))
    side = json.loads(out.stdout)["jobs"][0]["write" if "write" in rw else "read"]
    return side["iops"], side["bw_bytes"], " ".join(cmd)


def native(rfos, env, rw, bs, jobs, depth, size, runtime):
    cmd = [rfos, "bench", "--pool", "p", "--cont", "c", "--rw", rw, "--bs", bs, "--numjobs", str(jobs), "--iodepth",
           str(depth), "--size", size, "--runtime", str(runtime), "--output-format", "json"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("mount_bench: %s failed: %s" % (" ".join(cmd), out.stderr))
    side = json.loads(out.stdout)["jobs"][0]["write" if "write" in rw else "read"]
    return side["iops"], side["bw_bytes"], " ".join(cmd)


def metadata(mnt, files, dirs):
    """Creates, stats and unlinks `files` files spread over `dirs` directories; returns ops/s of each phase."""
    root = os.path.join(mnt, "md-%d-%d" % (dirs, random.randint(0, 1 << 30)))
    os.mkdir(root)
    paths = []
    for d in range(dirs):
        os.mkdir(os.path.join(root, "d%d" % d))
    for i in range(files):
        paths.append(os.path.join(root, "d%d" % (i % dirs), "f%d" % i))
    rates = []
    for phase in (lambda p: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)), os.stat, os.unlink):
        t0 = time.perf_counter()
        for p in paths:
            phase(p)
        rates.append(len(paths) / (time.perf_counter() - t0))
    shutil.rmtree(root)
    return rates


def _bigdir_phase(job):
    phase, d, lo, hi = job
    for i in range(lo, hi):
        p = os.path.join(d, "entry-%07d" % i)
        if phase == "create":
            os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        elif phase == "stat":
            os.stat(p)
        else:
            os.unlink(p)
    return hi - lo


def bigdir(mnt, n, procs):
    """One directory with n entries: created by `procs` processes at once, listed whole (each name once),
    stat'ed and unlinked in parallel; returns ops/s of create, list (entries/s), stat, unlink."""
    d = os.path.join(mnt, "bigdir-%d" % random.randint(0, 1 << 30))
    os.mkdir(d)
    step = (n + procs - 1) // procs
    jobs = lambda phase: [(phase, d, lo, min(n, lo + step)) for lo in range(0, n, step)]
    rates = {}
    with multiprocessing.Pool(procs) as pool:
        for phase in ("create", "list", "stat", "unlink"):
            t0 = time.perf_counter()
            if phase == "list":
                names = [e.name for e in os.scandir(d)]
                if len(names) != n or len(set(names)) != n:
                    sys.exit("mount_bench: listing %s gave %d names (%d distinct), expected %d"
                             % (d, len(names), len(set(names)), n))
            else:
                done = sum(pool.map(_bigdir_phase, jobs(phase)))
                assert done == n
            rates[phase] = n / (time.perf_counter() - t0)
            print("bigdir %-6s %d entries: %.0f/s" % (phase, n, rates[phase]), flush=True)
    if os.listdir(d):
        sys.exit("mount_bench: %s is not empty after unlinking every entry" % d)
    os.rmdir(d)
    return rates


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--runtime", type=float, default=5)
    p.add_argument("--provider", default="ucx+tcp")
    p.add_argument("--files", type=int, default=2000, help="files of the metadata runs (0: none)")
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--bigdir", type=int, default=0, help="also grow one directory to this many entries")
    p.add_argument("--procs", type=int, default=8, help="processes that work on the big directory at once")
    p.add_argument("--no-fio", action="store_true", help="metadata runs only")
    p.add_argument("--reps", type=int, default=1, help="native and mount runs alternating per cell (medians)")
    p.add_argument("--cells", default="", help="only these cells, as mode-rw (buffered-write,direct-read,...)")
    args = p.parse_args()
    if shutil.which("fio") is None:
        sys.exit("mount_bench: fio is not installed (scripts/install-deps installs it)")
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        sys.exit("mount_bench: needs root and /dev/fuse")
    rfos = os.path.abspath(os.path.join(args.build, "bin", "rfos"))
    env = dict(os.environ)
    env.setdefault("UCX_NET_DEVICES", "lo")
    env.setdefault("FI_TCP_IFACE", "lo")
    env.setdefault("FI_NET_IFACE", "lo")
    work = tempfile.mkdtemp(prefix="rfos-mount-bench-", dir=args.dir)
    env["RFOS_ADDR"] = "unix:" + os.path.join(work, "control.sock")
    server = subprocess.Popen([rfos, "server", "--data-dir", os.path.join(work, "data"), "--control-socket",
                               env["RFOS_ADDR"][5:], "--provider", args.provider, "--target-bytes", str(2 << 30)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mounts = {}
    rows = []
    big = None
    try:
        for _ in range(240):
            if subprocess.run([rfos, "pool", "create", "p"], env=env, capture_output=True).returncode == 0:
                break
            time.sleep(0.5)
        subprocess.run([rfos, "cont", "create", "--pool", "p", "c"], env=env, check=True, capture_output=True)
        mounts = {}
        for mode, extra in (("buffered", []), ("writeback", ["--writeback-cache"])):
            point = os.path.join(work, "mnt-" + mode)
            os.mkdir(point)
            mounts[mode] = (point, subprocess.Popen([rfos, "mount", "-f", "--pool", "p", "--cont", "c"] + extra +
                                                    [point], env=env, stdout=subprocess.DEVNULL,
                                                    stderr=subprocess.DEVNULL))
            for _ in range(200):
                if os.path.ismount(point):
                    break
                time.sleep(0.05)
        mounts["direct"] = mounts["buffered"]
        mnt = mounts["buffered"][0]
        cells = set(c for c in args.cells.split(",") if c)
        for mode, rw, bs, jobs, depth, size in ([] if args.no_fio else CASES):
            if cells and "%s-%s" % (mode, rw) not in cells:
                continue
            pairs = []
            for _ in range(max(1, args.reps)):
                n = native(rfos, env, rw, bs, jobs, depth, size, args.runtime)
                m = fio_on_mount(mounts[mode][0], mode, rw, bs, jobs, depth, size, args.runtime)
                pairs.append((n, m))
                print("%-9s %-9s %-3s jobs %d qd%-2d native %9.0f IOPS %7.1f MiB/s | mount %9.0f IOPS %7.1f MiB/s | "
                      "%.2f" % (mode, rw, bs, jobs, depth, n[0], n[1] / 2**20, m[0], m[1] / 2**20, m[0] / n[0]),
                      flush=True)
            n_iops, n_bw = (statistics.median(p[0][i] for p in pairs) for i in (0, 1))
            m_iops, m_bw = (statistics.median(p[1][i] for p in pairs) for i in (0, 1))
            ratios = [p[1][0] / p[0][0] for p in pairs]
            rows.append((mode, rw, bs, jobs, depth, n_iops, n_bw, m_iops, m_bw, min(ratios), max(ratios)))
            for f in os.listdir(mnt):
                os.unlink(os.path.join(mnt, f))
        md = [(1, metadata(mnt, args.files, 1)), (50, metadata(mnt, args.files, 50))] if args.files else []
        big = bigdir(mnt, args.bigdir, args.procs) if args.bigdir else None
    finally:
        for mode in ("buffered", "writeback"):
            if mode in mounts:
                subprocess.run(["fusermount3", "-u", "-z", mounts[mode][0]], check=False)
                mounts[mode][1].wait(timeout=30)
        server.terminate()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
    print("\n| fio on the mount | pattern | bs | jobs | depth | native IOPS | native MiB/s | mount IOPS | mount MiB/s |"
          " mount / native%s |" % (" (pairs)" if args.reps > 1 else ""))
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode, rw, bs, jobs, depth, n_iops, n_bw, m_iops, m_bw, lo, hi in rows:
        print("| %s | %s | %s | %d | %d | %.0f | %.1f | %.0f | %.1f | **%.2f**%s |"
              % (mode, rw, bs, jobs, depth, n_iops, n_bw / 2**20, m_iops, m_bw / 2**20, m_iops / n_iops,
                 " (%.2f-%.2f)" % (lo, hi) if args.reps > 1 else ""))
    if md:
        print("\n| metadata, %d files | creates/s | stats/s | unlinks/s |\n|---|---|---|---|" % args.files)
    for dirs, (c, s, u) in md:
        print("| in %d director%s | %.0f | %.0f | %.0f |" % (dirs, "y" if dirs == 1 else "ies", c, s, u))
    if big:
        print("\n| one directory, %d entries, %d processes | creates/s | listed entries/s | stats/s | unlinks/s |"
              "\n|---|---|---|---|---|" % (args.bigdir, args.procs))
        print("| through the mount | %.0f | %.0f | %.0f | %.0f |"
              % (big["create"], big["list"], big["stat"], big["unlink"]))


if __name__ == "__main__":
    main()
