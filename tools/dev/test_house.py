#!/usr/bin/env python3
"""house.py's own test: a small tree with a known circle, an upward call, a misnamed
function and a tool that includes a header of src/, built with ninja as meson builds
(gcc depfiles, compile_commands.json); house.py must find each, and nothing more."""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import house  # noqa: E402

SOURCES = {
    # a -> b -> c -> a is the circle; a -> d and c -> d are not in it.
    "src/daemon/a.c": '#include "../common/x.h"\n'
                      "int rgapsd_b(void); int rgapsd_d(void);\n"
                      "int rgapsd_a(void) { return rgapsd_b() + rgapsd_d() + rgaps__x(); }\n",
    "src/daemon/b.c": "int rgapsd_c(void);\nint rgapsd_b(void) { return rgapsd_c(); }\n",
    "src/daemon/c.c": "int rgapsd_a(void); int rgapsd_d(void);\n"
                      "int rgapsd_c(void) { return rgapsd_a() + rgapsd_d(); }\n",
    "src/daemon/d.c": "int rgapsd__d2(void);\nint rgapsd_d(void) { return 1; }\n"
                      "int rgapsd__d2(void) { return 2; }\n",
    "src/common/x.h": "int rgaps__x(void);\nint helper(void);\n",
    "src/common/x.c": '#include "x.h"\nint rgaps__x(void) { return helper(); }\n'
                      "int helper(void) { return 0; }\n",
    "tools/t.c": '#include "../src/common/x.h"\nint main(void) { return rgaps__x(); }\n',
}


class HouseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="house-test-")
        build = os.path.join(cls.tmp, "build")
        os.makedirs(build)
        rules = ["rule cc", "  command = cc -c $in -o $out -MD -MF $out.d", "  depfile = $out.d",
                 "  deps = gcc", ""]
        commands = []
        for path, text in SOURCES.items():
            full = os.path.join(cls.tmp, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)
            if path.endswith(".c"):
                obj = path.replace("/", "_") + ".o"
                rules.append(f"build {obj}: cc ../{path}")
                commands.append({"directory": build, "file": f"../{path}", "output": obj})
        with open(os.path.join(build, "build.ninja"), "w") as f:
            f.write("\n".join(rules) + "\n")
        with open(os.path.join(build, "compile_commands.json"), "w") as f:
            json.dump(commands, f)
        subprocess.run(["ninja", "-C", build], check=True, capture_output=True)
        cls.b = house.Build(build, cls.tmp)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_cmd(self, fn):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = fn(self.b)
        return rc, out.getvalue()

    def test_calls_and_includes(self):
        self.assertEqual(dict(self.b.calls["src/daemon/a.c"]),
                         {"src/daemon/b.c": {"rgapsd_b"}, "src/daemon/d.c": {"rgapsd_d"},
                          "src/common/x.c": {"rgaps__x"}})
        self.assertEqual(self.b.includes["tools/t.c"], {"src/common/x.h"})

    def test_circle_and_floors(self):
        files, edges = self.b.daemon_graph()
        circles = house.circles_of(files, edges)
        self.assertEqual(circles, [["src/daemon/a.c", "src/daemon/b.c", "src/daemon/c.c"]])
        fl = house.heights(files, edges, circles)
        self.assertEqual((fl["src/daemon/d.c"], fl["src/daemon/a.c"], fl["src/daemon/c.c"]),
                         (0, 1, 1))
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
            f.write("top: src/daemon/a.c\n  src/daemon/b.c\nlow: src/daemon/c.c src/daemon/d.c\n")
            f.flush()
            up, left = house.closing_calls(circles[0], edges, house.Floors(f.name))
        self.assertEqual(up, [("src/daemon/c.c", "src/daemon/a.c")])
        self.assertEqual(left, [])
        rc, out = self.run_cmd(house.cmd_circles)
        self.assertEqual(rc, 1)
        self.assertIn("circle 1: 3 files", out)

    def test_prefixes(self):
        rc, out = self.run_cmd(house.cmd_prefixes)
        self.assertEqual(rc, 1)
        self.assertIn("helper  (internal: rgaps__)", out)
        self.assertIn("rgapsd__d2  (rgapsd__: the daemon's prefix is rgapsd_)", out)
        self.assertIn("prefixes: 2 offender(s) in 2 file(s)", out)

    def test_doors(self):
        rc, out = self.run_cmd(house.cmd_doors)
        self.assertEqual(rc, 1)
        self.assertIn("tools/t.c includes src/common/x.h", out)
        self.assertIn("tools/t.c calls src/common/x.c: rgaps__x", out)
        self.assertIn("doors: 2 violation(s)", out)

    def test_renamed(self):
        exported = {"rgaps_publisher_init"}
        cases = [("src/common/t.c", "rgaps_sub_take", "rgaps__sub_take"),
                 ("src/common/h.c", "helper", None),  # no rule names it: a person does
                 ("src/daemon/d.c", "rgapsd__d2", "rgapsd_d2"),
                 ("src/daemon/p/w.c", "peer_text", "rgapsd_peer_text"),
                 ("src/daemon/remote/r.c", "rgaps_ring_check", "rt_ring_check"),
                 ("tools/lib/q.c", "rgaps_tool_query", "tool_query"),
                 ("tools/lib/s.c", "stats_get", "tool_stats_get")]
        for src, old, new in cases:
            self.assertEqual(house.renamed(src, old, exported), new, (src, old))
            if new:
                self.assertIsNone(house.prefix_rule(src, new, exported), new)

    def test_exported_names(self):
        names = house.exported_names()
        self.assertIn("rgaps_publisher_init", names)  # the first stanza
        self.assertIn("rgaps_msg_info", names)  # a later one
        self.assertFalse({"*", "local", "global"} & names)


if __name__ == "__main__":
    unittest.main()
