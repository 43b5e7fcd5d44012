#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite unit): each folder's README lists its files. For every folder of the
repository that has a README.md, each file git tracks directly in it (but the README) and each
subfolder must be named in that README, as `name` (a folder as `name/`, or by a file in it,
`name/file`; a `stem.*` entry covers stem.c and stem.h; a
code span names its first word). The folders of runner/ must each have a README. TAP output.
Argument: SOURCE_ROOT."""
import fnmatch
import os
import re
import subprocess
import sys

# Folders whose files are data a README describes by kind, not one by one.
DATA = ("tests/fuzz/", "tests/cli/broken", "tests/golden", "examples", "tests/chaos/workflows",
        "tests/integration/workflows", "worker-protocol/python/tests/workflows")


def main():
    root = sys.argv[1]
    files = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split("\n")
    folders = {}
    for f in filter(None, files):
        d, base = os.path.split(f)
        folders.setdefault(d, set()).add(base)
        while d:
            parent, sub = os.path.split(d)
            folders.setdefault(parent, set()).add(sub + "/")
            d = parent
    n = failures = 0
    for d in sorted(folders):
        if any(d.startswith(p) for p in DATA):
            continue
        entries = folders[d]
        readme = os.path.join(root, d, "README.md")
        if not os.path.isfile(readme):
            if d.startswith("runner/") or d == "runner":
                n += 1
                failures += 1
                print("not ok %d - %s/ has no README.md" % (n, d))
            continue
        text = open(readme, encoding="utf-8").read()
        # A code span names its first word: `limit-cost [BUILD_DIR]` names limit-cost.
        named = set(re.findall(r"`([^`\s]+)(?:\s[^`]*)?`", text))
        missing = []
        for e in sorted(entries):
            if e == "README.md":
                continue
            stem = e.rsplit(".", 1)[0]
            if (e in named or e.rstrip("/") in named or (stem + ".*") in named
                    or any(fnmatch.fnmatch(e, p) for p in named if "*" in p and "/" not in p)
                    or (e.endswith("/") and any(p.startswith(e) for p in named))):
                continue
            missing.append(e)
        n += 1
        if missing:
            failures += 1
            print("not ok %d - %s/README.md does not name: %s" % (n, d or ".", " ".join(missing)))
        else:
            print("ok %d - %s/README.md names its %d entries" % (n, d or ".", len(entries) - 1))
    print("1..%d" % n)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
