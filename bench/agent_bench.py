"""Host mode against agent mode: `rfos bench` in-process and through `rfos agent`, the same patterns alternating
in one run, the app and the agent pinned to different cores (as on a host and its DPU), with the CPU time each
spends per GiB moved and per 1k I/Os.

    python3 bench/agent_bench.py [--build build] [--provider ucx+shm] [--runtime 4] [--reps 3]
        [--app-cpus 0] [--agent-cpus 1] [--server-cpus LIST] [--seal]
        [--patterns read:1m:4,write:1m:4,randread:4k:16,randwrite:4k:16]

Prints one row per pattern: IOPS and MiB/s in each mode, their ratio (agent / host), and the app's CPU seconds
per GiB and per 1k I/Os in each mode, with the agent's beside them.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rfos_setup  # noqa: E402

def bench(server, args, rw, bs, depth, agent_sock):
    cmd = ["taskset", "-c", args.app_cpus, server.rfos, "bench", "--pool", "p", "--cont", "c", "--rw", rw, "--bs",
           bs, "--iodepth", str(depth), "--size", "64m", "--runtime", str(args.runtime), "--output-format", "json"]
    if agent_sock:
        cmd += ["--agent", agent_sock]
    out = subprocess.run(cmd, env=server.env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("rfos bench failed: " + out.stderr)
    j = json.loads(out.stdout)
    side = j["jobs"][0]["write" if "write" in rw else "read"]
    return {"iops": side["iops"], "bw": side["bw_bytes"], "cpu": j["rfos_cpu"]}


def main():
    p = rfos_setup.parser(__doc__)
    p.add_argument("--runtime", type=float, default=4)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--app-cpus", default="0")
    p.add_argument("--agent-cpus", default="1")
    p.add_argument("--server-cpus", default="",
                   help="keep the server's threads to these CPUs (default: all); e.g. the app's, so that the agent's "
                        "core is its own, as a DPU's are")
    p.add_argument("--seal", action="store_true",
                   help="also through a second agent whose tenant seals its data (AES-256-GCM)")
    p.add_argument("--patterns", default="read:1m:4,write:1m:4,randread:4k:16,randwrite:4k:16",
                   help="rw:bs:iodepth, comma-separated")
    args = p.parse_args()
    patterns = [(rw, bs, int(d)) for rw, bs, d in (x.split(":") for x in args.patterns.split(","))]
    work = tempfile.mkdtemp(prefix="rfos-agent-bench-", dir=args.dir)
    sock = os.path.join(work, "agent", "agent.sock")
    rows = {}
    try:
        with rfos_setup.Server(args.build, work, args.provider, extra=["--trust-agent", "root=root"],
                               cpus=args.server_cpus or None) as server:
            agents = [subprocess.Popen([server.rfos, "agent", "--listen", sock, "--cpus", args.agent_cpus,
                                        "--provider", args.provider], env=server.env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
            modes = [("host", None), ("agent", sock)]
            if args.seal:
                config = rfos_setup.sealing_agent_config(work)
                sealed_sock = os.path.join(work, "agent", "sealed.sock")
                agents.append(subprocess.Popen([server.rfos, "agent", "--config", config, "--listen", sealed_sock,
                                                "--cpus", args.agent_cpus, "--provider", args.provider],
                                               env=server.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                modes.append(("sealed", sealed_sock))
            try:
                for _ in range(200):
                    if all(os.path.exists(m[1]) for m in modes if m[1]):
                        break
                    time.sleep(0.05)
                for _ in range(args.reps):
                    for rw, bs, depth in patterns:
                        for mode, s in modes:
                            r = bench(server, args, rw, bs, depth, s)
                            rows.setdefault((rw, bs, depth, mode), []).append(r)
                            print("%-9s %-3s depth %2d %-6s: %8.0f IOPS %8.1f MiB/s  app cpu %.2f s  agent cpu %.2f s"
                                  % (rw, bs, depth, mode, r["iops"], r["bw"] / 2**20, r["cpu"]["app_s"],
                                     r["cpu"]["agent_s"]), flush=True)
            finally:
                for a in agents:
                    a.terminate()
                    a.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(rw, bs, depth, mode, f):
        return statistics.median(f(r) for r in rows[(rw, bs, depth, mode)])

    print("\nprovider %s, app on CPUs %s, agent on CPUs %s, server on CPUs %s, %d rep(s) of %.0f s, medians\n"
          % (args.provider, args.app_cpus, args.agent_cpus, args.server_cpus or "all", args.reps, args.runtime))
    print("| pattern | host MiB/s | agent MiB/s | agent / host | app CPU s per GiB, host | app, agent mode | "
          "agent's own | app CPU s per 1k I/Os, host | app, agent mode | agent's own |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rw, bs, depth in patterns:
        h = med(rw, bs, depth, "host", lambda r: r["bw"])
        a = med(rw, bs, depth, "agent", lambda r: r["bw"])
        cpu = {(mode, k): med(rw, bs, depth, mode, lambda r: r["cpu"][k])
               for mode in ("host", "agent") for k in ("app_s_per_gib", "app_s_per_kio", "agent_s_per_gib",
                                                        "agent_s_per_kio") if k in rows[(rw, bs, depth, mode)][0]["cpu"]}
        print("| %s %s depth %d | %.1f | %.1f | %.2f | %.3f | %.3f | %.3f | %.4f | %.4f | %.4f |" % (
            rw, bs, depth, h / 2**20, a / 2**20, a / h, cpu[("host", "app_s_per_gib")],
            cpu[("agent", "app_s_per_gib")], cpu[("agent", "agent_s_per_gib")], cpu[("host", "app_s_per_kio")],
            cpu[("agent", "app_s_per_kio")], cpu[("agent", "agent_s_per_kio")]))
    if args.seal:
        print("\n| pattern | agent MiB/s | sealing agent MiB/s | sealed / plain | agent CPU s per GiB: plain | sealed |")
        print("|---|---|---|---|---|---|")
        for rw, bs, depth in patterns:
            a = med(rw, bs, depth, "agent", lambda r: r["bw"])
            z = med(rw, bs, depth, "sealed", lambda r: r["bw"])
            print("| %s %s depth %d | %.1f | %.1f | %.2f | %.3f | %.3f |" % (
                rw, bs, depth, a / 2**20, z / 2**20, z / a,
                med(rw, bs, depth, "agent", lambda r: r["cpu"]["agent_s_per_gib"]),
                med(rw, bs, depth, "sealed", lambda r: r["cpu"]["agent_s_per_gib"])))


if __name__ == "__main__":
    main()
