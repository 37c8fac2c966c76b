"""What sealing costs through the layouts the agent runs (docs/agent.md, "Inline encryption"): `rfos --agent SOCK
put` and `get` of a named object and of a file of the namespace, through an agent whose tenant seals its data
(AES-256-GCM) and through one that does not, alternating, each get compared with what was put. The ceiling of
each sealed figure is the plain agent's in the same run.

    python3 bench/agent_seal_objects_bench.py [--build build] [--provider ucx+shm] [--size-mib 256] [--reps 3]
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rfos_setup  # noqa: E402


def start_agent(server, args, sock, config=None):
    cmd = [server.rfos, "agent", "--listen", sock, "--provider", args.provider]
    if config:
        cmd += ["--config", config]
    proc = subprocess.Popen(cmd, env=server.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while not os.path.exists(sock):
        if proc.poll() is not None or time.time() > deadline:
            sys.exit("rfos agent did not start")
        time.sleep(0.05)
    return proc


def main():
    p = rfos_setup.parser(__doc__)
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="rfos-seal-objects-", dir=args.dir)
    os.chmod(work, 0o755)
    src, back = os.path.join(work, "src.bin"), os.path.join(work, "back.bin")
    with open(src, "wb") as f:
        f.write(os.urandom(args.size_mib << 20))
    with open(src, "rb") as f:
        want = f.read()
    agents = []
    try:
        with rfos_setup.Server(args.build, work, args.provider, extra=["--trust-agent", "root=root"]) as server:
            config = rfos_setup.sealing_agent_config(work)
            socks = {"plain": os.path.join(work, "agent", "plain.sock"),
                     "sealed": os.path.join(work, "agent", "sealed.sock")}
            agents.append(start_agent(server, args, socks["plain"]))
            agents.append(start_agent(server, args, socks["sealed"], config))
            mib_s = {}
            for rep in range(args.reps):
                for mode, sock in socks.items():
                    for kind, name in (("object", "obj-%s-%d" % (mode, rep)), ("file", "/file-%s-%d" % (mode, rep))):
                        for op, argv in (("put", [name, src]), ("get", [name, back])):
                            t = time.time()
                            server.cli("--agent", sock, op, "--pool", "p", "--cont", "c", *argv, check=True)
                            mib_s.setdefault((mode, kind, op), []).append(args.size_mib / (time.time() - t))
                        with open(back, "rb") as f:
                            if f.read() != want:
                                sys.exit("%s %s came back different" % (mode, name))
                        os.unlink(back)
                        print("%s %s: put %.0f MiB/s, get %.0f MiB/s" % (mode, kind, mib_s[(mode, kind, "put")][-1],
                                                                        mib_s[(mode, kind, "get")][-1]), flush=True)
    finally:
        for a in agents:
            a.terminate()
        shutil.rmtree(work, ignore_errors=True)
    print("\nprovider %s, %d MiB, %d rep(s), medians (each a whole `rfos` command: its start included)\n"
          % (args.provider, args.size_mib, args.reps))
    print("| what | plain agent MiB/s | sealing agent MiB/s | sealed / plain |")
    print("|---|---|---|---|")
    for kind in ("object", "file"):
        for op in ("put", "get"):
            a = statistics.median(mib_s[("plain", kind, op)])
            b = statistics.median(mib_s[("sealed", kind, op)])
            print("| %s %s | %.0f | %.0f | %.2f |" % (kind, op, a, b, b / a))


if __name__ == "__main__":
    main()
