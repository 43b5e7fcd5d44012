#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite unit): what the docs claim about the runner's surface is what it has.
- every HTTP route the listener answers (runner/ops/http.c) is named by `cairn-runner --help`,
  the README's configuration table and docs/operations.md;
- every setting `cairn-runner --help` lists (its flag and its CAIRN_* variable) is in the
  README's configuration table;
- every series /metrics serves (runner/ops/metrics.c, and the jobs' and summaries' names) is
  in docs/operations.md's table of series.
TAP output. Arguments: CAIRN_RUNNER SOURCE_ROOT."""
import re
import subprocess
import sys

n = failures = 0


def check(what, missing):
    global n, failures
    n += 1
    if missing:
        failures += 1
        print("not ok %d - %s: missing %s" % (n, what, ", ".join(sorted(missing))))
    else:
        print("ok %d - %s" % (n, what))


def main():
    runner, root = sys.argv[1], sys.argv[2]
    helptext = subprocess.run([runner, "--help"], capture_output=True, text=True,
                              timeout=30).stdout
    readme = open(root + "/README.md", encoding="utf-8").read()
    ops = open(root + "/docs/operations.md", encoding="utf-8").read()
    http = open(root + "/runner/ops/http.c", encoding="utf-8").read()
    metrics = open(root + "/runner/ops/metrics.c", encoding="utf-8").read().replace("\\\n", " ")

    routes = set(re.findall(r'strcmp\(url, "(/[a-z]*)"\)', http))
    check("the listener answers routes (%s)" % " ".join(sorted(routes)),
          set() if len(routes) >= 4 else {"routes"})
    for where, text in (("cairn-runner --help", helptext), ("README", readme),
                        ("docs/operations.md", ops)):
        check("%s names every HTTP route" % where,
              {r for r in routes if ("`%s`" % r) not in text and (" %s " % r) not in text
               and (" %s," % r) not in text and (" %s)" % r) not in text})

    variables = set(re.findall(r"\bCAIRN_[A-Z_]+\b", helptext))
    flags = set(re.findall(r"^\s+(--[a-z][a-z-]*)", helptext, re.M))
    check("cairn-runner --help lists its settings", set() if variables and flags else {"all"})
    check("the README names every setting's variable",
          {v for v in variables if ("`%s`" % v) not in readme})
    check("the README names every setting's flag", {f for f in flags if ("`%s`" % f) not in readme})

    series = set(re.findall(r'X\(\s*"(cairn_[a-z_]+)"', metrics))
    series |= set(re.findall(r'"(cairn_[a-z_]+)"', metrics))
    check("/metrics serves series (%d)" % len(series), set() if len(series) > 30 else {"series"})
    check("docs/operations.md's table names every series",
          {s for s in series if not re.search(r"\| `%s[`{]" % s, ops)})
    print("1..%d" % n)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
