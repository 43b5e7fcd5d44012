#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite install): what `meson install` puts on a machine, used as a user would.

- `meson install --no-rebuild --destdir TMP` from this build: the three programs (each answers
  --version with the project's version), the SDK's headers, libcairn-worker.a and its .pc file
  (the internal libraries' dependencies as Requires.private/Libs.private, nothing pointing into
  the build tree), a man page per program made from its --help (when help2man was found), and
  both systemd units with the install prefix's bindir (checked by `systemd-analyze verify`
  when systemd is installed);
- the SDK's public path: its headers under include/cairn/, including each other as
  <cairn/...>, and a .pc whose Cflags are -I${includedir} alone, so that `#include
  <cairn/worker.h>` works and the source tree's folder names (<worker.h>, <ir/value.h>) are
  not include paths;
- the archive holds the SDK and nothing it does not use (nm): every function the installed
  headers declare is defined in it, every member is reached from those functions through the
  symbols the members call (so no object of the compiler or of ir/base the SDK does not need
  is shipped), and every global symbol is in a Cairn namespace (cairn_, cn_, ir_, wp_);
- a tiny worker (tests/integration/install/tiny_worker.c, which includes <cairn/worker.h> and
  nothing of the tree) compiles and links with this build's compiler and
  `pkg-config --cflags --libs --static libcairn-worker` alone, pointed at the installed .pc;
- with CAIRN_TEST_DATABASE_URL: the installed cairnctl migrates a fresh database and registers
  a workflow, the installed cairn-runner runs it, and the tiny worker serves its action: 21
  doubled comes back as 42; both stop with status 0 on SIGTERM.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT BUILD_ROOT MAN(yes|no) SANITIZE CC...
(the build's programs only feed the shared helpers; the installed copies are what run). TAP.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)



def check(what, ok, detail=""):
    e2e.check(what, ok, detail.replace("\n", " | "))  # one TAP line, whatever the detail

ROOT, BUILD, MAN, SANITIZE = sys.argv[4:8]
CC = sys.argv[8:]
PROGRAMS = ["cairn-runner", "cairn-worker", "cairnctl"]
TINY_WORKFLOW = """# tiny: doubles n through the installed SDK's tiny worker.
fn main(input: [n], output: [r]):
    r = @tiny.double(n=n)
    return r
"""


SDK_HEADERS = ["cairn/worker.h", "cairn/ir/value.h", "cairn/ir/base/err.h", "cairn/ir/base/buf.h",
               "cairn/ir/base/log.h"]
# Where a public symbol of the archive may start: the SDK, the base, the values, the codec.
NAMESPACES = ("cairn_", "cn_", "ir_", "wp_")


def declared_functions(paths):
    """The functions the headers at paths declare: name( outside comments and directives."""
    names = set()
    for p in paths:
        text = open(p).read()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"//[^\n]*", " ", text)
        text = text.replace("\\\n", " ")
        text = "\n".join(ln for ln in text.split("\n") if not ln.lstrip().startswith("#"))
        names |= set(re.findall(r"\b([a-z][a-z0-9_]*)\(", text))
    return names


def archive_symbols(nm, archive):
    """{member: (defined global symbols, undefined symbols)} from `nm -A`."""
    r = run([nm, "-A", archive])
    members = {}
    for line in r.stdout.splitlines():
        parts = line.split(":", 2)
        fields = parts[2].split() if len(parts) == 3 else []
        if len(fields) < 2:
            continue
        defs, undefs = members.setdefault(parts[1], (set(), set()))
        kind, name = fields[-2], fields[-1]
        if kind == "U":
            undefs.add(name)
        elif kind.isupper():
            defs.add(name)
    return members


def introspect(what):
    out = subprocess.run(["meson", "introspect", BUILD, what], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=kw.pop("timeout", 120), **kw)


def pc_fields(path):
    fields = {}
    with open(path) as f:
        for line in f:
            if ": " in line:
                k, v = line.rstrip("\n").split(": ", 1)
                fields[k] = v
    return fields


class Layout:
    """Where the install put things, inside the destdir."""

    def __init__(self, dest):
        opts = {o["name"]: o["value"] for o in introspect("--buildoptions")}
        self.prefix = opts["prefix"]
        self.version = introspect("--projectinfo")["version"]
        self.dest = dest

        def under(opt):
            d = opts[opt]
            return d if os.path.isabs(d) else os.path.join(self.prefix, d)

        self.bindir = under("bindir")
        self.libdir = under("libdir")
        self.includedir = under("includedir")
        self.mandir = under("mandir")
        unitdir = opts.get("systemdunitdir") or ""
        self.unitdir = unitdir or os.path.join(self.prefix, "lib/systemd/system")

    def d(self, path):
        return self.dest + path


def check_files(lay):
    for prog in PROGRAMS:
        path = lay.d(os.path.join(lay.bindir, prog))
        r = run([path, "--version"]) if os.access(path, os.X_OK) else None
        check(f"{prog} installed and says its version",
              r is not None and r.returncode == 0 and r.stdout == f"{prog} {lay.version}\n",
              r.stdout + r.stderr if r is not None else f"{path} missing")
    for h in SDK_HEADERS:
        check(f"header {h} installed", os.path.isfile(lay.d(os.path.join(lay.includedir, h))))
    check("libcairn-worker.a installed",
          os.path.isfile(lay.d(os.path.join(lay.libdir, "libcairn-worker.a"))))
    pc = lay.d(os.path.join(lay.libdir, "pkgconfig", "libcairn-worker.pc"))
    check("libcairn-worker.pc installed", os.path.isfile(pc))
    if os.path.isfile(pc):
        f = pc_fields(pc)
        text = open(pc).read()
        check(".pc: Libs names only the installed library",
              f.get("Libs") == "-L${libdir} -lcairn-worker", f.get("Libs", ""))
        check(".pc: nng and what it needs are Libs.private",
              all(x in f.get("Libs.private", "").split() for x in ["-lnng", "-lpthread", "-lm"]),
              f.get("Libs.private", ""))
        check(".pc: msgpack and jansson are Requires.private",
              all(x in f.get("Requires.private", "") for x in ["msgpack", "jansson"]) and
              "Requires" not in f, text)
        check(".pc: nothing points into the build or source tree",
              BUILD not in text and ROOT not in text, text)
        check(".pc: Cflags are -I${includedir} alone (headers as <cairn/...>)",
              f.get("Cflags") == "-I${includedir}", f.get("Cflags", ""))
    if MAN == "yes":
        for prog in PROGRAMS:
            page = lay.d(os.path.join(lay.mandir, "man1", prog + ".1"))
            body = open(page).read() if os.path.isfile(page) else ""
            check(f"man page {prog}.1 installed, made from --help", ".SH NAME" in body and
                  (prog == "cairnctl" or "log\\-file" in body), page)
    else:
        check("man pages # SKIP help2man was not found at setup", True)


def check_headers(lay, tmp):
    """The public path: <cairn/...> with -I${includedir} alone, and nothing else."""
    paths = [lay.d(os.path.join(lay.includedir, h)) for h in SDK_HEADERS]
    quoted = [f"{p}: {ln.strip()}" for p in paths if os.path.isfile(p) for ln in open(p)
              if ln.startswith("#include \"")]
    check("installed headers include each other as <cairn/...>", quoted == [],
          "\n".join(quoted))
    pcdir = lay.d(os.path.join(lay.libdir, "pkgconfig"))
    env = dict(os.environ, PKG_CONFIG_PATH=pcdir, PKG_CONFIG_SYSROOT_DIR=lay.dest)
    cflags = run(["pkg-config", "--cflags", "libcairn-worker"], env=env).stdout.split()

    def compiles(include):
        src = os.path.join(tmp, "include_check.c")
        with open(src, "w") as f:
            f.write(f"#include {include}\nint main(void) {{ return CN_OK; }}\n")
        r = run([*CC, "-std=c11", "-fsyntax-only", *cflags, src])
        return r.returncode == 0, r.stderr[-2000:]

    ok, err = compiles("<cairn/worker.h>")
    check("#include <cairn/worker.h> compiles with pkg-config --cflags alone", ok, err)
    for internal in ["<worker.h>", "<ir/value.h>"]:
        ok, err = compiles(internal)
        check(f"{internal} is not an include path of the installed SDK", not ok, err)


def check_archive(lay):
    """libcairn-worker.a holds the SDK and what it uses, nothing more."""
    archive = lay.d(os.path.join(lay.libdir, "libcairn-worker.a"))
    nm = shutil.which("nm")
    if nm is None or not os.path.isfile(archive):
        check("archive members # SKIP nm or the archive is missing", True)
        return
    members = archive_symbols(nm, archive)
    owner = {s: m for m, (defs, _) in members.items() for s in defs}
    declared = declared_functions(lay.d(os.path.join(lay.includedir, h)) for h in SDK_HEADERS)
    missing = sorted(declared - owner.keys())
    check("archive: every function the installed headers declare is in it", missing == [],
          " ".join(missing))
    reached = {owner[s] for s in declared if s in owner}
    todo = list(reached)
    while todo:
        for s in members[todo.pop()][1]:
            m = owner.get(s)
            if m is not None and m not in reached:
                reached.add(m)
                todo.append(m)
    unused = sorted(set(members) - reached)
    check("archive: every member is used by the SDK (no compiler or other internal object)",
          unused == [] and len(members) > 0, "not reached: " + " ".join(unused))
    foreign = sorted(s for s in owner if not s.startswith(NAMESPACES))
    check("archive: every global symbol is in a Cairn namespace", foreign == [],
          " ".join(foreign))


def check_units(lay, tmp):
    bindir = lay.bindir.rstrip("/") + "/"
    copies = []
    for unit, prog in [("cairn-runner.service", "cairn-runner"),
                       ("cairn-worker.service", "cairn-worker")]:
        path = lay.d(os.path.join(lay.unitdir, unit))
        text = open(path).read() if os.path.isfile(path) else ""
        check(f"{unit} installed with the prefix's bindir",
              f"ExecStart={bindir}{prog}" in text and "Type=notify" in text and
              "@bindir@" not in text, path)
        # The same unit with ExecStart in the destdir, so that verify finds the program.
        copy = os.path.join(tmp, unit)
        with open(copy, "w") as f:
            f.write(text.replace(f"={bindir}", "=" + lay.d(bindir)))
        copies.append(copy)
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        check("systemd-analyze verify # SKIP systemd-analyze is not installed", True)
        return
    r = run([analyze, "verify", "--man=no", *copies])
    check("systemd-analyze verify: no error, no warning", r.returncode == 0 and r.stderr == "",
          r.stderr)


def build_tiny(lay, tmp):
    pcdir = lay.d(os.path.join(lay.libdir, "pkgconfig"))
    env = dict(os.environ, PKG_CONFIG_PATH=pcdir, PKG_CONFIG_SYSROOT_DIR=lay.dest)
    r = run(["pkg-config", "--cflags", "--libs", "--static", "libcairn-worker"], env=env)
    check("pkg-config finds libcairn-worker", r.returncode == 0, r.stderr)
    flags = r.stdout.split()
    exe = os.path.join(tmp, "tiny-worker")
    san = [f"-fsanitize={SANITIZE}"] if SANITIZE not in ("", "none") else []
    r = run([*CC, "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", *san,
             "-o", exe, os.path.join(ROOT, "tests/integration/install/tiny_worker.c"), *flags])
    check("a tiny worker compiles and links against the installed SDK alone",
          r.returncode == 0, r.stderr[-2000:])
    if r.returncode != 0:
        return None
    r = run([exe, "--version"])
    check("the tiny worker runs", r.returncode == 0 and r.stdout == "tiny-worker 1\n",
          r.stdout + r.stderr)
    return exe


def run_db(lay, tiny, url, env, tmp):
    ctl = lay.d(os.path.join(lay.bindir, "cairnctl"))
    r = run([ctl, "migrate"], env=env)
    check("installed cairnctl migrates", r.returncode == 0, r.stderr)
    wf = os.path.join(tmp, "tiny.cairn")
    with open(wf, "w") as f:
        f.write(TINY_WORKFLOW)
    r = run([ctl, "register", wf], env=env)
    check("installed cairnctl registers a workflow", r.returncode == 0, r.stderr)
    sock = f"ipc://{tmp}/w.sock"
    runner = e2e.Proc("runner", [lay.d(os.path.join(lay.bindir, "cairn-runner")),
                                 "--worker-listen", sock, "--poll-interval-ms", "100",
                                 "--shutdown-grace-ms", "2000"], env, tmp)
    worker = e2e.Proc("tiny-worker", [tiny, sock], env, tmp)
    r = run([ctl, "run", "tiny", "--input", '{"n": 21}', "--wait", "--timeout", "60"], env=env,
            timeout=90)
    check("the installed runner runs it, the tiny worker serves the action: 42",
          r.returncode == 0 and r.stdout.strip() == "42", r.stdout + r.stderr)
    check("the tiny worker stops on SIGTERM with status 0", worker.term() == 0, worker.text())
    check("the installed runner stops on SIGTERM with status 0", runner.term() == 0,
          runner.text()[-2000:])


def main():
    tmp = tempfile.mkdtemp(prefix="cairn-install-")
    dest = os.path.join(tmp, "dest")
    try:
        r = run(["meson", "install", "-C", BUILD, "--no-rebuild", "--destdir", dest],
                timeout=300)
        check("meson install --no-rebuild --destdir", r.returncode == 0, r.stdout + r.stderr)
        lay = Layout(dest)
        check_files(lay)
        check_headers(lay, tmp)
        check_archive(lay)
        check_units(lay, tmp)
        tiny = build_tiny(lay, tmp)
        if tiny is not None and e2e.BASE:
            return e2e.main_in_fresh_db("install", lambda url, env, t: run_db(lay, tiny, url,
                                                                              env, t))
        if not e2e.BASE:
            check("runs a workflow # SKIP CAIRN_TEST_DATABASE_URL is not set", True)
    except Exception as ex:
        check("the test ran to its end", False, repr(ex))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"1..{e2e.n_checks}")
    return 1 if e2e.failures else 0


if __name__ == "__main__":
    sys.exit(main())
