#!/usr/bin/env python3
"""End-to-end matrix per provider, each figure beside both of its ceilings measured in the same run.

For every pattern it measures
  - the media: fio (io_uring, O_DIRECT, the same block size and depth) on the file system of the server's data
    directory, before, between and after the rfos runs of a cell (fio and rfos alternate, --reps rfos runs and
    one fio run more), the median taken as the ceiling: a shared virtual disk moves by 2-3x within minutes, so
    one sample of each side says little. On writes the ceiling syncs once per `depth` writes (--fdatasync=DEPTH):
    rfos group-commits the writes in flight, at best one sync for all of them, so a ceiling that synced every
    write would do more work than rfos and bound nothing; fio syncing every write is shown beside it;
  - the transport (through `rfos bench --ceiling`, beside every rfos run, the median taken): ucx_perftest
    ucp_am_bw for UCX providers, with the same size and window and the endpoint mode rfos's own endpoints use
    (peer-failure handling, `-e`, except on shm, which cannot detect peer failure); over tcp the figure without
    it, which a server cannot use, is shown in its own column; fi_pingpong for libfabric ones, which is one
    message in flight, so it is shown but not used as a ceiling at depth > 1;
  - rfos: `rfos bench` against an `rfos server` started for that provider on loopback, the median of --reps runs;
  - both at once (UCX providers): the most I/Os per second the machine sustains with fio held to a rate and
    ucx_perftest running beside it (both_at_once), since each ceiling above had the machine to itself, and on a
    virtual machine whose disk is emulated on the host CPUs of its vCPUs, the two take from each other;
and, for read patterns, fio that checks every block it reads (--verify=crc32c), in turns with the plain fio runs:
plain fio never looks at what it reads, rfos's client checks every byte, and on a virtual disk that fills guest
memory with host CPUs the two differ by far (docs/BENCHMARKS.md, "A device read is slower when its data gets read"); the issue's ceiling
stays plain fio, this is shown beside it. It prints a Markdown table with the ratio to the lower ceiling and to
the both-at-once one, then a line on the host: its TCP congestion control and how much memory it reported to the
hypervisor during the run (free page reporting).

  bench/provider_matrix.py [--build build] [--runtime 5] [--reps 3] [--providers ucx+tcp,ucx+shm,ofi+tcp,ofi+shm]
                           [--rw randread,randwrite,read,write] [--targets N] [--both-probes 5]
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from statistics import median

CASES = [("randread", "4k", 4096, 16, "64m"), ("randwrite", "4k", 4096, 16, "64m"),
         ("read", "1m", 1 << 20, 4, "256m"), ("write", "1m", 1 << 20, 4, "256m")]


# fio's buffers on transparent huge pages, as the engine's arena is: a 1 MiB buffer of 4 KiB pages may be 256
# memory segments, more than a virtio disk takes in one request (254), and fio's 1 MiB I/O then reached the
# device as two requests at a fraction of the speed (573 against 3292 1 MiB reads/s here).
FIO = ["env", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1", "fio", "--iomem_align=2m"]

# Free page reporting (virtio-balloon): the guest hands freed memory back to the hypervisor and faults it in again
# on reuse. rfos's 1 MiB writes made this VM report 130-260 MiB/s, ucx_perftest none, and writes ran 15 % faster
# with it off (docs/BENCHMARKS.md, "The hypervisor takes memory back"), so the table says how much was reported.
PAGE_REPORTING = "/sys/module/page_reporting/parameters/"


def read_text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def host_note(reported_kib_before, seconds):
    """A line on what this machine's kernel did during the run that moves the figures."""
    cc = read_text("/proc/sys/net/ipv4/tcp_congestion_control") or "unknown"
    order, after = read_text(PAGE_REPORTING + "page_reporting_order"), read_text(PAGE_REPORTING + "reported_kib")
    if order is None or after is None or reported_kib_before is None:
        return "Host: TCP congestion control %s; no free page reporting." % cc
    mib = (int(after) - int(reported_kib_before)) / 1024
    return ("Host: TCP congestion control %s; free page reporting at order %s: %.0f MiB reported to the "
            "hypervisor during the run (%.0f MiB/s)." % (cc, order, mib, mib / max(seconds, 1)))


def fio_on(d, size, name):
    """fio with the matrix's settings on the file of job `name` in directory d."""
    return FIO + ["--directory=" + d, "--size=" + size, "--ioengine=io_uring", "--direct=1", "--name=" + name]


def fio_measure(cmd, rw, depth, runtime):
    """cmd (fio_on's) measuring rw at depth for runtime seconds, with JSON output."""
    return cmd + ["--output-format=json", "--rw=" + rw, "--iodepth=" + str(depth), "--runtime=" + str(runtime),
                  "--time_based"]


def fio_cmd(dirpath, rw, bs, depth, runtime, size, rate=0, sync_every=1):
    """fio on a file as large as rfos bench's object; fio_layout lays it out first. rate: --rate_iops (0: none).
    Writes fdatasync every `sync_every` writes."""
    cmd = fio_measure(fio_on(os.path.join(dirpath, "fio"), size, "ceiling") + ["--bs=" + str(bs)], rw, depth, runtime)
    if "write" in rw:
        cmd.append("--fdatasync=%d" % sync_every)
    if rate:
        cmd.append("--rate_iops=%d" % rate)
    return cmd


def fio_layout(dirpath, size):
    """The file fio_cmd runs on, laid out by 1 MiB writes as rfos bench lays out its object."""
    d = os.path.join(dirpath, "fio")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    subprocess.run(fio_on(d, size, "ceiling") + ["--rw=write", "--bs=1m"], check=True, capture_output=True)


def fio_run(cmd, rw):
    j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["jobs"][0]
    return (j["write"] if "write" in rw else j["read"])["iops"]


def fio_checking(dirpath, rw, bs, depth, runtime, size, layout=False):
    """fio that checks every block it reads against a checksum (--verify=crc32c, on a file laid out with them;
    layout=True writes it first): a reader that looks at its data as rfos's client does, where plain fio never
    touches what it reads. Read patterns only."""
    d = os.path.join(dirpath, "fio-checking")
    # verify_state_save=0: fio would otherwise leave its verify state (local-checking-0-verify.state) in the cwd.
    base = fio_on(d, size, "checking") + ["--verify=crc32c", "--verify_state_save=0", "--bs=" + str(bs)]
    if layout:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        subprocess.run(base + ["--rw=write"], check=True, capture_output=True)
    return fio_run(fio_measure(base, rw, depth, runtime), rw)


def fio(dirpath, rw, bs, depth, runtime, size, sync_every=1):
    fio_layout(dirpath, size)
    iops = fio_run(fio_cmd(dirpath, rw, bs, depth, runtime, size, sync_every=sync_every), rw)
    shutil.rmtree(os.path.join(dirpath, "fio"), ignore_errors=True)
    return iops


# ucx_perftest as `rfos bench --ceiling` runs it (src/cli/cmd_bench.cc): ucp_am_bw, the same size and window,
# the transports of the provider (ucx_transports in src/transport/transport.cc) and peer-failure handling where
# rfos's endpoints have it.
PERFTEST = {"ucx+tcp": ("tcp", ["-e"]), "ucx+shm": ("posix,sysv,self", [])}


class Perftest:
    """A ucx_perftest pair on loopback that runs until stopped; rate(a, b) is its message rate between two
    moments, from the per-second reports of its client (a line per second with the messages so far)."""

    def __init__(self, provider, bs, depth, env):
        tls, extra = PERFTEST[provider]
        env = dict(env, UCX_TLS=tls)
        port = str(random.randint(41000, 60000))
        args = ["ucx_perftest", "-p", port, "-t", "ucp_am_bw", "-s", str(bs), "-O", str(depth), "-n", "1000000000",
                "-w", "100"]
        self.reports = []
        self.server = subprocess.Popen(args + extra, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        # Line-buffered: a pipe would hold its reports back for many seconds.
        self.client = subprocess.Popen(["stdbuf", "-oL"] + args + extra + ["127.0.0.1"], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.client.stdout:
            if line.startswith("[thread"):
                self.reports.append((time.time(), int(line.split()[2])))

    def wait_for_reports(self, n=2, timeout=15):
        deadline = time.time() + timeout
        while len(self.reports) < n and time.time() < deadline and self.client.poll() is None:
            time.sleep(0.1)

    def rate(self, a, b):
        inside = [r for r in self.reports if a <= r[0] <= b]
        if len(inside) < 2:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

    def stop(self):
        for p in (self.client, self.server):
            p.kill()
            p.wait()


def both_at_once(provider, work, rw, bs, depth, size, hi, env, probes=5, runtime=3):
    """The most I/Os per second this machine sustains with the media and the transport busy at once, where that
    can be measured: fio held to a rate (--rate_iops) while ucx_perftest runs flat out beside it, the rate found
    by bisection between 0 and `hi` (the lower of the two ceilings measured alone). A rate holds when fio reaches
    it (95 %) and ucx_perftest does at least as many messages meanwhile.

    Why: on a virtual machine whose disk is emulated on the same host CPUs as its vCPUs, each ceiling measured
    alone had the whole budget, and an end-to-end store has to do both for every I/O (docs/BENCHMARKS.md,
    "The disk runs on the host CPUs of the vCPUs"). ucx_perftest cannot be held to a rate, so the figure bounds only where the transport is
    what runs out: where, at the highest rate that held, ucx_perftest did at most 1.5x that rate. Elsewhere (4 KiB
    I/O, or a disk much slower than the transport) it polls far faster than needed, takes more from the disk
    than a transport at that rate would, and the figure would be too low: None then.
    Returns (rate or None, [(probe, fio IOPS, ucx_perftest msg/s)])."""
    fio_layout(work, size)
    perf = Perftest(provider, bs, depth, env)
    lo, up, at_lo, tried = 0.0, float(hi), None, []
    try:
        perf.wait_for_reports()
        for _ in range(probes):
            r = (lo + up) / 2
            start = time.time()
            got = fio_run(fio_cmd(work, rw, bs, depth, runtime, size, rate=int(r),
                                  sync_every=depth if "write" in rw else 1), rw)
            transport = perf.rate(start + 0.3, time.time())
            tried.append((r, got, transport))
            if transport is not None and got >= 0.95 * r and transport >= r:
                lo, at_lo = r, transport
            else:
                up = r
    finally:
        perf.stop()
        shutil.rmtree(os.path.join(work, "fio"), ignore_errors=True)
    return (lo if at_lo is not None and at_lo <= 1.5 * lo else None), tried


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--runtime", type=float, default=5)
    p.add_argument("--reps", type=int, default=3, help="rfos runs per cell, alternating with fio runs")
    p.add_argument("--providers", default="ucx+tcp,ucx+shm,ofi+tcp,ofi+shm")
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--rw", default="randread,randwrite,read,write", help="patterns to run (comma-separated)")
    p.add_argument("--both-probes", type=int, default=5,
                   help="bisection steps of the both-at-once ceiling (UCX providers; 0: not measured)")
    p.add_argument("--targets", type=int, default=0,
                   help="the server's targets (default 0: the server's own default, one per core)")
    args = p.parse_args()
    cases = [c for c in CASES if c[0] in args.rw.split(",")]
    for tool in ("fio", "ucx_perftest", "fi_pingpong"):
        if shutil.which(tool) is None:
            sys.exit("provider_matrix: %s is not installed (scripts/install-deps installs it)" % tool)
    env = dict(os.environ)
    env.setdefault("UCX_NET_DEVICES", "lo")
    env.setdefault("FI_TCP_IFACE", "lo")
    env.setdefault("FI_NET_IFACE", "lo")
    rfos = os.path.join(args.build, "bin", "rfos")
    work = tempfile.mkdtemp(prefix="rfos-matrix-", dir=args.dir)
    addr = "unix:" + os.path.join(work, "control.sock")
    env["RFOS_ADDR"] = addr
    rows = []
    reported_before, started = read_text(PAGE_REPORTING + "reported_kib"), time.time()
    try:
        for prov in args.providers.split(","):
            data = os.path.join(work, "data")
            shutil.rmtree(data, ignore_errors=True)
            server = subprocess.Popen([rfos, "server", "--data-dir", data, "--control-socket", addr[5:], "--provider", prov,
                                       "--target-bytes", str(1 << 30), "--create-defaults"] +
                                      (["--targets", str(args.targets)] if args.targets else []), env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                for _ in range(240):
                    if subprocess.run([rfos, "cont", "query", "--pool", "default", "default"], env=env,
                                      capture_output=True).returncode == 0:
                        break
                    time.sleep(0.5)
                for rw, bs_text, bs, depth, size in cases:
                    cmd = [rfos, "bench", "--rw", rw, "--bs", bs_text, "--iodepth", str(depth), "--size", size,
                           "--runtime", str(args.runtime), "--output-format", "json"]
                    reads = "write" not in rw
                    # Writes: the ceiling syncs once per `depth` writes (as rfos's group commit at best does);
                    # fio syncing every write is kept beside it.
                    ceiling = lambda: fio(work, rw, bs, depth, args.runtime, size, sync_every=1 if reads else depth)
                    every = lambda: None if reads else fio(work, rw, bs, depth, args.runtime, size)
                    media, runs, synced_each = [ceiling()], [], [every()]
                    checking = [fio_checking(work, rw, bs, depth, args.runtime, size, layout=True)] if reads else []
                    for rep in range(args.reps):
                        out = subprocess.run(cmd + ["--ceiling"], env=env, capture_output=True, text=True)
                        if out.returncode != 0:
                            sys.exit("provider_matrix: %s failed: %s" % (" ".join(cmd), out.stderr.strip()))
                        runs.append(json.loads(out.stdout))
                        media.append(ceiling())
                        synced_each.append(every())
                        if reads:
                            checking.append(fio_checking(work, rw, bs, depth, args.runtime, size))
                    shutil.rmtree(os.path.join(work, "fio-checking"), ignore_errors=True)
                    side_of = lambda j: j["jobs"][0]["write" if "write" in rw else "read"]
                    iops = [side_of(j)["iops"] for j in runs]
                    mid = sorted(runs, key=lambda j: side_of(j)["iops"])[len(runs) // 2]
                    side = side_of(mid)
                    ceilings = [j.get("ceiling", {}) for j in runs]
                    transport = median([c["msg_rate"] for c in ceilings]) if all("msg_rate" in c for c in ceilings) \
                        else None
                    other = [c["without_peer_failure_handling"]["msg_rate"] for c in ceilings
                             if "without_peer_failure_handling" in c]
                    unhandled = median(other) if other else None
                    media_iops = median(media)
                    bounds = transport and (prov.startswith("ucx+") or depth == 1)  # a ping-pong bounds depth 1 only
                    lower_of = lambda t: min(media_iops, t) if bounds else media_iops
                    lower = lower_of(transport)
                    ratio = side["iops"] / lower
                    # Run by run: each rfos run against the lower of the media ceiling and the transport ceiling
                    # measured beside it. The host moves between a fast and a slow state that lasts up to a minute
                    # and slows both sides alike (docs/BENCHMARKS.md, "The transport ceiling has two speeds"), so a cell whose runs
                    # mix the two states says more this way than as a ratio of medians.
                    paired = median([x / lower_of(c["msg_rate"]) for x, c in zip(iops, ceilings)]) if transport \
                        else None
                    both, probes = (both_at_once(prov, work, rw, bs, depth, size, lower, env, args.both_probes)
                                    if args.both_probes and prov in PERFTEST else (None, []))
                    rows.append(dict(prov=prov, rw=rw, bs=bs_text, depth=depth, iops=side["iops"],
                                     bw=side["bw_bytes"], p50=side["clat_ns"]["percentile"]["50.000000"],
                                     media=media_iops, transport=transport, unhandled=unhandled, ratio=ratio,
                                     lo=min(iops) / lower, hi=max(iops) / lower, paired=paired, both=both,
                                     checking=median(checking) if checking else None,
                                     every=None if reads else median(synced_each)))
                    print("%-8s %-9s %-3s qd%-2d rfos %s IOPS | media %s | checking %s | transport %s | unhandled %s | "
                          "ratio %.2f" %
                          (prov, rw, bs_text, depth, "/".join("%.0f" % x for x in iops),
                           "/".join("%.0f" % x for x in media), "/".join("%.0f" % x for x in checking) or "-",
                           "/".join("%.0f" % c["msg_rate"] for c in ceilings if "msg_rate" in c) or "-",
                           "/".join("%.0f" % x for x in other) or "-", ratio), flush=True)
                    if probes:
                        steps = ", ".join("%.0f: %.0f, %s" % (r, f, "-" if t is None else "%.0f" % t)
                                          for r, f, t in probes)
                        why = ("no reports from ucx_perftest" if all(t is None for _, _, t in probes)
                               else "the transport was not what ran out")
                        print("    both at once %s; probes (rate: fio, ucx_perftest): %s" %
                              ("%.0f" % both if both else "n/a (%s)" % why, steps), flush=True)
            finally:
                server.terminate()
                server.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| provider | pattern | bs | depth | rfos IOPS | rfos MiB/s | p50 (us) | media ceiling IOPS (writes: a "
          "sync per depth) | transport ceiling msg/s | ratio to the lower (runs) | run by run | both at once IOPS "
          "(rfos / it) | perftest without peer-failure handling msg/s (rfos / it) | fio checking what it reads IOPS "
          "(rfos / it) | fio syncing every write IOPS (rfos / it) |\n" + "|---" * 15 + "|")
    for r in rows:
        tr, un, both, chk = r["transport"], r["unhandled"], r["both"], r["checking"]
        ev = r["every"]
        print("| %s | %s | %s | %d | %.0f | %.1f | %.0f | %.0f | %s | **%.2f** (%.2f-%.2f) | %s | %s | %s | %s | %s |" %
              (r["prov"], r["rw"], r["bs"], r["depth"], r["iops"], r["bw"] / 2**20, r["p50"] / 1e3, r["media"],
               ("%.0f" % tr + ("" if r["prov"].startswith("ucx+") else " (ping-pong)")) if tr else "n/a",
               r["ratio"], r["lo"], r["hi"], "%.2f" % r["paired"] if r["paired"] is not None else "-",
               "%.0f (%.2f)" % (both, r["iops"] / both) if both else "-",
               "%.0f (%.2f)" % (un, r["iops"] / un) if un else "-",
               "%.0f (%.2f)" % (chk, r["iops"] / chk) if chk else "-",
               "%.0f (%.2f)" % (ev, r["iops"] / ev) if ev else "-"))
    print("\n" + host_note(reported_before, time.time() - started))


if __name__ == "__main__":
    main()
