#!/usr/bin/env python3
"""Engine benchmark matrix beside its ceiling, measured in the same run.

For every case (update/fetch x sequential/random x block size x threads) it runs
  - rfos_engine_bench: the engine on a fresh target in --dir (durable updates, group commit), and
  - fio with io_uring and O_DIRECT on the same file system, same pattern, same number of jobs, iodepth 1,
    with an fdatasync per write where the engine syncs before it acknowledges,
alternating the two `--reps` times (the machine is shared and noisy), and reports the medians and the ratio.

fio's files get the same history as the engine's block file: written through the page cache (the engine
pre-zeroes its block file), and for reads then overwritten with 1 MiB O_DIRECT writes (the engine's layout).

  bench/engine_bench.py [--quick] [--build build] [--dir /var/tmp/rfos-bench] [--json out.json] [--markdown out.md]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

PATTERNS = [("write", "update", "seq"), ("randwrite", "update", "rand"), ("read", "fetch", "seq"),
            ("randread", "fetch", "rand")]


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out.stdout


# fio's buffers on transparent huge pages, as the engine's arena is: a 1 MiB buffer of 4 KiB pages may be 256
# memory segments, more than a virtio disk takes in one request (254), and fio's 1 MiB I/O then reached the
# device as two requests at a fraction of the speed (573 against 3292 1 MiB reads/s here).
FIO = ["env", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1", "fio", "--iomem_align=2m"]


def fio_case(args, rw, bs, threads, size):
    d = os.path.join(args.dir, "fio")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    common = FIO + ["--directory=" + d, "--filename_format=f.$jobnum", "--size=" + str(size),
              "--numjobs=" + str(threads), "--ioengine=io_uring", "--direct=1", "--iodepth=1",
              "--group_reporting", "--output-format=json"]
    # Layout through the page cache (fio's default for a new file), then, for reads, the engine's layout.
    run(common + ["--name=layout", "--rw=write", "--bs=1m", "--direct=0", "--end_fsync=1"])
    if rw in ("read", "randread"):
        run(common + ["--name=layout", "--rw=write", "--bs=1m", "--end_fsync=1"])
    cmd = common + ["--name=ceiling", "--rw=" + rw, "--bs=" + str(bs), "--runtime=" + str(args.runtime),
                    "--time_based"]
    if rw in ("write", "randwrite"):
        cmd.append("--fdatasync=1")
    j = json.loads(run(cmd))["jobs"][0]
    side = j["write"] if rw in ("write", "randwrite") else j["read"]
    shutil.rmtree(d, ignore_errors=True)
    return {"iops": side["iops"], "bw_bytes": side["bw_bytes"],
            "p50_ns": side["clat_ns"]["percentile"]["50.000000"] + side.get("slat_ns", {}).get("mean", 0),
            "p99_ns": side["clat_ns"]["percentile"]["99.000000"] + side.get("slat_ns", {}).get("mean", 0),
            "cmd": " ".join(cmd)}


def engine_case(args, rw, bs, threads, size):
    cmd = [os.path.join(args.build, "bin", "rfos_engine_bench"), "--dir", os.path.join(args.dir, "engine"),
           "--rw", rw, "--bs", str(bs), "--threads", str(threads), "--size", str(size),
           "--runtime", str(args.runtime)]
    j = json.loads(run(cmd))
    return {"iops": j["iops"], "bw_bytes": j["bw_bytes"], "p50_ns": j["lat_ns"]["p50"], "p99_ns": j["lat_ns"]["p99"],
            "direct_io": j["direct_io"], "cmd": " ".join(cmd)}


def median_of(results, key):
    return statistics.median(r[key] for r in results)


def human_bs(bs):
    return "1 MiB" if bs == 1 << 20 else "%d KiB" % (bs // 1024)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--dir", default="/var/tmp/rfos-bench")
    p.add_argument("--quick", action="store_true", help="1 rep, 3 s per run, 1 thread only")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--runtime", type=float, default=4)
    p.add_argument("--json")
    p.add_argument("--markdown")
    args = p.parse_args()
    if shutil.which("fio") is None:
        sys.exit("engine_bench: fio is not installed (apt-get install fio, or run scripts/install-deps)")
    threads_list = [1, 2]
    if args.quick:
        args.reps, args.runtime, threads_list = 1, 3, [1]
    os.makedirs(args.dir, exist_ok=True)

    cells = []
    started = time.time()
    for bs in (4096, 1 << 20):
        size = (64 << 20) if bs == 4096 else (256 << 20)
        for rw, op, order in PATTERNS:
            for threads in threads_list:
                eng, fio = [], []
                for _ in range(args.reps):
                    fio.append(fio_case(args, rw, bs, threads, size))
                    eng.append(engine_case(args, rw, bs, threads, size))
                cell = {"op": op, "order": order, "rw": rw, "bs": bs, "threads": threads,
                        "engine": {k: median_of(eng, k) for k in ("iops", "bw_bytes", "p50_ns", "p99_ns")},
                        "fio": {k: median_of(fio, k) for k in ("iops", "bw_bytes", "p50_ns", "p99_ns")},
                        "engine_runs": eng, "fio_runs": fio}
                cell["ratio"] = cell["engine"]["iops"] / cell["fio"]["iops"] if cell["fio"]["iops"] else 0
                cells.append(cell)
                e, f = cell["engine"], cell["fio"]
                print("%-6s %-4s %-6s jobs=%d  engine %9.0f IOPS %7.3f GiB/s p50 %7.1f us p99 %8.1f us | "
                      "fio %9.0f IOPS %7.3f GiB/s p50 %7.1f us | ratio %.2f" %
                      (op, order, human_bs(bs), threads, e["iops"], e["bw_bytes"] / 2**30, e["p50_ns"] / 1e3,
                       e["p99_ns"] / 1e3, f["iops"], f["bw_bytes"] / 2**30, f["p50_ns"] / 1e3, cell["ratio"]),
                      flush=True)
    elapsed = time.time() - started
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "dir": args.dir, "reps": args.reps,
            "runtime_s": args.runtime, "elapsed_s": round(elapsed, 1), "nproc": os.cpu_count(),
            "kernel": os.uname().release}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "cells": cells}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("Measured %s on %s (%d cores, kernel %s), %d rep(s) of %.0f s each, medians; %.0f s in all.\n\n" %
                    (meta["date"], args.dir, meta["nproc"], meta["kernel"], args.reps, args.runtime, elapsed))
            f.write("| op | pattern | bs | jobs | engine IOPS | engine GiB/s | engine p50 / p99 (us) | "
                    "fio IOPS | fio GiB/s | fio p50 (us) | ratio |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
            for c in cells:
                e, fi = c["engine"], c["fio"]
                f.write("| %s | %s | %s | %d | %.0f | %.3f | %.0f / %.0f | %.0f | %.3f | %.0f | **%.2f** |\n" %
                        (c["op"], c["order"], human_bs(c["bs"]), c["threads"], e["iops"], e["bw_bytes"] / 2**30,
                         e["p50_ns"] / 1e3, e["p99_ns"] / 1e3, fi["iops"], fi["bw_bytes"] / 2**30, fi["p50_ns"] / 1e3,
                         c["ratio"]))
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
