#!/usr/bin/python3
"""`rfos s3` against the native client on the same server: large objects in and out through the gateway, beside
`rfos put` and `rfos get` of the same file (the ceiling: the same named-object put and get, without HTTP).

  bench/s3_bench.py [--build build] [--size 256m] [--reps 3] [--provider ucx+shm] [--dir /var/tmp]

Starts a server (loopback only) and `rfos s3` on 127.0.0.1, makes a bucket, then per rep, alternating:
  - `rfos put` of a --size file into the bucket's container and `rfos get` of it to /dev/null;
  - curl PUT of the same file to a presigned URL (one streamed PUT: the gateway computes its MD5, the
    ETag, as S3 does) and curl GET of it to /dev/null; the object is compared (its ETag with the file's MD5).
Prints MB/s medians and S3 / native ratios. curl, not a Python SDK, so that the client is not what binds.
Then, where the build has it, s3_rdma_bench (bench/s3_rdma_bench.cc) in the same server and gateway: the RDMA path (put_from /
get_into a registered buffer through the gateway) against NamedObjects put / get of the same buffer in that
process, and the same RDMA path through `rfos agent` (the agent lends the app's shared buffer), alternating per rep.
"""
import hashlib
import os
import pwd
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rfos_setup import Server, parser  # noqa: E402


def parse_size(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(text[:-1]) * units[text[-1].lower()] if text[-1].lower() in units else int(text)


def timed(cmd, env=None):
    t = time.monotonic()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.monotonic() - t


def wait_for_agent(sock, agent):
    # Ready once its socket takes a connection (it binds and listens at once); it answers nothing unasked.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if agent.poll() is not None:
            sys.exit("rfos agent exited with %d" % agent.returncode)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as c:
                c.connect(sock)
                return
        except OSError:
            time.sleep(0.05)
    sys.exit("rfos agent did not listen on %s" % sock)


def main():
    p = parser(__doc__)
    p.add_argument("--size", default="256m")
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        sys.exit("needs python3-boto3 (for presigned URLs)")
    if shutil.which("curl") is None:
        sys.exit("needs curl")
    size = parse_size(args.size)
    work = tempfile.mkdtemp(prefix="rfos-s3-bench-", dir=args.dir)
    try:
        data = os.path.join(work, "object.bin")
        md5 = hashlib.md5()
        with open(data, "wb") as f:
            for _ in range(0, size, 1 << 20):
                piece = os.urandom(min(1 << 20, size - f.tell()))
                md5.update(piece)
                f.write(piece)
        me = pwd.getpwuid(os.geteuid()).pw_name  # the agent runs as this user, for this user's bench
        with Server(args.build, work, args.provider, target_bytes=max(2 << 30, 4 * size),
                    extra=["--trust-agent", "%s=%s" % (me, me)]) as s:
            with s.gateway() as (gw, endpoint, access, secret):
                s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=access,
                                  aws_secret_access_key=secret,
                                  config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"))
                s3.create_bucket(Bucket="bench")
                figures = {"native put": [], "native get": [], "s3 put": [], "s3 get": []}
                for rep in range(args.reps):
                    figures["native put"].append(size / timed(
                        [s.rfos, "put", "-q", "--pool", "p", "--cont", "bench", "native", data], s.env))
                    figures["native get"].append(size / timed(
                        [s.rfos, "get", "-q", "--pool", "p", "--cont", "bench", "native", "/dev/null"], s.env))
                    put = s3.generate_presigned_url("put_object", Params={"Bucket": "bench", "Key": "s3"})
                    get = s3.generate_presigned_url("get_object", Params={"Bucket": "bench", "Key": "s3"})
                    figures["s3 put"].append(size / timed(["curl", "-sf", "-T", data, put]))
                    if s3.head_object(Bucket="bench", Key="s3")["ETag"] != '"%s"' % md5.hexdigest():
                        sys.exit("the object's ETag is not the file's MD5")
                    figures["s3 get"].append(size / timed(["curl", "-sf", "-o", "/dev/null", get]))
                med = {k: statistics.median(v) / 1e6 for k, v in figures.items()}
                print("%s, %d MiB objects, %d reps (medians, MB/s):" % (args.provider, size >> 20, args.reps))
                for k, v in figures.items():
                    print("  %-11s %8.1f   (%s)" % (k, med[k], " ".join("%.0f" % (x / 1e6) for x in v)))
                print("  s3 / native: put %.2f, get %.2f" % (med["s3 put"] / med["native put"],
                                                             med["s3 get"] / med["native get"]))
                rdma_bench = os.path.join(args.build, "bin", "s3_rdma_bench")
                if os.path.exists(rdma_bench):
                    sock = os.path.join(work, "agent.sock")
                    agent = subprocess.Popen([s.rfos, "agent", "--listen", sock, "--provider", args.provider],
                                             env=s.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    try:
                        wait_for_agent(sock, agent)
                        subprocess.run([rdma_bench, endpoint.split("//")[-1], access, secret, "p", "bench",
                                        str(size >> 20), str(args.reps), args.provider, sock], env=s.env, check=True)
                    finally:
                        agent.terminate()
                        agent.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
