#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Differential conformance test: random programs through `cairnctl exec` and through Python.

Generates programs in the Python-compatible part of the language (docs/language.md), seed
after seed: int, float, bool, string, list and dict expressions with every operator and the
Python-compatible builtins, float literals in all their forms (`1.e3`, `2.E-1`, `.5`, `3.`),
assignment with one or several targets (`a, = x`, `a, b = x`), trailing-comma lists
(`y = a,`), if/elif/else, for loops (including `for a, in pairs`), while, try/except with the
error types the expressions can raise, try/finally (with and without handlers, an error
raised in the finally, break and continue through one), and `raise` of built-in and declared
error types (`class
Odd(ValueError): pass`, `class Worse(Odd, LookupError): pass`) caught by a type or a base, or
re-raised by a bare `raise`. Each program runs twice: in Cairn (a real `cairnctl
exec` process) and as Python 3 after a mechanical translation (`fn main(input: [...]):` becomes
`def main(...):`). Both must agree exactly: the same value with the same types (1, 1.0 and True
differ; floats bit for bit), or the same error type.

Then the forms Python rejects must be compile errors in Cairn too (`cairnctl check`), and the
forms it accepts must compile.

  test_conformance.py CAIRNCTL [--programs N] [--seed S]
TAP output. Reproduce a failure with the seed it prints.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

INT64 = 2**63


class Gen:
    """One random program. Tracks which variables are definitely assigned and their types, so
    that the program compiles (Cairn checks definite assignment) and mostly type-checks (some
    errors are wanted, most runs should produce a value)."""

    def __init__(self, rng):
        self.r = rng
        self.vars = {"x": "ilist", "n": "int", "s": "str", "d": "dict"}
        self.count = 0
        self.lines = []

    def new(self):
        self.count += 1
        return f"v{self.count}"

    def pick(self, typ):
        names = [v for v, t in self.vars.items() if t == typ]
        return self.r.choice(names) if names else None

    # ---- expressions, by type; depth bounds size ----
    def float_lit(self):
        r = self.r
        i, f, e = r.randint(0, 99), r.randint(0, 99), r.randint(0, 3)
        return r.choice([f"{i}.{f}", f"{i}.", f"{i}.e{e}", f"{i}.E-{e}", f"{i}e{e}",
                         f".{f}", f"{i}.{f}e-{e}", f"{i}.E+{e}", f"0.{f}"])

    def int_e(self, depth):
        r = self.r
        v = self.pick("int")
        if depth <= 0 or r.random() < 0.3:
            return v if v and r.random() < 0.6 else str(r.randint(0, 100))
        a, b = self.int_e(depth - 1), self.int_e(depth - 1)
        forms = [
            lambda: f"({a} + {b})",
            lambda: f"({a} - {b})",
            lambda: f"({a} * {r.randint(-9, 9)})",  # a literal factor: values stay far from 2^63
            lambda: f"({a} // {b})",  # ZeroDivisionError when b is 0
            lambda: f"({a} % {b})",
            lambda: f"-{a}",
            lambda: f"abs({a})",
            lambda: f"len({self.list_e(depth - 1)})",
            lambda: f"min({a}, {b})" if r.random() < 0.5 else f"max([{a}, {b}, 3])",
            lambda: f"({a} if {self.bool_e(depth - 1)} else {b})",
            lambda: f"{self.list_e(depth - 1)}[{a}]",  # IndexError when out of range
            lambda: f"sum({self.list_e(depth - 1)})",
            lambda: f"int({self.float_e(depth - 1)})",
            lambda: f"len({self.str_e(depth - 1)})",
        ]
        return forms[r.randrange(len(forms))]()

    def float_e(self, depth):
        r = self.r
        v = self.pick("float")
        if depth <= 0 or r.random() < 0.3:
            return v if v and r.random() < 0.5 else self.float_lit()
        a, b = self.float_e(depth - 1), self.int_e(depth - 1)
        forms = [
            lambda: f"({a} + {b})",
            lambda: f"({a} - {self.float_e(depth - 1)})",
            lambda: f"({a} * {self.float_lit()})",
            lambda: f"({b} / {self.int_e(depth - 1)})",  # ZeroDivisionError when 0
            lambda: f"float({b})",
            lambda: f"round({a}, {r.randint(0, 3)})",
            lambda: f"({a} // {self.float_lit()})",
        ]
        return forms[r.randrange(len(forms))]()

    def bool_e(self, depth):
        r = self.r
        if depth <= 0 or r.random() < 0.2:
            return r.choice(["True", "False", f"{self.int_e(0)} > {self.int_e(0)}"])
        # The form is drawn before its operands, as it always was: a seed gives the same programs.
        forms = [
            lambda: f"({a} < {b} <= {self.int_e(depth - 1)})",
            lambda: f"({a} == {self.float_e(depth - 1)})",
            lambda: f"({self.bool_e(depth - 1)} and {self.bool_e(depth - 1)})",
            lambda: f"({self.bool_e(depth - 1)} or {self.bool_e(depth - 1)})",
            lambda: f"(not {self.bool_e(depth - 1)})",
            lambda: f"({a} in {self.list_e(depth - 1)})",
            lambda: f"({self.str_e(depth - 1)} not in {self.str_e(depth - 1)})",
            lambda: f"bool({a})",
        ]
        k = r.randrange(len(forms))
        a, b = self.int_e(depth - 1), self.int_e(depth - 1)
        return forms[k]()

    def str_e(self, depth):
        r = self.r
        v = self.pick("str")
        if depth <= 0 or r.random() < 0.3:
            return v if v and r.random() < 0.5 else r.choice(['"ab"', "'c'", '""', '"x\\ty"',
                                                            '"\\u00e9t\\u00e9"'])
        forms = [
            lambda: f"({self.str_e(depth - 1)} + {self.str_e(depth - 1)})",
            lambda: f"str({self.int_e(depth - 1)})",
            lambda: f"str({self.float_e(depth - 1)})",
            lambda: f"{self.str_e(depth - 1)}[{self.int_e(0)}:{self.int_e(0)}]",
            lambda: f"({r.choice(['ab', 'z'])!r} * {r.randint(0, 3)})",
            lambda: f"{self.str_e(depth - 1)}[{self.int_e(0)}]",  # IndexError when out of range
        ]
        return forms[r.randrange(len(forms))]()

    def list_e(self, depth):
        r = self.r
        v = self.pick("ilist")
        if depth <= 0 or r.random() < 0.3:
            if v and r.random() < 0.6:
                return v
            return "[" + ", ".join(str(r.randint(-5, 9)) for _ in range(r.randint(0, 4))) + "]"
        forms = [
            lambda: f"({self.list_e(depth - 1)} + {self.list_e(depth - 1)})",
            lambda: f"{self.list_e(depth - 1)}[{self.int_e(0)}:]",
            lambda: f"sorted({self.list_e(depth - 1)})",
            lambda: f"list(range({r.randint(-2, 6)}))",
            lambda: f"[{self.int_e(depth - 1)}, {self.int_e(depth - 1)},]",
            lambda: f"{self.list_e(depth - 1)}[:{self.int_e(0)}]",
        ]
        return forms[r.randrange(len(forms))]()

    def dict_e(self, depth):
        r = self.r
        v = self.pick("dict")
        if depth <= 0 or r.random() < 0.4:
            return v if v and r.random() < 0.5 else f'{{"a": {self.int_e(0)}, "b": 2}}'
        return f'({self.dict_e(depth - 1)} | {{"{r.choice("abc")}": {self.int_e(depth - 1)}}})'

    def expr(self, typ, depth=2):
        return {"int": self.int_e, "float": self.float_e, "bool": self.bool_e, "str": self.str_e,
                "ilist": self.list_e, "dict": self.dict_e}[typ](depth)

    # ---- statements ----
    def emit(self, ind, text):
        self.lines.append("    " * ind + text)

    def stmt(self, ind, depth):
        r = self.r
        k = r.randrange(15 if depth > 0 else 6)
        typ = r.choice(["int", "int", "float", "bool", "str", "ilist", "dict"])
        if k <= 2:
            v = self.new()
            self.emit(ind, f"{v} = {self.expr(typ)}")
            self.vars[v] = typ
        elif k == 3:
            v = self.new()  # a, = [e]: one item unpacked (or a list of another length: an error)
            items = [self.expr(typ, 1) for _ in range(r.choice([1, 1, 1, 2]))]
            self.emit(ind, f"{v}, = [{', '.join(items)}]")
            self.vars[v] = typ
        elif k == 4:
            a, b = self.new(), self.new()
            self.emit(ind, f"{a}, {b} = [{self.expr(typ, 1)}, {self.expr('int', 1)}]")
            self.vars[a], self.vars[b] = typ, "int"
        elif k == 5:
            v = self.new()  # a trailing comma: a one-item list (a tuple in Python, see below)
            self.emit(ind, f"{v} = {self.expr(typ, 1)},")
            self.vars[v] = "opaque"
        elif k == 6:
            v = self.new()
            self.emit(ind, f"{v} = {self.expr('int', 0)}")
            self.vars[v] = "int"
            self.emit(ind, f"if {self.bool_e(2)}:")
            self.emit(ind + 1, f"{v} = {self.int_e(2)}")
            if r.random() < 0.5:
                self.emit(ind, f"elif {self.bool_e(1)}:")
                self.emit(ind + 1, f"{v} += {self.int_e(1)}")
            self.emit(ind, "else:")
            self.block(ind + 1, depth - 1)
        elif k == 7:
            acc, it = self.new(), self.new()
            self.emit(ind, f"{acc} = 0")
            self.emit(ind, f"for {it} in {self.list_e(1)}:")
            self.emit(ind + 1, f"{acc} = {acc} + {it}")
            self.vars[acc] = "int"
        elif k == 8:
            acc, it = self.new(), self.new()
            self.emit(ind, f"{acc} = []")
            self.emit(ind, f"for {it}, in [[{self.int_e(1)}], [{self.int_e(1)}]]:")
            self.emit(ind + 1, f"{acc} = {acc} + [{it} * 2]")
            self.vars[acc] = "ilist"
        elif k == 9:
            v = self.new()
            self.emit(ind, f"{v} = -1")
            self.emit(ind, "try:")
            self.emit(ind + 1, f"{v} = {self.int_e(2)}")
            self.emit(ind, r.choice(["except ZeroDivisionError:", "except ArithmeticError:",
                                     "except (IndexError, ZeroDivisionError) as e:",
                                     "except LookupError:", "except:"]))
            self.emit(ind + 1, f"{v} = {self.int_e(0)}")
            self.vars[v] = "int"
        elif k == 10:
            i, acc = self.new(), self.new()
            self.emit(ind, f"{i} = 0")
            self.emit(ind, f"{acc} = {self.str_e(0)}")
            self.emit(ind, f"while {i} < {r.randint(0, 4)}:")
            self.emit(ind + 1, f"{i} += 1")
            self.emit(ind + 1, f"if {i} == 2:")
            self.emit(ind + 2, r.choice(["continue", "break", "pass"]))
            self.emit(ind + 1, f"{acc} = {acc} + str({i})")
            self.vars[i], self.vars[acc] = "int", "str"
        elif k == 12:
            v = self.new()
            self.emit(ind, f"{v} = -1")
            self.emit(ind, "try:")
            self.emit(ind + 1, f"if {self.bool_e(1)}:")
            self.emit(ind + 2, f"raise {r.choice(RAISED)}({self.str_e(0)})")
            self.emit(ind + 1, f"{v} = {self.int_e(1)}")
            self.emit(ind, f"except {r.choice(CAUGHT)}:")
            self.emit(ind + 1, f"{v} = {self.int_e(0)}")
            if r.random() < 0.3:
                self.emit(ind + 1, f"if {self.bool_e(0)}:")
                self.emit(ind + 2, "raise")
            self.vars[v] = "int"
        elif k == 13:
            v = self.new()  # try/finally, with or without handlers, maybe raising in the finally
            self.emit(ind, f"{v} = {self.str_e(0)}")
            self.emit(ind, "try:")
            self.emit(ind + 1, f"if {self.bool_e(1)}:")
            self.emit(ind + 2, f"raise {r.choice(RAISED)}({self.str_e(0)})")
            self.emit(ind + 1, f"{v} = {v} + str({self.int_e(1)})")
            if r.random() < 0.5:
                self.emit(ind, f"except {r.choice(CAUGHT)}:")
                self.emit(ind + 1, f"{v} = {v} + 'e'")
            self.emit(ind, "finally:")
            self.emit(ind + 1, f"{v} = {v} + 'f'")
            if r.random() < 0.2:
                self.emit(ind + 1, f"if {self.bool_e(0)}:")
                self.emit(ind + 2, f"raise {r.choice(RAISED)}('in finally')")
            self.vars[v] = "str"
        elif k == 14:
            i, acc = self.new(), self.new()  # break and continue through a finally
            self.emit(ind, f"{i} = 0")
            self.emit(ind, f"{acc} = {self.str_e(0)}")
            self.emit(ind, f"while {i} < {r.randint(0, 4)}:")
            self.emit(ind + 1, f"{i} += 1")
            self.emit(ind + 1, "try:")
            self.emit(ind + 2, f"if {i} == {r.randint(1, 3)}:")
            self.emit(ind + 3, r.choice(["continue", "break", "pass"]))
            self.emit(ind + 2, f"{acc} = {acc} + str({i})")
            self.emit(ind + 1, "finally:")
            self.emit(ind + 2, f"{acc} = {acc} + 'f'")
            self.vars[i], self.vars[acc] = "int", "str"
        else:
            i, v = self.new(), self.new()
            self.emit(ind, f"{v} = []")
            self.emit(ind, f"for {i}, {self.new()} in enumerate({self.str_e(1)}):")
            self.emit(ind + 1, f"{v} = {v} + [{i}]")
            self.vars[v] = "ilist"

    def block(self, ind, depth):
        saved = dict(self.vars)
        for _ in range(self.r.randint(1, 2)):
            self.stmt(ind, depth)
        self.vars = saved  # names bound only in a branch are not definitely assigned
        self.emit(ind, "pass")

    def program(self):
        for _ in range(self.r.randint(2, 7)):
            self.stmt(1, 1)
        out = [v for v in self.vars if v.startswith("v")]
        if self.r.random() < 0.3 and out:
            self.emit(1, f"return {out[-1]},")  # a trailing comma on return: a list of one
        else:
            self.emit(1, "return [" + ", ".join(out) + "]")
        return CLASSES + "fn main(input: [x, n, s, d]):\n" + "\n".join(self.lines) + "\n"


# The error types the programs declare, raise and catch.
CLASSES = "class Odd(ValueError):\n    pass\n\n\nclass Worse(Odd, LookupError):\n    'worse'\n\n\n"
RAISED = ["ValueError", "KeyError", "RuntimeError", "Odd", "Worse", "ZeroDivisionError"]
CAUGHT = ["ValueError", "LookupError", "Odd", "Worse", "KeyError", "Exception",
          "(Odd, RuntimeError)", "ArithmeticError"]


def to_python(src):
    return src.replace("fn main(input: [x, n, s, d]):", "def main(x, n, s, d):", 1)


def typed(v):
    """A value with its types spelled out: 1, 1.0 and True compare unequal; tuples are lists."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, float):
        return ("float", v.hex())
    if isinstance(v, (list, tuple)):
        return ("list", [typed(x) for x in v])
    if isinstance(v, dict):
        return ("dict", [(k, typed(x)) for k, x in v.items()])
    return (type(v).__name__, v)


def fits(v):
    """Cairn ints are int64: a Python result outside that range is not comparable."""
    if isinstance(v, bool):
        return True
    if isinstance(v, int):
        return -INT64 <= v < INT64
    if isinstance(v, (list, tuple)):
        return all(fits(x) for x in v)
    if isinstance(v, dict):
        return all(fits(x) for x in v.values())
    return True


def run_python(src, inp):
    ns = {}
    exec(compile(to_python(src), "<program>", "exec"), ns)
    try:
        return "value", ns["main"](**inp)
    except Exception as e:  # the program's own error, compared by type
        return "error", type(e).__name__


def run_cairn(ctl, path, inp):
    r = subprocess.run([ctl, "exec", path, "--input", json.dumps(inp), "--json"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode in (0, 4):
        doc = json.loads(r.stdout)
        if doc["status"] == "completed":
            return "value", doc["result"]
        if doc["status"] == "failed":
            return "error", doc["error"]["type"]
    return "crash", f"exit {r.returncode}: {r.stderr.strip()}"


# Forms Python rejects, each a compile error in Cairn too; and the forms next to them that both
# accept. Every one is checked with Python's own compiler first, so the list cannot drift.
REJECTED = [
    "    return 1.x\n",
    "    return 1.e5x\n",
    "    return 1.e\n",
    "    try:\n        pass\n    except as e:\n        pass\n",
    "    a, += 1\n",
    "    return 012\n",
    "    for , in x:\n        pass\n",
    "    try:\n        pass\n    y = 1\n",
    "    try:\n        pass\n    finally:\n        pass\n    except:\n        pass\n",
]
ACCEPTED = [
    "    return 1.e3\n",
    "    return 2.E-1 + 0.e0\n",
    "    return x,\n",
    "    y = x,\n    return y\n",
    "    a, = x\n    return a\n",
    "    for a, in x:\n        pass\n",
    "    try:\n        pass\n    except (KeyError, IndexError) as e:\n        pass\n",
    "    try:\n        pass\n    finally:\n        pass\n",
    "    try:\n        y = 1\n    except KeyError:\n        y = 2\n    finally:\n        pass\n"
    "    return y\n",
    "\ufeff",  # a byte-order mark, then the rest of the file
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cairnctl")
    ap.add_argument("--programs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CAIRN_CONFORMANCE_SEED", 1)))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cairn-conformance-")
    failures = 0
    ran = {"value": 0, "error": 0}

    def ok(good, what):
        nonlocal failures
        failures += not good
        print(f"{'ok' if good else 'not ok'} - {what}", flush=True)

    print(f"1..{3 + len(REJECTED) + len(ACCEPTED)}")
    mismatches, bad = [], 0
    for i in range(args.programs):
        seed = args.seed * 1_000_003 + i
        rng = random.Random(seed)
        src = Gen(rng).program()
        inp = {"x": [rng.randint(-3, 9) for _ in range(rng.randint(0, 4))],
               "n": rng.randint(-5, 5), "s": rng.choice(["", "abc", "h\u00e9"]),
               "d": {"a": rng.randint(0, 3), "k": 7}}
        path = os.path.join(tmp, "p.cairn")
        with open(path, "w") as f:
            f.write(src)
        want = run_python(src, inp)
        if want[0] == "value" and not fits(want[1]):
            continue
        got = run_cairn(args.cairnctl, path, inp)
        ran[want[0]] += 1
        same = (got[0] == want[0] and (typed(got[1]) == typed(want[1]) if got[0] == "value"
                                        else got[1] == want[1]))
        if not same:
            bad += 1
            if len(mismatches) < 5:
                mismatches.append(f"seed {seed}: Cairn {got}, Python {want}, input "
                                  f"{json.dumps(inp)}\n{src}")
    for m in mismatches:
        print("# " + m.replace("\n", "\n# "))
    ok(bad == 0, f"{ran['value'] + ran['error']} random programs agree with Python "
                 f"({bad} differ)")
    # Both outcomes must be exercised, or the generator has drifted into a corner.
    ok(ran["value"] >= args.programs // 3, f"{ran['value']} of them returned a value")
    ok(ran["error"] >= args.programs // 20, f"{ran['error']} of them raised an error")

    for body in REJECTED:
        src = "fn main(input: [x]):\n" + body
        try:
            compile(to_python(src).replace("def main(x, n, s, d)", "def main(x)")
                    .replace("fn main(input: [x]):", "def main(x):"), "<form>", "exec")
            py_rejects = False
        except SyntaxError:
            py_rejects = True
        path = os.path.join(tmp, "r.cairn")
        with open(path, "w") as f:
            f.write(src)
        r = subprocess.run([args.cairnctl, "check", path], capture_output=True, text=True)
        ok(py_rejects and r.returncode != 0 and "error" in r.stderr,
           f"rejected by both: {body.strip()!r} (Cairn: {r.stderr.strip().splitlines()[:1]})")
    for body in ACCEPTED:
        src = ("\ufefffn main(input: [x]):\n    pass\n" if body == "\ufeff"
               else "fn main(input: [x]):\n" + body)
        compile(src.lstrip("\ufeff").replace("fn main(input: [x]):", "def main(x):"), "<form>",
                "exec")  # Python accepts it, or this test is wrong
        path = os.path.join(tmp, "a.cairn")
        with open(path, "w", encoding="utf-8") as f:
            f.write(src)
        r = subprocess.run([args.cairnctl, "check", path], capture_output=True, text=True)
        ok(r.returncode == 0, f"accepted by both: {body.strip()!r} {r.stderr.strip()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
