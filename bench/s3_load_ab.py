#!/usr/bin/python3
"""Two or more builds or settings of `rfos s3` against each other, in alternating runs (docs/BENCHMARKS.md).

  bench/s3_load_ab.py --variant NAME=RFOS[,--flag value][,ENV:VALUE]... --variant ... [--reps 5] [--conns 16]
                      [--bs 1m] [--rw read|write] [--runtime 3] [--build build] [--provider ucx+shm]

One server (this build's); per rep, per variant in turn: a gateway from that variant's `rfos` binary (a copy of
an earlier build, say), with its flags and environment, then build/bin/s3_load of one cell against it. Prints each
run, then each variant's median rate and gateway CPU per request. This machine is noisy: only alternating runs
compared by their medians tell a change of a few percent from the noise.
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


def variant(text):
    name, rest = text.split("=", 1)
    parts = rest.split(",")
    flags = [w for p in parts[1:] if p.startswith("--") for w in p.split()]
    env = dict(p.split(":", 1) for p in parts[1:] if not p.startswith("--"))
    return name, os.path.abspath(parts[0]), flags, env


def main():
    p = parser(__doc__)
    p.add_argument("--variant", action="append", required=True, type=variant)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--conns", default="16")
    p.add_argument("--bs", default="1m")
    p.add_argument("--rw", choices=("read", "write"), default="read")
    p.add_argument("--runtime", type=float, default=3)
    args = p.parse_args()
    load = os.path.abspath(os.path.join(args.build, "bin", "s3_load"))
    runs = {name: [] for name, _, _, _ in args.variant}
    work = tempfile.mkdtemp(prefix="rfos-s3-ab-", dir=args.dir)
    try:
        with Server(args.build, work, args.provider) as s:
            own, env = s.rfos, dict(s.env)
            for _ in range(args.reps):
                for name, rfos, flags, extra in args.variant:
                    keys = os.path.join(work, "s3-keys.yaml")
                    if os.path.exists(keys):
                        os.unlink(keys)  # a fresh key pair: gateway() reads it from what the gateway prints
                    s.rfos, s.env = rfos, dict(env, **extra)
                    try:
                        with s.gateway(flags) as (gw, endpoint, access, secret):
                            s.rfos, s.env = own, env
                            base = [load, "--endpoint", endpoint.split("//")[-1], "--access-key", access,
                                    "--secret-key", secret, "--bucket", "ab-runs", "--gateway-pid", str(gw.pid),
                                    "--output-format", "json"]
                            subprocess.run(base + ["--create-bucket", "--rw", "write", "--bs", args.bs, "--runtime",
                                                   "0.3", "--iodepth", "4"], check=True, stdout=subprocess.DEVNULL)
                            out = subprocess.run(base + ["--rw", args.rw, "--bs", args.bs, "--runtime",
                                                         str(args.runtime), "--iodepth", args.conns],
                                                 capture_output=True, text=True, check=True).stdout
                    finally:
                        s.rfos, s.env = own, env
                    job = json.loads(out)
                    runs[name].append(job)
                    print("%-12s %8.1f /s  %8.1f us gateway CPU per request" %
                          (name, job["iops"], job["gateway_cpu_us_per_op"]), flush=True)
        print("%s %s, %s connections, %d alternating runs of %g s: medians" %
              (args.rw, args.bs, args.conns, args.reps, args.runtime))
        for name, jobs in runs.items():
            print("%-12s %8.1f /s  %8.1f us gateway CPU per request" %
                  (name, statistics.median(j["iops"] for j in jobs),
                   statistics.median(j["gateway_cpu_us_per_op"] for j in jobs)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
