#!/usr/bin/python3
"""The evaluation matrix driver (bench/matrix.py): its parsers on recorded outputs of fio, rfos bench,
ucx_perftest and fi_pingpong, and its report on a recorded set of cells. With --smoke RFOS_BUILD_DIR it also
runs `matrix.py --smoke` end to end and checks that every file is produced and every cell has a figure.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures")
MATRIX = os.path.join(HERE, "..", "..", "bench", "matrix.py")
spec = importlib.util.spec_from_file_location("matrix", MATRIX)
matrix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(matrix)
SMOKE_BUILD = None


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


class Parsers(unittest.TestCase):
    def test_fio_json(self):
        r = matrix.parse_fio_json(fixture("fio_randread.json"), "randread")
        self.assertGreater(r["iops"], 0)
        self.assertGreater(r["bw_bytes"], 0)
        self.assertAlmostEqual(r["bw_bytes"] / r["iops"], 4096, delta=64)
        self.assertGreater(r["p50_us"], 0)

    def test_rfos_bench_json_is_fio_shaped(self):
        r = matrix.parse_fio_json(fixture("rfos_bench_read.json"), "read")
        self.assertGreater(r["iops"], 0)
        self.assertAlmostEqual(r["bw_bytes"] / r["iops"], 4096, delta=64)

    def test_fio_json_after_a_warning_line(self):
        text = "fio: note: both iodepth >= 1 and synchronous I/O engine are selected\n" + fixture("fio_randread.json")
        self.assertGreater(matrix.parse_fio_json(text, "randread")["iops"], 0)


class Report(unittest.TestCase):
    def test_every_file_and_every_e2e_cell_with_its_ceilings(self):
        recorded = json.loads(fixture("cells_smoke.json"))
        cells = recorded["cells"]
        with tempfile.TemporaryDirectory() as out:
            maps = matrix.write_outputs(cells, out, recorded["meta"])
            for name in ("cells.json", "cells.csv", "report.md"):
                self.assertTrue(os.path.getsize(os.path.join(out, name)) > 0, name)
            groups = {(c["stage"], c["source"], c["provider"], c["bs"]) for c in cells}
            self.assertEqual(len(maps), len(groups))
            for m in maps:
                for ext in ("png", "svg"):
                    self.assertGreater(os.path.getsize(os.path.join(out, m + "." + ext)), 1000)
            report = open(os.path.join(out, "report.md")).read()
            e2e = [c for c in cells if c["stage"] == "e2e"]
            self.assertTrue(e2e)
            # The expected ratios, worked out here from the recorded cells (not with matrix.py's own functions):
            # the media ceiling is the best of fio's cells of the same pattern and size at as many jobs or fewer;
            # the transport ceiling the best of ucx_perftest's of the same provider, direction and size at as many
            # pairs as the cell's jobs or fewer; the ratio is IOPS / the lower one.
            for c in e2e:
                media = max(m["iops"] for m in cells if (m["stage"], m["source"], m["pattern"], m["bs"]) ==
                            ("media", "fio", c["pattern"], c["bs"]) and m["jobs"] <= c["jobs"])
                direction = "write" if "write" in c["pattern"] else "read"
                transport = max(t["iops"] for t in cells if (t["stage"], t["source"], t["provider"], t["pattern"],
                                                             t["bs"]) == ("transport", "ucx_perftest", c["provider"],
                                                                          direction, c["bs"]) and t["jobs"] <= c["jobs"])
                expected = c["iops"] / min(media, transport)
                row = "| %s | %s | %s | %s | %s | %d | %.0f |" % (c["source"], c["provider"], c["client"],
                                                                 c["pattern"], c["bs"], c["jobs"], c["iops"])
                line = next((l for l in report.splitlines() if l.startswith(row)), None)
                self.assertIsNotNone(line, row)
                self.assertIn("**%.2f**" % expected, line)
                self.assertIn("| %.0f |" % transport, line)  # ucx_perftest, not rfos's bypass server
            with open(os.path.join(out, "cells.csv")) as f:
                self.assertEqual(len(f.read().strip().splitlines()), len(cells) + 1)

    def test_host_and_agent_table(self):  # agent cells beside their host cells, the ratio per cell
        recorded = json.loads(fixture("cells_smoke.json"))
        cells = recorded["cells"]
        agent = [dict(c, client="agent", iops=c["iops"] / 2) for c in cells if c["stage"] == "e2e"]
        with tempfile.TemporaryDirectory() as out:
            matrix.write_outputs(cells + agent, out, recorded["meta"])
            report = open(os.path.join(out, "report.md")).read()
            self.assertIn("## Host and agent", report)
            table = report.split("## Host and agent")[1].split("##")[0]
            rows = [l for l in table.splitlines() if l.startswith("| ucx")]
            self.assertEqual(len(rows), len(agent))
            for row in rows:
                self.assertIn("**0.50**", row)
        with tempfile.TemporaryDirectory() as out:  # host only: no such table
            matrix.write_outputs(cells, out, recorded["meta"])
            self.assertNotIn("## Host and agent", open(os.path.join(out, "report.md")).read())

    def test_bottleneck_names(self):  # the naming rule, with figures chosen here
        self.assertEqual(matrix.bottleneck(90, 100, 1000), (0.9, "media"))
        self.assertEqual(matrix.bottleneck(90, 1000, 100), (0.9, "transport"))
        ratio, neck = matrix.bottleneck(20, 100, 1000)
        self.assertEqual(ratio, 0.2)
        self.assertTrue(neck.startswith("rfos"))
        self.assertEqual(matrix.bottleneck(20, None, None), (None, "no ceiling measured"))


class Smoke(unittest.TestCase):
    def test_smoke_run_produces_every_file_and_figure(self):
        if not SMOKE_BUILD:
            self.skipTest("pass --smoke BUILD_DIR to run the matrix end to end")
        with tempfile.TemporaryDirectory() as out:
            run = subprocess.run([sys.executable, MATRIX, "--smoke", "--build", SMOKE_BUILD, "--out", out],
                                 capture_output=True, text=True, timeout=900)
            self.assertEqual(run.returncode, 0, run.stdout[-2000:] + run.stderr[-2000:])
            data = json.load(open(os.path.join(out, "cells.json")))
            cells = data["cells"]
            stages = {c["stage"] for c in cells}
            self.assertEqual(stages, {"media", "transport", "e2e"})
            for c in cells:
                self.assertGreater(c["iops"], 0, c)
                self.assertGreater(c["bw_bytes"], 0, c)
                self.assertTrue(c["command"], c)
            # Every pattern, size and jobs value of the profile has its media and end-to-end figure.
            jobs, _, _, providers = matrix.PROFILES["smoke"]
            for bs in ("4k", "1m"):
                for rw in matrix.PATTERNS:
                    for j in jobs:
                        for stage, source, prov, client in (("media", "fio", "-", "host"),
                                                            ("e2e", "rfos-bench", providers[0], "host"),
                                                            ("e2e", "rfos-bench", providers[0], "agent")):
                            self.assertTrue(any((c["stage"], c["source"], c["provider"], c["client"], c["pattern"],
                                                 c["bs"], c["jobs"]) == (stage, source, prov, client, rw, bs, j)
                                                for c in cells), (stage, client, rw, bs, j))
            files = os.listdir(out)
            self.assertIn("## Host and agent", open(os.path.join(out, "report.md")).read())
            self.assertIn("report.md", files)
            self.assertIn("cells.csv", files)
            self.assertTrue(any(f.endswith(".png") for f in files))
            self.assertTrue(any(f.endswith(".svg") for f in files))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--smoke":
        SMOKE_BUILD = sys.argv[2]
        del sys.argv[1:3]
    unittest.main(verbosity=2)
