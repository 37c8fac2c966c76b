"""A server with pool `p` and container `c` under a work directory, and mounts of it, for the benchmarks:

    with Server("build", work, "ucx+shm") as s, s.mount(work + "/mnt") as point:
        ...

Traffic stays on loopback (UCX_NET_DEVICES=lo, FI_*_IFACE=lo); the control socket is a Unix socket in `work`.
"""
import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time


def parser(doc):
    """A benchmark's command line with what every one against a server takes: --build, --provider, --dir."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="the build directory (its bin/rfos)")
    p.add_argument("--provider", default="ucx+shm")
    p.add_argument("--dir", default="/var/tmp", help="where the server's data (and ext4's and bindfs's) live")
    return p


def sealing_agent_config(work):
    """An `rfos agent` config file in `work` whose one tenant (root's apps) has its data sealed, with a fresh key
    readable by its owner only (docs/agent.md, "Inline encryption"): the file's path."""
    key = os.path.join(work, "tenant.key")
    with open(key, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    os.chmod(key, 0o600)
    config = os.path.join(work, "sealed.yaml")
    with open(config, "w") as f:
        f.write("state_dir: %s\ntenants:\n  - name: sealed\n    users: [root]\n    key_file: %s\n"
                % (os.path.join(work, "agent-state"), key))
    return config


@contextlib.contextmanager
def bindfs_over(work):
    """The ceilings of the mount's benchmarks: a directory on the file system of `work` (ext4 here) and bindfs,
    Debian's FUSE passthrough, over it, until the block ends; yields (ext4 directory, bindfs mount point)."""
    if shutil.which("bindfs") is None:
        sys.exit("bindfs is not installed (apt install bindfs)")
    ext4, point = os.path.join(work, "ext4"), os.path.join(work, "bindfs")
    os.makedirs(ext4)
    os.makedirs(point)
    subprocess.run(["bindfs", "--no-allow-other", ext4, point], check=True)
    try:
        yield ext4, point
    finally:
        subprocess.run(["fusermount3", "-u", "-z", point], check=False)


class Server:
    def __init__(self, build, work, provider, target_bytes=2 << 30, extra=(), cpus=None):
        """`cpus`: a taskset list the server's threads are kept to (all CPUs when None)."""
        self.rfos = os.path.abspath(os.path.join(build, "bin", "rfos"))
        self.work = work
        self.env = dict(os.environ)
        self.env.setdefault("UCX_NET_DEVICES", "lo")
        self.env.setdefault("FI_TCP_IFACE", "lo")
        self.env.setdefault("FI_NET_IFACE", "lo")
        self.env["RFOS_ADDR"] = "unix:" + os.path.join(work, "control.sock")
        self.cmd = [self.rfos, "server", "--data-dir", os.path.join(work, "data"), "--control-socket",
                    self.env["RFOS_ADDR"][5:], "--provider", provider, "--target-bytes", str(target_bytes)] + list(extra)
        if cpus:
            self.cmd = ["taskset", "-c", cpus] + self.cmd
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(240):
            if self.cli("pool", "create", "p").returncode == 0:
                break
            if self.proc.poll() is not None:
                sys.exit("rfos server exited with %d" % self.proc.returncode)
            time.sleep(0.5)
        else:
            sys.exit("rfos server did not come up")
        self.cli("cont", "create", "--pool", "p", "c", check=True)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait()

    def kill(self):
        """SIGKILL, as a crash: its data stays for the next start (start_again)."""
        self.proc.kill()
        self.proc.wait()

    def start_again(self):
        """The server on the same data and control socket after kill(); returns once its control plane answers."""
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(2000):
            if self.cli("pool", "list").returncode == 0:
                return
            if self.proc.poll() is not None:
                sys.exit("rfos server exited with %d" % self.proc.returncode)
            time.sleep(0.01)
        sys.exit("rfos server did not come up again")

    def cli(self, *argv, check=False):
        return subprocess.run([self.rfos] + list(argv), env=self.env, capture_output=True, text=True, check=check)

    @contextlib.contextmanager
    def gateway(self, extra=()):
        """`rfos s3` on pool p (127.0.0.1, a free port, a key pair of its own, `extra` flags) until the block
        ends; yields (its process, endpoint URL, access key, secret key)."""
        gw = subprocess.Popen([self.rfos, "s3", "--pool", "p", "--listen", "127.0.0.1:0", "--keys-file",
                               os.path.join(self.work, "s3-keys.yaml")] + list(extra), env=self.env, stdout=subprocess.PIPE,
                              text=True)
        try:
            out = ""
            while "secret key:" not in out:
                line = gw.stdout.readline()
                if not line:
                    sys.exit("rfos s3 did not start")
                out += line
            yield (gw, re.search(r"listening on (\S+)", out).group(1), re.search(r"access key: (\S+)", out).group(1),
                   re.search(r"secret key: (\S+)", out).group(1))
        finally:
            gw.terminate()
            gw.wait()

    @contextlib.contextmanager
    def mount(self, point, extra=()):
        """`rfos mount` of p/c at `point` (made if missing) until the block ends; yields the point."""
        os.makedirs(point, exist_ok=True)
        proc = subprocess.Popen([self.rfos, "mount", "-f", "--pool", "p", "--cont", "c"] + list(extra) + [point],
                                env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(400):
                if os.path.ismount(point):
                    break
                if proc.poll() is not None:
                    sys.exit("rfos mount exited with %d" % proc.returncode)
                time.sleep(0.05)
            else:
                sys.exit("rfos mount did not come up at %s" % point)
            yield point
        finally:
            subprocess.run(["fusermount3", "-u", "-z", point], check=False)
            proc.wait(timeout=30)
