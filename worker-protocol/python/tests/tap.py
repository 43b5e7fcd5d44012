# SPDX-License-Identifier: MIT
"""A pytest plugin that reports in TAP (one line per test), so meson counts each test in
./scripts/test's closing line. Loaded with `-p tap` (and `-p no:terminal`)."""
import sys

_n = 0
_failed = []


def _out(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def pytest_runtest_logreport(report):
    global _n
    name = report.nodeid.split("::", 1)[-1]
    if report.when == "setup" and report.skipped:
        _n += 1
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else "skipped"
        _out(f"ok {_n} - {name} # SKIP {reason}")
    elif report.when == "call" or (report.when == "setup" and report.failed):
        _n += 1
        if report.passed:
            _out(f"ok {_n} - {name}")
        else:
            _out(f"not ok {_n} - {name}")
            for line in str(report.longrepr).splitlines()[-40:]:
                _out("# " + line)
    elif report.when == "teardown" and report.failed:
        _n += 1
        _out(f"not ok {_n} - {name} (teardown)")
        for line in str(report.longrepr).splitlines()[-40:]:
            _out("# " + line)


def pytest_sessionfinish(session, exitstatus):
    _out(f"1..{_n}")
