#!/usr/bin/env python3
"""`rfos mount` through the kernel: a POSIX behaviour suite of syscalls, other local users, unmodified tools
(cp, tar, find, rsync, git, fio with verify=crc32c), two mounts of one container, and a server killed under a
writer (every fsync'ed file must read back after a restart).

  mount_test.py RFOS_BINARY        (needs root and /dev/fuse; fails, saying so, without them:
                                    `ctest -LE mount` leaves it out where it cannot run)

Real processes on loopback: an `rfos server` on its control socket with ucx+tcp pinned to lo, `rfos mount -f`.
"""
import ctypes
import errno
import hashlib
import mmap
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import random_ops_bench  # noqa: E402  (the fsx-style exerciser, shared with the benchmark)
import rfos_setup  # noqa: E402  (a sealing agent's config, shared with the benchmarks)

RFOS = None
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
ENV = dict(os.environ, UCX_NET_DEVICES="lo", FI_TCP_IFACE="lo", FI_NET_IFACE="lo")


class Server:
    def __init__(self, data_dir, socket_path, extra=()):
        self.data_dir = data_dir
        self.socket_path = socket_path
        self.proc = subprocess.Popen(
            [RFOS, "server", "--data-dir", data_dir, "--control-socket", socket_path, "--targets", "2",
             "--target-bytes", str(256 << 20), "--provider", "ucx+tcp"] + list(extra),
            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.addr = None
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if "listening on " in line:
                self.addr = line.split("listening on ")[1].split()[0]
                break
        if not self.addr:
            raise RuntimeError("rfos server did not start")

    def cli(self, *args, check=True):
        out = subprocess.run([RFOS, "--addr", self.addr] + list(args), env=ENV, capture_output=True, text=True)
        if check and out.returncode != 0:
            raise RuntimeError("rfos %s: %s" % (" ".join(args), out.stderr))
        return out

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()
        self.proc.stdout.close()


class Mount:
    def __init__(self, server, mountpoint, *extra):
        self.mountpoint = mountpoint
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([RFOS, "--addr", server.addr, "mount", "-f", "--pool", "p", "--cont", "c"] +
                                     list(extra) + [mountpoint], env=ENV, stdout=subprocess.DEVNULL,
                                     stderr=self.log, text=True)
        deadline = time.time() + 30
        while not os.path.ismount(mountpoint):
            if self.proc.poll() is not None or time.time() > deadline:
                self.log.seek(0)
                raise RuntimeError("rfos mount failed: %s" % self.log.read())
            time.sleep(0.05)

    def unmount(self):
        if os.path.ismount(self.mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], check=False)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def in_mount_table(path):
    """Whether path is still in /proc/mounts (os.path.ismount says no for a dead FUSE daemon's mount too)."""
    with open("/proc/mounts") as f:
        return any(line.split()[1] == os.path.realpath(path) for line in f)


def as_user(uid, gid, groups, fn):
    """Runs fn() in a child process with these credentials; returns its errno (0 when fn succeeded)."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setgroups(groups)
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            fn()
        except OSError as e:
            code = e.errno
        except Exception:  # noqa: BLE001 - anything else is a test failure
            code = 255
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WEXITSTATUS(status)


T_SET = 1_600_000_000_000_000_000  # a time the battery sets (ns)
# A mount that caches nothing: what it shows is what the targets hold.
UNCACHED = ("--attr-timeout", "0", "--entry-timeout", "0", "--negative-timeout", "0", "--no-notices")


def local_fs_battery(root):
    """Runs file-system operations under `root`, each as applications use them (cp -a, tar, sqlite, shared mmap,
    appends from several processes, set-id directories, ...); returns what each did, to be the same on the mount as
    on a local file system. Deterministic: times are compared to each other, never recorded."""
    rng = random.Random(7)
    res = []

    def rec(name, fn):
        try:
            res.append((name, "ok", fn()))
        except OSError as e:
            res.append((name, "errno", errno.errorcode.get(e.errno)))

    def p(*parts):
        return os.path.join(root, *parts)

    os.mkdir(p("a"))

    def create_then_utime():
        fd = os.open(p("a", "f"), os.O_CREAT | os.O_WRONLY, 0o640)
        os.write(fd, b"hello")
        os.close(fd)
        os.utime(p("a", "f"), ns=(T_SET, T_SET))
        return os.stat(p("a", "f")).st_mtime_ns == T_SET
    rec("create, close, utime", create_then_utime)

    def appends_from_two_descriptors():
        a, b = os.open(p("a", "f"), os.O_WRONLY | os.O_APPEND), os.open(p("a", "f"), os.O_WRONLY | os.O_APPEND)
        for fd, x in ((a, b"1"), (b, b"2"), (a, b"3")):
            os.write(fd, x)
        os.close(a)
        os.close(b)
        with open(p("a", "f"), "rb") as inp:
            return inp.read()
    rec("O_APPEND from two descriptors", appends_from_two_descriptors)

    def appends_from_processes():
        open(p("a", "ap"), "w").close()
        pids = []
        for k in range(3):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    fd = os.open(p("a", "ap"), os.O_WRONLY | os.O_APPEND)
                    for _ in range(50):
                        os.write(fd, (b"%d" % k) * 10)
                    code = 0
                finally:
                    os._exit(code)  # never back into the test run
            pids.append(pid)
        if any(os.WEXITSTATUS(os.waitpid(pid, 0)[1]) for pid in pids):
            return "a child failed"
        with open(p("a", "ap"), "rb") as inp:
            data = inp.read()
        return len(data), all(len(set(data[i:i + 10])) == 1 for i in range(0, len(data), 10))
    rec("O_APPEND from three processes", appends_from_processes)

    def hole_after_grow():
        fd = os.open(p("a", "g"), os.O_CREAT | os.O_RDWR, 0o600)
        os.ftruncate(fd, 10000)
        os.pwrite(fd, b"x", 8000)
        got = os.pread(fd, 10, 7995), os.fstat(fd).st_size
        os.close(fd)
        return got
    rec("ftruncate up, write into the hole", hole_after_grow)

    def shared_mmap():
        fd = os.open(p("a", "m"), os.O_CREAT | os.O_RDWR, 0o644)
        os.ftruncate(fd, 8192)
        m = mmap.mmap(fd, 8192)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                fd2 = os.open(p("a", "m"), os.O_RDWR)
                m2 = mmap.mmap(fd2, 8192)
                m2[100:105] = b"child"
                m2.flush()
                code = 0
            finally:
                os._exit(code)  # never back into the test run
        child = os.WEXITSTATUS(os.waitpid(pid, 0)[1])
        got = child, m[100:105], os.pread(fd, 5, 100)
        m.close()
        os.close(fd)
        return got
    rec("shared mmap between processes", shared_mmap)

    def rename_over_open():
        got = []
        for size in (3, 5000, 200_000):  # with its open, from its home target, from its chunks
            old, new = rng.randbytes(size), rng.randbytes(size)
            with open(p("a", "o"), "wb") as out:
                out.write(old)
            fd = os.open(p("a", "o"), os.O_RDONLY)
            with open(p("a", "n"), "wb") as out:
                out.write(new)
            os.rename(p("a", "n"), p("a", "o"))
            kept = os.pread(fd, size, 0) == old and os.fstat(fd).st_nlink == 0
            os.close(fd)
            with open(p("a", "o"), "rb") as inp:
                got.append((size, kept, inp.read() == new))
        return got
    rec("rename over an open file", rename_over_open)

    def unlinked_open():
        fd = os.open(p("a", "u"), os.O_CREAT | os.O_RDWR, 0o600)
        os.write(fd, b"abc")
        os.unlink(p("a", "u"))
        st = os.fstat(fd)
        os.write(fd, b"def")
        got = st.st_nlink, os.pread(fd, 10, 0)
        os.close(fd)
        return got
    rec("an unlinked open file", unlinked_open)

    def links():
        os.symlink("f", p("a", "l"))
        os.link(p("a", "f"), p("a", "h"))
        return os.lstat(p("a", "l")).st_size, os.stat(p("a", "l")).st_size, os.stat(p("a", "f")).st_nlink
    rec("symlink and hard link", links)

    def setgid_directory():
        os.mkdir(p("a", "sg"))
        os.chown(p("a", "sg"), 0, 1000)
        os.chmod(p("a", "sg"), 0o2775)
        open(p("a", "sg", "f"), "w").close()
        os.mkdir(p("a", "sg", "sub"))
        return (os.stat(p("a", "sg", "f")).st_gid, oct(os.stat(p("a", "sg", "sub")).st_mode),
                os.stat(p("a", "sg", "sub")).st_gid)
    rec("a set-group-id directory", setgid_directory)

    def truncate_on_open_moves_times():
        with open(p("a", "t"), "w") as out:
            out.write("12345")
        os.utime(p("a", "t"), ns=(T_SET, T_SET))
        open(p("a", "t"), "w").close()
        return os.stat(p("a", "t")).st_mtime_ns != T_SET, os.stat(p("a", "t")).st_size
    rec("open(O_TRUNC) moves the mtime", truncate_on_open_moves_times)

    def times_set_before_close():
        fd = os.open(p("a", "w"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, rng.randbytes(3000))
        os.utime(fd, ns=(T_SET, T_SET + 5))
        os.fchmod(fd, 0o640)
        os.close(fd)
        st = os.stat(p("a", "w"))
        return st.st_mtime_ns == T_SET + 5, oct(st.st_mode), st.st_size
    rec("times set through the descriptor, then close", times_set_before_close)

    def chown_clears_setuid():
        with open(p("a", "suid"), "w") as out:
            out.write("x")
        os.chmod(p("a", "suid"), 0o4755)
        os.chown(p("a", "suid"), 1000, 1000)
        return oct(os.stat(p("a", "suid")).st_mode)
    rec("chown clears set-user-id", chown_clears_setuid)

    def directory_moves():
        os.makedirs(p("b", "c", "d"))
        with open(p("b", "c", "d", "f"), "w") as out:
            out.write("q")
        os.rename(p("b", "c"), p("a", "c"))
        with open(p("a", "c", "d", "f")) as inp:
            return (inp.read(), os.stat(p("a", "c")).st_nlink, os.stat(p("b")).st_nlink)
    rec("a directory moved with its tree", directory_moves)

    def many_entries():
        os.mkdir(p("a", "many"))
        for i in range(600):
            open(p("a", "many", "n%04d" % i), "w").close()
        for i in range(0, 600, 3):
            os.unlink(p("a", "many", "n%04d" % i))
        return len(os.listdir(p("a", "many"))), sorted(os.listdir(p("a", "many")))[:3]
    rec("a directory of hundreds of names", many_entries)

    def sqlite_database():
        db = sqlite3.connect(p("a", "db.sqlite"))
        db.execute("create table t(k integer primary key, v text)")
        db.executemany("insert into t values(?, ?)", [(i, "v%d" % i) for i in range(300)])
        db.commit()
        db.execute("pragma journal_mode=wal")
        db.executemany("insert into t values(?, ?)", [(i, "w%d" % i) for i in range(300, 500)])
        db.commit()
        other = sqlite3.connect(p("a", "db.sqlite"))
        got = other.execute("select count(*), sum(k) from t").fetchone()
        other.close()
        db.close()
        return got
    rec("sqlite, rollback journal then WAL", sqlite_database)

    def copies_keep_modes_and_times():
        subprocess.run(["cp", "-a", p("a"), p("cp-a")], check=True)
        subprocess.run(["tar", "cf", p("a.tar"), "-C", root, "a"], check=True)
        os.mkdir(p("untar"))
        subprocess.run(["tar", "xf", p("a.tar"), "-C", p("untar")], check=True)
        out = []
        for name in sorted(os.listdir(p("a"))):
            src = os.lstat(p("a", name))
            for copy in (p("cp-a", name), p("untar", "a", name)):
                st = os.lstat(copy)
                out.append((name, oct(st.st_mode), st.st_uid, st.st_gid,
                            stat.S_ISDIR(st.st_mode) or st.st_mtime_ns // 10**9 == src.st_mtime_ns // 10**9))
        return out
    rec("cp -a and tar keep modes, owners and times", copies_keep_modes_and_times)

    def at_calls():
        os.mkdir(p("a", "dirfd"))
        fd = os.open(p("a", "dirfd"), os.O_RDONLY | os.O_DIRECTORY)
        f = os.open("child", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd)
        os.write(f, b"hi")
        os.close(f)
        os.rename("child", "kid", src_dir_fd=fd, dst_dir_fd=fd)
        got = os.listdir(fd)
        os.close(fd)
        return got
    rec("calls relative to a directory descriptor", at_calls)

    def xattr_moves_ctime():
        with open(p("a", "x"), "w") as out:
            out.write("x")
        before = os.stat(p("a", "x")).st_ctime_ns
        time.sleep(0.01)  # apart by more than the clocks' resolution, not for any ordering
        os.setxattr(p("a", "x"), "user.k", b"v")
        return os.stat(p("a", "x")).st_ctime_ns > before
    rec("an xattr set moves the ctime", xattr_moves_ctime)

    def fallocate_modes():
        keep, punch, zero = 0x01, 0x02, 0x10  # FALLOC_FL_KEEP_SIZE, _PUNCH_HOLE, _ZERO_RANGE
        fd = os.open(p("a", "fa"), os.O_CREAT | os.O_RDWR, 0o644)
        data = rng.randbytes(3 << 20)
        os.pwrite(fd, data, 0)
        out = []
        # Inside a block, across 1 MiB chunks (some whole), to the end and beyond it, zeros that grow the file,
        # space asked for and size kept, and a hole past the end.
        for mode, off, n in ((punch | keep, 5000, 10000), (punch | keep, 900000, 2200000), (zero | keep, 100, 50),
                             (punch | keep, (3 << 20) - 7000, 1 << 30), (zero, (3 << 20) - 10, 100),
                             (0, 0, (3 << 20) + 5000), (keep, 0, 64 << 20), (punch | keep, 1 << 30, 10),
                             (punch, 0, 10), (0, 0, 4096)):
            before = os.fstat(fd).st_mtime_ns
            time.sleep(0.01)  # apart by more than the clocks' resolution, not for any ordering
            if libc.fallocate(fd, mode, off, n) != 0:
                out.append(errno.errorcode.get(ctypes.get_errno()))
                continue
            size = os.fstat(fd).st_size
            # (Kernels before 6.x leave ext4's times alone for a punch past the end.)
            moved = off >= size or os.fstat(fd).st_mtime_ns > before
            out.append((size, hashlib.sha1(os.pread(fd, size + 1, 0)).hexdigest(), moved))
        os.close(fd)
        return out
    rec("fallocate: holes, zeros, growth", fallocate_modes)
    return res


def tree_state(view):
    """Every entry under `view`: inode number, type and mode, links, owner, size, mtime, the bytes' hash, a
    symlink's target. (Inode numbers are the objects' own, the same on every mount and after the kernel forgot
    an inode.)"""
    out = []
    for dp, dns, fns in os.walk(view):
        dns.sort()
        for n in sorted(dns + fns):
            st = os.lstat(os.path.join(dp, n))
            row = [os.path.relpath(os.path.join(dp, n), view), st.st_ino, oct(st.st_mode), st.st_nlink, st.st_uid,
                   st.st_gid]
            if not stat.S_ISDIR(st.st_mode):
                row += [st.st_size, st.st_mtime_ns]
            if stat.S_ISREG(st.st_mode):
                with open(os.path.join(dp, n), "rb") as inp:
                    row.append(hash(inp.read()))
            if stat.S_ISLNK(st.st_mode):
                row.append(os.readlink(os.path.join(dp, n)))
            out.append(tuple(row))
    return out


def check_battery(tc, work, mnt, mount):
    """The same operations on a directory of the local file system and on the mount at `mnt` do the same; then what
    the mount shows of the tree (its caches included) is what a mount that caches nothing (`mount(point, *flags)`)
    reads from the targets."""
    local = os.path.join(work, "battery-local")
    os.mkdir(local)
    os.mkdir(os.path.join(mnt, "battery"))
    old_umask = os.umask(0o022)
    try:
        want = local_fs_battery(local)
        got = local_fs_battery(os.path.join(mnt, "battery"))
    finally:
        os.umask(old_umask)
    for w, g in zip(want, got):
        tc.assertEqual(g, w, "%s: the local file system did %r, the mount %r" % (w[0], w[1:], g[1:]))
    tc.assertEqual(len(got), len(want))
    fresh_mnt = os.path.join(work, "mnt-battery")
    os.makedirs(fresh_mnt, exist_ok=True)
    fresh = mount(fresh_mnt, *UNCACHED)
    try:
        seen, stored = tree_state(os.path.join(mnt, "battery")), tree_state(os.path.join(fresh_mnt, "battery"))
        for a, b in zip(seen, stored):
            tc.assertEqual(a, b, "the mount shows %r, the targets hold %r" % (a, b))
        tc.assertEqual(len(seen), len(stored))
    finally:
        fresh.unmount()
    # Nothing left behind: the files removed or replaced while open went with their last close (a consistent
    # namespace, and no unlinked inode or file data waiting to be purged).
    def clean(out):
        return out.returncode == 0 and "not purged" not in out.stdout and "file data no file" not in out.stdout
    deadline = time.monotonic() + 10
    while True:
        out = tc.server.cli("fs", "check", "--pool", "p", "--cont", "c", check=False)
        if clean(out) or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # the kernel's forget of a closed, unlinked inode comes on its own
    tc.assertTrue(clean(out), out.stdout + out.stderr)


def check_largest_file(tc, f):
    """A file ends at 2^62 bytes (the store's limit; the kernel's for FUSE is 2^63 - 1): as on a local file system
    at its limit, a write there is EFBIG and one across it is cut short, and so is a truncate beyond, where
    write-behind once acknowledged such writes and the close then failed with EINVAL."""
    limit = 1 << 62
    fd = os.open(f, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        tc.assertEqual(os.pwrite(fd, b"ab", limit - 2), 2)
        tc.assertEqual(os.pwrite(fd, b"cd", limit - 1), 1)
        for at in (limit, limit + 4096, (1 << 63) - 4096):
            with tc.assertRaises(OSError) as e:
                os.pwrite(fd, b"x", at)
            tc.assertEqual(e.exception.errno, errno.EFBIG)
        with tc.assertRaises(OSError) as e:
            os.ftruncate(fd, limit + 1)
        tc.assertEqual(e.exception.errno, errno.EFBIG)
        tc.assertEqual(os.fstat(fd).st_size, limit)
        tc.assertEqual(os.pread(fd, 8, limit - 4), b"\0\0ac")
    finally:
        os.close(fd)  # raises if a write the mount took failed later
    tc.assertEqual(os.stat(f).st_size, limit)
    os.unlink(f)


class MountTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="rfos-mount-", dir=os.environ.get("RFOS_TEST_DIR", "/var/tmp"))
        os.chmod(cls.work, 0o755)
        cls.server = Server(os.path.join(cls.work, "data"), os.path.join(cls.work, "control.sock"))
        cls.server.cli("pool", "create", "p")
        cls.server.cli("cont", "create", "--pool", "p", "c")
        cls.mnt = os.path.join(cls.work, "mnt")
        os.mkdir(cls.mnt)
        cls.mount = Mount(cls.server, cls.mnt)

    @classmethod
    def tearDownClass(cls):
        cls.mount.unmount()
        cls.server.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def expect_errno(self, err, fn, *args):
        with self.assertRaises(OSError) as ctx:
            fn(*args)
        self.assertEqual(ctx.exception.errno, err, "%s%r" % (fn.__name__, args))

    def test_files_and_directories(self):
        d = self.path("t1")
        os.mkdir(d)
        self.expect_errno(errno.EEXIST, os.mkdir, d)
        f = os.path.join(d, "f")
        with open(f, "wb") as out:
            out.write(b"hello")
            out.seek(3 << 20)  # sparse, past a chunk boundary
            out.write(b"tail")
        st = os.stat(f)
        self.assertEqual(st.st_size, (3 << 20) + 4)
        with open(f, "rb") as inp:
            data = inp.read()
        self.assertEqual(data[:5], b"hello")
        self.assertEqual(data[5:4096], bytes(4091))
        self.assertEqual(data[-4:], b"tail")
        fd = os.open(f, os.O_RDWR)
        os.pwrite(fd, b"XY", 1)
        os.ftruncate(fd, 4)
        os.fsync(fd)
        os.close(fd)
        with open(f, "rb") as inp:
            self.assertEqual(inp.read(), b"hXYl")
        os.truncate(f, 10)
        with open(f, "rb") as inp:
            self.assertEqual(inp.read(), b"hXYl" + bytes(6))
        self.expect_errno(errno.ENOTEMPTY, os.rmdir, d)
        self.expect_errno(errno.ENOTDIR, os.listdir, f)
        self.expect_errno(errno.EISDIR, os.unlink, d)
        self.expect_errno(errno.ENOENT, os.stat, os.path.join(d, "missing"))
        self.expect_errno(errno.ENAMETOOLONG, os.mkdir, os.path.join(d, "n" * 256))
        self.expect_errno(errno.EISDIR, open, d, "w")
        os.chmod(f, 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(f).st_mode), 0o600)
        os.chown(f, 1234, 5678)
        self.assertEqual((os.stat(f).st_uid, os.stat(f).st_gid), (1234, 5678))
        os.utime(f, ns=(1_000_000_000_123, 2_000_000_000_456))
        st = os.stat(f)
        self.assertEqual((st.st_atime_ns, st.st_mtime_ns), (1_000_000_000_123, 2_000_000_000_456))
        os.unlink(f)
        os.rmdir(d)
        self.assertFalse(os.path.exists(d))

    def test_links_rename_xattrs(self):
        d = self.path("t2")
        os.mkdir(d)
        a, b = os.path.join(d, "a"), os.path.join(d, "b")
        with open(a, "w") as out:
            out.write("A")
        os.link(a, b)
        self.assertEqual(os.stat(a).st_nlink, 2)
        os.unlink(a)
        self.assertEqual(os.stat(b).st_nlink, 1)
        os.symlink("b", a)
        self.assertEqual(os.readlink(a), "b")
        with open(a) as inp:
            self.assertEqual(inp.read(), "A")
        # An open file survives its unlink.
        fd = os.open(b, os.O_RDONLY)
        os.unlink(b)
        self.assertEqual(os.pread(fd, 1, 0), b"A")
        os.close(fd)
        with open(b, "w") as out:
            out.write("B")
        c = os.path.join(d, "c")
        with open(c, "w") as out:
            out.write("C")
        os.rename(b, c)  # replaces
        with open(c) as inp:
            self.assertEqual(inp.read(), "B")
        sub = os.path.join(d, "sub")
        os.mkdir(sub)
        os.rename(c, os.path.join(sub, "moved"))
        self.assertEqual(os.listdir(sub), ["moved"])
        self.expect_errno(errno.EINVAL, os.rename, d, os.path.join(sub, "inside"))
        os.setxattr(sub, "user.k", b"v")
        self.assertEqual(os.getxattr(sub, "user.k"), b"v")
        self.assertIn("user.k", os.listxattr(sub))
        os.removexattr(sub, "user.k")
        self.expect_errno(errno.ENODATA, os.getxattr, sub, "user.k")
        # No POSIX ACLs (the mode bits are the permissions): refused, not kept as plain xattrs, so cp -a, which
        # sets a copy's mode with one, falls back to chmod (told the ACL was kept, it left copies at 0600).
        acl = struct.pack("<I" + "HHI" * 3, 2, 1, 6, 0xFFFFFFFF, 4, 4, 0xFFFFFFFF, 0x20, 4, 0xFFFFFFFF)  # u::rw g::r o::r
        self.expect_errno(errno.EOPNOTSUPP, os.setxattr, sub, "system.posix_acl_access", acl)
        self.expect_errno(errno.EOPNOTSUPP, os.getxattr, sub, "system.posix_acl_access")
        src = os.path.join(self.work, "acl-src")
        os.makedirs(src, exist_ok=True)
        os.chmod(src, 0o751)
        for name, mode in (("rw-r--r--", 0o644), ("rwxr-x---", 0o750), ("rw-rw-rw-", 0o666)):
            with open(os.path.join(src, name), "w") as out:
                out.write(name)
            os.chmod(os.path.join(src, name), mode)
        subprocess.run(["cp", "-a", src, os.path.join(d, "cp-a")], check=True)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(d, "cp-a")).st_mode), 0o751)
        for name, mode in (("rw-r--r--", 0o644), ("rwxr-x---", 0o750), ("rw-rw-rw-", 0o666)):
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(d, "cp-a", name)).st_mode), mode, name)
        shutil.rmtree(d)

    def test_rename_flags(self):
        d = self.path("t3")
        os.mkdir(d)
        x, y = os.path.join(d, "x"), os.path.join(d, "y")
        for p, v in ((x, "X"), (y, "Y")):
            with open(p, "w") as out:
                out.write(v)
        at = -100  # AT_FDCWD
        rc = libc.renameat2(at, x.encode(), at, y.encode(), 1)  # RENAME_NOREPLACE
        self.assertEqual((rc, ctypes.get_errno()), (-1, errno.EEXIST))
        self.assertEqual(libc.renameat2(at, x.encode(), at, y.encode(), 2), 0)  # RENAME_EXCHANGE
        with open(x) as inp:
            self.assertEqual(inp.read(), "Y")
        with open(y) as inp:
            self.assertEqual(inp.read(), "X")
        shutil.rmtree(d)

    def test_other_users_and_permissions(self):
        d = self.path("t4")
        os.mkdir(d, 0o755)
        os.chown(d, 1000, 1000)
        alice = lambda fn: as_user(1000, 1000, [1000], fn)  # noqa: E731
        bob = lambda fn: as_user(1001, 1001, [1001, 50], fn)  # noqa: E731
        f = os.path.join(d, "alice.txt")
        self.assertEqual(alice(lambda: open(f, "w").write("mine")), 0)
        self.assertEqual(os.stat(f).st_uid, 1000)
        self.assertEqual(bob(lambda: open(os.path.join(d, "bob.txt"), "w")), errno.EACCES)
        self.assertEqual(bob(lambda: open(f, "a")), errno.EACCES)
        self.assertEqual(bob(lambda: os.chmod(f, 0o666)), errno.EPERM)
        # Supplementary groups count.
        shared = self.path("t4-shared")
        os.mkdir(shared)
        os.chmod(shared, 0o770)  # not through mkdir's mode, which the umask trims
        os.chown(shared, 0, 50)
        self.assertEqual(bob(lambda: open(os.path.join(shared, "b"), "w").write("b")), 0)
        self.assertEqual(alice(lambda: os.listdir(shared)), errno.EACCES)
        # A group the others' bits let in and its own bits shut out: its members stay out (the mount reads the
        # caller's groups only where they decide, so this is where a lapse would show).
        others = self.path("t4-others")
        os.mkdir(others)
        os.chmod(others, 0o707)
        os.chown(others, 0, 50)
        self.assertEqual(bob(lambda: open(os.path.join(others, "b"), "w")), errno.EACCES)
        self.assertEqual(alice(lambda: open(os.path.join(others, "a"), "w").write("a")), 0)
        self.assertEqual(bob(lambda: os.listdir(others)), errno.EACCES)
        # Sticky directories.
        tmp = self.path("t4-tmp")
        os.mkdir(tmp)
        os.chmod(tmp, 0o1777)
        self.assertEqual(alice(lambda: open(os.path.join(tmp, "a"), "w").write("a")), 0)
        self.assertEqual(bob(lambda: os.unlink(os.path.join(tmp, "a"))), errno.EPERM)
        self.assertEqual(alice(lambda: os.unlink(os.path.join(tmp, "a"))), 0)
        # Setgid directories.
        os.chmod(shared, 0o2770)
        self.assertEqual(bob(lambda: os.mkdir(os.path.join(shared, "sub"))), 0)
        st = os.stat(os.path.join(shared, "sub"))
        self.assertEqual(st.st_gid, 50)
        self.assertTrue(st.st_mode & stat.S_ISGID)

    def test_random_operations_on_one_file(self):
        """Writes, reads, truncates and mmap reads at random, each checked against a model of the bytes and
        the size (a write past the end after a truncate once read back the truncated size)."""
        d = self.path("t-fsx")
        os.mkdir(d)
        for seed in range(3):
            random_ops_bench.one_file(d, 1500, seed)

    def test_the_largest_file(self):
        check_largest_file(self, self.path("t-largest"))

    def test_check_repairs_what_a_dead_mount_left(self):
        """A mount killed while it held an unlinked file open leaves the file's inode and bytes (nobody purges them),
        and a put that died leaves its hidden file: `fs check` names them, `fs check --repair` gives them back."""
        point = os.path.join(self.work, "mnt-doomed")
        os.makedirs(point, exist_ok=True)
        doomed = Mount(self.server, point)
        d = os.path.join(point, "t-repair")
        os.mkdir(d)
        with open(os.path.join(d, "held"), "wb") as out:
            out.write(os.urandom(300 << 10))
        with open(os.path.join(d, ".model.rfos-put-0123456789abcdef"), "wb") as out:
            out.write(b"half a put")
        fd = os.open(os.path.join(d, "held"), os.O_RDONLY)
        os.unlink(os.path.join(d, "held"))
        self.assertEqual(len(os.pread(fd, 10, 0)), 10)  # still readable: its purge waits for the close
        doomed.proc.kill()
        doomed.proc.wait()
        try:
            os.close(fd)  # the daemon is gone: no release reaches anyone
        except OSError:
            pass
        subprocess.run(["fusermount3", "-u", "-z", point], check=False)  # a dead daemon's mount: not ismount()
        self.assertFalse(in_mount_table(point))
        doomed.unmount()
        found = self.server.cli("fs", "check", "--pool", "p", "--cont", "c", check=False).stdout
        self.assertIn("unlinked inode not purged", found)
        self.assertIn("unfinished put", found)
        # Refused while sessions are open: this class's mount's, and the killed one's until they expire.
        refused = self.server.cli("fs", "check", "--pool", "p", "--cont", "c", "--repair", check=False)
        self.assertNotEqual(refused.returncode, 0, refused.stdout)
        self.assertIn("session(s) open on the container", refused.stderr)
        again = self.server.cli("fs", "check", "--pool", "p", "--cont", "c", check=False).stdout
        self.assertIn("unfinished put", again, "a refused repair changed something")
        fixed = self.server.cli("fs", "check", "--pool", "p", "--cont", "c", "--repair", "--force", check=False)
        self.assertEqual(fixed.returncode, 0, fixed.stdout + fixed.stderr)
        # (Every client stopped but this class's mount, which holds no removed file open between tests.)
        self.assertIn("repaired 2\n", fixed.stdout)
        again = self.server.cli("fs", "check", "--pool", "p", "--cont", "c", check=False).stdout
        self.assertNotIn("not purged", again, found + fixed.stdout)
        self.assertNotIn("unfinished put", again)
        self.assertTrue(again.endswith("consistent\n"), again)
        self.assertEqual(os.listdir(self.path("t-repair")), [])
        os.rmdir(self.path("t-repair"))

    def test_open_trunc_and_writes_to_setid_files(self):
        d = self.path("t4-trunc")
        os.mkdir(d)
        os.chmod(d, 0o777)
        f = os.path.join(d, "f")
        with open(f, "w") as w:
            w.write("hello world")
        before = os.stat(f)
        os.close(os.open(f, os.O_WRONLY | os.O_TRUNC))  # cut at open, as a shell's `> f` does
        after = os.stat(f)
        self.assertEqual(after.st_size, 0)
        with open(f) as r:
            self.assertEqual(r.read(), "")
        self.assertGreater(after.st_mtime_ns, before.st_mtime_ns)
        self.assertGreater(after.st_ctime_ns, before.st_ctime_ns)
        os.close(os.open(f, os.O_WRONLY | os.O_TRUNC))  # already empty: the times still move (POSIX)
        again = os.stat(f)
        self.assertGreater(again.st_mtime_ns, after.st_mtime_ns)
        with open(f, "w") as w:
            w.write("longer than the next")
        with open(f, "w") as w:  # O_TRUNC through Python's "w"
            w.write("short")
        with open(f) as r:
            self.assertEqual(r.read(), "short")
        # A write by someone other than the owner clears the set-id bits; root's (CAP_FSETID) does not.
        prog = os.path.join(d, "prog")
        with open(prog, "w") as w:
            w.write("#!/bin/sh\n")
        os.chmod(prog, 0o6777)
        with open(prog, "a") as w:
            w.write("true\n")
        self.assertEqual(stat.S_IMODE(os.stat(prog).st_mode), 0o6777)
        def append():
            with open(prog, "a") as w:
                w.write("echo\n")
        self.assertEqual(as_user(1000, 1000, [1000], append), 0)
        self.assertEqual(stat.S_IMODE(os.stat(prog).st_mode), 0o777)
        self.assertEqual(os.stat(prog).st_uid, 0)

    def test_readdir_large_and_stable(self):
        d = self.path("t5")
        os.mkdir(d)
        for i in range(1200):
            open(os.path.join(d, "f%05d" % i), "w").close()
        names = os.listdir(d)
        self.assertEqual(len(names), 1200)
        self.assertEqual(len(set(names)), 1200)
        found = subprocess.run(["find", d, "-type", "f"], capture_output=True, text=True, check=True)
        self.assertEqual(len(found.stdout.split()), 1200)
        shutil.rmtree(d)
        self.assertFalse(os.path.exists(d))
        # A directory removed while open lists empty, as on Linux's own file systems.
        os.mkdir(d)
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        os.rmdir(d)
        self.assertEqual(list(os.scandir(fd)), [])
        os.close(fd)

    def test_listings_beside_changes(self):
        # Listings (opendir, readdirplus pages, releasedir) in several threads while others make and remove
        # files in the same directory: the mount answers each from its own handle, freed by the kernel's
        # release as soon as the last page arrived. A name present throughout shows exactly once in every
        # listing; no name shows twice.
        d = self.path("t5b")
        os.mkdir(d)
        kept = {"k%02d" % i for i in range(20)}
        for name in kept:
            with open(os.path.join(d, name), "w") as f:
                f.write(name)
        failures = []

        def churn(seed):
            rng = random.Random(seed)
            for _ in range(300):
                p = os.path.join(d, "n%02d" % rng.randrange(40))
                try:
                    if rng.random() < 0.5:
                        with open(p, "x") as f:
                            f.write("x" * rng.randrange(1, 2000))
                    else:
                        os.unlink(p)
                except (FileExistsError, FileNotFoundError):
                    pass

        def lister():
            for _ in range(150):
                names = []
                for e in os.scandir(d):
                    names.append(e.name)
                    try:
                        e.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        pass
                if len(names) != len(set(names)) or not kept <= set(names):
                    failures.append(sorted(names))

        threads = [threading.Thread(target=churn, args=(i,)) for i in range(2)]
        threads += [threading.Thread(target=lister) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(failures, [])
        self.assertEqual(sorted(n for n in os.listdir(d) if n.startswith("k")), sorted(kept))
        shutil.rmtree(d)

    def test_tools(self):
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "posix")
        dst = self.path("t6")
        os.mkdir(dst)
        subprocess.run(["cp", "-a", src, os.path.join(dst, "cp")], check=True)
        subprocess.run(["tar", "cf", os.path.join(dst, "x.tar"), "-C", src, "."], check=True)
        os.mkdir(os.path.join(dst, "untar"))
        subprocess.run(["tar", "xf", os.path.join(dst, "x.tar"), "-C", os.path.join(dst, "untar")], check=True)
        subprocess.run(["diff", "-r", src, os.path.join(dst, "untar")], check=True)
        if shutil.which("rsync"):
            subprocess.run(["rsync", "-a", src + "/", os.path.join(dst, "rsync")], check=True)
            subprocess.run(["diff", "-r", src, os.path.join(dst, "rsync")], check=True)
        if shutil.which("git"):
            repo = os.path.join(dst, "repo")
            g = dict(ENV, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                     GIT_COMMITTER_EMAIL="t@t")
            subprocess.run(["git", "init", "-q", repo], check=True, env=g)
            shutil.copy(os.path.join(src, "namespace.h"), repo)
            subprocess.run(["git", "-C", repo, "add", "."], check=True, env=g)
            subprocess.run(["git", "-C", repo, "commit", "-qm", "x"], check=True, env=g)
            subprocess.run(["git", "clone", "-q", repo, os.path.join(dst, "clone")], check=True, env=g)
            subprocess.run(["git", "-C", os.path.join(dst, "clone"), "fsck", "--no-progress"], check=True, env=g)
            subprocess.run(["cmp", os.path.join(src, "namespace.h"), os.path.join(dst, "clone", "namespace.h")],
                           check=True)

    def test_times_set_before_close_stay(self):
        # tar x and cp -p write a file, set its times through the descriptor, then close it: the close must not
        # move the mtime again (a local file system's writes moved it before the set). Seen through a second
        # mount that caches no attributes, straight from the targets, not from this mount's kernel cache.
        fresh_mnt = os.path.join(self.work, "mnt-times")
        os.makedirs(fresh_mnt, exist_ok=True)
        fresh = Mount(self.server, fresh_mnt, *UNCACHED)
        try:
            src = os.path.join(self.work, "times-src")
            os.makedirs(os.path.join(src, "d"), exist_ok=True)
            sizes = {"small": 3000, "large": 200_000, "empty": 0}  # held by write-behind, sent at once, none
            for i, (name, size) in enumerate(sizes.items()):
                with open(os.path.join(src, "d", name), "wb") as out:
                    out.write(os.urandom(size))
                os.utime(os.path.join(src, "d", name), (1_400_000_000 + i, 1_500_000_000 + i))  # tar keeps seconds
            subprocess.run(["tar", "cf", os.path.join(self.work, "times.tar"), "-C", src, "d"], check=True)
            os.mkdir(self.path("t-times"))
            subprocess.run(["tar", "xf", os.path.join(self.work, "times.tar"), "-C", self.path("t-times")], check=True)
            subprocess.run(["cp", "-p", os.path.join(src, "d", "small"), self.path("t-times", "cp-p")], check=True)
            for name, there in [(n, os.path.join("d", n)) for n in sizes] + [("small", "cp-p")]:
                want = os.stat(os.path.join(src, "d", name)).st_mtime_ns
                seen = os.stat(os.path.join(fresh_mnt, "t-times", there))
                self.assertEqual(seen.st_mtime_ns, want, there)
                with open(os.path.join(fresh_mnt, "t-times", there), "rb") as a, \
                        open(os.path.join(src, "d", name), "rb") as b:
                    self.assertEqual(a.read(), b.read(), there)
            # A write after the set moves the mtime again, at the close.
            before = time.time_ns()
            fd = os.open(self.path("t-times", "later"), os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, b"one")
            os.utime(fd, ns=(1_000_000_000, 2_000_000_000))
            os.write(fd, b"two")
            os.close(fd)
            seen = os.stat(os.path.join(fresh_mnt, "t-times", "later"))
            self.assertGreaterEqual(seen.st_mtime_ns, before - 10**9)
            self.assertEqual(seen.st_size, 6)
            # A caller who may not set the times is refused (by the kernel: the mount checks permissions there,
            # default_permissions), and the bytes held for the file land all the same. (The targets' refusal of
            # times that come with a held write is write_behind_test's TimesGoWithAHeldWrite.)
            f = self.path("t-times", "others")
            with open(f, "wb") as out:
                out.write(b"x")
            os.chmod(f, 0o666)

            def write_then_set():
                fd = os.open(f, os.O_WRONLY)
                try:
                    os.write(fd, b"y")
                    os.utime(fd, ns=(3_000_000_000, 4_000_000_000))
                finally:
                    os.close(fd)
            self.assertEqual(as_user(4321, 4321, [4321], write_then_set), errno.EPERM)
            with open(os.path.join(fresh_mnt, "t-times", "others"), "rb") as inp:
                self.assertEqual(inp.read(), b"y")
            self.assertNotEqual(os.stat(os.path.join(fresh_mnt, "t-times", "others")).st_mtime_ns, 4_000_000_000)
        finally:
            fresh.unmount()

    def test_same_outcomes_as_a_local_file_system(self):
        check_battery(self, self.work, self.mnt, lambda point, *extra: Mount(self.server, point, *extra))

    def test_full_pool_reaches_the_writer(self):
        """Writes are stored behind write(): a failure (here a full pool) reaches the writer at fsync at the
        latest, and its space comes back once the file is gone."""
        def free_mib():
            out = self.server.cli("pool", "query", "p").stdout
            m = re.search(r"([\d.]+) (B|KiB|MiB|GiB) free of", out)  # a full pool says KiB
            return float(m.group(1)) * {"B": 2**-20, "KiB": 2**-10, "MiB": 1, "GiB": 1024}[m.group(2)]
        before = free_mib()
        p = self.path("huge")
        fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
        chunk = os.urandom(1 << 20)
        err = None
        try:
            for _ in range(700):  # the pool has 512 MiB
                os.write(fd, chunk)
            os.fsync(fd)
        except OSError as e:
            err = e.errno
        finally:
            try:
                os.close(fd)
            except OSError as e:
                err = err or e.errno
        self.assertEqual(err, errno.ENOSPC)
        os.unlink(p)
        deadline = time.time() + 30
        while free_mib() < before - 1 and time.time() < deadline:
            time.sleep(0.2)
        self.assertGreaterEqual(free_mib(), before - 1, "the removed file's space did not come back")

    def test_fs_copy_without_a_mount(self):
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "posix")
        out = self.server.cli("fs", "copy", "--pool", "p", "--cont", "c", src, "rfos:/t7")
        self.assertIn("copied", out.stdout)
        subprocess.run(["diff", "-r", src, self.path("t7")], check=True)  # seen through the mount
        back = os.path.join(self.work, "back")
        self.server.cli("fs", "copy", "--pool", "p", "--cont", "c", "rfos:/t7", back)
        subprocess.run(["diff", "-r", src, back], check=True)
        listing = self.server.cli("fs", "ls", "--pool", "p", "--cont", "c", "rfos:/t7").stdout
        self.assertIn("namespace.cc", listing)
        missing = self.server.cli("fs", "copy", "--pool", "p", "--cont", "c", "rfos:/nope", back, check=False)
        self.assertEqual(missing.returncode, 1)
        self.assertIn("NotFound", missing.stderr)

    def test_fio_verify(self):
        if not shutil.which("fio"):
            self.skipTest("fio is not installed")
        for engine, rw, bs in (("psync", "write", "1m"), ("io_uring", "randwrite", "4k"), ("psync", "randrw", "64k")):
            out = subprocess.run(
                ["fio", "--name=verify", "--verify_state_save=0", "--filename=" + self.path("fio-" + engine + rw), "--size=24m",
                 "--bs=" + bs, "--rw=" + rw, "--ioengine=" + engine, "--iodepth=8", "--verify=crc32c",
                 "--do_verify=1", "--verify_fatal=1"], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            self.assertIn("err= 0", out.stdout)

    def test_two_mounts_see_each_other(self):
        other_mnt = os.path.join(self.work, "mnt2")
        os.makedirs(other_mnt, exist_ok=True)
        # This one asks for no notices: what it caches of the other mount's changes lasts until its timeouts.
        other = Mount(self.server, other_mnt, "--attr-timeout", "0.2", "--entry-timeout", "0.2",
                      "--negative-timeout", "0.2", "--no-notices")
        try:
            with open(self.path("shared"), "w") as out:
                out.write("one")
            with open(os.path.join(other_mnt, "shared")) as inp:
                self.assertEqual(inp.read(), "one")
            # Close-to-open, no waiting: a file closed on one mount reads whole at the next open on the other,
            # even at the same size (the cached pages and the small file's bytes are not kept: mtime moved).
            for word in ("two!", "TWO!", "2two"):
                with open(os.path.join(other_mnt, "shared"), "w") as out:
                    out.write(word)
                with open(self.path("shared")) as inp:
                    self.assertEqual(inp.read(), word)
                with open(self.path("shared")) as inp:  # again, unchanged: the kept pages are right too
                    self.assertEqual(inp.read(), word)
            # Beside the native API: rfos put of the path, then an open on the mount.
            src = os.path.join(self.work, "native-src")
            with open(src, "w") as out:
                out.write("from the native API")
            out = self.server.cli("put", "--pool", "p", "--cont", "c", "/shared", src)
            self.assertEqual(out.returncode, 0, out.stderr)
            with open(self.path("shared")) as inp:
                self.assertEqual(inp.read(), "from the native API")
            # Past the other mount's timeouts (0.2 s), the attributes, names and absences it cached are asked
            # for again.
            there = os.path.join(other_mnt, "shared")
            os.stat(there)  # its attributes, cached there
            with open(self.path("shared"), "w") as out:
                out.write("two!")
            time.sleep(0.4)  # past the attribute timeout: fresh without an open
            self.assertEqual(os.stat(there).st_size, 4)
            with open(there) as inp:
                self.assertEqual(inp.read(), "two!")
            os.unlink(self.path("shared"))
            time.sleep(0.4)
            self.assertFalse(os.path.exists(there))
            # A name's absence is kept like a name: this mount's own create replaces it at once, the other
            # mount's shows within the timeout.
            self.assertFalse(os.path.exists(os.path.join(other_mnt, "made-here")))
            with open(os.path.join(other_mnt, "made-here"), "w") as out:
                out.write("x")
            self.assertTrue(os.path.exists(os.path.join(other_mnt, "made-here")))
            self.assertFalse(os.path.exists(os.path.join(other_mnt, "made-elsewhere")))
            with open(self.path("made-elsewhere"), "w") as out:
                out.write("y")
            time.sleep(0.4)
            with open(os.path.join(other_mnt, "made-elsewhere")) as inp:
                self.assertEqual(inp.read(), "y")
        finally:
            other.unmount()

    def test_notices_show_other_mounts_changes_at_once(self):
        # A mount whose kernel would keep names, absences and attributes for a minute still sees another
        # mount's changes within seconds: the targets send notices of them (docs/posix.md, coherence).
        other_mnt = os.path.join(self.work, "mnt-watch")
        os.makedirs(other_mnt, exist_ok=True)
        other = Mount(self.server, other_mnt, "--attr-timeout", "60", "--entry-timeout", "60",
                      "--negative-timeout", "60")

        def shows(what, check, bound=10.0):
            deadline = time.monotonic() + bound
            while not check():
                self.assertLess(time.monotonic(), deadline, what + ": not seen within %.0f s" % bound)
                time.sleep(0.01)

        try:
            os.mkdir(self.path("watched"))
            there = os.path.join(other_mnt, "watched")
            self.assertEqual(os.listdir(there), [])
            self.assertFalse(os.path.exists(os.path.join(there, "f")))  # its absence, cached for 60 s
            with open(self.path("watched/f"), "w") as out:
                out.write("one")
            shows("a create", lambda: os.path.exists(os.path.join(there, "f")))
            os.chmod(self.path("watched/f"), 0o600)
            shows("a chmod", lambda: os.stat(os.path.join(there, "f")).st_mode & 0o777 == 0o600)
            with open(self.path("watched/f"), "a") as out:
                out.write("two")
            shows("a write's size", lambda: os.stat(os.path.join(there, "f")).st_size == 6)
            os.rename(self.path("watched/f"), self.path("watched/g"))
            shows("a rename", lambda: not os.path.exists(os.path.join(there, "f")) and
                  os.path.exists(os.path.join(there, "g")))
            os.unlink(self.path("watched/g"))
            shows("an unlink", lambda: not os.path.exists(os.path.join(there, "g")))
            shows("the listing", lambda: os.listdir(there) == [])
            os.rmdir(self.path("watched"))
            shows("an rmdir", lambda: not os.path.exists(there))
            # A directory the watching mount made itself, whose names it knows without asking, until a notice
            # says another mount made one.
            os.mkdir(os.path.join(other_mnt, "made-there"))
            self.assertFalse(os.path.exists(os.path.join(other_mnt, "made-there", "f")))
            with open(self.path("made-there/f"), "w") as out:
                out.write("x")
            shows("a create in a directory the other mount made",
                  lambda: os.path.exists(os.path.join(other_mnt, "made-there", "f")))
        finally:
            other.unmount()
        # With --no-notices, the same absence stays cached for its timeout.
        quiet = Mount(self.server, other_mnt, "--negative-timeout", "60", "--no-notices")
        try:
            self.assertFalse(os.path.exists(os.path.join(other_mnt, "unheard")))
            with open(self.path("unheard"), "w") as out:
                out.write("x")
            self.assertTrue(os.path.exists(self.path("unheard")))
            time.sleep(0.3)  # where notices come, one would have by now (they showed within milliseconds above)
            self.assertFalse(os.path.exists(os.path.join(other_mnt, "unheard")))
        finally:
            quiet.unmount()

    def test_no_local_root_through_the_mount(self):
        """Setuid files and device nodes never take effect, unless root mounts a container root owns."""
        with open("/proc/mounts") as f:
            line = next(l for l in f if l.split()[1] == os.path.realpath(self.mnt))
        opts = line.split()[3].split(",")
        self.assertIn("nosuid", opts, line)
        self.assertIn("nodev", opts, line)
        self.server.cli("cont", "create", "--pool", "p", "theirs")
        self.server.cli("cont", "acl", "set-owner", "--pool", "p", "theirs", "--user", "nobody")
        mnt = os.path.join(self.work, "mnt-suid")
        os.makedirs(mnt, exist_ok=True)
        out = subprocess.run([RFOS, "--addr", self.server.addr, "mount", "--pool", "p", "--cont", "theirs",
                              "-o", "suid,dev", mnt], env=ENV, capture_output=True, text=True)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("-o suid and -o dev are refused", out.stderr)
        self.assertFalse(in_mount_table(mnt))

    def test_errors_and_signals(self):
        out = subprocess.run([RFOS, "--addr", self.server.addr, "mount", "--pool", "nope", self.work], env=ENV,
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 1)
        self.assertIn("nope", out.stderr)
        out = subprocess.run([RFOS, "--addr", self.server.addr, "mount", "--pool", "p", "--cont", "c",
                              os.path.join(self.work, "no-such-dir")], env=ENV, capture_output=True, text=True)
        self.assertEqual(out.returncode, 1)
        self.assertIn("not a directory", out.stderr)
        # Background by default: returns once mounted; SIGTERM to the daemon unmounts cleanly.
        mnt = os.path.join(self.work, "mnt3")
        os.makedirs(mnt, exist_ok=True)
        out = subprocess.run([RFOS, "--addr", self.server.addr, "mount", "--pool", "p", "--cont", "c", mnt], env=ENV,
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(os.path.ismount(mnt))
        pid = int(subprocess.run(["pgrep", "-f", "mount --pool p --cont c " + mnt], capture_output=True,
                                 text=True).stdout.split()[0])
        os.kill(pid, signal.SIGTERM)
        deadline = time.time() + 10
        while in_mount_table(mnt) and time.time() < deadline:
            time.sleep(0.05)
        self.assertFalse(in_mount_table(mnt), "SIGTERM left the mount behind")
        # Foreground: SIGINT unmounts and exits 0.
        fg = Mount(self.server, mnt)
        fg.proc.send_signal(signal.SIGINT)
        self.assertEqual(fg.proc.wait(timeout=10), 0)
        self.assertFalse(in_mount_table(mnt), "SIGINT left the mount behind")
        fg.log.close()

    def test_zz_server_killed_under_a_writer(self):
        """Runs last: every file fsync'ed before the server died reads back after a restart, through the mount that
        was there all along (it goes on with the restarted server's targets: docs/posix.md) and through a new one."""
        d = self.path("crash")
        os.mkdir(d)
        synced = {}
        for i in range(20):
            data = os.urandom(100_000 + i)
            p = os.path.join(d, "f%d" % i)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, data)
            os.fsync(fd)
            os.close(fd)
            synced["f%d" % i] = data
        self.server.kill()
        type(self).server = Server(self.server.data_dir, self.server.socket_path)
        read_across_a_restart(self, d, synced)
        self.mount.unmount()
        type(self).mount = Mount(self.server, self.mnt)
        for name, data in synced.items():
            with open(os.path.join(d, name), "rb") as inp:
                self.assertEqual(inp.read(), data, name)
        with open(os.path.join(d, "after"), "rb") as inp:
            self.assertEqual(inp.read(), b"written after the restart")


def read_across_a_restart(test, d, synced):
    """Right after the server under a mount restarted: the mount's first calls find the old targets gone (an
    error within seconds, not a hang: ESHUTDOWN, from the look at the control plane that found the new server
    process, not the 30 s deadline of a call), then every file of `synced` (name: bytes) in directory d reads back
    and a new one is written there ("after")."""
    def read(name):
        with open(os.path.join(d, name), "rb") as inp:
            return inp.read()

    failures = 0
    deadline = time.time() + 60
    while True:
        try:
            first = read("f0")
            break
        except OSError as e:
            failures += 1
            if time.time() > deadline:
                raise
            test.assertEqual(e.errno, errno.ESHUTDOWN, e)
    test.assertLessEqual(failures, 3, "the mount kept failing after the server was back")
    test.assertEqual(first, synced["f0"])
    for name, data in synced.items():
        test.assertEqual(read(name), data, name)
    with open(os.path.join(d, "after"), "wb") as out:
        out.write(b"written after the restart")
    test.assertEqual(read("after"), b"written after the restart")


class Agent:
    """`rfos agent` serving apps on `sock` for `server` (which must trust root as an agent), with `config` (a YAML
    file) if given."""

    def __init__(self, server, sock, config=None):
        self.sock = sock
        extra = ["--config", config] if config else []
        self.proc = subprocess.Popen([RFOS, "--addr", server.addr, "agent", "--listen", sock, "--provider",
                                      "ucx+tcp"] + extra, env=ENV, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while not self.answers():  # a killed agent's socket file stays until the new one replaces it
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("rfos agent did not start")
            time.sleep(0.05)

    def answers(self):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            try:
                s.connect(self.sock)
                return True
            except OSError:
                return False

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


def socket_inodes(pid):
    """The inodes of the sockets process pid holds."""
    found = []
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            found.append(target[len("socket:["):-1])
    return found


class AgentServer:
    """For a test class: a server that trusts root as an agent, with pool p and container c, an agent on it
    (configured by agent_config, a YAML file it writes into the work directory, or on flags alone), and a mount
    point."""

    @classmethod
    def agent_config(cls, work):
        return None

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="rfos-agent-mount-", dir=os.environ.get("RFOS_TEST_DIR", "/var/tmp"))
        os.chmod(cls.work, 0o755)
        cls.server = Server(os.path.join(cls.work, "data"), os.path.join(cls.work, "control.sock"),
                            ["--trust-agent", "root=root"])
        cls.server.cli("pool", "create", "p")
        cls.server.cli("cont", "create", "--pool", "p", "c")
        cls.sock = os.path.join(cls.work, "agent", "agent.sock")
        cls.agent = Agent(cls.server, cls.sock, cls.agent_config(cls.work))
        cls.mnt = os.path.join(cls.work, "mnt")
        os.mkdir(cls.mnt)

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()
        cls.server.stop()
        shutil.rmtree(cls.work, ignore_errors=True)


class AgentMountTest(AgentServer, unittest.TestCase):
    """`rfos mount --agent`: the shim only mounts; the namespace (sessions, capabilities, endpoints) runs in the
    agent, for the user who mounted, with every caller's rights checked there."""

    def mount(self):
        return Mount(self.server, self.mnt, "--agent", self.sock)

    def test_zz_the_agent_goes_on_when_the_server_restarts(self):
        """Runs last: the server under the agent killed and started again; the agent's sessions go on with the new
        server process, and the mount through it with them."""
        m = self.mount()
        try:
            d = os.path.join(self.mnt, "restart")
            os.mkdir(d)
            synced = {}
            for i in range(5):
                synced["f%d" % i] = os.urandom(50_000 + i)
                with open(os.path.join(d, "f%d" % i), "wb") as out:
                    out.write(synced["f%d" % i])
                    out.flush()
                    os.fsync(out.fileno())
            self.server.kill()
            type(self).server = Server(self.server.data_dir, self.server.socket_path, ["--trust-agent", "root=root"])
            read_across_a_restart(self, d, synced)
        finally:
            m.unmount()

    def test_the_largest_file(self):
        m = self.mount()
        try:
            check_largest_file(self, os.path.join(self.mnt, "largest"))
        finally:
            m.unmount()

    def test_same_outcomes_as_a_local_file_system(self):
        m = self.mount()
        try:
            check_battery(self, self.work, self.mnt,
                          lambda point, *extra: Mount(self.server, point, "--agent", self.sock, *extra))
        finally:
            m.unmount()

    def test_files_go_through_the_agent_and_the_shim_holds_no_fabric(self):
        m = self.mount()
        try:
            d = os.path.join(self.mnt, "through-agent")
            os.mkdir(d)
            data = os.urandom(3 << 20)
            with open(os.path.join(d, "big"), "wb") as f:
                f.write(data)
            with open(os.path.join(d, "small"), "w") as f:
                f.write("hello")
            os.rename(os.path.join(d, "small"), os.path.join(d, "renamed"))
            self.assertEqual(sorted(os.listdir(d)), ["big", "renamed"])
            with open(os.path.join(d, "big"), "rb") as f:
                self.assertEqual(f.read(), data)
            # The native client sees what went through the agent.
            out = self.server.cli("fs", "ls", "--pool", "p", "--cont", "c", "rfos:/through-agent").stdout
            self.assertIn("renamed", out)
            self.assertIn(str(3 << 20), out)
            # The shim's sockets are all Unix sockets (its one to the agent): no endpoint, no control channel.
            with open("/proc/net/unix") as f:
                unix = {line.split()[6] for line in f.readlines()[1:] if len(line.split()) > 6}
            held = socket_inodes(m.proc.pid)
            self.assertTrue(held)
            self.assertEqual([i for i in held if i not in unix], [])
        finally:
            m.unmount()
        self.assertEqual(m.proc.returncode, 0)  # unmounted: the agent said the mount ended, the shim left

    def test_another_users_rights_hold_through_the_agents_mount(self):
        m = self.mount()
        try:
            private = os.path.join(self.mnt, "private")
            with open(private, "w") as f:
                f.write("root's")
            os.chmod(private, 0o600)
            self.assertEqual(as_user(65534, 65534, [], lambda: open(private).read()), errno.EACCES)
            self.assertEqual(as_user(65534, 65534, [], lambda: open(os.path.join(self.mnt, "x"), "w")),
                             errno.EACCES)
            self.assertEqual(as_user(65534, 65534, [], lambda: os.listdir(self.mnt)), 0)
        finally:
            m.unmount()

    def test_fs_copy_goes_through_the_agent(self):
        # A tree with small files (batched), a large one (in chunks), a subdirectory and a symlink, copied in and
        # back out through the agent, and out natively: the same tree each time, and the namespace consistent.
        tree = os.path.join(self.work, "tree")
        shutil.copytree(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "agent"), tree)
        with open(os.path.join(tree, "large.bin"), "wb") as f:
            f.write(os.urandom((5 << 20) + 123))
        os.symlink("large.bin", os.path.join(tree, "link"))
        agent = ["--agent", self.sock, "fs", "copy", "--pool", "p", "--cont", "c"]
        out = self.server.cli(*agent, tree, "rfos:/copied")
        self.assertIn("copied %d files" % sum(len(f) for _, _, f in os.walk(tree)), out.stdout)
        for way, cmd in (("agent", agent), ("native", agent[2:])):
            back = os.path.join(self.work, "back-" + way)
            self.server.cli(*cmd, "rfos:/copied", back)
            subprocess.run(["diff", "-r", "--no-dereference", tree, back], check=True)
            self.assertEqual(os.readlink(os.path.join(back, "link")), "large.bin")
        self.server.cli(*agent, tree, "rfos:/copied")  # into the existing directory, by its name (as cp does)
        listing = self.server.cli("--agent", self.sock, "fs", "ls", "--pool", "p", "--cont", "c", "rfos:/copied/tree")
        self.assertIn("large.bin", listing.stdout)
        check = self.server.cli("--agent", self.sock, "fs", "check", "--pool", "p", "--cont", "c")
        self.assertTrue(check.stdout.endswith("consistent\n"), check.stdout)
        missing = self.server.cli(*agent, "rfos:/nope", os.path.join(self.work, "nope"), check=False)
        self.assertEqual(missing.returncode, 1)
        self.assertIn("NotFound", missing.stderr)

    def test_suid_is_refused(self):
        out = subprocess.run([RFOS, "--addr", self.server.addr, "mount", "-f", "--pool", "p", "--cont", "c",
                              "--agent", self.sock, "-o", "suid", self.mnt], env=ENV, capture_output=True, text=True)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("not available through the agent", out.stderr)
        self.assertFalse(in_mount_table(self.mnt))

    def test_an_agent_killed_ends_the_mount_at_once_and_a_new_one_serves_it(self):
        m = self.mount()
        path = os.path.join(self.mnt, "kept")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"acknowledged")
        os.fsync(fd)
        os.close(fd)
        self.agent.kill()
        try:
            m.proc.wait(timeout=20)  # the shim hears the agent hang up, unmounts and fails
        finally:
            type(self).agent = Agent(self.server, self.sock)
        self.assertNotEqual(m.proc.returncode, 0)
        m.log.seek(0)
        self.assertIn("agent is gone", m.log.read())
        self.assertFalse(in_mount_table(self.mnt))
        m.log.close()
        again = self.mount()
        try:
            with open(path, "rb") as f:
                self.assertEqual(f.read(), b"acknowledged")
        finally:
            again.unmount()


class SealedAgentMountTest(AgentServer, unittest.TestCase):
    """`rfos mount --agent` for a tenant whose data the agent seals (AES-256-GCM, docs/agent.md): files of any size
    written, overwritten in part, cut, grown and mapped read back as written, a copied tree is the same tree, and
    the server's media hold none of it in the clear."""

    MARKER = b"sealed-mount-marker-5e0b93-"

    @classmethod
    def agent_config(cls, work):
        return rfos_setup.sealing_agent_config(work)

    def test_the_largest_file(self):
        m = Mount(self.server, self.mnt, "--agent", self.sock)
        try:
            check_largest_file(self, os.path.join(self.mnt, "largest"))
        finally:
            m.unmount()

    def test_same_outcomes_as_a_local_file_system(self):
        m = Mount(self.server, self.mnt, "--agent", self.sock)
        try:
            check_battery(self, self.work, self.mnt,
                          lambda point, *extra: Mount(self.server, point, "--agent", self.sock, *extra))
        finally:
            m.unmount()

    def test_zz_files_are_whole_through_the_mount_and_never_on_the_media(self):  # last: it stops the server
        m = Mount(self.server, self.mnt, "--agent", self.sock)
        try:
            d = os.path.join(self.mnt, "sealed")
            os.mkdir(d)
            written = {}
            for size in (0, 1, 3000, 4096, 4097, 70000, (1 << 20) + 5, (3 << 20) + 777):
                data = (self.MARKER * (size // len(self.MARKER) + 1))[:size]
                path = os.path.join(d, "f%d" % size)
                with open(path, "wb") as f:
                    f.write(data)
                written[path] = data
            # Overwrites in part, across blocks and chunks, a cut inside a block, growth past it, an append.
            path = os.path.join(d, "f%d" % ((3 << 20) + 777))
            data = bytearray(written[path])
            fd = os.open(path, os.O_RDWR)
            for at, piece in ((10, b"x" * 5), (4090, b"y" * 20), ((1 << 20) - 3, b"z" * 9), (2 << 20, b"w" * 5000)):
                os.pwrite(fd, piece, at)
                data[at:at + len(piece)] = piece
            os.ftruncate(fd, 1234567)
            del data[1234567:]
            os.pwrite(fd, b"grown", 1300000)
            data += bytes(1300000 - len(data)) + b"grown"
            os.close(fd)
            with open(path, "ab") as f:
                f.write(b"appended")
            data += b"appended"
            written[path] = bytes(data)
            for p, want in written.items():
                self.assertEqual(os.stat(p).st_size, len(want), p)
                with open(p, "rb") as f:
                    self.assertEqual(f.read(), want, p)
            # Small random operations on one file, each checked (reads, writes, cuts, mmap).
            for seed in range(2):
                random_ops_bench.one_file(d, 400, seed)
            # A tree copied in and out the same.
            tree = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "agent")
            shutil.copytree(tree, os.path.join(self.mnt, "tree"))
            subprocess.run(["diff", "-r", tree, os.path.join(self.mnt, "tree")], check=True)
        finally:
            m.unmount()
        # The native client, without the key, sees files of the same sizes but not their bytes.
        out = self.server.cli("fs", "ls", "--pool", "p", "--cont", "c", "rfos:/sealed").stdout
        self.assertIn(str((1 << 20) + 5), out)
        back = os.path.join(self.work, "native-copy")
        self.server.cli("fs", "copy", "--pool", "p", "--cont", "c", "rfos:/sealed/f70000", back)
        with open(back, "rb") as f:
            theirs = f.read()
        self.assertEqual(len(theirs), 70000)
        self.assertFalse(self.MARKER in theirs, "the native client read the plaintext")
        self.server.stop()  # everything it holds on its files
        needle = self.MARKER + self.MARKER[:8]
        for root, _, files in os.walk(self.server.data_dir):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    self.assertFalse(needle in f.read(), "plaintext in " + os.path.join(root, name))


def main():
    global RFOS
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    RFOS = os.path.abspath(sys.argv.pop(1))
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        # Never a quiet skip: a run that cannot exercise the mount must not pass as if it had.
        print("FAILED: the mount suite needs root, /dev/fuse and fusermount3 (leave it out with `ctest -LE mount`)")
        sys.exit(1)
    unittest.main(verbosity=2)


if __name__ == "__main__":
    main()
