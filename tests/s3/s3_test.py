#!/usr/bin/python3
"""`rfos s3` against real S3 clients from Debian (awscli, boto3, rclone, s3cmd) and raw HTTP: buckets, objects, ranges,
conditions, listings, presigned URLs, aws-chunked uploads, and the refusals of bad signatures, skewed clocks,
bad digests and cut-off uploads, each of which must change nothing.

  s3_test.py RFOS_BINARY [unittest args]

Real processes on loopback: an `rfos server` (ucx+tcp pinned to lo) and `rfos s3` on 127.0.0.1.
Needs Debian's python3-boto3, awscli, rclone and s3cmd (scripts/install-deps); fails, saying so, without them.
"""
import base64
import datetime
import hashlib
import hmac
import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
import zlib

try:
    import boto3
    import botocore
    from botocore.config import Config
except ImportError:
    sys.exit("s3_test: needs Debian's python3-boto3 (scripts/install-deps installs it)")

RFOS = None
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
AWS = "/usr/bin/aws"
ENV = dict(os.environ, UCX_NET_DEVICES="lo", FI_TCP_IFACE="lo", FI_NET_IFACE="lo")


def wait_line(proc, needle, what):
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("%s did not start" % what)
        if needle in line:
            return line


class Cluster:
    """A server with a pool 'default', and a gateway with a key pair it made."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="rfos-s3-", dir=os.environ.get("RFOS_TEST_DIR"))
        self.start_server()
        self.cli("pool", "create", "default")
        self.keys_file = os.path.join(self.dir, "keys", "s3-keys.yaml")
        self.gateway_log = open(os.path.join(self.dir, "gateway.log"), "w+")
        self.gateway = subprocess.Popen(
            [RFOS, "--addr", self.addr, "s3", "--listen", "127.0.0.1:0", "--keys-file", self.keys_file,
             "--domain", "s3.test"],
            env=ENV, stdout=subprocess.PIPE, stderr=self.gateway_log, text=True)
        line = wait_line(self.gateway, "listening on http://", "rfos s3")
        self.endpoint = line.split("listening on ")[1].split()[0]
        self.port = int(self.endpoint.rsplit(":", 1)[1])
        self.access = wait_line(self.gateway, "access key:", "rfos s3").split(":", 1)[1].strip()
        self.secret = wait_line(self.gateway, "secret key:", "rfos s3").split(":", 1)[1].strip()

    def start_server(self):
        """The server, on the data directory and control socket it had before if it ran already (a restart)."""
        sock = os.path.join(self.dir, "control.sock")
        self.server = subprocess.Popen(
            [RFOS, "server", "--data-dir", os.path.join(self.dir, "data"), "--control-socket", sock,
             "--targets", "2", "--target-bytes", str(1536 << 20), "--provider", "ucx+tcp",
             "--trust-agent", "root=nobody"],  # a gateway run by root may act for nobody: anonymous requests
            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = wait_line(self.server, "listening on ", "rfos server")
        self.addr = line.split("listening on ")[1].split()[0]

    def cli(self, *args, check=True, input=None):
        out = subprocess.run([RFOS, "--addr", self.addr] + list(args), env=ENV, capture_output=True, input=input)
        if check and out.returncode != 0:
            raise RuntimeError("rfos %s: %s" % (" ".join(args), out.stderr.decode()))
        return out

    def client(self, secret=None, access=None):
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=access or self.access, aws_secret_access_key=secret or self.secret,
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                                          signature_version="s3v4"))

    def aws(self, *args, check=True):
        env = dict(ENV, AWS_ACCESS_KEY_ID=self.access, AWS_SECRET_ACCESS_KEY=self.secret,
                   AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
        out = subprocess.run([AWS, "--endpoint-url", self.endpoint] + list(args), env=env, capture_output=True,
                             text=True)
        if check and out.returncode != 0:
            raise RuntimeError("aws %s: %s" % (" ".join(args), out.stderr))
        return out

    def stop(self):
        """Stops both; False when the gateway had died or did not shut down cleanly (a sanitizer's report)."""
        died = self.gateway.poll() is not None
        for p in (self.gateway, self.server):
            if p.poll() is None:
                p.terminate()
                p.wait()
            p.stdout.close()
        ok = not died and self.gateway.returncode == 0
        if not ok:
            self.gateway_log.seek(0)
            print("rfos s3 %s with %s:\n%s" % ("died" if died else "exited", self.gateway.returncode,
                                               self.gateway_log.read()), file=sys.stderr)
        self.gateway_log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return ok


CLUSTER = None


def error_code(fn):
    try:
        fn()
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"]
    return None


def sign_v4(secret, key_date, region, to_sign):
    k = hmac.new(("AWS4" + secret).encode(), key_date.encode(), hashlib.sha256).digest()
    for part in (region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k, hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()


class S3Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = CLUSTER
        cls.s3 = CLUSTER.client()

    def bucket(self, name):
        self.s3.create_bucket(Bucket=name)
        self.addCleanup(self.empty_and_remove, name)
        return name

    def empty_and_remove(self, name):
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            for o in page.get("Contents", []):
                self.s3.delete_object(Bucket=name, Key=o["Key"])
        self.s3.delete_bucket(Bucket=name)

    def test_gateway_keys_are_private(self):
        self.assertEqual(os.stat(self.c.keys_file).st_mode & 0o777, 0o600)
        self.assertEqual(os.stat(os.path.dirname(self.c.keys_file)).st_mode & 0o777, 0o700)

    def test_buckets(self):
        self.bucket("buckets-one")
        names = [b["Name"] for b in self.s3.list_buckets()["Buckets"]]
        self.assertIn("buckets-one", names)
        self.s3.head_bucket(Bucket="buckets-one")
        self.assertEqual(error_code(lambda: self.s3.create_bucket(Bucket="buckets-one")), "BucketAlreadyOwnedByYou")
        self.assertEqual(error_code(lambda: self.s3.head_bucket(Bucket="no-such-bucket")), "404")
        self.assertEqual(error_code(lambda: self.s3.list_objects_v2(Bucket="no-such-bucket")), "NoSuchBucket")
        self.assertEqual(error_code(lambda: self.s3.create_bucket(Bucket="Bad_Name")), "InvalidBucketName")
        self.s3.put_object(Bucket="buckets-one", Key="k", Body=b"x")
        self.assertEqual(error_code(lambda: self.s3.delete_bucket(Bucket="buckets-one")), "BucketNotEmpty")
        # A bucket is a container: the CLI sees it.
        self.assertIn("buckets-one", self.c.cli("cont", "list", "--pool", "default").stdout.decode())

    def test_objects_with_metadata_and_etags(self):
        b = self.bucket("objects")
        data = os.urandom(3 << 20)
        r = self.s3.put_object(Bucket=b, Key="dir/a.bin", Body=data, ContentType="application/x-test",
                               Metadata={"origin": "s3-test"}, CacheControl="no-cache")
        self.assertEqual(r["ETag"], '"%s"' % hashlib.md5(data).hexdigest())
        got = self.s3.get_object(Bucket=b, Key="dir/a.bin")
        self.assertEqual(got["Body"].read(), data)
        self.assertEqual(got["ContentType"], "application/x-test")
        self.assertEqual(got["Metadata"], {"origin": "s3-test"})
        self.assertEqual(got["CacheControl"], "no-cache")
        self.assertEqual(got["ETag"], r["ETag"])
        head = self.s3.head_object(Bucket=b, Key="dir/a.bin")
        self.assertEqual(head["ContentLength"], len(data))
        self.assertEqual(head["ETag"], r["ETag"])
        # Empty objects, and replacing one object by a shorter one.
        self.s3.put_object(Bucket=b, Key="empty", Body=b"")
        self.assertEqual(self.s3.get_object(Bucket=b, Key="empty")["Body"].read(), b"")
        self.assertEqual(self.s3.head_object(Bucket=b, Key="empty")["ETag"], '"%s"' % hashlib.md5(b"").hexdigest())
        self.s3.put_object(Bucket=b, Key="dir/a.bin", Body=b"short")
        self.assertEqual(self.s3.get_object(Bucket=b, Key="dir/a.bin")["Body"].read(), b"short")
        # Response header overrides.
        got = self.s3.get_object(Bucket=b, Key="empty", ResponseContentType="text/x-over",
                                 ResponseContentDisposition="attachment")
        self.assertEqual(got["ContentType"], "text/x-over")
        self.assertEqual(got["ContentDisposition"], "attachment")
        # Delete: gone, and deleting again is no error (as S3).
        self.s3.delete_object(Bucket=b, Key="empty")
        self.assertEqual(error_code(lambda: self.s3.get_object(Bucket=b, Key="empty")), "NoSuchKey")
        self.s3.delete_object(Bucket=b, Key="empty")

    def test_ranges_and_conditions(self):
        b = self.bucket("ranges")
        data = os.urandom((2 << 20) + 1000)
        etag = self.s3.put_object(Bucket=b, Key="r", Body=data)["ETag"]
        for rng, want in [("bytes=0-9", data[:10]), ("bytes=1048570-1048580", data[1048570:1048581]),
                          ("bytes=2097000-", data[2097000:]), ("bytes=-100", data[-100:]),
                          ("bytes=5-999999999", data[5:])]:
            got = self.s3.get_object(Bucket=b, Key="r", Range=rng)
            self.assertEqual(got["Body"].read(), want, rng)
            self.assertEqual(got["ResponseMetadata"]["HTTPStatusCode"], 206)
        self.assertEqual(error_code(lambda: self.s3.get_object(Bucket=b, Key="r", Range="bytes=%d-" % len(data))),
                         "InvalidRange")
        self.assertEqual(error_code(lambda: self.s3.get_object(Bucket=b, Key="r", IfMatch='"0000"')),
                         "PreconditionFailed")
        self.assertEqual(error_code(lambda: self.s3.get_object(Bucket=b, Key="r", IfNoneMatch=etag)), "304")
        self.assertEqual(self.s3.get_object(Bucket=b, Key="r", IfMatch=etag)["ContentLength"], len(data))
        past = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
        future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
        self.assertEqual(error_code(lambda: self.s3.get_object(Bucket=b, Key="r", IfModifiedSince=future)), "304")
        self.assertEqual(error_code(lambda: self.s3.get_object(Bucket=b, Key="r", IfUnmodifiedSince=past)),
                         "PreconditionFailed")
        self.assertEqual(self.s3.get_object(Bucket=b, Key="r", IfModifiedSince=past)["ContentLength"], len(data))

    def test_listings(self):
        b = self.bucket("listings")
        keys = ["a/1", "a/2", "a/b/3", "b", "c/4", "c/5", "d e/ü 6", "z"]
        for k in keys:
            self.s3.put_object(Bucket=b, Key=k, Body=k.encode())
        # Pages of 2 over everything, in byte order.
        got = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=b, PaginationConfig={"PageSize": 2}):
            self.assertLessEqual(page["KeyCount"], 2)
            got += [o["Key"] for o in page.get("Contents", [])]
        self.assertEqual(got, sorted(keys, key=lambda k: k.encode()))
        # A delimiter: common prefixes, each once, also across pages.
        names, prefixes = [], []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=b, Delimiter="/",
                                                                      PaginationConfig={"PageSize": 2}):
            names += [o["Key"] for o in page.get("Contents", [])]
            prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        self.assertEqual(names, ["b", "z"])
        self.assertEqual(prefixes, ["a/", "c/", "d e/"])
        r = self.s3.list_objects_v2(Bucket=b, Prefix="a/", Delimiter="/")
        self.assertEqual([o["Key"] for o in r["Contents"]], ["a/1", "a/2"])
        self.assertEqual([p["Prefix"] for p in r["CommonPrefixes"]], ["a/b/"])
        r = self.s3.list_objects_v2(Bucket=b, StartAfter="c/4")
        self.assertEqual([o["Key"] for o in r["Contents"]], ["c/5", "d e/ü 6", "z"])
        self.assertEqual(r["Contents"][0]["Size"], 3)
        self.assertEqual(r["Contents"][0]["ETag"], '"%s"' % hashlib.md5(b"c/5").hexdigest())
        # ListObjects v1 with markers (botocore asks for encoding-type=url and decodes).
        got = []
        for page in self.s3.get_paginator("list_objects").paginate(Bucket=b, PaginationConfig={"PageSize": 3}):
            got += [o["Key"] for o in page.get("Contents", [])]
        self.assertEqual(got, sorted(keys, key=lambda k: k.encode()))
        self.assertEqual(error_code(lambda: self.s3.list_objects_v2(Bucket=b, ContinuationToken="zz")),
                         "InvalidArgument")
        # A "folder" object (a key ending in the delimiter) at a page's end: the next page goes on under it.
        self.s3.put_object(Bucket=b, Key="a/", Body=b"")
        got = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=b, Prefix="a/", Delimiter="/",
                                                                      PaginationConfig={"PageSize": 1}):
            got += [o["Key"] for o in page.get("Contents", [])] + [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        self.assertEqual(got, ["a/", "a/1", "a/2", "a/b/"])
        self.assertEqual(self.s3.list_objects_v2(Bucket=b, MaxKeys=0)["KeyCount"], 0)
        # A common prefix over more names than a page of the index holds (the gateway reads 1000 at a time): given
        # once, and the listing goes on past it, in one request as in pages.
        many = ["many/%04d" % i for i in range(1030)]
        threads = [threading.Thread(target=lambda part: [self.s3.put_object(Bucket=b, Key=k, Body=b"") for k in part],
                                    args=(many[i::8],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        r = self.s3.list_objects_v2(Bucket=b, Delimiter="/")
        self.assertEqual([p["Prefix"] for p in r["CommonPrefixes"]], ["a/", "c/", "d e/", "many/"])
        self.assertEqual([o["Key"] for o in r["Contents"]], ["b", "z"])
        names, prefixes = [], []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=b, Delimiter="/",
                                                                      PaginationConfig={"PageSize": 3}):
            self.assertLessEqual(page["KeyCount"], 3)
            names += [o["Key"] for o in page.get("Contents", [])]
            prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        self.assertEqual((names, prefixes), (["b", "z"], ["a/", "c/", "d e/", "many/"]))
        r = self.s3.list_objects_v2(Bucket=b, Prefix="many/", StartAfter="many/0999")
        self.assertEqual([o["Key"] for o in r["Contents"]], many[1000:])
        got = []
        for page in self.s3.get_paginator("list_objects").paginate(Bucket=b, Prefix="many/"):
            got += [o["Key"] for o in page.get("Contents", [])]
        self.assertEqual(got, many)
        # A key the index cannot hold (a NUL byte) is refused, and nothing is stored.
        self.assertEqual(error_code(lambda: self.s3.put_object(Bucket=b, Key="nul\x00key", Body=b"x")),
                         "InvalidArgument")
        self.assertEqual(self.s3.list_objects_v2(Bucket=b, Prefix="nul")["KeyCount"], 0)

    def test_awscli(self):
        self.c.aws("s3", "mb", "s3://awscli")
        self.addCleanup(lambda: self.c.aws("s3", "rb", "--force", "s3://awscli", check=False))
        tree = tempfile.mkdtemp(dir=self.c.dir)
        os.makedirs(os.path.join(tree, "sub", "deeper"))
        files = {"top.txt": b"top", "sub/one.bin": os.urandom(5 << 20), "sub/deeper/empty": b"",
                 "sub/deeper/two": os.urandom(70000)}
        for name, data in files.items():
            with open(os.path.join(tree, name), "wb") as f:
                f.write(data)
        self.c.aws("s3", "sync", "--only-show-errors", tree, "s3://awscli/t")
        ls = self.c.aws("s3", "ls", "--recursive", "s3://awscli/").stdout
        for name, data in files.items():
            self.assertIn("t/" + name, ls)
        back = tempfile.mkdtemp(dir=self.c.dir)
        self.c.aws("s3", "cp", "--only-show-errors", "--recursive", "s3://awscli/t", back)
        for name, data in files.items():
            with open(os.path.join(back, name), "rb") as f:
                self.assertEqual(f.read(), data, name)
        self.assertIn("PRE sub/", self.c.aws("s3", "ls", "s3://awscli/t/").stdout)
        self.c.aws("s3", "rm", "--only-show-errors", "--recursive", "s3://awscli/t/sub")
        self.assertNotIn("sub/", self.c.aws("s3", "ls", "--recursive", "s3://awscli/").stdout)

    def test_objects_are_shared_with_the_cli(self):
        b = self.bucket("shared")
        data = os.urandom(1500000)
        self.s3.put_object(Bucket=b, Key="from-s3", Body=data)
        self.assertEqual(self.c.cli("get", "-q", "--pool", "default", "--cont", b, "from-s3", "-").stdout, data)
        self.c.cli("put", "-q", "--pool", "default", "--cont", b, "from-cli", "-", input=b"cli bytes")
        self.assertEqual(self.s3.get_object(Bucket=b, Key="from-cli")["Body"].read(), b"cli bytes")
        listed = self.s3.list_objects_v2(Bucket=b)["Contents"]
        self.assertEqual([o["Key"] for o in listed], ["from-cli", "from-s3"])
        self.assertTrue(listed[0]["ETag"].endswith('-1"'))  # no MD5 was taken: not one

    def test_presigned_urls(self):
        b = self.bucket("presigned")
        self.s3.put_object(Bucket=b, Key="p", Body=b"presigned bytes")
        url = self.s3.generate_presigned_url("get_object", Params={"Bucket": b, "Key": "p"}, ExpiresIn=300)
        self.assertEqual(urllib.request.urlopen(url).read(), b"presigned bytes")
        put_url = self.s3.generate_presigned_url("put_object", Params={"Bucket": b, "Key": "q"}, ExpiresIn=300)
        req = urllib.request.Request(put_url, data=b"put by url", method="PUT")
        self.assertEqual(urllib.request.urlopen(req).status, 200)
        self.assertEqual(self.s3.get_object(Bucket=b, Key="q")["Body"].read(), b"put by url")
        # Another key in the same URL, or a changed expiry: refused.
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url.replace("/p?", "/q?"))
        self.assertEqual(e.exception.code, 403)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url.replace("X-Amz-Expires=300", "X-Amz-Expires=600"))
        self.assertEqual(e.exception.code, 403)
        # Expired: signed an hour ago for 60 s (and the same signed now: good, so the refusal is the time's).
        for ago, status in ((3600, 403), (0, 200)):
            try:
                code = urllib.request.urlopen(self.presign("/%s/p" % b, 60, ago)).status
            except urllib.error.HTTPError as e:
                code = e.code
                self.assertIn(b"expired", e.read())
            self.assertEqual(code, status)
        # SigV2 URLs are refused as such.
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(boto3.client(
                "s3", endpoint_url=self.c.endpoint, region_name="us-east-1", aws_access_key_id=self.c.access,
                aws_secret_access_key=self.c.secret, config=Config(s3={"addressing_style": "path"},
                                                                  signature_version="s3")).generate_presigned_url(
                "get_object", Params={"Bucket": b, "Key": "p"}))
        self.assertIn(b"Signature Version 2", e.exception.read())

    def presign(self, path, expires, ago=0):
        """A presigned GET URL signed `ago` seconds ago, by hand."""
        when = datetime.datetime.utcnow() - datetime.timedelta(seconds=ago)
        amz_date, day = when.strftime("%Y%m%dT%H%M%SZ"), when.strftime("%Y%m%d")
        scope = "%s/us-east-1/s3/aws4_request" % day
        q = {"X-Amz-Algorithm": "AWS4-HMAC-SHA256", "X-Amz-Credential": "%s/%s" % (self.c.access, scope),
             "X-Amz-Date": amz_date, "X-Amz-Expires": str(expires), "X-Amz-SignedHeaders": "host"}
        query = "&".join("%s=%s" % (urllib.parse.quote(k, safe=""), urllib.parse.quote(v, safe=""))
                         for k, v in sorted(q.items()))
        canonical = "\n".join(["GET", path, query, "host:127.0.0.1:%d\n" % self.c.port, "host", "UNSIGNED-PAYLOAD"])
        to_sign = "AWS4-HMAC-SHA256\n%s\n%s\n%s" % (amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest())
        _, sig = sign_v4(self.c.secret, day, "us-east-1", to_sign)
        return "%s%s?%s&X-Amz-Signature=%s" % (self.c.endpoint, path, query, sig)

    def test_bad_signatures_and_clocks_change_nothing(self):
        b = self.bucket("refusals")
        self.s3.put_object(Bucket=b, Key="k", Body=b"original")
        wrong = self.c.client(secret="not-the-secret-key")
        self.assertEqual(error_code(lambda: wrong.put_object(Bucket=b, Key="k", Body=b"evil")),
                         "SignatureDoesNotMatch")
        self.assertEqual(error_code(lambda: wrong.delete_object(Bucket=b, Key="k")), "SignatureDoesNotMatch")
        stranger = self.c.client(access="AKIDNOSUCHKEY")
        self.assertEqual(error_code(lambda: stranger.get_object(Bucket=b, Key="k")), "InvalidAccessKeyId")
        for skew in (-3600, 3600):  # a clock an hour behind, or ahead
            r = self.raw_put("/%s/k" % b, b"late", {}, hashlib.sha256(b"late").hexdigest(), skew=skew).getresponse()
            self.assertEqual(r.status, 403)
            self.assertIn(b"RequestTimeTooSkewed", r.read())
        anon = http.client.HTTPConnection("127.0.0.1", self.c.port)
        anon.request("GET", "/%s/k" % b)
        r = anon.getresponse()
        self.assertEqual(r.status, 403)
        self.assertIn(b"AccessDenied", r.read())
        self.assertEqual(error_code(lambda: self.s3.put_object(Bucket=b, Key="k", Body=b"bad md5",
                                                               ContentMD5="1B2M2Y8AsgTpgAmY7PhCfg==")), "BadDigest")
        self.assertEqual(self.s3.get_object(Bucket=b, Key="k")["Body"].read(), b"original")

    def signed_headers(self, method, path, headers, payload_hash, skew=0):
        """Headers signed here (a clock `skew` seconds off): header auth over `headers`, host and x-amz-*; with
        the signing key, date, scope and signature (an aws-chunked body's chain starts there)."""
        now = datetime.datetime.utcnow() + datetime.timedelta(seconds=skew)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        h = dict(headers)
        h["host"] = "127.0.0.1:%d" % self.c.port
        h["x-amz-date"] = amz_date
        h["x-amz-content-sha256"] = payload_hash
        names = sorted(h)
        p, _, q = path.partition("?")
        query = "&".join(sorted("%s=%s" % (k, v) for kv in q.split("&") if kv for k, _, v in [kv.partition("=")]))
        canonical = "\n".join([method, p, query, "".join("%s:%s\n" % (k, h[k]) for k in names), ";".join(names),
                               payload_hash])
        scope = "%s/us-east-1/s3/aws4_request" % day
        to_sign = "AWS4-HMAC-SHA256\n%s\n%s\n%s" % (amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest())
        key, sig = sign_v4(self.c.secret, day, "us-east-1", to_sign)
        h["authorization"] = "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (
            self.c.access, scope, ";".join(names), sig)
        return h, key, amz_date, scope, sig

    def raw_put(self, path, body, headers, payload_hash, send=None, skew=0):
        """A PUT signed here; `send` the bytes actually sent."""
        h, key, amz_date, scope, sig = self.signed_headers("PUT", path, headers, payload_hash, skew)
        if callable(body):
            body = body(key, amz_date, scope, sig)
        conn = http.client.HTTPConnection("127.0.0.1", self.c.port)
        conn.putrequest("PUT", path, skip_host=True, skip_accept_encoding=True)
        for k, v in h.items():
            conn.putheader(k, v)
        conn.putheader("content-length", str(len(body)))
        conn.endheaders()
        conn.send(body if send is None else send)
        return conn

    def test_aws_chunked_uploads(self):
        b = self.bucket("chunked")
        data = os.urandom(200000)

        def chunked(tamper=False):
            def make(key, amz_date, scope, seed):
                prev, out = seed, b""
                pieces = [data[i:i + 65536] for i in range(0, len(data), 65536)] + [b""]
                for p in pieces:
                    to_sign = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, prev,
                                         hashlib.sha256(b"").hexdigest(), hashlib.sha256(p).hexdigest()])
                    prev = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
                    body = p if not (tamper and p) else bytes([p[0] ^ 1]) + p[1:]
                    out += b"%x;chunk-signature=%s\r\n" % (len(p), prev.encode()) + body + b"\r\n"
                return out
            return make

        hdrs = {"content-encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(data))}
        r = self.raw_put("/%s/signed" % b, chunked(), hdrs, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD").getresponse()
        self.assertEqual(r.status, 200, r.read())
        self.assertEqual(self.s3.get_object(Bucket=b, Key="signed")["Body"].read(), data)
        r = self.raw_put("/%s/signed" % b, chunked(tamper=True), hdrs,
                         "STREAMING-AWS4-HMAC-SHA256-PAYLOAD").getresponse()
        self.assertEqual(r.status, 403, r.read())
        self.assertEqual(self.s3.get_object(Bucket=b, Key="signed")["Body"].read(), data)
        # Unsigned chunks with an empty trailer.
        body = b"%x\r\n" % len(data) + data + b"\r\n0\r\n\r\n"
        r = self.raw_put("/%s/unsigned" % b, body, hdrs, "STREAMING-UNSIGNED-PAYLOAD-TRAILER").getresponse()
        self.assertEqual(r.status, 200, r.read())
        self.assertEqual(self.s3.get_object(Bucket=b, Key="unsigned")["Body"].read(), data)
        # A hex payload hash the body does not match.
        r = self.raw_put("/%s/unsigned" % b, b"other", {}, hashlib.sha256(b"something else").hexdigest())
        resp = r.getresponse()
        self.assertEqual(resp.status, 400)
        self.assertIn(b"XAmzContentSHA256Mismatch", resp.read())
        self.assertEqual(self.s3.get_object(Bucket=b, Key="unsigned")["Body"].read(), data)

    def test_an_upload_cut_short_leaves_nothing(self):
        b = self.bucket("cutshort")
        self.s3.put_object(Bucket=b, Key="old", Body=b"old bytes")
        for key in ("old", "new"):
            conn = self.raw_put("/%s/%s" % (b, key), b"x" * (4 << 20), {}, "UNSIGNED-PAYLOAD", send=b"x" * 100000)
            conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()
        # Whenever the gateway sees the cut, the put it started fails without swapping anything in: no waiting
        # is needed for what follows to hold.
        self.assertEqual(self.s3.get_object(Bucket=b, Key="old")["Body"].read(), b"old bytes")
        self.assertEqual(error_code(lambda: self.s3.head_object(Bucket=b, Key="new")), "404")
        self.assertEqual([o["Key"] for o in self.s3.list_objects_v2(Bucket=b)["Contents"]], ["old"])

    def test_concurrent_writers_to_one_key(self):
        b = self.bucket("race")
        bodies = [bytes([i]) * ((1 << 20) + i * 4096) for i in range(6)]
        clients = [self.c.client() for _ in bodies]
        threads = [threading.Thread(target=lambda c=c, d=d: c.put_object(Bucket=b, Key="k", Body=d))
                   for c, d in zip(clients, bodies)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = self.s3.get_object(Bucket=b, Key="k")["Body"].read()
        self.assertIn(got, bodies)  # one writer's whole object, never a mix
        self.assertEqual(self.s3.head_object(Bucket=b, Key="k")["ETag"], '"%s"' % hashlib.md5(got).hexdigest())

    def test_multipart_uploads(self):
        b = self.bucket("multipart")
        parts = [os.urandom(5 << 20), os.urandom(5 << 20), os.urandom(1000)]
        up = self.s3.create_multipart_upload(Bucket=b, Key="mp/obj", ContentType="application/x-parts",
                                             Metadata={"kind": "multipart"})["UploadId"]
        etags = []
        for i, data in enumerate(parts):
            etags.append(self.s3.upload_part(Bucket=b, Key="mp/obj", UploadId=up, PartNumber=i + 1,
                                             Body=data)["ETag"])
        self.assertEqual(etags[2], '"%s"' % hashlib.md5(parts[2]).hexdigest())
        # Part 2 again: the later upload counts.
        parts[1] = os.urandom(5 << 20)
        etags[1] = self.s3.upload_part(Bucket=b, Key="mp/obj", UploadId=up, PartNumber=2, Body=parts[1])["ETag"]
        listed = self.s3.list_parts(Bucket=b, Key="mp/obj", UploadId=up)["Parts"]
        self.assertEqual([(p["PartNumber"], p["ETag"], p["Size"]) for p in listed],
                         [(i + 1, etags[i], len(parts[i])) for i in range(3)])
        self.assertIn(up, [u["UploadId"] for u in self.s3.list_multipart_uploads(Bucket=b)["Uploads"]])
        # The staged parts are the layout's: `rfos ls` (and `rfos fs check`) take none of them for strays.
        self.assertEqual(self.c.cli("ls", "--pool", "default", "--cont", b).stdout.decode().strip(), "")
        # Not there until completed; bad completions change nothing.
        self.assertEqual(error_code(lambda: self.s3.head_object(Bucket=b, Key="mp/obj")), "404")
        done = lambda ps: self.s3.complete_multipart_upload(Bucket=b, Key="mp/obj", UploadId=up,
                                                            MultipartUpload={"Parts": ps})
        self.assertEqual(error_code(lambda: done([{"PartNumber": 1, "ETag": '"00"'}])), "InvalidPart")
        self.assertEqual(error_code(lambda: done([{"PartNumber": 2, "ETag": etags[1]},
                                                  {"PartNumber": 1, "ETag": etags[0]}])), "InvalidPartOrder")
        self.assertEqual(error_code(lambda: done([{"PartNumber": 3, "ETag": etags[2]},
                                                  {"PartNumber": 4, "ETag": etags[2]}])), "InvalidPart")
        r = done([{"PartNumber": i + 1, "ETag": etags[i]} for i in range(3)])
        want = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-3"
        self.assertEqual(r["ETag"], '"%s"' % want)
        got = self.s3.get_object(Bucket=b, Key="mp/obj")
        self.assertEqual(got["Body"].read(), b"".join(parts))
        self.assertEqual(got["ETag"], '"%s"' % want)
        self.assertEqual(got["ContentType"], "application/x-parts")
        self.assertEqual(got["Metadata"], {"kind": "multipart"})
        whole = b"".join(parts)
        rng = self.s3.get_object(Bucket=b, Key="mp/obj", Range="bytes=%d-%d" % ((5 << 20) - 10, (10 << 20) + 10))
        self.assertEqual(rng["Body"].read(), whole[(5 << 20) - 10:(10 << 20) + 11])
        self.assertEqual(self.c.cli("get", "-q", "--pool", "default", "--cont", b, "mp/obj", "-").stdout, whole)
        self.assertEqual(error_code(lambda: self.s3.list_parts(Bucket=b, Key="mp/obj", UploadId=up)), "NoSuchUpload")
        self.assertNotIn("Uploads", self.s3.list_multipart_uploads(Bucket=b))
        # A part too small in the middle; and an aborted upload leaves nothing.
        up2 = self.s3.create_multipart_upload(Bucket=b, Key="mp/small")["UploadId"]
        e1 = self.s3.upload_part(Bucket=b, Key="mp/small", UploadId=up2, PartNumber=1, Body=b"a" * 100)["ETag"]
        e2 = self.s3.upload_part(Bucket=b, Key="mp/small", UploadId=up2, PartNumber=2, Body=b"b" * 100)["ETag"]
        self.assertEqual(error_code(lambda: self.s3.complete_multipart_upload(
            Bucket=b, Key="mp/small", UploadId=up2,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})),
            "EntityTooSmall")
        self.s3.abort_multipart_upload(Bucket=b, Key="mp/small", UploadId=up2)
        self.assertEqual(error_code(lambda: self.s3.abort_multipart_upload(Bucket=b, Key="mp/small", UploadId=up2)),
                         "NoSuchUpload")
        self.assertEqual(error_code(lambda: self.s3.upload_part(Bucket=b, Key="mp/small", UploadId=up2, PartNumber=1,
                                                                Body=b"late")), "NoSuchUpload")
        self.assertEqual(error_code(lambda: self.s3.head_object(Bucket=b, Key="mp/small")), "404")
        # Bad XML is refused.
        r = self.raw_request("POST", "/%s/mp/obj?uploadId=%s" % (b, up), b"<CompleteMultipartUpload><Part>")
        self.assertEqual(r.status, 400)
        self.assertIn(b"MalformedXML", r.read())
        # Replaced by a single PUT, then removed: nothing of the parts is left (the bucket empties).
        self.s3.put_object(Bucket=b, Key="mp/obj", Body=b"single")
        self.assertEqual(self.s3.get_object(Bucket=b, Key="mp/obj")["Body"].read(), b"single")

    def test_anonymous_access_where_the_acl_allows_it(self):
        self.bucket("public")
        self.bucket("private")
        for b in ("public", "private"):
            self.s3.put_object(Bucket=b, Key="k", Body=b"for everyone" if b == "public" else b"secret")
        self.c.cli("pool", "acl", "update", "default", "-e", "A::EVERYONE@:r")
        self.c.cli("cont", "acl", "update", "--pool", "default", "public", "-e", "A::EVERYONE@:r")
        # A gateway may not make root, or its own user, the anonymous one.
        bad = subprocess.run([RFOS, "--addr", self.c.addr, "s3", "--listen", "127.0.0.1:0", "--keys-file",
                              self.c.keys_file, "--anonymous-user", "root"], env=ENV, capture_output=True, text=True,
                             timeout=60)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("anonymous_user must be", bad.stderr)
        gw = subprocess.Popen([RFOS, "--addr", self.c.addr, "s3", "--listen", "127.0.0.1:0", "--keys-file",
                               self.c.keys_file, "--anonymous-user", "nobody"],
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            endpoint = wait_line(gw, "listening on http://", "rfos s3 (anonymous)").split("listening on ")[1].split()[0]
            try:
                got = urllib.request.urlopen(endpoint + "/public/k").read()
            except urllib.error.HTTPError as e:
                got = e.read()
            self.assertEqual(got, b"for everyone", got)
            for method, path, body in (("GET", "/private/k", None), ("PUT", "/public/new", b"x"),
                                       ("DELETE", "/public/k", None)):
                with self.assertRaises(urllib.error.HTTPError) as e:
                    urllib.request.urlopen(urllib.request.Request(endpoint + path, data=body, method=method))
                self.assertEqual(e.exception.code, 403, path)
                self.assertIn(b"AccessDenied", e.exception.read())
            self.assertEqual(self.s3.get_object(Bucket="public", Key="k")["Body"].read(), b"for everyone")
            self.assertEqual(error_code(lambda: self.s3.head_object(Bucket="public", Key="new")), "404")
        finally:
            gw.terminate()
            gw.wait()
            gw.stdout.close()

    def test_upload_listings(self):
        b = self.bucket("uploads")
        made = {}
        for key in ["a/1", "a/2", "b", "b", "c/d/e", "z"]:
            made.setdefault(key, []).append(self.s3.create_multipart_upload(Bucket=b, Key=key)["UploadId"])
        want = sorted((k, u) for k, ups in made.items() for u in ups)
        # Pages of 2, by key then upload id, resumed from both markers (also within one key's uploads).
        got, pages = [], 0
        for page in self.s3.get_paginator("list_multipart_uploads").paginate(Bucket=b,
                                                                              PaginationConfig={"PageSize": 2}):
            self.assertLessEqual(len(page.get("Uploads", [])), 2)
            got += [(u["Key"], u["UploadId"]) for u in page.get("Uploads", [])]
            pages += 1
        self.assertEqual(got, want)
        self.assertEqual(pages, 3)
        r = self.s3.list_multipart_uploads(Bucket=b, KeyMarker="b", UploadIdMarker=min(made["b"]))
        self.assertEqual([(u["Key"], u["UploadId"]) for u in r["Uploads"]],
                         [("b", max(made["b"]))] + [(k, made[k][0]) for k in ("c/d/e", "z")])
        # A delimiter folds keys into common prefixes, each given once, across pages too.
        keys, prefixes = [], []
        for page in self.s3.get_paginator("list_multipart_uploads").paginate(Bucket=b, Delimiter="/",
                                                                              PaginationConfig={"PageSize": 1}):
            keys += [u["Key"] for u in page.get("Uploads", [])]
            prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        self.assertEqual((keys, prefixes), (["b", "b", "z"], ["a/", "c/"]))
        r = self.s3.list_multipart_uploads(Bucket=b, Prefix="c/", Delimiter="/")
        self.assertEqual([p["Prefix"] for p in r["CommonPrefixes"]], ["c/d/"])
        # A key that ends with the delimiter is an upload of its own: pages of one with both markers go through
        # its uploads and on to the keys under it, which fold into no prefix of that listing's.
        folder = [self.s3.create_multipart_upload(Bucket=b, Key="a/")["UploadId"] for _ in range(2)]
        made["a/"] = folder
        got = []
        for page in self.s3.get_paginator("list_multipart_uploads").paginate(Bucket=b, Prefix="a/", Delimiter="/",
                                                                              PaginationConfig={"PageSize": 1}):
            got += [(u["Key"], u["UploadId"]) for u in page.get("Uploads", [])]
        self.assertEqual(got, sorted([("a/", u) for u in folder]) + sorted((k, made[k][0]) for k in ("a/1", "a/2")))
        self.assertFalse(self.s3.list_multipart_uploads(Bucket=b, MaxUploads=0)["IsTruncated"])
        self.assertEqual(error_code(lambda: self.s3.list_multipart_uploads(Bucket=b, EncodingType="zip")),
                         "InvalidArgument")
        for key, ups in made.items():
            for u in ups:
                self.s3.abort_multipart_upload(Bucket=b, Key=key, UploadId=u)

    def test_a_part_cut_short_leaves_the_upload_abortable(self):
        b = self.bucket("cutpart")
        up = self.s3.create_multipart_upload(Bucket=b, Key="k")["UploadId"]
        self.s3.upload_part(Bucket=b, Key="k", UploadId=up, PartNumber=1, Body=b"p" * (5 << 20))
        conn = self.raw_put("/%s/k?partNumber=2&uploadId=%s" % (b, up), b"x" * (4 << 20), {}, "UNSIGNED-PAYLOAD",
                            send=b"x" * 100000)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        # Part 2 never counts: whenever the gateway sees the cut, the part it was writing is not recorded.
        parts = self.s3.list_parts(Bucket=b, Key="k", UploadId=up)["Parts"]
        self.assertEqual([p["PartNumber"] for p in parts], [1])
        self.assertEqual(error_code(lambda: self.s3.head_object(Bucket=b, Key="k")), "404")
        self.s3.abort_multipart_upload(Bucket=b, Key="k", UploadId=up)
        self.assertNotIn("Uploads", self.s3.list_multipart_uploads(Bucket=b))

    def test_large_objects_through_awscli(self):
        self.c.aws("s3", "mb", "s3://large")
        self.addCleanup(lambda: self.c.aws("s3", "rb", "--force", "s3://large", check=False))
        # 1 GiB: a multipart upload of 128 parts of 8 MiB, read back by ranged GETs in parallel.
        path = os.path.join(self.c.dir, "large.bin")
        digest = hashlib.sha256()
        with open(path, "wb") as f:
            piece = os.urandom(1 << 20)
            for i in range(1024):
                block = i.to_bytes(8, "little") + piece[8:]  # every MiB its own
                digest.update(block)
                f.write(block)
        self.c.aws("s3", "cp", "--only-show-errors", path, "s3://large/l.bin")
        head = self.s3.head_object(Bucket="large", Key="l.bin")
        self.assertEqual(head["ContentLength"], 1 << 30)
        self.assertTrue(head["ETag"].endswith('-128"'), head["ETag"])
        os.unlink(path)
        back = path + ".back"
        self.c.aws("s3", "cp", "--only-show-errors", "s3://large/l.bin", back)
        got = hashlib.sha256()
        with open(back, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                got.update(block)
        os.unlink(back)
        self.assertEqual(got.hexdigest(), digest.hexdigest())

    def test_checksums(self):
        b = self.bucket("checksums")
        data = os.urandom(300000)
        for alg in ("CRC32", "CRC32C", "SHA1", "SHA256"):
            r = self.s3.put_object(Bucket=b, Key=alg, Body=data, ChecksumAlgorithm=alg)
            self.assertIn("Checksum" + alg, r)
            got = self.s3.get_object(Bucket=b, Key=alg, ChecksumMode="ENABLED")
            self.assertEqual(got["Body"].read(), data)  # botocore checks the checksum it is given
            self.assertEqual(got["Checksum" + alg], r["Checksum" + alg])
            self.assertEqual(got["ResponseMetadata"]["HTTPHeaders"]["x-amz-checksum-type"], "FULL_OBJECT")
            self.assertNotIn("Checksum" + alg, self.s3.get_object(Bucket=b, Key=alg))
        # A wrong value is BadDigest, and the object stays as it was.
        r = self.raw_put("/%s/CRC32" % b, b"other bytes", {"x-amz-checksum-crc32": "AAAAAA=="},
                         hashlib.sha256(b"other bytes").hexdigest()).getresponse()
        self.assertEqual(r.status, 400)
        self.assertIn(b"BadDigest", r.read())
        self.assertEqual(self.s3.get_object(Bucket=b, Key="CRC32")["Body"].read(), data)
        # In an aws-chunked trailer (what newer SDKs send by default).
        import zlib, base64 as b64
        crc = b64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
        for value, status in ((crc, 200), ("AAAAAA==", 400)):
            body = b"%x\r\n" % len(data) + data + b"\r\n0\r\nx-amz-checksum-crc32:%s\r\n\r\n" % value.encode()
            r = self.raw_put("/%s/trailer" % b, body, {"content-encoding": "aws-chunked",
                                                       "x-amz-decoded-content-length": str(len(data)),
                                                       "x-amz-trailer": "x-amz-checksum-crc32"},
                             "STREAMING-UNSIGNED-PAYLOAD-TRAILER").getresponse()
            self.assertEqual(r.status, status, r.read())
        self.assertEqual(self.s3.get_object(Bucket=b, Key="trailer", ChecksumMode="ENABLED")["ChecksumCRC32"], crc)
        # CRC64NVME (AWS CLI v2's default), against a reference computed here; a wrong value is BadDigest.
        table = []
        for n in range(256):
            c = n
            for _ in range(8):
                c = (c >> 1) ^ (0x9A6C9329AC4BC9B5 if c & 1 else 0)
            table.append(c)

        def crc64nvme(data):
            c = 0xFFFFFFFFFFFFFFFF
            for byte in data:
                c = (c >> 8) ^ table[(c ^ byte) & 0xFF]
            return c ^ 0xFFFFFFFFFFFFFFFF

        self.assertEqual(crc64nvme(b"123456789"), 0xAE8B14860A799888)
        small = data[:20000]
        want = b64.b64encode(crc64nvme(small).to_bytes(8, "big")).decode()
        for value, status in (("AAAAAAAAAAA=", 400), (want, 200)):
            r = self.raw_put("/%s/crc64" % b, small, {"x-amz-checksum-crc64nvme": value},
                             hashlib.sha256(small).hexdigest()).getresponse()
            self.assertEqual(r.status, status, r.read())
        got = self.s3.head_object(Bucket=b, Key="crc64", ChecksumMode="ENABLED")
        self.assertEqual(got["ResponseMetadata"]["HTTPHeaders"].get("x-amz-checksum-crc64nvme"), want)

    def test_multipart_checksums(self):
        b = self.bucket("mpsums")
        parts = [os.urandom(5 << 20), os.urandom(1000)]
        crc32 = lambda d: base64.b64encode(zlib.crc32(d).to_bytes(4, "big")).decode()
        # COMPOSITE (the default for CRC32 and SHA256): the algorithm over the parts' checksums, "-<parts>".
        for alg, raw in (("CRC32", lambda d: zlib.crc32(d).to_bytes(4, "big")),
                         ("SHA256", lambda d: hashlib.sha256(d).digest())):
            key = "composite-" + alg
            up = self.s3.create_multipart_upload(Bucket=b, Key=key, ChecksumAlgorithm=alg)
            self.assertEqual(up["ChecksumAlgorithm"], alg)
            done = []
            for i, data in enumerate(parts):
                r = self.s3.upload_part(Bucket=b, Key=key, UploadId=up["UploadId"], PartNumber=i + 1, Body=data,
                                        ChecksumAlgorithm=alg)
                self.assertEqual(r["Checksum" + alg], base64.b64encode(raw(data)).decode())
                done.append({"PartNumber": i + 1, "ETag": r["ETag"], "Checksum" + alg: r["Checksum" + alg]})
            listed = self.s3.list_parts(Bucket=b, Key=key, UploadId=up["UploadId"])
            self.assertEqual(listed["ChecksumAlgorithm"], alg)
            self.assertEqual([p["Checksum" + alg] for p in listed["Parts"]], [d["Checksum" + alg] for d in done])
            # A part's checksum that is not the one it was stored with: refused, the upload still there.
            wrong = [dict(done[0], **{"Checksum" + alg: done[1]["Checksum" + alg]}), done[1]]
            self.assertEqual(error_code(lambda: self.s3.complete_multipart_upload(
                Bucket=b, Key=key, UploadId=up["UploadId"], MultipartUpload={"Parts": wrong})), "InvalidPart")
            r = self.s3.complete_multipart_upload(Bucket=b, Key=key, UploadId=up["UploadId"],
                                                  MultipartUpload={"Parts": done})
            want = base64.b64encode(raw(b"".join(raw(d) for d in parts))).decode() + "-2"
            self.assertEqual(r["Checksum" + alg], want)
            got = self.s3.head_object(Bucket=b, Key=key, ChecksumMode="ENABLED")
            self.assertEqual(got["Checksum" + alg], want)
            self.assertEqual(got["ResponseMetadata"]["HTTPHeaders"]["x-amz-checksum-type"], "COMPOSITE")
            self.assertNotIn("Checksum" + alg, self.s3.head_object(Bucket=b, Key=key))
            self.assertEqual(self.s3.get_object(Bucket=b, Key=key, ChecksumMode="ENABLED")["Body"].read(),
                             b"".join(parts))
        # FULL_OBJECT (asked for with x-amz-checksum-type, which this botocore does not know): the CRC of the whole
        # object, combined from the parts'; a part copied from an object gets its checksum too.
        self.s3.put_object(Bucket=b, Key="source", Body=parts[1])

        def full_object(request, **kwargs):
            request.headers["x-amz-checksum-type"] = "FULL_OBJECT"
        client = self.c.client()
        client.meta.events.register("before-sign.s3.CreateMultipartUpload", full_object)
        up = client.create_multipart_upload(Bucket=b, Key="full", ChecksumAlgorithm="CRC32")
        self.assertEqual(up["ResponseMetadata"]["HTTPHeaders"]["x-amz-checksum-type"], "FULL_OBJECT")
        first = self.s3.upload_part(Bucket=b, Key="full", UploadId=up["UploadId"], PartNumber=1, Body=parts[0],
                                    ChecksumAlgorithm="CRC32")
        second = self.s3.upload_part_copy(Bucket=b, Key="full", UploadId=up["UploadId"], PartNumber=2,
                                          CopySource={"Bucket": b, "Key": "source"})["CopyPartResult"]
        self.assertEqual(second["ChecksumCRC32"], crc32(parts[1]))
        r = self.s3.complete_multipart_upload(
            Bucket=b, Key="full", UploadId=up["UploadId"],
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": first["ETag"]},
                                       {"PartNumber": 2, "ETag": second["ETag"]}]})
        self.assertEqual(r["ChecksumCRC32"], crc32(b"".join(parts)))
        got = self.s3.head_object(Bucket=b, Key="full", ChecksumMode="ENABLED")
        self.assertEqual(got["ChecksumCRC32"], crc32(b"".join(parts)))
        self.assertEqual(got["ResponseMetadata"]["HTTPHeaders"]["x-amz-checksum-type"], "FULL_OBJECT")
        # botocore checks a whole object's checksum as it reads the body.
        self.assertEqual(self.s3.get_object(Bucket=b, Key="full", ChecksumMode="ENABLED")["Body"].read(),
                         b"".join(parts))
        # Refusals: a pair S3 does not make, a part of another algorithm; nothing is made.
        self.assertEqual(error_code(lambda: client.create_multipart_upload(Bucket=b, Key="no", ChecksumAlgorithm="SHA1")),
                         "InvalidRequest")
        up = self.s3.create_multipart_upload(Bucket=b, Key="no", ChecksumAlgorithm="CRC32")["UploadId"]
        self.assertEqual(error_code(lambda: self.s3.upload_part(Bucket=b, Key="no", UploadId=up, PartNumber=1,
                                                                Body=b"x", ChecksumAlgorithm="SHA1")), "InvalidRequest")
        self.assertNotIn("Parts", self.s3.list_parts(Bucket=b, Key="no", UploadId=up))
        self.assertEqual(error_code(lambda: self.s3.head_object(Bucket=b, Key="no")), "404")
        # A part sent without a checksum gets the upload's, taken by the gateway.
        r = self.s3.upload_part(Bucket=b, Key="no", UploadId=up, PartNumber=1, Body=b"x")
        self.assertEqual(r["ChecksumCRC32"], crc32(b"x"))
        done = self.s3.complete_multipart_upload(Bucket=b, Key="no", UploadId=up, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]}]})
        self.assertEqual(done["ChecksumCRC32"],
                         base64.b64encode(zlib.crc32(zlib.crc32(b"x").to_bytes(4, "big")).to_bytes(4, "big")).decode()
                         + "-1")

    def test_virtual_hosted_buckets(self):
        # The gateway serves the domain s3.test (--domain): a Host of "<bucket>.s3.test" names the bucket. The names
        # lead to it by a resolver given to this process, as a wildcard DNS record would lead real clients.
        real = socket.getaddrinfo

        def resolve(host, *args, **kwargs):
            return real("127.0.0.1" if host == "s3.test" or host.endswith(".s3.test") else host, *args, **kwargs)
        socket.getaddrinfo = resolve
        try:
            v = boto3.client("s3", endpoint_url="http://s3.test:%d" % self.c.port, region_name="us-east-1",
                             aws_access_key_id=self.c.access, aws_secret_access_key=self.c.secret,
                             config=Config(s3={"addressing_style": "virtual"}, retries={"max_attempts": 1},
                                           signature_version="s3v4"))
            v.create_bucket(Bucket="vhosted")
            v.put_object(Bucket="vhosted", Key="dir/a key", Body=b"virtual")
            self.assertEqual(v.get_object(Bucket="vhosted", Key="dir/a key")["Body"].read(), b"virtual")
            self.assertEqual(self.s3.get_object(Bucket="vhosted", Key="dir/a key")["Body"].read(), b"virtual")
            self.assertEqual([o["Key"] for o in v.list_objects_v2(Bucket="vhosted")["Contents"]], ["dir/a key"])
            self.assertIn("vhosted", [b["Name"] for b in v.list_buckets()["Buckets"]])  # s3.test itself: path-style
            url = v.generate_presigned_url("get_object", Params={"Bucket": "vhosted", "Key": "dir/a key"})
            self.assertTrue(url.startswith("http://vhosted.s3.test:"), url)
            self.assertEqual(urllib.request.urlopen(url).read(), b"virtual")
            # A signature made for one bucket's host does not pass for another's.
            self.bucket("other")
            r = http.client.HTTPConnection("127.0.0.1", self.c.port)
            r.request("GET", urllib.parse.urlsplit(url).path + "?" + urllib.parse.urlsplit(url).query,
                      headers={"Host": "other.s3.test:%d" % self.c.port})
            self.assertEqual(r.getresponse().status, 403)
            v.delete_object(Bucket="vhosted", Key="dir/a key")
            v.delete_bucket(Bucket="vhosted")
            self.assertNotIn("vhosted", [b["Name"] for b in self.s3.list_buckets()["Buckets"]])
        finally:
            socket.getaddrinfo = real

    def test_rclone_and_s3cmd(self):
        tree = tempfile.mkdtemp(dir=self.c.dir)
        os.makedirs(os.path.join(tree, "sub"))
        files = {"a": os.urandom(100000), "sub/b": os.urandom(3000000), "empty": b""}
        for name, data in files.items():
            with open(os.path.join(tree, name), "wb") as f:
                f.write(data)
        env = dict(ENV, RCLONE_CONFIG_RFOS_TYPE="s3", RCLONE_CONFIG_RFOS_PROVIDER="Other",
                   RCLONE_CONFIG_RFOS_ACCESS_KEY_ID=self.c.access, RCLONE_CONFIG_RFOS_SECRET_ACCESS_KEY=self.c.secret,
                   RCLONE_CONFIG_RFOS_ENDPOINT=self.c.endpoint, RCLONE_CONFIG_RFOS_REGION="us-east-1",
                   RCLONE_CONFIG="/dev/null")
        env.pop("AWS_CA_BUNDLE", None)  # rclone cannot take one over plain HTTP

        def rclone(*args):
            out = subprocess.run(["rclone"] + list(args), env=env, capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertNotIn("Unsolicited response", out.stderr)
            return out

        rclone("mkdir", "rfos:rclone")
        rclone("copy", tree, "rfos:rclone/t")
        self.assertIn("0 differences found", rclone("check", tree, "rfos:rclone/t").stderr)  # sizes and MD5s
        self.assertEqual(sorted(rclone("lsf", "-R", "--files-only", "rfos:rclone/t").stdout.split()),
                         ["a", "empty", "sub/b"])
        back = tempfile.mkdtemp(dir=self.c.dir)
        rclone("copy", "rfos:rclone/t", back)
        for name, data in files.items():
            with open(os.path.join(back, name), "rb") as f:
                self.assertEqual(f.read(), data)
        rclone("purge", "rfos:rclone")
        self.assertEqual(error_code(lambda: self.s3.head_bucket(Bucket="rclone")), "404")

        cfg = os.path.join(self.c.dir, "s3cfg")
        with open(cfg, "w") as f:
            f.write("[default]\naccess_key = %s\nsecret_key = %s\nhost_base = 127.0.0.1:%d\nhost_bucket = "
                    "127.0.0.1:%d\nuse_https = False\nsignature_v2 = False\nbucket_location = us-east-1\n" % (
                        self.c.access, self.c.secret, self.c.port, self.c.port))

        def s3cmd(*args):
            out = subprocess.run(["s3cmd", "-c", cfg] + list(args), env=env, capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            return out.stdout

        s3cmd("mb", "s3://s3cmd")
        big = os.path.join(self.c.dir, "big")
        with open(big, "wb") as f:
            f.write(os.urandom(20 << 20))  # over s3cmd's 15 MiB: a multipart upload
        s3cmd("put", big, "s3://s3cmd/big")
        s3cmd("put", os.path.join(tree, "a"), "s3://s3cmd/a")
        listing = s3cmd("ls", "s3://s3cmd")
        self.assertIn("s3://s3cmd/big", listing)
        self.assertIn(str(20 << 20), listing)
        s3cmd("get", "--force", "s3://s3cmd/big", big + ".back")  # s3cmd checks the MD5 where the ETag is one
        with open(big, "rb") as a, open(big + ".back", "rb") as b:
            self.assertTrue(a.read() == b.read())
        s3cmd("del", "s3://s3cmd/big", "s3://s3cmd/a")
        s3cmd("rb", "s3://s3cmd")

    def test_copies(self):
        b = self.bucket("copies")
        other = self.bucket("copies-other")
        data = os.urandom((2 << 20) + 333)
        self.s3.put_object(Bucket=b, Key="src", Body=data, ContentType="text/x-src", Metadata={"m": "1"})
        r = self.s3.copy_object(Bucket=other, Key="dst", CopySource={"Bucket": b, "Key": "src"})
        self.assertEqual(r["CopyObjectResult"]["ETag"], '"%s"' % hashlib.md5(data).hexdigest())
        got = self.s3.get_object(Bucket=other, Key="dst")
        self.assertEqual(got["Body"].read(), data)
        self.assertEqual((got["ContentType"], got["Metadata"]), ("text/x-src", {"m": "1"}))  # COPY: the source's
        self.s3.copy_object(Bucket=b, Key="src", CopySource={"Bucket": b, "Key": "src"},
                            MetadataDirective="REPLACE", ContentType="text/x-new", Metadata={"m": "2"})
        got = self.s3.get_object(Bucket=b, Key="src")
        self.assertEqual(got["Body"].read(), data)
        self.assertEqual((got["ContentType"], got["Metadata"]), ("text/x-new", {"m": "2"}))
        self.assertEqual(error_code(lambda: self.s3.copy_object(Bucket=b, Key="src",
                                                                CopySource={"Bucket": b, "Key": "src"})),
                         "InvalidRequest")  # onto itself, nothing changed
        self.assertEqual(error_code(lambda: self.s3.copy_object(Bucket=b, Key="x",
                                                                CopySource={"Bucket": b, "Key": "nope"})),
                         "NoSuchKey")
        # UploadPartCopy: ranges of the source as parts.
        up = self.s3.create_multipart_upload(Bucket=other, Key="assembled")["UploadId"]
        e1 = self.s3.upload_part_copy(Bucket=other, Key="assembled", UploadId=up, PartNumber=1,
                                      CopySource={"Bucket": b, "Key": "src"},
                                      CopySourceRange="bytes=0-1048575")
        e2 = self.s3.upload_part_copy(Bucket=other, Key="assembled", UploadId=up, PartNumber=2,
                                      CopySource={"Bucket": b, "Key": "src"}, CopySourceRange="bytes=2000000-2097484")
        self.assertEqual(e2["CopyPartResult"]["ETag"], '"%s"' % hashlib.md5(data[2000000:2097485]).hexdigest())
        parts = self.s3.list_parts(Bucket=other, Key="assembled", UploadId=up)["Parts"]
        self.assertEqual([p["Size"] for p in parts], [1048576, 97485])
        self.s3.abort_multipart_upload(Bucket=other, Key="assembled", UploadId=up)

    def test_https(self):
        certs = os.path.join(self.c.dir, "certs")
        subprocess.run([os.path.join(SOURCE, "scripts", "make-certs"), certs, "127.0.0.1"], check=True,
                       stdout=subprocess.DEVNULL)
        gw = subprocess.Popen([RFOS, "--addr", self.c.addr, "s3", "--listen", "127.0.0.1:0", "--keys-file",
                               self.c.keys_file, "--https-cert", os.path.join(certs, "server.pem"), "--https-key",
                               os.path.join(certs, "server.key")],
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            endpoint = wait_line(gw, "listening on https://", "rfos s3 (https)").split("listening on ")[1].split()[0]
            tls = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=self.c.access,
                               aws_secret_access_key=self.c.secret, verify=os.path.join(certs, "ca.pem"),
                               config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"))
            tls.create_bucket(Bucket="https")
            self.addCleanup(self.empty_and_remove, "https")
            data = os.urandom(2 << 20)
            tls.put_object(Bucket="https", Key="k", Body=data)
            self.assertEqual(tls.get_object(Bucket="https", Key="k")["Body"].read(), data)
            # Plain HTTP to it gets no answer; a client that does not trust its CA refuses it.
            port = int(endpoint.rsplit(":", 1)[1])
            plain = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            with self.assertRaises((http.client.HTTPException, ConnectionError)):
                plain.request("GET", "/")
                plain.getresponse()
            untrusting = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", verify=True,
                                      aws_access_key_id=self.c.access, aws_secret_access_key=self.c.secret,
                                      config=Config(retries={"max_attempts": 1}))
            with self.assertRaises(botocore.exceptions.SSLError):
                untrusting.list_buckets()
        finally:
            gw.terminate()
            gw.wait()
            gw.stdout.close()

    def test_delete_objects(self):
        b = self.bucket("multidelete")
        for k in ("a", "b", "c"):
            self.s3.put_object(Bucket=b, Key=k, Body=k.encode())
        r = self.s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "a"}, {"Key": "c"}, {"Key": "missing"}]})
        self.assertEqual(sorted(d["Key"] for d in r["Deleted"]), ["a", "c", "missing"])
        self.assertEqual([o["Key"] for o in self.s3.list_objects_v2(Bucket=b)["Contents"]], ["b"])
        r = self.s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "b"}], "Quiet": True})
        self.assertNotIn("Deleted", r)
        self.assertEqual(self.s3.list_objects_v2(Bucket=b)["KeyCount"], 0)

    def raw_request(self, method, path, body):
        """A request signed here with the body's SHA-256."""
        h = self.signed_headers(method, path, {}, hashlib.sha256(body).hexdigest())[0]
        conn = http.client.HTTPConnection("127.0.0.1", self.c.port)
        conn.request(method, path, body=body, headers=h)
        return conn.getresponse()

    def test_zz_the_gateway_goes_on_when_the_server_restarts(self):
        """Runs last: the server under the gateway killed and started again; the gateway's handles go on with the
        new server process (docs/control-plane.md, "A server that restarts"): what was stored reads back, and
        new objects go in."""
        b = self.bucket("restart")
        body = os.urandom(300_000)
        self.s3.put_object(Bucket=b, Key="before", Body=body)
        self.c.server.kill()
        self.c.server.wait()
        self.c.server.stdout.close()
        self.c.start_server()
        failures = 0
        deadline = time.time() + 60
        while True:
            try:
                got = self.s3.get_object(Bucket=b, Key="before")["Body"].read()
                break
            except botocore.exceptions.ClientError as e:
                failures += 1
                if time.time() > deadline:
                    raise
                # A request that found the old targets gone: unavailable for now, not a wrong answer.
                self.assertEqual(e.response["ResponseMetadata"]["HTTPStatusCode"], 503, e.response)
        self.assertLessEqual(failures, 3, "the gateway kept failing after the server was back")
        self.assertEqual(got, body)
        self.s3.put_object(Bucket=b, Key="after", Body=b"after the restart")
        self.assertEqual(self.s3.get_object(Bucket=b, Key="after")["Body"].read(), b"after the restart")

    def test_what_is_not_implemented_says_so(self):
        b = self.bucket("unimplemented")
        self.assertEqual(error_code(lambda: self.s3.get_bucket_acl(Bucket=b)), "NotImplemented")
        self.assertNotIn("Status", self.s3.get_bucket_versioning(Bucket=b))  # never versioned
        self.assertEqual(error_code(lambda: self.s3.put_bucket_versioning(
            Bucket=b, VersioningConfiguration={"Status": "Enabled"})), "NotImplemented")
        self.s3.put_object(Bucket=b, Key="src", Body=b"s")
        etag = self.s3.head_object(Bucket=b, Key="src")["ETag"]
        self.assertEqual(error_code(lambda: self.s3.copy_object(Bucket=b, Key="dst", CopySourceIfMatch=etag,
                                                                CopySource={"Bucket": b, "Key": "src"})),
                         "NotImplemented")
        self.assertEqual(error_code(lambda: self.s3.head_object(Bucket=b, Key="dst")), "404")


def main():
    global RFOS, CLUSTER
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    RFOS = os.path.abspath(sys.argv.pop(1))
    for tool in (AWS, "/usr/bin/rclone", "/usr/bin/s3cmd"):
        if not os.path.exists(tool):
            sys.exit("s3_test: needs %s (scripts/install-deps installs it)" % tool)
    CLUSTER = Cluster()
    try:
        result = unittest.main(verbosity=2, exit=False).result
    finally:
        clean = CLUSTER.stop()
    sys.exit(0 if result.wasSuccessful() and clean else 1)


if __name__ == "__main__":
    main()
