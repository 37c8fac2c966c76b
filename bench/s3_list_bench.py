#!/usr/bin/python3
"""S3 listings of buckets of growing size through `rfos s3`, in one run (docs/BENCHMARKS.md, "S3 listings").

  bench/s3_list_bench.py [--build build] [--provider ucx+shm] [--keys 1000,10000,100000] [--reps 5]

Starts a server (loopback only) and `rfos s3`, fills
bucket `list` with keys load/0 .. load/N-1 (build/bin/s3_load's fill: 1-byte PUTs over 16 connections), and at
each size times, with boto3, the median of --reps requests of:
  - first:  ListObjectsV2, the first page (MaxKeys 100);
  - middle: ListObjectsV2 from StartAfter load/<N/2> (100 keys);
  - folded: ListObjectsV2 with Delimiter "/" (every key folds into one common prefix, which the listing must get
            past: one entry given);
  - prefix: ListObjectsV2 of Prefix load/1 (100 keys of the 11% that have it);
  - get:    a GET of one 1-byte key, the ceiling: one request through the same client, gateway and target.
Prints each cell in ms and as a multiple of the GET, and each page's time at N keys over its time at the first N.
Run it with --build of another checkout's build to compare versions (the server and gateway of one build).
"""
import bisect
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rfos_setup import Server, parser  # noqa: E402

PAGE = 100  # keys per page: every page cell gives this many at every size (the client's XML parsing alike)


def timed(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main():
    p = parser(__doc__)
    p.add_argument("--keys", default="1000,10000,100000")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    try:
        import boto3
        import botocore.config
    except ImportError:
        sys.exit("needs python3-boto3")
    load = os.path.abspath(os.path.join(args.build, "bin", "s3_load"))
    if not os.path.exists(load):
        sys.exit("no %s: build the target s3_load" % load)
    sizes = [int(k) for k in args.keys.split(",")]
    work = tempfile.mkdtemp(prefix="rfos-s3-list-", dir=args.dir)
    results = {}  # keys -> {cell: ms}
    try:
        with Server(args.build, work, args.provider) as s:
            with s.gateway() as (gw, endpoint, access, secret):
                c = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=access,
                                 aws_secret_access_key=secret,
                                 config=botocore.config.Config(retries={"max_attempts": 1}))
                for n in sizes:
                    subprocess.run([load, "--endpoint", endpoint.split("//")[-1], "--access-key", access,
                                    "--secret-key", secret, "--bucket", "list", "--create-bucket", "--rw", "read",
                                    "--bs", "1", "--nrfiles", str(n), "--iodepth", "16", "--runtime", "0.1"],
                                   check=True, stdout=subprocess.DEVNULL)
                    middle = "load/%d" % (n // 2)
                    cells = {
                        "first": lambda: c.list_objects_v2(Bucket="list", MaxKeys=PAGE),
                        "middle": lambda: c.list_objects_v2(Bucket="list", StartAfter=middle, MaxKeys=PAGE),
                        "folded": lambda: c.list_objects_v2(Bucket="list", Delimiter="/"),
                        "prefix": lambda: c.list_objects_v2(Bucket="list", Prefix="load/1", MaxKeys=PAGE),
                        "get": lambda: c.get_object(Bucket="list", Key="load/0")["Body"].read(),
                    }
                    r = c.list_objects_v2(Bucket="list", Delimiter="/")
                    if [x["Prefix"] for x in r.get("CommonPrefixes", [])] != ["load/"] or r["KeyCount"] != 1:
                        sys.exit("the folded listing is wrong: %s" % r.get("CommonPrefixes"))
                    keys = sorted("load/%d" % i for i in range(n))
                    want = keys[bisect.bisect_right(keys, middle):][:PAGE]
                    if [o["Key"] for o in cells["middle"]()["Contents"]] != want:
                        sys.exit("the page after %s is wrong" % middle)
                    for fn in cells.values():
                        fn()  # warm
                    results[n] = {cell: timed(fn, args.reps) for cell, fn in cells.items()}
    finally:
        subprocess.run(["rm", "-rf", work], check=False)

    cells = ("first", "middle", "folded", "prefix")
    print("| keys | first page | middle page | folded (delimiter) | prefix page | GET (ceiling) |")
    print("|---|---|---|---|---|---|")
    for n, r in results.items():
        row = ["%.1f ms (%.1fx)" % (r[c], r[c] / r["get"]) for c in cells]
        print("| %d | %s | %.2f ms |" % (n, " | ".join(row), r["get"]))
    print()
    for n in sizes[1:]:
        print("page time at %d keys over its time at %d: %s" % (
            n, sizes[0], ", ".join("%s %.2f" % (c, results[n][c] / results[sizes[0]][c]) for c in cells)))


if __name__ == "__main__":
    main()
