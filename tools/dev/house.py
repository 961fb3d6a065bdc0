#!/usr/bin/env python3
"""house.py: the structure of rgaps as its build shows it, and the rules it keeps.

What calls what is read from the object files of a meson build: a file that
references a global symbol which another file defines calls that file (nm).
What includes what is read from the compiler's own dependency lists (ninja -t
deps). Neither guesses at C: a call through a function pointer (a hook, an
operation table) is no reference, which is what layering wants; a static
inline function of a header is seen as the include of that header.

Commands (each prints its findings; a check exits 1 on a violation):

  map        the drawing: rgapsd's files on floors, the calls that go upward
             against the floors declared in tools/dev/floors.txt, every circle
             among the daemon's files, and who uses each file of src/common
  circles    check: no circle (strongly connected component of two files or
             more) among the files of src/daemon and src/daemon/remote
  prefixes   check: every non-static function and global of src/common,
             src/lib, src/daemon and tools/lib carries its area's prefix
             (CONTRIBUTING.md, "Names")
  doors      check: who may include and call what (tools, plugins, the
             daemon and the library: docs/ARCHITECTURE.md section 12)
  rename     the renames that make `prefixes` pass, one 'old new' a line,
             and every rgapsd__ name of the tree as rgapsd_; with --apply,
             made in every tracked text file (but docs/DECISIONS.md, the
             record, and tools/dev, whose tests spell wrong names on
             purpose). A branch that adds names runs it after its rebase.

Usage: tools/dev/house.py COMMAND [-C BUILD_DIR] [--apply]    (default: build)
The build must be complete (ninja -C BUILD_DIR): every object is read.
"""
import argparse
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
from collections import defaultdict

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLOORS_FILE = os.path.join(SRC_ROOT, "tools", "dev", "floors.txt")
LIB_MAP = os.path.join(SRC_ROOT, "src", "lib", "librgaps.map")

# The areas of the tree, most specific first: (path prefix, side).
SIDES = [
    ("src/daemon/", "daemon"),
    ("src/lib/", "library"),
    ("src/common/", "common"),
    ("tools/", "tools"),
    ("plugins/", "plugins"),
    ("tests/", "tests"),
]
USER_SIDES = ["daemon", "library", "tools", "plugins", "tests"]

# What a reference from each side may resolve to (the objects it is linked with).
LINKED_WITH = {
    "daemon": {"daemon", "common"},
    "library": {"library", "common"},
    "common": {"common"},
    "tools": {"tools", "library", "common"},
    "plugins": {"plugins"},
    "tests": {"daemon", "library", "common", "tools", "plugins"},
}


def side_of(path):
    for prefix, side in SIDES:
        if path.startswith(prefix):
            return side
    return None


def is_daemon_file(path):
    return path.startswith("src/daemon/") and path.endswith(".c")


def unit_of(path):
    """A .c and its .h are one unit: src/common/config.c and config.h are 'config'."""
    return os.path.splitext(os.path.basename(path))[0]


def fail_usage(msg):
    print(f"house.py: {msg}", file=sys.stderr)
    sys.exit(2)


class Build:
    """The sources of one build: what each defines, references and includes."""

    def __init__(self, build_dir, src_root=SRC_ROOT):
        self.build_dir = os.path.abspath(build_dir)
        self.src_root = os.path.abspath(src_root)
        cc_path = os.path.join(self.build_dir, "compile_commands.json")
        try:
            with open(cc_path) as f:
                commands = json.load(f)
        except OSError as e:
            fail_usage(f"cannot read {cc_path}: {e.strerror} (is {build_dir} a meson build?)")
        self.defines = defaultdict(set)  # source -> global symbols it defines
        self.refs = defaultdict(set)  # source -> global symbols it references
        self.includes = defaultdict(set)  # source -> in-tree headers it includes
        self.missing = []  # sources whose object is not built
        objects = {}  # object (relative to the build dir) -> source
        for c in commands:
            src = self._rel(os.path.join(c["directory"], c["file"]))
            if src is None or not src.endswith(".c"):
                continue  # generated, or not C (CUDA objects are the plugin's own)
            obj = c["output"]
            if not os.path.exists(os.path.join(self.build_dir, obj)):
                self.missing.append(src)
                continue
            objects[obj] = src
        unbuilt = [m for m in self.missing if side_of(m) != "tests"]
        if not objects or unbuilt:
            fail_usage(f"{len(unbuilt) or 'no'} object file(s) of rgaps missing in {build_dir}"
                       f": build it first (ninja -C {build_dir})")
        for obj, src in objects.items():
            self._read_symbols(obj, src)
        self._read_includes(objects)
        self.sources = sorted(set(objects.values()))
        self._resolve()

    def _rel(self, path):
        """A path relative to the source tree, None if outside it or in the build dir."""
        p = os.path.normpath(os.path.join(self.build_dir, path))
        if p.startswith(self.build_dir + os.sep) or not p.startswith(self.src_root + os.sep):
            return None
        return os.path.relpath(p, self.src_root)

    def _read_symbols(self, obj, src):
        out = subprocess.run(["nm", "-P", "-g", obj], cwd=self.build_dir, check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) < 2 or f[0].startswith("__") or "." in f[0]:
                continue  # compiler-made (sanitizers, constant pools)
            name, kind = f[0], f[1]
            if kind in "Uw":
                self.refs[src].add(name)
            elif kind in "TDBRCGSVWui":
                self.defines[src].add(name)

    def _read_includes(self, objects):
        out = subprocess.run(["ninja", "-C", self.build_dir, "-t", "deps"] + list(objects),
                             check=True, capture_output=True, text=True).stdout
        src = None
        for line in out.splitlines():
            if line and not line[0].isspace():
                obj = line.split(":", 1)[0]
                src = objects.get(obj)
                continue
            header = self._rel(line.strip()) if src else None
            if header and header.endswith(".h"):
                self.includes[src].add(header)

    def _resolve(self):
        """calls[a][b]: the symbols of b that a references (a != b). A name defined by
        several files resolves to the one a links with (a plugin: its own folder); a
        name that stays ambiguous is listed in self.ambiguous, never guessed."""
        definers = defaultdict(set)
        for src, names in self.defines.items():
            if side_of(src) not in (None, "tests"):
                for n in names:
                    definers[n].add(src)
        self.calls = defaultdict(lambda: defaultdict(set))
        self.ambiguous = []
        for src in sorted(self.refs):
            linked = LINKED_WITH.get(side_of(src), set())
            for n in sorted(self.refs[src]):
                every = definers.get(n, set())
                cands = {d for d in every if side_of(d) in linked}
                if side_of(src) == "plugins":  # each plugin is its own module
                    cands = {d for d in cands if d.split("/")[1] == src.split("/")[1]}
                if not cands and len(every) == 1:
                    cands = set(every)  # not linked with it: a door check reports it
                if len(cands) == 1:
                    d = cands.pop()
                    if d != src:
                        self.calls[src][d].add(n)
                elif cands:
                    self.ambiguous.append((src, n, sorted(cands)))

    def daemon_graph(self):
        files = [s for s in self.sources if is_daemon_file(s)]
        return files, {a: {b: self.calls[a][b] for b in self.calls[a] if is_daemon_file(b)}
                       for a in files}


def short(path):
    return path[len("src/daemon/"):] if path.startswith("src/daemon/") else path


# ------------------------------------------------------------------ graphs


def circles_of(nodes, edges):
    """Strongly connected components of two nodes or more (Tarjan), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return sorted(found, key=lambda c: (-len(c), c))


def heights(nodes, edges, circles):
    """Floor of each node: 0 calls nothing; else 1 + the highest floor it calls.
    The files of one circle share a floor."""
    comp = {v: v for v in nodes}
    for c in circles:
        for v in c:
            comp[v] = c[0]
    out = defaultdict(set)
    for a in nodes:
        for b in edges.get(a, {}):
            if comp[a] != comp[b]:
                out[comp[a]].add(comp[b])
    memo = {}

    def h(c):
        if c not in memo:
            memo[c] = 1 + max((h(d) for d in out[c]), default=-1)
        return memo[c]

    return {v: h(comp[v]) for v in nodes}


def closing_calls(circle, edges, floors):
    """The calls of a circle that go upward on the declared floors, and what is left of
    the circle once they are cut (a hook, a move): the circles among the rest."""
    inside = set(circle)
    up = [(a, b) for a in circle for b in sorted(edges.get(a, {}))
          if b in inside and floors.rank(a) is not None and floors.rank(b) is not None
          and floors.rank(b) > floors.rank(a)]
    rest = {a: {b: s for b, s in edges.get(a, {}).items() if b in inside and (a, b) not in up}
            for a in circle}
    return up, circles_of(circle, rest)


class Floors:
    """tools/dev/floors.txt: the floors the daemon is built toward, top first. A line
    'floor: file...' (globs), continued by indented lines."""

    def __init__(self, path):
        self.path = path
        self.names, self.globs = [], []
        with open(path) as f:
            for n, raw in enumerate(f, 1):
                line = raw.split("#", 1)[0].strip()
                if not line:
                    continue
                if raw[0].isspace() and self.globs:  # a floor's files, continued
                    self.globs[-1] += line.split()
                    continue
                name, sep, rest = line.partition(":")
                if not sep or not rest.split():
                    fail_usage(f"{path}:{n}: expected 'floor: file...'")
                self.names.append(name.strip())
                self.globs.append(rest.split())

    def rank(self, path):
        """0 for the bottom floor; None if no floor names it. The first match wins."""
        for i, globs in enumerate(self.globs):
            if any(fnmatch.fnmatchcase(path, g) for g in globs):
                return len(self.globs) - 1 - i
        return None

    def name(self, rank):
        return self.names[len(self.names) - 1 - rank]


# ------------------------------------------------------------------ commands


def cmd_map(b):
    files, edges = b.daemon_graph()
    circles = circles_of(files, edges)
    floor = heights(files, edges, circles)
    in_circle = {v: i + 1 for i, c in enumerate(circles) for v in c}
    ncalls = sum(len(e) for e in edges.values())
    print(f"rgapsd: {len(files)} files, {ncalls} file-to-file calls "
          f"({sum(len(s) for e in edges.values() for s in e.values())} symbols), "
          f"{len(circles)} circle(s)")
    print()
    print("Floors, drawn from the calls (a file calls only lower floors, or its own circle):")
    for fl in sorted(set(floor.values()), reverse=True):
        here = sorted(v for v in files if floor[v] == fl)
        loose = [short(v) for v in here if v not in in_circle]
        line = " ".join(loose)
        for i in sorted({in_circle[v] for v in here if v in in_circle}):
            line += f" [circle {i}: {len(circles[i - 1])} files]"
        print(f"  {fl:2d}  {line.strip()}")
    if b.ambiguous:
        print(f"  ({len(b.ambiguous)} reference(s) to names that several files define, "
              "left out: " + ", ".join(sorted({n for _, n, _ in b.ambiguous})) + ")")
    print()
    floors = Floors(FLOORS_FILE) if os.path.exists(FLOORS_FILE) else None
    print_upward(files, edges, floors)
    print_circles(circles, edges, floors)
    print_common(b)
    return 0


def print_upward(files, edges, floors):
    if floors is None:
        print(f"(no {os.path.relpath(FLOORS_FILE, SRC_ROOT)}: no declared floors to compare)")
        return
    unplaced = [short(v) for v in files if floors.rank(v) is None]
    rows = [(a, b, s) for a in files for b, s in sorted(edges[a].items())
            if floors.rank(a) is not None and floors.rank(b) is not None
            and floors.rank(b) > floors.rank(a)]
    print(f"Declared floors ({os.path.relpath(FLOORS_FILE, SRC_ROOT)}), top first: "
          + " > ".join(floors.names))
    if unplaced:
        print("  on no declared floor: " + " ".join(unplaced))
    print(f"Calls upward against them: {len(rows)}")
    for a, b, syms in rows:
        print(f"  {short(a)} ({floors.name(floors.rank(a))}) -> {short(b)} "
              f"({floors.name(floors.rank(b))}): {', '.join(sorted(syms))}")
    print()


def print_circles(circles, edges, floors):
    print(f"Circles among the daemon's files: {len(circles)}")
    for i, c in enumerate(circles, 1):
        inside = set(c)
        print(f"  circle {i}: {len(c)} files: {' '.join(short(v) for v in c)}")
        for a in c:
            for bb in sorted(edges[a]):
                if bb in inside:
                    print(f"    {short(a)} -> {short(bb)}: {', '.join(sorted(edges[a][bb]))}")
        if floors is not None:
            up, left = closing_calls(c, edges, floors)
            print(f"    calls upward on the declared floors, which close it: {len(up)}")
            for a, bb in up:
                print(f"      {short(a)} -> {short(bb)}: {', '.join(sorted(edges[a][bb]))}")
            for r in left:
                print(f"    still a circle without them: {' '.join(short(v) for v in r)}")
            if not left:
                print("    without them, no circle is left")
    print()


def print_common(b):
    """Each unit of src/common (a .c with its .h, or a header alone): which sides use it,
    directly (an include or a call) or only through another unit of src/common."""
    units = defaultdict(set)
    for s in b.sources:
        if s.startswith("src/common/"):
            units[unit_of(s)].add(s)
    for hs in b.includes.values():
        for h in hs:
            if h.startswith("src/common/"):
                units[unit_of(h)].add(h)
    owner = {f: u for u, fs in units.items() for f in fs}

    def used(src):  # the common units a source uses directly
        got = {owner[h] for h in b.includes[src] if h in owner}
        got |= {owner[d] for d in b.calls[src] if d in owner}
        return got - ({owner[src]} if src in owner else set())

    direct = defaultdict(set)  # unit -> sides that use it themselves
    by_common = defaultdict(set)  # unit -> common units that use it
    for s in b.sources:
        side = side_of(s)
        for u in used(s):
            if side == "common":
                by_common[u].add(owner[s])
            elif side in USER_SIDES:
                direct[u].add(side)
    reach = {u: set(direct[u]) for u in units}  # transitively through common units
    changed = True
    while changed:
        changed = False
        for u in units:
            for v in by_common[u]:
                if not reach[v] <= reach[u]:
                    reach[u] |= reach[v]
                    changed = True
    print("src/common: who uses each unit (d = itself, t = only through another unit "
          "of src/common)")
    print(f"  {'unit':14s}" + "".join(f"{s:9s}" for s in USER_SIDES) + "used by common units")
    for u in sorted(units):
        cells = "".join(f"{('d' if s in direct[u] else 't' if s in reach[u] else '-'):9s}"
                        for s in USER_SIDES)
        print(f"  {u:14s}{cells}{' '.join(sorted(by_common[u])) or '-'}")
    print()


def cmd_circles(b):
    files, edges = b.daemon_graph()
    circles = circles_of(files, edges)
    floors = Floors(FLOORS_FILE) if os.path.exists(FLOORS_FILE) else None
    print_circles(circles, edges, floors)
    print(f"circles: {len(circles)} among {len(files)} files of src/daemon"
          + (" (none: the daemon's files call each other without a circle)" if not circles
             else ""))
    return 1 if circles else 0


def exported_names():
    """The names librgaps exports: the global: lists of its linker map."""
    names, in_global = set(), False
    with open(LIB_MAP) as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    for tok in re.findall(r"[A-Za-z_][A-Za-z0-9_.]*:|[A-Za-z_][A-Za-z0-9_]*;|[{}]", text):
        if tok == "global:":
            in_global = True
        elif tok.endswith(":") or tok in "{}":
            in_global = False
        elif in_global:
            names.add(tok[:-1])
    return names


# The prefix each area's non-static names carry (CONTRIBUTING.md, "Names"; DECISIONS 140).
def prefix_rule(src, name, exported):
    """None if name is right for an object of src, else what is wrong with it."""
    if src.startswith(("src/common/", "src/lib/")):
        if name in exported:
            return None if name.startswith("rgaps_") and not name.startswith("rgaps__") \
                else "exported by librgaps, but not rgaps_"
        if name.startswith("rgaps__"):
            return None
        if name.startswith("rgaps_"):
            return "rgaps_ but not exported by librgaps: rgaps__"
        return "internal: rgaps__"
    if src.startswith("src/daemon/remote/"):
        if name.startswith(("rt_", "rgapsd_remote_")):
            return None
        return "remote path: rt_ (private to remote/) or rgapsd_remote_ (its interface)"
    if src.startswith("src/daemon/"):
        if name == "main" and src == "src/daemon/main.c":
            return None
        if name.startswith("rgapsd__"):
            return "rgapsd__: the daemon's prefix is rgapsd_"
        if name.startswith("rgapsd_"):
            return None
        return "rgapsd_"
    if src.startswith("tools/lib/"):
        return None if name.startswith("tool_") else "tools/lib: tool_"
    return None


def cmd_prefixes(b):
    exported = exported_names()
    bad = defaultdict(list)
    for n in sorted(exported):
        if not n.startswith("rgaps_") or n.startswith("rgaps__"):
            bad["src/lib/librgaps.map"].append((n, "exported, but not rgaps_"))
    for src in b.sources:
        for n in sorted(b.defines[src]):
            why = prefix_rule(src, n, exported)
            if why:
                bad[src].append((n, why))
    # rt_ is private to the remote path: nobody else calls it.
    for src in b.sources:
        if src.startswith("src/daemon/remote/") or side_of(src) == "tests":
            continue
        for d, syms in sorted(b.calls[src].items()):
            for n in sorted(syms):
                if n.startswith("rt_") and d.startswith("src/daemon/remote/"):
                    bad[src].append((n, f"calls {short(d)}'s rt_ name from outside remote/"))
    total = sum(len(v) for v in bad.values())
    for src in sorted(bad):
        print(f"{src}: {len(bad[src])}")
        for n, why in bad[src]:
            print(f"  {n}  ({why})")
    print(f"prefixes: {total} offender(s) in {len(bad)} file(s)")
    return 1 if total else 0


# Who may include and call what (docs/ARCHITECTURE.md section 12): for the sources under
# a path (the first that matches), the in-tree headers they may include and the files
# they may call (path prefixes), and why. Code of src/common that librgaps exports is
# the public API, which anyone linked with librgaps may call.
DOORS = [
    ("tools/lib/", ("include/", "tools/lib/", "src/common/config.h", "src/common/futex.h",
                    "src/common/util.h", "src/common/prometheus.h"),
     ("src/lib/", "tools/lib/", "src/common/config.c", "src/common/prometheus.c"),
     "tools/lib is the tools' internal library: the public API, and src/common's sizes, "
     "clocks, futexes and the Prometheus text rgapsd serves, which tool.h and stats.h "
     "hand on"),
    ("tools/", ("include/", "tools/"), ("src/lib/", "tools/"),
     "a tool uses the public API and tools/lib"),
    ("plugins/", ("include/", "plugins/"), ("plugins/",),
     "a plugin sees only include/rgaps/plugin.h"),
    ("src/lib/", ("include/", "src/lib/", "src/common/"), ("src/lib/", "src/common/"),
     "librgaps never includes rgapsd"),
    ("src/daemon/", ("include/", "src/daemon/", "src/common/"), ("src/daemon/", "src/common/"),
     "rgapsd never includes librgaps"),
    ("src/common/", ("include/", "src/common/"), ("src/common/",),
     "src/common includes neither rgapsd nor librgaps"),
]


def cmd_doors(b):
    exported = exported_names()
    bad = []
    for src in b.sources:
        rule = next((r for r in DOORS if src.startswith(r[0])), None)
        if rule is None:
            continue
        _, may_include, may_call, why = rule
        for h in sorted(b.includes[src]):
            if not h.startswith(may_include):
                bad.append(f"{src} includes {h} ({why})")
        for d, syms in sorted(b.calls[src].items()):
            if d.startswith(may_call):
                continue
            if "src/lib/" in may_call and side_of(d) == "common" and syms <= exported:
                continue
            bad.append(f"{src} calls {d}: {', '.join(sorted(syms))} ({why})")
    for line in bad:
        print(line)
    print(f"doors: {len(bad)} violation(s)")
    return 1 if bad else 0


def renamed(src, name, exported):
    """The name prefix_rule wants for name, defined in src; None when it needs a person."""
    rest = re.sub(r"^(rgapsd__|rgapsd_|rgaps__|rgaps_)", "", name)
    if src.startswith(("src/common/", "src/lib/")):
        return "rgaps__" + rest if name.startswith("rgaps_") else None
    if src.startswith("src/daemon/remote/"):
        return "rt_" + rest
    if src.startswith("src/daemon/"):
        return "rgapsd_" + rest
    if src.startswith("tools/lib/"):
        return rest if rest.startswith("tool_") else "tool_" + rest
    return None


# Kept as written: the record of decisions, and the house's own instruments.
RENAME_SKIP = ("docs/DECISIONS.md", "tools/dev/")
# Where the rule's name is a type's already (struct rgapsd_client_id): a verb of its own.
RENAME_CHOSEN = {
    "rgapsd__client_id": "rgapsd_client_identify",
    "rgapsd__replica_stats": "rgapsd_replica_stats_get",
}
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def tracked_texts():
    """The tracked text files of the tree (relative paths) and their contents."""
    out = subprocess.run(["git", "-C", SRC_ROOT, "ls-files", "-z"], check=True,
                         capture_output=True).stdout.decode().split("\0")
    texts = {}
    for rel in out:
        path = os.path.join(SRC_ROOT, rel)
        if not rel or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data:
            continue
        try:
            texts[rel] = data.decode()
        except UnicodeDecodeError:
            continue
    return texts


def rename_map(b, texts):
    """old -> new for every offender of prefixes and every rgapsd__ token; the
    offenders no rule renames; the new names that some other name has already."""
    exported = exported_names()
    names, by_hand = {}, []
    for src in b.sources:
        for n in sorted(b.defines[src]):
            if prefix_rule(src, n, exported) is None:
                continue
            new = RENAME_CHOSEN.get(n) or renamed(src, n, exported)
            if new is None or prefix_rule(src, new, exported) is not None:
                by_hand.append((src, n))
            else:
                names[n] = new
    tokens = set()
    for rel, text in texts.items():
        if rel.startswith(RENAME_SKIP):
            continue
        found = set(TOKEN.findall(text))
        tokens |= found
        for t in found:
            if t.startswith("rgapsd__") and len(t) > len("rgapsd__"):
                names.setdefault(t, RENAME_CHOSEN.get(t, "rgapsd_" + t[len("rgapsd__"):]))
    taken = sorted((old, new) for old, new in names.items() if new in tokens and new not in names)
    return names, by_hand, taken


def cmd_rename(b, apply=False):
    texts = tracked_texts()
    names, by_hand, taken = rename_map(b, texts)
    for old in sorted(names):
        print(f"{old} {names[old]}")
    for src, n in by_hand:
        print(f"by hand: {src}: {n} (no rule gives it a name)", file=sys.stderr)
    for old, new in taken:
        print(f"taken: {old} -> {new}, a name the tree has already", file=sys.stderr)
    print(f"rename: {len(names)} name(s), {len(by_hand)} by hand, {len(taken)} taken",
          file=sys.stderr)
    if by_hand or taken:
        return 1
    if not apply or not names:
        return 0
    # The linker's --wrap names (__wrap_x, __real_x) follow x; a type's tag of the same
    # name as a function (struct rgaps_sub_region) does not.
    pattern = re.compile(r"(?<!struct )(?<!union )(?<!enum )\b(__wrap_|__real_)?("
                         + "|".join(sorted(map(re.escape, names), key=len, reverse=True))
                         + r")\b")
    changed = 0
    for rel, text in sorted(texts.items()):
        if rel.startswith(RENAME_SKIP):
            continue
        new = pattern.sub(lambda m: (m.group(1) or "") + names[m.group(2)], text)
        if new != text:
            with open(os.path.join(SRC_ROOT, rel), "w") as f:
                f.write(new)
            changed += 1
            if rel.endswith((".c", ".h", ".cu")):
                reflow_long(rel, text, new)
    print(f"rename: {changed} file(s) rewritten", file=sys.stderr)
    return 0


def reflow_long(rel, old, new):
    """A line the renames made pass 100 columns is formatted again (clang-format on that
    line alone: the rest of the file stays as it was). Renames keep the lines in place."""
    lines = [f"--lines={i}:{i}"
             for i, (a, b) in enumerate(zip(old.split("\n"), new.split("\n")), 1)
             if a != b and len(b.expandtabs(8)) > 100]
    if not lines:
        return
    try:
        subprocess.run(["clang-format", "-i"] + lines + [os.path.join(SRC_ROOT, rel)], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"{rel}: {len(lines)} line(s) over 100 columns, not formatted: {e}",
              file=sys.stderr)


COMMANDS = {"map": cmd_map, "circles": cmd_circles, "prefixes": cmd_prefixes, "doors": cmd_doors,
            "rename": cmd_rename}


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `house.py map | head` ends quietly
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("command", choices=sorted(COMMANDS))
    ap.add_argument("-C", dest="build", default=os.path.join(SRC_ROOT, "build"),
                    help="the meson build directory (default: build)")
    ap.add_argument("--apply", action="store_true", help="rename: make the renames")
    args = ap.parse_args()
    if args.apply and args.command != "rename":
        fail_usage("--apply goes with rename only")
    b = Build(args.build)
    if args.command == "rename":
        return cmd_rename(b, args.apply)
    return COMMANDS[args.command](b)


if __name__ == "__main__":
    sys.exit(main())
