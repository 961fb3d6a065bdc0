#!/usr/bin/env python3
"""Planted-bug check: apply each small, deliberate bug of
tests/mutation/mutations.txt to a copy of the tree, one at a time, build, run
the tests the bug names, and require that they fail. A bug that no test
catches fails this check; so does one whose text is not found exactly once
(the code moved: retarget it) or that does not build.

    tests/mutation/mutate.py [--list] [--keep] [--tests=T1,T2] [NAME...]

The copy is the working tree as it is (tracked and untracked files that git
does not ignore), built once in a temporary folder with -Dcuda=disabled; each
mutation then rebuilds only what it touches. The tests of every selected
mutation first run once unmutated and must pass, or the results would mean
nothing. --tests runs those tests instead of each mutation's own (to see which
of them catch it); --keep keeps the copy, its build and the log. Exit 0 when
every planted bug was caught.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIST = os.path.join(ROOT, "tests", "mutation", "mutations.txt")


def parse(path):
    muts, cur, block = [], None, None
    for n, line in enumerate(open(path), 1):
        line = line.rstrip("\n")
        if block is not None:
            if line in ("-new", "-end"):
                cur[block] = "\n".join(cur.pop("_lines")) + "\n" if cur.get("_lines") else ""
                if line == "-new":
                    block, cur["_lines"] = "new", []
                else:
                    block = None
                    muts.append(cur)
                    cur = None
            else:
                cur["_lines"].append(line)
            continue
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("mutation "):
            cur = {"name": line.split(None, 1)[1], "line": n}
        elif line.startswith(("why:", "file:", "tests:")):
            k, v = line.split(":", 1)
            cur[k] = v.strip()
        elif line == "-old":
            block, cur["_lines"] = "old", []
        else:
            sys.exit(f"{path}:{n}: cannot read '{line}'")
    for m in muts:
        for k in ("why", "file", "tests", "old", "new"):
            if k not in m:
                sys.exit(f"{path}:{m['line']}: mutation {m['name']} has no {k}")
        m["tests"] = m["tests"].split()
    return muts


def run(cmd, log, **kw):
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        return subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, **kw)


def failed_tests(build):
    out = []
    try:
        for line in open(os.path.join(build, "meson-logs", "testlog.json")):
            t = json.loads(line)
            if t["result"] not in ("OK", "SKIP", "EXPECTEDFAIL"):
                out.append(f"{t['name'].split(' / ')[-1]} ({t['result']})")
    except OSError:
        pass
    return out


def main():
    args = sys.argv[1:]
    keep = "--keep" in args
    muts = parse(LIST)
    if "--list" in args:
        for m in muts:
            print(f"{m['name']:28} {m['file']:32} {' '.join(m['tests'])}\n{'':28} {m['why']}")
        return 0
    only = [a.split("=", 1)[1].split(",") for a in args if a.startswith("--tests=")]
    if only:
        for m in muts:
            m["tests"] = only[-1]
    names = [a for a in args if not a.startswith("--")]
    if names:
        unknown = set(names) - {m["name"] for m in muts}
        if unknown:
            sys.exit(f"unknown mutations: {' '.join(sorted(unknown))}")
        muts = [m for m in muts if m["name"] in names]
    t0 = time.time()
    work = tempfile.mkdtemp(prefix="rgaps-mutation.")
    src, build, log = os.path.join(work, "src"), os.path.join(work, "build"), os.path.join(work, "log")
    print(f"== copy of the tree in {src}; build log {log}")
    files = subprocess.run(["git", "-C", ROOT, "ls-files", "-co", "--exclude-standard", "-z"],
                           check=True, capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        s = os.path.join(ROOT, f)
        if os.path.isfile(s) or os.path.islink(s):
            os.makedirs(os.path.dirname(os.path.join(src, f)), exist_ok=True)
            shutil.copy2(s, os.path.join(src, f), follow_symlinks=False)
    # -Dwerror=false: a planted bug may leave an unused variable; what counts is the tests.
    if run(["meson", "setup", build, src, "-Dcuda=disabled", "-Dwerror=false"], log) or \
       run(["ninja", "-C", build], log):
        sys.exit(f"the unmutated copy does not build: see {log}")
    tests = sorted({t for m in muts for t in m["tests"]})
    print(f"== baseline: {' '.join(tests)} on the unmutated copy ({time.time() - t0:.0f} s so far)")
    if run(["meson", "test", "-C", build, "--no-rebuild", "--print-errorlogs"] + tests, log):
        sys.exit(f"the tests fail without any mutation ({', '.join(failed_tests(build))}): see {log}")
    results = []
    for m in muts:
        path = os.path.join(src, m["file"])
        t1 = time.time()
        try:
            orig = open(path).read()
        except OSError as e:
            results.append((m, "BROKEN", f"cannot read {m['file']}: {e.strerror}"))
            continue
        n = orig.count(m["old"])
        if n != 1:
            results.append((m, "BROKEN", f"its text occurs {n} times in {m['file']}, not once: retarget it"))
            print(f"-- {m['name']}: BROKEN ({results[-1][2]})")
            continue
        with open(path, "w") as f:
            f.write(orig.replace(m["old"], m["new"]))
        try:
            if run(["ninja", "-C", build], log):
                results.append((m, "BROKEN", "the mutant does not build"))
            elif run(["meson", "test", "-C", build, "--no-rebuild", "--print-errorlogs"] + m["tests"], log):
                results.append((m, "caught", "by " + ", ".join(failed_tests(build))))
            else:
                results.append((m, "SURVIVED", f"{' '.join(m['tests'])} all passed"))
        finally:
            with open(path, "w") as f:
                f.write(orig)
        print(f"-- {m['name']}: {results[-1][1]} {results[-1][2]} ({time.time() - t1:.0f} s)", flush=True)
    run(["ninja", "-C", build], log)
    print(f"\n== {len(results)} planted bugs in {time.time() - t0:.0f} s:")
    for m, verdict, why in results:
        print(f"   {verdict:8} {m['name']}: {m['why']} [{m['file']}] - {why}")
    bad = [r for r in results if r[1] != "caught"]
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")
    if bad:
        print(f"FAIL: {len(bad)} of {len(results)} planted bugs were not caught (or could not be planted)")
        return 1
    print(f"ok: all {len(results)} planted bugs were caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
