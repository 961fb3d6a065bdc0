#!/usr/bin/env python3
"""The configuration examples and docs/CONFIG.md against `rgapsd --help-config`.

  config_examples.py RGAPSD SRCROOT

- config/rgapsd.json spells out every daemon key, in "discovery" every
  discovery key, and in "defaults" every topic key but "name", each at the
  default --help-config shows, and nothing else;
- config/topics.d/example.json sets every topic key (its values are its own);
- the key list in docs/CONFIG.md ("## Keys") is the text --help-config prints
  for the daemon and topic keys (the transport options that follow depend on
  the plugins a build made).
Prints one line per missing, unknown or differing key and exits 1 if any.
"""
import json
import os
import re
import subprocess
import sys


def parse_help(text):
    """{section: {key: default text}} for "Daemon keys", "Discovery keys", "Topic keys"."""
    keys, section, key = {}, None, None
    for line in text.splitlines():
        if line.startswith("Daemon keys"):
            section = "daemon"
        elif line.startswith("Discovery keys"):
            section = "discovery"
        elif line.startswith("Topic keys"):
            section = "topic"
        elif line.startswith("Transport options"):
            section = None
        elif section:
            m = re.match(r"^  ([a-z_]+) \(", line)
            if m:
                key = m.group(1)
                keys.setdefault(section, {})[key] = None
                continue
            m = re.match(r"^      default: (.*)$", line)
            if m and key:
                keys[section][key] = m.group(1)
    return keys


def check_keys(what, have, want, defaults, problems):
    for k in want:
        if k not in have:
            problems.append(f"{what}: lacks key '{k}'")
        elif defaults:
            try:
                default = json.loads(want[k])
            except (TypeError, json.JSONDecodeError):
                continue  # a default in words ("every topic key's own default")
            if have[k] != default:
                problems.append(f"{what}: '{k}' is {json.dumps(have[k])}, the default is "
                                f"{want[k]}")
    for k in have:
        if k not in want:
            problems.append(f"{what}: key '{k}' is not one rgapsd knows")


def main():
    rgapsd, src = sys.argv[1], sys.argv[2]
    text = subprocess.run([rgapsd, "--help-config"], check=True, capture_output=True,
                          text=True, timeout=30).stdout
    keys = parse_help(text)
    if not keys.get("daemon") or not keys.get("topic"):
        sys.exit("FAIL: no daemon or topic keys in rgapsd --help-config")
    problems = []
    daemon = json.load(open(os.path.join(src, "config", "rgapsd.json")))
    check_keys("config/rgapsd.json", daemon, keys["daemon"], True, problems)
    topic_keys = {k: v for k, v in keys["topic"].items() if k != "name"}
    check_keys("config/rgapsd.json \"defaults\"", daemon.get("defaults", {}), topic_keys, True,
               problems)
    check_keys("config/rgapsd.json \"discovery\"", daemon.get("discovery", {}),
               keys.get("discovery", {}), True, problems)
    example = json.load(open(os.path.join(src, "config", "topics.d", "example.json")))
    check_keys("config/topics.d/example.json", example, keys["topic"], False, problems)

    doc = open(os.path.join(src, "docs", "CONFIG.md")).read()
    block = re.search(r"^## Keys\n.*?^```\n(.*?)^```", doc, re.S | re.M)
    # (the daemon file's path is the build's sysconfdir; the docs name the packaged one)
    keys_only = lambda t: re.sub(r"^Daemon keys \(.*\):", "Daemon keys (/etc/rgaps/rgapsd.json):",
                                 t.split("\nTransport options")[0])  # noqa: E731
    if not block:
        problems.append("docs/CONFIG.md: no ``` block under '## Keys'")
    elif keys_only(block.group(1)) != keys_only(text):
        doc_lines, help_lines = keys_only(block.group(1)).splitlines(), keys_only(text).splitlines()
        n = next((i for i, (a, b) in enumerate(zip(doc_lines, help_lines)) if a != b),
                 min(len(doc_lines), len(help_lines)))
        problems.append(f"docs/CONFIG.md '## Keys' differs from rgapsd --help-config from line "
                        f"{n + 1}: {doc_lines[n] if n < len(doc_lines) else '(end)'!r} where "
                        f"--help-config has {help_lines[n] if n < len(help_lines) else '(end)'!r}"
                        " (regenerate the block from its output)")
    for p in problems:
        print(f"FAIL: {p}")
    if problems:
        sys.exit(1)
    print(f"ok: config/rgapsd.json has all {len(keys['daemon'])} daemon keys and "
          f"{len(topic_keys)} topic defaults at their defaults; example.json sets all "
          f"{len(keys['topic'])} topic keys; docs/CONFIG.md's list is --help-config's")


if __name__ == "__main__":
    main()
