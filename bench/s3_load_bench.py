#!/usr/bin/python3
"""`rfos s3` under load beside the native client, in one run (docs/BENCHMARKS.md, "S3 under load").

  bench/s3_load_bench.py [--build build] [--provider ucx+shm] [--runtime 3] [--conns 1,4,16,64] [--sizes 4k,1m]

Starts a server (loopback only) and `rfos s3`, then:
  - `rfos bench` in the same server, per size: reads and writes (4 KiB: random, depth 16; 1 MiB: sequential,
    depth 4), before and after the S3 cells; their mean is the native figure (the ceiling);
  - build/bin/s3_load (bench/s3_load.cc), per size, direction and connection count: GETs or PUTs of objects of
    that size over that many keep-alive connections, each request SigV4-signed with its payload's SHA-256, and
    the gateway's CPU time per request (from /proc).
Prints a row per S3 cell with its ratio to the native figure of the same size and direction.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rfos_setup import Server, parser  # noqa: E402

NATIVE = {"4k": (("randread", "randwrite"), 16, "64m"), "1m": (("read", "write"), 4, "256m")}


def native(s, bs, write, runtime):
    rws, depth, size = NATIVE[bs]
    out = s.cli("bench", "--pool", "p", "--cont", "c", "--rw", rws[write], "--bs", bs, "--iodepth", str(depth),
                "--size", size, "--runtime", str(runtime), "--output-format", "json", check=True).stdout
    job = json.loads(out)["jobs"][0]
    return job["write" if write else "read"]["iops"]


def main():
    p = parser(__doc__)
    p.add_argument("--runtime", type=float, default=3)
    p.add_argument("--conns", default="1,4,16,64")
    p.add_argument("--sizes", default="4k,1m")
    args = p.parse_args()
    load = os.path.abspath(os.path.join(args.build, "bin", "s3_load"))
    if not os.path.exists(load):
        sys.exit("no %s: build the target s3_load" % load)
    sizes = args.sizes.split(",")
    if any(bs not in NATIVE for bs in sizes):
        sys.exit("--sizes: 4k and 1m only")
    conns = [int(c) for c in args.conns.split(",")]
    work = tempfile.mkdtemp(prefix="rfos-s3-load-", dir=args.dir)
    try:
        with Server(args.build, work, args.provider) as s, s.gateway() as (gw, endpoint, access, secret):
            base = [load, "--endpoint", endpoint.split("//")[-1], "--access-key", access, "--secret-key", secret,
                    "--bucket", "load", "--gateway-pid", str(gw.pid), "--output-format", "json"]
            subprocess.run(base + ["--create-bucket", "--rw", "write", "--bs", "1", "--runtime", "0.1"],
                           check=True, stdout=subprocess.DEVNULL)
            base += ["--runtime", str(args.runtime)]
            ceiling = {(bs, w): [native(s, bs, w, args.runtime)] for bs in sizes for w in (False, True)}
            rows = []
            for bs in sizes:
                for write in (False, True):
                    for n in conns:
                        r = subprocess.run(base + ["--rw", "write" if write else "read", "--bs", bs, "--iodepth",
                                                   str(n), "--nrfiles", str(max(64, n))],
                                           check=True, capture_output=True, text=True)
                        rows.append((bs, write, n, json.loads(r.stdout)))
            for (bs, w), v in ceiling.items():
                v.append(native(s, bs, w, args.runtime))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%s, %.0f s a cell; native: `rfos bench` (4k: random, depth 16; 1m: sequential, depth 4), the mean of "
          "a run before and one after the S3 cells" % (args.provider, args.runtime))
    print("| op | size | connections | S3 IOPS | S3 MiB/s | p50 / p99 latency | gateway CPU per request | "
          "native IOPS | S3 / native |")
    print("|---|---|---|---|---|---|---|---|---|")
    for bs, write, n, j in rows:
        nat = statistics.mean(ceiling[(bs, write)])
        print("| %s | %s | %d | %.0f | %.1f | %.0f / %.0f us | %.1f us | %.0f (%s) | **%.2f** |"
              % ("PUT" if write else "GET", bs, n, j["iops"], j["mib_s"], j["lat_p50_us"], j["lat_p99_us"],
                 j["gateway_cpu_us_per_op"], nat, " / ".join("%.0f" % x for x in ceiling[(bs, write)]),
                 j["iops"] / nat))


if __name__ == "__main__":
    main()
