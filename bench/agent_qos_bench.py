"""An agent's per-tenant QoS under contention, 4 KiB random reads through one agent (`rfos bench --agent`):

  --mode limit (default): a tenant held to --limit I/Os a second (root's apps, one job at depth 16) beside one
      without limits (nobody's apps) running flat out, then the limited tenant alone; prints each one's IOPS and
      the limited tenant's ratio to its limit.
  --mode agents: the limited tenant (root) served by two agents at once, one job through each: the targets hold
      the two together to the one limit signed into their capabilities.
  --mode weights: tenant "many" (root: four jobs at depth 64) beside tenant "one" (nobody: one job at depth 256,
      --one-depth), with weights --weights A:B, against the same with share_depth 1e9 (nothing held in the
      agent by the depth: requests wait at the targets, which serve their senders in turn, and the tenants' tags
      order only what the rings still hold); prints each one's IOPS and share, and the share its weight gives
      it. Both tenants keep 256 submitted, twice the agent's share_depth: a tenant gets its share while it keeps
      requests waiting in its rings (docs/agent.md, "QoS"), and an app woken for half its completions at a time
      has up to half its depth done and not yet resubmitted. With --rw randwrite, durable 4 KiB random writes
      instead; with --one-jobs N, tenant "one" runs N jobs (its depth split among them).

    python3 bench/agent_qos_bench.py [--build build] [--provider ucx+shm] [--mode limit|agents|weights] [--limit 5000]
                                     [--weights 1:1] [--rw randread|randwrite] [--one-jobs 1] [--one-depth 256]
                                     [--runtime 5] [--reps 3]
"""
import contextlib
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


def start_bench(server, sock, runtime, as_nobody, numjobs=1, iodepth=16, rw="randread"):
    cmd = [server.rfos, "bench", "--pool", "p", "--cont", "c", "--rw", rw, "--bs", "4k", "--iodepth",
           str(iodepth), "--numjobs", str(numjobs), "--size", "64m", "--runtime", str(runtime), "--output-format",
           "json", "--agent", sock]
    if as_nobody:
        cmd = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"] + cmd
    return subprocess.Popen(cmd, env=server.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def iops_of(proc):
    out, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit("rfos bench failed: " + err)
    return sum(j["read"]["iops"] + j["write"]["iops"] for j in json.loads(out)["jobs"])


@contextlib.contextmanager
def agent(server, work, provider, config_text, name="agent"):
    sock = os.path.join(work, name, "agent.sock")
    config = os.path.join(work, name + ".yaml")
    with open(config, "w") as f:
        f.write(config_text)
    proc = subprocess.Popen([server.rfos, "agent", "--config", config, "--listen", sock, "--provider", provider],
                            env=server.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        yield sock
    finally:
        proc.terminate()
        proc.wait()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock)


def limit_mode(args, server, work):
    together, alone, free = [], [], []
    config = ("tenants:\n  - name: limited\n    users: [root]\n    qos: {iops: %g}\n"
              "  - name: free\n    users: [nobody]\n" % args.limit)
    with agent(server, work, args.provider, config) as sock:
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
    print("\nprovider %s, 4 KiB random reads at depth 16, %d rep(s) of %.0f s, medians\n"
          % (args.provider, args.reps, args.runtime))
    print("| limit | limited tenant beside a free one | its ratio to the limit | the free tenant | limited alone | ratio |")
    print("|---|---|---|---|---|---|")
    t, s = statistics.median(together), statistics.median(alone)
    print("| %.0f IOPS | %.0f | %.3f | %.0f | %.0f | %.3f |" % (args.limit, t, t / args.limit, statistics.median(free),
                                                            s, s / args.limit))


def agents_mode(args, server, work):
    config = "tenants:\n  - name: limited\n    users: [root]\n    qos: {iops: %g}\n" % args.limit
    sums = []
    with agent(server, work, args.provider, config, "agent1") as s1, \
            agent(server, work, args.provider, config, "agent2") as s2:
        for _ in range(args.reps):
            a = start_bench(server, s1, args.runtime, False)
            b = start_bench(server, s2, args.runtime, False)
            ia, ib = iops_of(a), iops_of(b)
            sums.append(ia + ib)
            print("through agent 1 %.0f IOPS, through agent 2 %.0f IOPS: %.0f together (limit %.0f)"
                  % (ia, ib, ia + ib, args.limit), flush=True)
    t = statistics.median(sums)
    print("\nprovider %s, 4 KiB random reads at depth 16, one job through each of two agents, %d rep(s) of %.0f s, "
          "medians\n" % (args.provider, args.reps, args.runtime))
    print("| limit | the tenant through two agents | ratio to the limit |")
    print("|---|---|---|")
    print("| %.0f IOPS | %.0f | %.3f |" % (args.limit, t, t / args.limit))


def weights_mode(args, server, work):
    wa, wb = (float(x) for x in args.weights.split(":"))
    want = wa / (wa + wb)
    rows = {}
    for name, depth in (("shared by weight", ""), ("share_depth 1e9", "share_depth: 1e9\n")):
        config = (depth + "tenants:\n  - name: many\n    users: [root]\n    weight: %g\n"
                  "  - name: one\n    users: [nobody]\n    weight: %g\n" % (wa, wb))
        many, one = [], []
        with agent(server, work, args.provider, config) as sock:
            for _ in range(args.reps):
                a = start_bench(server, sock, args.runtime, False, numjobs=4, iodepth=64, rw=args.rw)
                b = start_bench(server, sock, args.runtime, True, numjobs=args.one_jobs,
                                iodepth=args.one_depth // args.one_jobs, rw=args.rw)
                ia, ib = iops_of(a), iops_of(b)
                many.append(ia)
                one.append(ib)
                print("%s: many %.0f IOPS, one %.0f IOPS: many's share %.3f (its weight's %.3f)"
                      % (name, ia, ib, ia / (ia + ib), want), flush=True)
        rows[name] = (statistics.median(many), statistics.median(one),
                      statistics.median([a / (a + b) for a, b in zip(many, one)]))
    print("\nprovider %s, 4 KiB %s; tenant many: 4 jobs at depth 64, weight %g; tenant one: %d job(s) at depth %d, "
          "weight %g; %d rep(s) of %.0f s, medians\n" % (args.provider, args.rw, wa, args.one_jobs,
                                                         args.one_depth // args.one_jobs, wb, args.reps,
                                                         args.runtime))
    print("| agent | many (IOPS) | one (IOPS) | many's share | its weight's share | ratio |")
    print("|---|---|---|---|---|---|")
    for name, (a, b, share) in rows.items():
        print("| %s | %.0f | %.0f | %.3f | %.3f | %.3f |" % (name, a, b, share, want, share / want))


def main():
    p = rfos_setup.parser(__doc__)
    p.add_argument("--mode", choices=["limit", "agents", "weights"], default="limit")
    p.add_argument("--limit", type=float, default=5000)
    p.add_argument("--weights", default="1:1")
    p.add_argument("--rw", choices=["randread", "randwrite"], default="randread")
    p.add_argument("--one-jobs", type=int, default=1)
    p.add_argument("--one-depth", type=int, default=256, help="tenant one's requests submitted, over its jobs")
    p.add_argument("--runtime", type=float, default=5)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="rfos-qos-bench-", dir=args.dir)
    os.chmod(work, 0o755)
    try:
        with rfos_setup.Server(args.build, work, args.provider,
                               extra=["--trust-agent", "root=root,nobody"]) as server:
            server.cli("pool", "acl", "update", "p", "-e", "A::nobody@:r", check=True)
            server.cli("cont", "acl", "update", "--pool", "p", "c", "-e", "A::nobody@:rw", check=True)
            {"limit": limit_mode, "agents": agents_mode, "weights": weights_mode}[args.mode](args, server, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
