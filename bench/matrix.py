#!/usr/bin/python3
"""rfos's evaluation matrix in one command: media, transport and end-to-end figures, each end-to-end cell beside
its media and transport ceilings from the same run, with the bottleneck named.

  bench/matrix.py [--quick | --full | --smoke] [--out DIR] [--providers ucx+tcp,ucx+shm,...]
                  [--addr ADDR --bypass-addr ADDR] [--media-dir DIR] [--device /dev/nvme0n1]

Stages (each cell records the exact command that produced it):
  1. media:     fio (io_uring, O_DIRECT; on writes an fdatasync per `depth` writes, as rfos's group commit at
                best syncs the writes in flight once) on the file system of the server's data directory
                (--media-dir), and on --device when given (reads only);
  2. transport: the fabric's own tool (ucx_perftest ucp_am_bw, the transport ceiling of UCX providers;
                fi_pingpong, one message in flight, shown only), and the rfos data plane alone against a server
                started with --bypass-media (3FS's bypass_disk_io: what rfos's own data plane reaches, shown
                beside the ceiling, never used as one), per provider, varying client threads (jobs) and server
                threads (targets, each one network thread: --server-targets);
  3. end to end: `rfos bench` per provider, and fio on `rfos mount` (root and /dev/fuse), per jobs; on the
                client axis (--clients), "host" runs the client in `rfos bench`'s process and "agent" through
                `rfos agent` (docs/agent.md), which the local servers trust for this user: the paper's host-vs-DPU
                comparison, with a table of agent / host per cell in the report.

Output in --out: cells.json, cells.csv, heatmap-*.png and .svg, report.md.
Local by default: the tool starts its servers on 127.0.0.1 (pinned to lo). With --addr it measures an existing
server instead (end to end), with --bypass-addr one started with `rfos server --bypass-media` (transport);
fabric-tool ceilings then need their peers on that cluster and are left out.
"""
import argparse
import csv
import pwd
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PATTERNS = ["read", "write", "randread", "randwrite"]
DEPTH = {"4k": 16, "1m": 4}
PROFILES = {  # jobs, runtime per cell (s), bytes per job per block size, providers
    "smoke": ([1, 2], 0.3, {"4k": "4m", "1m": "8m"}, ["ucx+tcp"]),
    # Several seconds per cell: shorter samples on this shared machine measured its noise, not rfos.
    "quick": ([1, 4, 16], 3.0, {"4k": "8m", "1m": "32m"}, ["ucx+tcp", "ucx+shm"]),
    "full": ([1, 2, 4, 8, 16], 5.0, {"4k": "64m", "1m": "256m"}, ["ucx+tcp", "ucx+shm", "ofi+tcp", "ofi+shm"]),
}
INSTALL = {"fio": "fio", "ucx_perftest": "ucx-utils", "fi_pingpong": "libfabric-bin", "fusermount3": "fuse3"}


# ---- parsers (unit-tested on recorded outputs: tests/bench/matrix_test.py; the fabric tools' output is read by
# rfos itself, src/cli/transport_tools.cc) ----

def parse_fio_json(text, rw):
    """fio --output-format=json (also `rfos bench --output-format json`, which follows fio's layout)."""
    start = text.find("{")
    j = json.loads(text[start:])
    side = j["jobs"][0]["write" if "write" in rw else "read"]
    pct = side.get("clat_ns", {}).get("percentile", {})
    p50 = pct.get("50.000000", 0) / 1000.0
    return {"iops": float(side["iops"]), "bw_bytes": float(side["bw_bytes"]), "p50_us": p50}


# ---- running ----

class Runner:
    def __init__(self, args, env):
        self.args, self.env, self.cells = args, env, []

    def run(self, cmd, timeout=600, shell=False):
        out = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout, shell=shell)
        if out.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" % (cmd if shell else " ".join(cmd), out.returncode,
                                                       (out.stderr or out.stdout).strip()[-500:]))
        return out.stdout

    def add(self, stage, source, provider, pattern, bs, jobs, result, command, client="host", targets=None):
        cell = {"stage": stage, "source": source, "provider": provider, "client": client, "pattern": pattern,
                "bs": bs, "jobs": jobs, "iodepth": DEPTH[bs], "targets": targets or self.args.targets,
                "iops": round(result["iops"], 1),
                "bw_bytes": round(result["bw_bytes"]), "p50_us": round(result["p50_us"], 1), "command": command}
        self.cells.append(cell)
        print("%-10s %-12s %-8s %-9s %-3s jobs %-2d  %10.0f IOPS %9.1f MiB/s" % (
            stage, source, provider, pattern, bs, jobs, result["iops"], result["bw_bytes"] / 2**20), flush=True)


# fio's buffers on transparent huge pages, as the engine's arena is: a 1 MiB buffer of 4 KiB pages may be 256
# memory segments, more than a virtio disk takes in one request (254), and fio's 1 MiB I/O then reached the
# device as two requests at a fraction of the speed (573 against 3292 1 MiB reads/s here).
FIO = ["env", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1", "fio", "--iomem_align=2m"]


def fio_cmd(target, rw, bs, jobs, size, runtime, direct=True, durable=True, is_device=False):
    cmd = FIO + ["--name=matrix", "--rw=" + rw, "--bs=" + bs, "--numjobs=%d" % jobs, "--iodepth=%d" % DEPTH[bs],
           "--ioengine=io_uring", "--size=" + size, "--runtime=%g" % runtime, "--time_based",
           "--group_reporting", "--output-format=json"]
    cmd.append(("--filename=" if is_device else "--directory=") + target)
    if direct:
        cmd.append("--direct=1")
    if durable and "write" in rw:
        # One sync per `depth` writes: rfos acknowledges durable writes, but its group commit syncs the writes in
        # flight together; a sync per write would be more work than rfos does and bound nothing.
        cmd.append("--fdatasync=%d" % DEPTH[bs])
    return cmd


def stage_media(r, jobs_list, runtime, sizes):
    if not r.args.media_dir:
        print("media: no --media-dir (the server's data file system) given for a remote server: skipped")
        return
    work = tempfile.mkdtemp(prefix="rfos-matrix-fio-", dir=r.args.media_dir)
    try:
        for bs in ("4k", "1m"):
            for rw in PATTERNS:
                for jobs in jobs_list:
                    cmd = fio_cmd(work, rw, bs, jobs, sizes[bs], runtime)
                    r.add("media", "fio", "-", rw, bs, jobs, parse_fio_json(r.run(cmd), rw), " ".join(cmd))
                    for f in os.listdir(work):
                        os.unlink(os.path.join(work, f))
        if r.args.device:
            for bs in ("4k", "1m"):
                for rw in ("read", "randread"):  # never write to a device the user named
                    for jobs in jobs_list:
                        cmd = fio_cmd(r.args.device, rw, bs, jobs, sizes[bs], runtime, is_device=True)
                        r.add("media", "fio-device", "-", rw, bs, jobs, parse_fio_json(r.run(cmd), rw), " ".join(cmd))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def rfos_bench(r, addr, provider, rw, bs, jobs, size, runtime, agent=None):
    cmd = [r.args.rfos, "--addr", addr, "bench", "--pool", "matrix", "--cont", "matrix", "--provider", provider,
           "--rw", rw, "--bs", bs, "--numjobs", str(jobs), "--iodepth", str(DEPTH[bs]), "--size", size,
           "--runtime", str(runtime), "--output-format", "json"] + (["--agent", agent] if agent else [])
    return parse_fio_json(r.run(cmd), rw), " ".join(cmd)


def fabric_tool(r, provider, bs, pairs):
    """The fabric's own tool between `pairs` independent client and server processes at once (as rfos's jobs are
    independent clients), their rates summed; None where the tool cannot measure the cell. `rfos bench
    --ceiling-only` runs the tool and reads its output (one parser of it, src/cli/transport_tools.cc), with
    endpoints set up as rfos's: ucx_perftest ucp_am_bw on the transports rfos's workers pick, with peer-failure
    handling where rfos's endpoints have it (ucx+tcp); fi_pingpong for libfabric, one message in flight."""
    if provider not in ("ucx+tcp", "ucx+shm", "ofi+tcp", "ofi+shm"):
        return None
    if provider.startswith("ofi+") and pairs != 1:  # a ping-pong keeps one message in flight: no ceiling for many
        return None
    size = str(4096 if bs == "4k" else 1 << 20)
    base = 20000 + os.getpid() % 20000
    ports = [base + 2 * i for i in range(pairs)]

    def command(port):
        return [r.args.rfos, "bench", "--ceiling-only", "--provider", provider, "--bs", size, "--iodepth",
                str(DEPTH[bs]), "--ceiling-port", str(port), "--output-format", "json"]
    procs = [subprocess.Popen(command(p), env=r.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for p in ports]
    results = []
    for c in procs:
        out, err = c.communicate(timeout=600)
        if c.returncode != 0:
            raise RuntimeError("rfos bench --ceiling-only failed (%d): %s" % (c.returncode, (err or out).strip()[-500:]))
        j = json.loads(out)
        results.append({"iops": j["msg_rate"], "bw_bytes": j["bw_bytes"], "p50_us": j["p50_us"]})
    total = {"iops": sum(x["iops"] for x in results), "bw_bytes": sum(x["bw_bytes"] for x in results),
             "p50_us": statistics.median(x["p50_us"] for x in results)}
    cmd = " ".join(command(ports[0])) + ("  (x%d at once, ports %d..%d)" % (pairs, ports[0], ports[-1])
                                         if pairs > 1 else "")
    return ("ucx_perftest" if provider.startswith("ucx+") else "fi_pingpong"), total, cmd


def stage_transport(r, servers, jobs_list, runtime, sizes):
    for provider in r.providers:
        for targets in (r.args.server_targets if servers.local else [r.args.targets]):
            addr = servers.bypass(provider, targets)
            for bs in ("4k", "1m"):
                for rw in ("read", "write"):
                    for jobs in jobs_list:
                        if addr:
                            res, cmd = rfos_bench(r, addr, provider, rw, bs, jobs, sizes[bs], runtime)
                            r.add("transport", "rfos-bypass", provider, rw, bs, jobs, res, cmd, targets=targets)
        for bs in ("4k", "1m"):
            if not servers.local:
                continue
            for pairs in sorted({1, min(max(jobs_list), os.cpu_count() or 1)}):
                got = fabric_tool(r, provider, bs, pairs)
                if got:
                    tool, res, cmd = got
                    for rw in ("read", "write"):
                        r.add("transport", tool, provider, rw, bs, pairs, res, cmd)


def stage_e2e(r, servers, jobs_list, runtime, sizes):
    can_mount = os.geteuid() == 0 and os.path.exists("/dev/fuse") and shutil.which("fusermount3")
    if not can_mount:
        print("e2e: fio on rfos mount needs root, /dev/fuse and fusermount3: skipped")
    for provider in r.providers:
        addr = servers.normal(provider)
        for client in r.clients:
            agent = servers.agent(provider) if client == "agent" else None
            for bs in ("4k", "1m"):
                for rw in PATTERNS:
                    for jobs in jobs_list:
                        res, cmd = rfos_bench(r, addr, provider, rw, bs, jobs, sizes[bs], runtime, agent)
                        r.add("e2e", "rfos-bench", provider, rw, bs, jobs, res, cmd, client=client)
        if can_mount:  # through FUSE 16 jobs on a small machine add time, not information: quick stops at 4
            mount_jobs = [j for j in jobs_list if j <= 4] if r.args.profile == "quick" else jobs_list
            fio_on_mount(r, addr, provider, mount_jobs, runtime, sizes)


def fio_on_mount(r, addr, provider, jobs_list, runtime, sizes):
    mnt = tempfile.mkdtemp(prefix="rfos-matrix-mnt-")
    # --direct-io: file data bypasses the page cache, as the media ceiling's O_DIRECT does (a read cell would
    # otherwise be served from the pages its own layout phase left behind).
    mount = subprocess.Popen([r.args.rfos, "--addr", addr, "mount", "-f", "--direct-io", "--pool", "matrix", "--cont",
                              "matrix", "--provider", provider, mnt], env=r.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        for _ in range(400):
            if os.path.ismount(mnt):
                break
            time.sleep(0.05)
        d = os.path.join(mnt, "fio")
        os.makedirs(d, exist_ok=True)
        for bs in ("4k", "1m"):
            for rw in PATTERNS:
                for jobs in jobs_list:
                    # Writes synced as their ceilings' are (fio on the media, rfos bench's acknowledged updates).
                    cmd = fio_cmd(d, rw, bs, jobs, sizes[bs], runtime, direct=False, durable=True)
                    r.add("e2e", "fio-mount", provider, rw, bs, jobs, parse_fio_json(r.run(cmd), rw), " ".join(cmd))
                    for f in os.listdir(d):
                        os.unlink(os.path.join(d, f))
    finally:
        subprocess.run(["fusermount3", "-u", "-z", mnt], check=False)
        mount.wait(timeout=30)
        os.rmdir(mnt)


class Servers:
    """Local servers (one normal and one --bypass-media per provider, started on demand), or given addresses."""

    def __init__(self, r, work):
        self.r, self.work, self.procs, self.addrs = r, work, [], {}
        self.local = not r.args.addr

    def _start(self, provider, bypass, targets):
        key = (provider, bypass, targets)
        if key in self.addrs:
            return self.addrs[key]
        for p in list(self.procs):  # one server at a time: two cores
            p.terminate()
            p.wait()
            self.procs.remove(p)
        self.addrs.clear()
        data = os.path.join(self.work, "data-%s-%d-%d" % (provider.replace("+", "_"), bypass, targets))
        sock = os.path.join(self.work, "control-%s-%d-%d.sock" % (provider.replace("+", "_"), bypass, targets))
        me = pwd.getpwuid(os.geteuid()).pw_name  # the agent runs as this user, for this user's rfos bench
        cmd = [self.r.args.rfos, "server", "--data-dir", data, "--control-socket", sock, "--provider",
               provider, "--targets", str(targets), "--target-bytes", str(self.r.args.target_bytes),
               "--trust-agent", "%s=%s" % (me, me)]
        if bypass:
            cmd.append("--bypass-media")
        proc = subprocess.Popen(cmd, env=self.r.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(proc)
        addr = None
        while addr is None:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("rfos server for %s did not start" % provider)
            if "listening on " in line:
                addr = line.split("listening on ")[1].split()[0]
        self._prepare(addr)
        self.addrs[key] = addr
        return addr

    def _prepare(self, addr):
        rfos = self.r.args.rfos
        if subprocess.run([rfos, "--addr", addr, "pool", "query", "matrix"], env=self.r.env,
                          capture_output=True).returncode != 0:
            self.r.run([rfos, "--addr", addr, "pool", "create", "matrix"])
        if subprocess.run([rfos, "--addr", addr, "cont", "query", "--pool", "matrix", "matrix"], env=self.r.env,
                          capture_output=True).returncode != 0:
            self.r.run([rfos, "--addr", addr, "cont", "create", "--pool", "matrix", "matrix"])

    def normal(self, provider):
        if not self.local:
            self._prepare(self.r.args.addr)
            return self.r.args.addr
        return self._start(provider, False, self.r.args.targets)

    def agent(self, provider):
        """`rfos agent` in front of the provider's normal server (local servers only), started on demand."""
        addr = self.normal(provider)
        key = (provider, "agent")
        if key in self.addrs:
            return self.addrs[key]
        sock = os.path.join(self.work, "agent-%s.sock" % provider.replace("+", "_"))
        proc = subprocess.Popen([self.r.args.rfos, "--addr", addr, "agent", "--listen", sock, "--provider", provider],
                                env=self.r.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(proc)
        while "serving apps on" not in (proc.stdout.readline() or "serving apps on"):
            pass
        if proc.poll() is not None:
            raise RuntimeError("rfos agent for %s did not start" % provider)
        self.addrs[key] = sock
        return sock

    def bypass(self, provider, targets):
        if not self.local:
            if self.r.args.bypass_addr:
                self._prepare(self.r.args.bypass_addr)
            return self.r.args.bypass_addr
        return self._start(provider, True, targets)

    def stop(self):
        for p in self.procs:
            p.terminate()
            p.wait()
            p.stdout.close()


# ---- the report ----

def ceilings(cells, cell):
    """The media and transport ceilings of an end-to-end cell (IOPS), from the same run; None where not measured."""
    def best_at_most_jobs(stage, source, provider, pattern):
        runs = [c["iops"] for c in cells if (c["stage"], c["source"], c["provider"], c["pattern"], c["bs"]) ==
                (stage, source, provider, pattern, cell["bs"]) and c["jobs"] <= cell["jobs"]]
        return max(runs) if runs else None
    # A device does not get slower with more submitters; fio on two cores does, as its processes crowd one
    # another (1 MiB random reads: 2808/s at one job, 1747 at sixteen), while rfos reaches the media through
    # its targets whatever its jobs. So a cell's media ceiling is the best of fio at as many jobs or fewer.
    media = best_at_most_jobs("media", "fio", "-", cell["pattern"])
    direction = "write" if "write" in cell["pattern"] else "read"
    # The fabric's own tool, not rfos's bypass server (rfos measuring itself bounds nothing). fi_pingpong keeps
    # one message in flight, so it bounds no cell at depth: libfabric cells have the media ceiling only.
    # The tool runs as many pairs as the cell has jobs up to the cores (more busy-polling pairs than cores only
    # thrash the scheduler, bounding nothing); a cell with more jobs takes the best of the pair counts measured.
    transport = best_at_most_jobs("transport", "ucx_perftest", cell["provider"], direction) \
        if cell["provider"].startswith("ucx+") else None
    return media, transport


def bottleneck(iops, media, transport):
    bounds = [(v, n) for v, n in ((media, "media"), (transport, "transport")) if v]
    if not bounds:
        return None, "no ceiling measured"
    lower, name = min(bounds)
    ratio = iops / lower
    if ratio >= 0.7:
        return ratio, name
    return ratio, "rfos (%.0f%% of the %s ceiling)" % (100 * ratio, name)


def heatmaps(cells, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    files = []
    groups = sorted({(c["stage"], c["source"], c["provider"], c["client"], c.get("targets", 2)) for c in cells})
    many_targets = len({c.get("targets", 2) for c in cells}) > 1
    for stage, source, provider, client, targets in groups:
        for bs in ("4k", "1m"):
            sel = [c for c in cells if (c["stage"], c["source"], c["provider"], c["client"], c.get("targets", 2),
                                        c["bs"]) == (stage, source, provider, client, targets, bs)]
            if not sel:
                continue
            rows = [p for p in PATTERNS if any(c["pattern"] == p for c in sel)]
            cols = sorted({c["jobs"] for c in sel})
            grid = [[None] * len(cols) for _ in rows]
            for c in sel:
                v = c["iops"] / 1000 if bs == "4k" else c["bw_bytes"] / 2**30
                grid[rows.index(c["pattern"])][cols.index(c["jobs"])] = v
            fig, ax = plt.subplots(figsize=(1.2 + 1.0 * len(cols), 0.8 + 0.55 * len(rows)))
            data = [[v if v is not None else float("nan") for v in row] for row in grid]
            im = ax.imshow(data, cmap="viridis", aspect="auto")
            ax.set_xticks(range(len(cols)), [str(j) for j in cols])
            ax.set_yticks(range(len(rows)), rows)
            ax.set_xlabel("jobs")
            unit = "kIOPS" if bs == "4k" else "GiB/s"
            ax.set_title("%s %s %s %s (%s)" % (stage, source, provider if provider != "-" else "", bs, unit),
                         fontsize=9)
            lo = min(v for row in grid for v in row if v is not None)
            hi = max(v for row in grid for v in row if v is not None)
            for i, row in enumerate(grid):
                for j, v in enumerate(row):
                    if v is not None:  # dark text on the bright end of the colour map
                        ax.text(j, i, "%.1f" % v if v < 100 else "%.0f" % v, ha="center", va="center",
                                color="black" if v > lo + 0.6 * (hi - lo) else "white", fontsize=8)
            fig.colorbar(im, ax=ax, fraction=0.05)
            fig.tight_layout()
            name = "heatmap-%s-%s-%s-%s-%s" % (stage, source, provider.replace("+", "_").replace("-", "none"),
                                               client, bs)
            if many_targets:
                name += "-t%d" % targets
            for ext in ("png", "svg"):
                fig.savefig(os.path.join(out, name + "." + ext))
            plt.close(fig)
            files.append(name)
    return files


def write_outputs(cells, out, meta):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "cells.json"), "w") as f:
        json.dump({"meta": meta, "cells": cells}, f, indent=1)
    fields = ["stage", "source", "provider", "client", "targets", "pattern", "bs", "jobs", "iodepth", "iops",
              "bw_bytes", "p50_us", "command"]
    with open(os.path.join(out, "cells.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for c in cells:
            w.writerow({k: c.get(k, 2 if k == "targets" else "") for k in fields})
    maps = heatmaps(cells, out)
    lines = ["# rfos evaluation matrix", "",
             "Profile `%s`, %s, on %s. Every figure comes from this run; commands are in cells.json / cells.csv." %
             (meta["profile"], meta["date"], meta["host"]), "",
             "## End to end beside its ceilings", "",
             "Ratio = end-to-end IOPS / the lower of the media ceiling (fio on the data file system, same pattern, "
             "block size and depth, the best of its runs at as many jobs as the cell or fewer; writes synced once "
             "per depth writes) and the transport ceiling (ucx_perftest ucp_am_bw, same provider and block size, "
             "independent client-server pairs at once, one per job up to the cores, their rates summed, the best "
             "pair count at or below the cell's jobs; none for libfabric providers, whose fi_pingpong keeps one "
             "message in flight). The bottleneck is the lower ceiling when the cell "
             "reaches 70% of it, else rfos itself. rfos's own data plane without the media (`--bypass-media`) is in "
             "the Transport table, beside the ceiling, not as one.", "",
             "| source | provider | client | pattern | bs | jobs | IOPS | MiB/s | media IOPS | transport IOPS | ratio |"
             " bottleneck |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ranges = {}
    for c in cells:
        if c["stage"] != "e2e":
            continue
        media, transport = ceilings(cells, c)
        ratio, neck = bottleneck(c["iops"], media, transport)
        if ratio is not None:
            ranges.setdefault((c["source"], c["provider"], c["client"]), {}).setdefault(
                (c["bs"], c["pattern"]), []).append(ratio)
        lines.append("| %s | %s | %s | %s | %s | %d | %.0f | %.1f | %s | %s | %s | %s |" % (
            c["source"], c["provider"], c["client"], c["pattern"], c["bs"], c["jobs"], c["iops"],
            c["bw_bytes"] / 2**20, "%.0f" % media if media else "-", "%.0f" % transport if transport else "-",
            "**%.2f**" % ratio if ratio is not None else "-", neck))
    columns = [(bs, rw) for bs in ("4k", "1m") for rw in PATTERNS]
    summary = ["Summary: the ratio to the lower ceiling, lowest-highest over jobs.", "",
               "| source | provider | client | " + " | ".join("%s %s" % (rw, bs) for bs, rw in columns) + " |",
               "|---|---|---|" + "---|" * len(columns)]
    for (source, provider, client), by in sorted(ranges.items()):
        summary.append("| %s | %s | %s | " % (source, provider, client) + " | ".join(
            ("%.2f-%.2f" % (min(by[k]), max(by[k])) if k in by else "-") for k in columns) + " |")
    summary += ["", "Every cell:", ""]
    at = next(i for i, l in enumerate(lines) if l.startswith("| source | provider | client | pattern"))
    lines[at:at] = summary  # after the introduction, before the table of every cell
    pairs = [(c, h) for c in cells if c["stage"] == "e2e" and c["client"] == "agent"
             for h in cells if h["stage"] == "e2e" and h["client"] == "host" and
             (h["source"], h["provider"], h["pattern"], h["bs"], h["jobs"]) ==
             (c["source"], c["provider"], c["pattern"], c["bs"], c["jobs"])]
    if pairs:
        lines += ["", "## Host and agent", "", "The same `rfos bench` cell with the client in its own process (host) "
                  "and through `rfos agent` (the paper's offloaded client); agent / host above 1 is the agent faster.",
                  "", "| provider | pattern | bs | jobs | host IOPS | agent IOPS | agent / host |",
                  "|---|---|---|---|---|---|---|"]
        lines += ["| %s | %s | %s | %d | %.0f | %.0f | **%.2f** |" % (
            c["provider"], c["pattern"], c["bs"], c["jobs"], h["iops"], c["iops"], c["iops"] / h["iops"])
            for c, h in pairs]
    lines += ["", "## Transport", "", "Jobs are client threads; targets the server's (one network thread each; "
              "for the fabric tools, jobs are independent ucx_perftest pairs run at once).", "",
              "| source | provider | targets | direction | bs | jobs | IOPS | MiB/s |", "|---|---|---|---|---|---|---|---|"]
    lines += ["| %s | %s | %s | %s | %s | %d | %.0f | %.1f |" % (
        c["source"], c["provider"], c.get("targets", 2) if c["source"] == "rfos-bypass" else "-", c["pattern"],
        c["bs"], c["jobs"], c["iops"], c["bw_bytes"] / 2**20) for c in cells if c["stage"] == "transport"]
    lines += ["", "## Media", "", "| source | pattern | bs | jobs | IOPS | MiB/s | p50 us |", "|---|---|---|---|---|---|---|"]
    lines += ["| %s | %s | %s | %d | %.0f | %.1f | %.0f |" % (c["source"], c["pattern"], c["bs"], c["jobs"], c["iops"],
                                                            c["bw_bytes"] / 2**20, c["p50_us"])
              for c in cells if c["stage"] == "media"]
    lines += ["", "## Heatmaps", ""] + ["![%s](%s.png)" % (m, m) for m in maps]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return maps


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_const", dest="profile", const="quick", help="about 15 minutes (default)")
    g.add_argument("--full", action="store_const", dest="profile", const="full", help="jobs 1..16, longer cells")
    g.add_argument("--smoke", action="store_const", dest="profile", const="smoke", help="seconds, tiny sizes (CI)")
    p.set_defaults(profile="quick")
    p.add_argument("--out", default="matrix-out")
    p.add_argument("--build", default="build")
    p.add_argument("--providers", help="comma-separated (default per profile)")
    p.add_argument("--addr", help="an existing server's control address (end to end); default: start local ones")
    p.add_argument("--bypass-addr", help="an existing server started with --bypass-media (transport)")
    p.add_argument("--media-dir", help="a directory on the server's data file system (default: local servers')")
    p.add_argument("--device", help="also read a block device with fio (read patterns only)")
    p.add_argument("--target-bytes", type=int, default=2 << 30)
    p.add_argument("--targets", type=int, default=2, help="targets of the servers the tool starts")
    p.add_argument("--server-targets", help="targets to try in the transport stage, e.g. 1,2 (default per profile)")
    p.add_argument("--stages", default="media,transport,e2e")
    p.add_argument("--clients", help="end-to-end client axis: host, agent (default both; host only with --addr)")
    args = p.parse_args()
    jobs_list, runtime, sizes, providers = PROFILES[args.profile]
    args.server_targets = [int(t) for t in args.server_targets.split(",")] if args.server_targets else (
        [1, args.targets] if args.profile == "full" else [args.targets])
    if args.profile == "smoke":
        # Room for what 0.3 s of 1 MiB overwrites leave before aggregation reclaims them (it keeps the last 100 ms
        # and runs every 50 ms under pressure): at 1.5 GiB/s, 256 MiB targets ran out (NoSpace) once in a run.
        args.target_bytes = min(args.target_bytes, 1 << 30)
    args.rfos = os.path.abspath(os.path.join(args.build, "bin", "rfos"))
    if not os.path.exists(args.rfos):
        sys.exit("matrix: %s is not built (make build)" % args.rfos)
    needed = ["fio"] + (["ucx_perftest", "fi_pingpong"] if not args.addr else [])
    missing = [t for t in needed if shutil.which(t) is None]
    if missing:
        sys.exit("matrix: %s not installed: apt-get install %s (or scripts/install-deps)" % (
            ", ".join(missing), " ".join(INSTALL[t] for t in missing)))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit("matrix: matplotlib is missing: apt-get install python3-matplotlib, and run with /usr/bin/python3")
    env = dict(os.environ)
    for k, v in (("UCX_NET_DEVICES", "lo"), ("FI_TCP_IFACE", "lo"), ("FI_NET_IFACE", "lo")):
        if not args.addr:
            env.setdefault(k, v)
    r = Runner(args, env)
    r.providers = args.providers.split(",") if args.providers else providers
    r.clients = args.clients.split(",") if args.clients else (["host"] if args.addr else ["host", "agent"])
    if "agent" in r.clients and args.addr:
        sys.exit("matrix: --clients agent needs local servers (an agent the remote server trusts is yours to start)")
    work = tempfile.mkdtemp(prefix="rfos-matrix-", dir=os.environ.get("RFOS_TEST_DIR", "/var/tmp"))
    if not args.addr and not args.media_dir:
        args.media_dir = work  # local servers keep their data here
    servers = Servers(r, work)
    stages = args.stages.split(",")
    t0 = time.time()
    try:
        if "media" in stages:
            stage_media(r, jobs_list, runtime, sizes)
        if "transport" in stages:
            stage_transport(r, servers, jobs_list, runtime, sizes)
        if "e2e" in stages:
            stage_e2e(r, servers, jobs_list, runtime, sizes)
    finally:
        servers.stop()
        shutil.rmtree(work, ignore_errors=True)
    meta = {"profile": args.profile, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": os.uname().nodename,
            "cores": os.cpu_count(), "seconds": round(time.time() - t0), "providers": r.providers,
            "addr": args.addr or "local"}
    maps = write_outputs(r.cells, args.out, meta)
    print("matrix: %d cells, %d heatmaps, %d s -> %s/report.md" % (len(r.cells), len(maps), meta["seconds"],
                                                                   args.out))


if __name__ == "__main__":
    main()
