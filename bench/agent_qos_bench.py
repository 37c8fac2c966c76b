"""An agent's per-tenant limits under contention: a tenant held to --limit I/Os a second (root's apps) and one
without limits (nobody's apps) run `rfos bench --agent` at once through one agent; then the limited tenant
alone. Prints each one's IOPS and the limited tenant's ratio to its limit.

    python3 bench/agent_qos_bench.py [--build build] [--provider ucx+shm] [--limit 5000] [--runtime 5] [--reps 3]
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


def start_bench(server, sock, runtime, as_nobody):
    cmd = [server.rfos, "bench", "--pool", "p", "--cont", "c", "--rw", "randread", "--bs", "4k", "--iodepth", "16",
           "--size", "64m", "--runtime", str(runtime), "--output-format", "json", "--agent", sock]
    if as_nobody:
        cmd = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"] + cmd
    return subprocess.Popen(cmd, env=server.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def iops_of(proc):
    out, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit("rfos bench failed: " + err)
    return json.loads(out)["jobs"][0]["read"]["iops"]


def main():
    p = rfos_setup.parser(__doc__)
    p.add_argument("--limit", type=float, default=5000)
    p.add_argument("--runtime", type=float, default=5)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="rfos-qos-bench-", dir=args.dir)
    os.chmod(work, 0o755)
    sock = os.path.join(work, "agent", "agent.sock")
    together, alone, free = [], [], []
    try:
        with rfos_setup.Server(args.build, work, args.provider,
                               extra=["--trust-agent", "root=root,nobody"]) as server:
            server.cli("pool", "acl", "update", "p", "-e", "A::nobody@:r", check=True)
            server.cli("cont", "acl", "update", "--pool", "p", "c", "-e", "A::nobody@:rw", check=True)
            config = os.path.join(work, "agent.yaml")
            with open(config, "w") as f:
                f.write("tenants:\n  - name: limited\n    users: [root]\n    qos: {iops: %g}\n"
                        "  - name: free\n    users: [nobody]\n" % args.limit)
            agent = subprocess.Popen([server.rfos, "agent", "--config", config, "--listen", sock, "--provider",
                                      args.provider], env=server.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
            try:
                for _ in range(200):
                    if os.path.exists(sock):
                        break
                    time.sleep(0.05)
                for _ in range(args.reps):
                    a = start_bench(server, sock, args.runtime, False)
                    b = start_bench(server, sock, args.runtime, True)
                    la, fb = iops_of(a), iops_of(b)
                    together.append(la)
                    free.append(fb)
                    solo = iops_of(start_bench(server, sock, args.runtime, False))
                    alone.append(solo)
                    print("limited %.0f IOPS beside free %.0f IOPS; limited alone %.0f IOPS (limit %.0f)"
                          % (la, fb, solo, args.limit), flush=True)
            finally:
                agent.terminate()
                agent.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\nprovider %s, 4 KiB random reads at depth 16, %d rep(s) of %.0f s, medians\n"
          % (args.provider, args.reps, args.runtime))
    print("| limit | limited tenant beside a free one | its ratio to the limit | the free tenant | limited alone | ratio |")
    print("|---|---|---|---|---|---|")
    t, s = statistics.median(together), statistics.median(alone)
    print("| %.0f IOPS | %.0f | %.3f | %.0f | %.0f | %.3f |" % (args.limit, t, t / args.limit, statistics.median(free),
                                                            s, s / args.limit))


if __name__ == "__main__":
    main()
