#!/usr/bin/python3
"""rfos put / get of one large file beside their ceilings from the same run.

  bench/put_get_bench.py [--build build] [--size 1g] [--reps 3] [--provider ucx+tcp] [--dir /var/tmp]

Starts a server on 127.0.0.1 (its own data directory and control socket, loopback only), then per rep, in turn:
  - `rfos put` of a --size file, `rfos get` of it back (compared with cmp, outside the timing);
  - `rfos bench --rw write|read --bs 1m --iodepth 16 --numjobs 1 --size SIZE --io-size SIZE` (the same bytes once,
    sequential, the
    same depth put and get keep: the data plane's figure for this transfer);
  - `cp` of the file into and out of `rfos mount` (root and /dev/fuse only), with a final sync, as put's exit
    status promises durability.
Prints each figure in MB/s and put and get as ratios to rfos bench's, medians over reps.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def parse_size(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(text[:-1]) * units[text[-1].lower()] if text[-1].lower() in units else int(text)


def timed(cmd, env):
    t = time.monotonic()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.monotonic() - t


def settle(rfos, env):
    """Waits until every target has aggregated past the newest epoch: the space a replaced or removed object held
    is reclaimed, so that the next step does not pay for the last one's background work."""
    deadline = time.monotonic() + 60
    target = None
    while time.monotonic() < deadline:
        out = subprocess.run([rfos, "pool", "query", "default"], env=env, check=True, capture_output=True,
                             text=True).stdout
        m = re.search(r"epoch (\d+)  aggregated to (\d+)", out)
        epoch, aggregated = int(m.group(1)), int(m.group(2))
        target = target or epoch
        if aggregated >= target:
            return
        time.sleep(0.1)  # polls the server's report


def bench_mbps(rfos, env, rw, size):
    out = subprocess.run([rfos, "bench", "--rw", rw, "--bs", "1m", "--iodepth", "16", "--numjobs", "1",
                          "--size", size, "--io-size", size, "--runtime", "120", "--output-format", "json"],
                         env=env, check=True, capture_output=True, text=True).stdout
    job = json.loads(out)["jobs"][0]
    return job["write" if rw == "write" else "read"]["bw_bytes"] / 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--size", default="1g")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--provider", default="ucx+tcp")
    p.add_argument("--dir", default="/var/tmp")
    args = p.parse_args()
    rfos = os.path.abspath(os.path.join(args.build, "bin", "rfos"))
    size = parse_size(args.size)
    work = tempfile.mkdtemp(prefix="rfos-putget-", dir=args.dir)
    sock = os.path.join(work, "control.sock")
    env = dict(os.environ, UCX_NET_DEVICES="lo", FI_TCP_IFACE="lo", FI_NET_IFACE="lo", RFOS_ADDR="unix:" + sock)
    server = subprocess.Popen([rfos, "server", "--data-dir", os.path.join(work, "data"), "--control-socket", sock,
                               "--provider", args.provider, "--targets", "2",
                               "--target-bytes", str(max(16 * size, 8 << 30) // 2), "--create-defaults"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in server.stdout:  # the server says when it serves
            if "are ready" in line:
                break
        src = os.path.join(work, "in.bin")
        with open(src, "wb") as f:
            for _ in range(size >> 20):
                f.write(os.urandom(1 << 20))
        can_mount = os.geteuid() == 0 and os.path.exists("/dev/fuse") and shutil.which("fusermount3")
        rows = {k: [] for k in ("put", "get", "bench write", "bench read", "cp into mount", "cp out of mount")}
        for rep in range(args.reps):
            settle(rfos, env)
            rows["put"].append(size / timed([rfos, "put", "-q", "big", src], env) / 1e6)
            settle(rfos, env)
            rows["bench write"].append(bench_mbps(rfos, env, "write", args.size))
            settle(rfos, env)
            back = os.path.join(work, "back.bin")
            rows["get"].append(size / timed([rfos, "get", "-q", "big", back], env) / 1e6)
            subprocess.run(["cmp", src, back], check=True)
            os.unlink(back)
            settle(rfos, env)
            rows["bench read"].append(bench_mbps(rfos, env, "read", args.size))
            settle(rfos, env)
            if can_mount:
                mnt = os.path.join(work, "mnt")
                os.makedirs(mnt, exist_ok=True)
                subprocess.run([rfos, "mount", mnt], env=env, check=True)
                try:
                    dst = os.path.join(mnt, "big.bin")
                    rows["cp into mount"].append(size / timed(["sh", "-c", "cp %s %s && sync %s" % (src, dst, dst)],
                                                              env) / 1e6)
                    settle(rfos, env)
                    subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], check=False)
                    rows["cp out of mount"].append(size / timed(["cp", dst, back], env) / 1e6)
                    os.unlink(back)
                    os.unlink(dst)
                    settle(rfos, env)
                finally:
                    subprocess.run(["fusermount3", "-u", "-z", mnt], check=False)
        med = {k: statistics.median(v) for k, v in rows.items() if v}
        print("rfos put/get of %s over %s, %d reps (medians, MB/s):" % (args.size, args.provider, args.reps))
        for k, v in med.items():
            print("  %-16s %8.0f   %s" % (k, v, " ".join("%.0f" % x for x in rows[k])))
        print("  put / bench write: %.2f   get / bench read: %.2f" % (med["put"] / med["bench write"],
                                                                   med["get"] / med["bench read"]))
        if "cp into mount" in med:
            print("  put / cp into mount: %.2f   get / cp out of mount: %.2f" % (
                med["put"] / med["cp into mount"], med["get"] / med["cp out of mount"]))
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
