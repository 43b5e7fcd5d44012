#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generates tests/unit/ir/eval_cases.txt: Cairn expressions with the results Python 3.11 gives.

Each case is a Cairn expression that is also Python syntax. The script parses it with Python's
`ast`, rewrites the few constructs whose Cairn meaning differs from Python's (see SHIMS below),
evaluates it with the same variable bindings the C test uses, and writes one line per case:

    EXPR <TAB> V <TAB> json     the value, as JSON (1, 1.0 and true stay distinct; floats are
                                Python's shortest repr, so they round-trip bit for bit)
    EXPR <TAB> X <TAB> json     the same, and the value is an error value (flag set)
    EXPR <TAB> R <TAB> repr     a value JSON cannot carry (inf, nan): compared through repr()
    EXPR <TAB> E <TAB> Type <TAB> message   the expression raises

Every difference from plain Python is one of the documented deviations in ir/eval.h, and each
shim names it. Run from anywhere: python3 tests/unit/ir/gen_eval_cases.py (needs Python 3.11:
error messages changed in 3.12). Review the diff of eval_cases.txt before committing.
"""
import ast
import json
import math
import os
import re
import sys
import warnings

if sys.version_info[:2] != (3, 11):
    sys.exit("gen_eval_cases.py needs Python 3.11 (found %d.%d)" % sys.version_info[:2])

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
MAX_ITEMS = 10 * 1000 * 1000  # IR_EVAL_MAX_ITEMS
MAX_STR = 64 << 20  # IR_EVAL_MAX_STR
OVERFLOW = "integer overflow: result does not fit in 64 bits"

# Error values are dicts with a flag in Cairn; a dict subclass named 'dict' keeps Python's
# messages ("... not 'dict'") identical.
ErrDict = type("dict", (dict,), {})


def tn(v):
    return type(v).__name__


def chk(v):
    """Cairn ints are int64 (eval.h: OverflowError instead of a bigint)."""
    if type(v) is int and not INT_MIN <= v <= INT_MAX:
        raise OverflowError(OVERFLOW)
    return v


def too_many():
    return ValueError("result too large: more than %d items" % MAX_ITEMS)


def too_long():
    return ValueError("result too large: more than %d bytes" % MAX_STR)


def new_list(xs):
    xs = list(xs)
    if len(xs) > MAX_ITEMS:
        raise too_many()
    return xs


def iterable(v):
    """What Cairn iterates: lists, strings (characters), dicts (keys)."""
    if not isinstance(v, (list, str, dict)):
        raise TypeError("'%s' object is not iterable" % tn(v))
    return list(v)


# ---- SHIMS: the constructs whose Cairn meaning is not Python's ----

def s_bin(op, x, y):
    if op == "|":  # dict merge only (eval.h)
        if isinstance(x, dict) and isinstance(y, dict):
            r = dict(x)
            r.update(y)
            return r
        raise TypeError("unsupported operand type(s) for |: '%s' and '%s'" % (tn(x), tn(y)))
    if op == "%" and isinstance(x, str):  # no printf-style formatting (eval.h)
        raise TypeError("unsupported operand type(s) for %%: 'str' and '%s'" % tn(y))
    if op == "*":  # size limit before Python would allocate
        seq, n = (x, y) if isinstance(x, (str, list)) else (y, x)
        if isinstance(seq, (str, list)) and type(n) in (int, bool) and n > 0:
            size = len(seq.encode()) if isinstance(seq, str) else len(seq)
            if size * n > (MAX_STR if isinstance(seq, str) else MAX_ITEMS):
                raise too_long() if isinstance(seq, str) else too_many()
    if op == "+" and type(x) is type(y) and isinstance(x, (str, list)):
        if isinstance(x, str) and len(x.encode()) + len(y.encode()) > MAX_STR:
            raise too_long()
        if isinstance(x, list) and len(x) + len(y) > MAX_ITEMS:
            raise too_many()
    ops = {
        "+": lambda: x + y,
        "-": lambda: x - y,
        "*": lambda: x * y,
        "/": lambda: x / y,
        "//": lambda: x // y,
        "%": lambda: x % y,
    }
    return chk(ops[op]())


def s_neg(x):
    return chk(-x)


def s_attr(x, name):  # x.f is x["f"] on dicts; Cairn has no AttributeError (eval.h)
    if isinstance(x, dict):
        if name in x:
            return x[name]
        raise KeyError(name)
    raise TypeError("'%s' object has no attribute '%s'" % (tn(x), name))


def s_dict(*kv):  # all operands first, then the str-key check (eval.h)
    d = {}
    for i in range(0, len(kv), 2):
        if type(kv[i]) is not str:
            raise TypeError("dict keys must be strings, not %s" % tn(kv[i]))
    for i in range(0, len(kv), 2):
        d[kv[i]] = kv[i + 1]
    return d


# Builtins: lists where Python returns iterators, int64 results, size limits.

def b_range(*a):
    r = range(*a)  # Python's own type and zero-step errors
    n = max(0, (r.stop - r.start + r.step - (1 if r.step > 0 else -1)) // r.step)
    if n > MAX_ITEMS:
        raise too_many()
    return list(r)


def b_enumerate(xs, start=0):
    e = enumerate(xs, start)  # Python's own argument errors, in its order
    return new_list([chk(i), x] for i, x in e)


def b_zip(*xs):
    return new_list(list(t) for t in zip(*xs))


def b_sum(xs, *start):
    it = iter(iterable(xs))
    if start and isinstance(start[0], str):
        sum([], start[0])  # Python's own message
    acc = start[0] if start else 0
    for x in it:
        acc = s_bin("+", acc, x)  # each step is int64-checked (eval.h)
    return acc


def b_abs(x):
    return chk(abs(x))


def b_round(*a):
    return chk(round(*a))


def b_int(*a):
    return chk(int(*a))


def b_list(*a):
    return new_list(iterable(a[0])) if a else []


def b_sorted(xs):
    return sorted(iterable(xs))


def b_view(name, f):
    def view(d):
        if not isinstance(d, dict):
            raise TypeError("%s() argument must be a dict, not '%s'" % (name, tn(d)))
        return f(d)

    return view


def b_isexception(x):
    return isinstance(x, ErrDict)


def b_str(*a):
    return str(*a)


BUILTINS = {
    "len": len,
    "range": b_range,
    "enumerate": b_enumerate,
    "zip": b_zip,
    "min": min,
    "max": max,
    "sum": b_sum,
    "abs": b_abs,
    "round": b_round,
    "str": b_str,
    "int": b_int,
    "float": float,
    "bool": bool,
    "sorted": b_sorted,
    "list": b_list,
    "keys": b_view("keys", lambda d: list(d.keys())),
    "values": b_view("values", lambda d: list(d.values())),
    "items": b_view("items", lambda d: [[k, v] for k, v in d.items()]),
    "isexception": b_isexception,
}

BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
          ast.Mod: "%", ast.BitOr: "|"}


class Shim(ast.NodeTransformer):
    """Routes Cairn constructs through the shims above; the rest stays Python."""

    @staticmethod
    def call(name, args):
        return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=[])

    def visit_BinOp(self, n):
        self.generic_visit(n)
        return self.call("s_bin", [ast.Constant(BINOPS[type(n.op)]), n.left, n.right])

    def visit_UnaryOp(self, n):
        self.generic_visit(n)
        if isinstance(n.op, ast.USub):
            return self.call("s_neg", [n.operand])
        assert isinstance(n.op, ast.Not)
        return n

    def visit_Tuple(self, n):  # `(a, b)` makes a list: Cairn has no tuples
        self.generic_visit(n)
        return ast.List(elts=n.elts, ctx=ast.Load())

    def visit_Attribute(self, n):
        self.generic_visit(n)
        return self.call("s_attr", [n.value, ast.Constant(n.attr)])

    def visit_Dict(self, n):
        self.generic_visit(n)
        args = []
        for k, v in zip(n.keys, n.values):
            args += [k, v]
        return self.call("s_dict", args)

    def visit_Call(self, n):
        self.generic_visit(n)
        assert isinstance(n.func, ast.Name) and n.func.id in BUILTINS and not n.keywords, n
        n.func = ast.Name(id="b_" + n.func.id, ctx=ast.Load())
        return n


def env():
    e = {"s_bin": s_bin, "s_neg": s_neg, "s_attr": s_attr, "s_dict": s_dict}
    for k, f in BUILTINS.items():
        e["b_" + k] = f
    # The bindings, identical to the C test's (test_eval.c, t_env_init).
    e["a"] = {"k": "v", "n": 2, "l": [1, 2, 3], "d": {"x": 1.5}}
    e["b"] = [3, 1, 2]
    e["c"] = "héllo"
    e["e"] = ErrDict(type="KeyError", message="'k'", bases=["LookupError", "Exception"],
                     details=None)
    return e


def evaluate(src):
    tree = Shim().visit(ast.parse(src, mode="eval"))
    ast.fix_missing_locations(tree)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = compile(tree, "<case>", "eval")
    return eval(code, {"__builtins__": {}}, env())


def finite(v):
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, list):
        return all(finite(x) for x in v)
    if isinstance(v, dict):
        return all(finite(x) for x in v.values())
    return True


def no_nested_error(v, top=True):
    if isinstance(v, ErrDict) and not top:
        return False
    if isinstance(v, list):
        return all(no_nested_error(x, False) for x in v)
    if isinstance(v, dict):
        return all(no_nested_error(x, False) for x in v.values())
    return True


def line_for(src):
    assert "\t" not in src and "\n" not in src, src
    # Python reads "\07" as one octal escape, Cairn as NUL then "7": write "\u0000" there.
    assert not re.search(r"\\0[0-7]", src), src
    try:
        v = evaluate(src)
    except Exception as x:  # noqa: BLE001 - every Python error is an expected outcome
        msg = str(x)
        if isinstance(x, KeyError):
            msg = repr(x.args[0])  # KeyError's str() is the repr of the key
        assert "\t" not in msg and "\n" not in msg, (src, msg)
        return "%s\tE\t%s\t%s" % (src, type(x).__name__, msg)
    assert not isinstance(v, tuple), (src, v)
    assert no_nested_error(v), src
    if not finite(v):
        return "%s\tR\t%s" % (src, repr(v))
    return "%s\t%s\t%s" % (src, "X" if isinstance(v, ErrDict) else "V",
                           json.dumps(v, ensure_ascii=False))


INF = 'float("inf")'
NAN = 'float("nan")'
MAX = "9223372036854775807"
MIN = "-9223372036854775808"

CASES = [
    # ---- literals, names, displays ----
    "1", "-1", "0", "1.5", "-0.0", ".5", "1.", "1e3", "2.5e-3", "1e16", '"s"', "'it\\'s'",
    '"tab\\there"', '"\\u00e9"', '"nul\\0"', "True", "False", "None", MAX, MIN,
    "[]", '[1, 2.5, "x", None, True]', "[[], [[]]]", "{}", '{"a": 1, "b": [2]}',
    '{"a": 1, "a": 2}', '{"a": 1, "b": 2, "a": 3}', "{b[0]: 2}", "{a.d: 1}", '{"a": 1, a.d.x: 2}',
    '{c: 1, "k": b, c: 2}',
    '{"a": 1 // 0}', "{[1]: 1 // 0}", "[1, 1 // 0]", "a", "b", "c", "e", "[a, b]",
    '{"e": 1} | {"f": c}', "(1, 2)",
    # ---- x.field ----
    "a.k", "a.n", "a.l", "a.d.x", "a.missing", "b.k", "c.upper", "e.type", "e.message",
    "e.bases", "e.details", "None.x", "(1).real", '{"a": 1}.a',
    # ---- indexing ----
    "b[0]", "b[-1]", "b[2]", "b[3]", "b[-3]", "b[-4]", "b[True]", "b[False]", "b[1.0]",
    'b["0"]', "b[None]", "b[[0]]", "b[" + MAX + "]", "b[" + MIN + "]", "c[0]", "c[1]",
    "c[-1]", "c[4]", "c[5]", "c[-5]", "c[-6]", "c[1.5]", "c[None]", 'c["a"]', '"日本語"[1]',
    '"😀a"[0]', '"😀a"[1]', '"😀a"[-1]', '"😀a"[-2]', '""[0]', "[][0]", "[][-1]", 'a["k"]',
    'a["zz"]', 'a[""]', "a[1]", "a[1.5]", "a[None]", "a[True]", "a[[1]]", "a[{}]", "5[0]",
    "None[0]", "True[0]", "1.5[0]", 'e["type"]', "e[0]", 'a["l"][-1]', "[[1, 2], [3]][0][1]",
    "b[1 // 0]", "(1 // 0)[0]", "[1][5] + (1 // 0)",
    # ---- slicing ----
    "b[0:2]", "b[1:]", "b[:2]", "b[:]", "b[-2:]", "b[:-1]", "b[-100:100]", "b[5:]", "b[2:1]",
    "b[-1:-3]", "b[None:None]", "b[True:]", "b[:False]", "b[1.0:]", 'b[:"a"]', "b[:[1]]",
    "b[" + MAX + ":]", "b[" + MIN + ":]", "b[:" + MIN + "]", "b[3:3]", "b[0:0]", "c[1:3]",
    "c[-3:]", "c[:0]", "c[10:20]", "c[-20:2]", "c[:]", '"日本語"[1:]', '"日本語"[:-1]',
    '"😀😁😂"[1:2]', '"a😀b"[-2:]', '""[:]', "[][1:]", "a[1:2]", "e[:]", "5[1:2]", "None[:]",
    "c[1 // 0:]", "b[:1 // 0]",
    # ---- int arithmetic ----
    "1 + 2", "-5 + 3", "7 - 10", "6 * 7", "-3 * 4", "7 / 2", "6 / 3", "-7 / 2", "1 / 3",
    "0 / 5", "0 / -5", "7 // 2", "-7 // 2", "7 // -2", "-7 // -2", "7 % 3", "-7 % 2", "7 % -2",
    "-7 % -2", "6 % -3", "0 // 5", "0 % -5", "-1 // " + MAX, MAX + " // 2", MIN + " // 2",
    MIN + " % 3", MIN + " // -1", MIN + " % -1", MIN + " // 1", MIN + " % " + MAX,
    MAX + " + 1", "-9223372036854775807 - 2", "-9223372036854775807 - 1",
    "-(-9223372036854775807 - 1)", "-(-9223372036854775807)", "-" + MAX,
    "3037000500 * 3037000500", "3037000499 * 3037000499", "-3037000500 * 3037000500",
    "4611686018427387904 * 2", "-4611686018427387904 * 2", MAX + " * -1", MIN + " * -1",
    "(" + MAX + " + 1) - 1", MAX + " - -1", MIN + " + -1", MIN + " - 1", MAX + " + " + MIN,
    "9007199254740993 / 1", MAX + " / 3", MAX + " / 9223372036854775806", MIN + " / 3",
    "1 / " + MAX, "4611686018427387905 / 3", "9007199254740993 / 9007199254740995",
    "123456789012345678 / 10", MIN + " / -1", MIN + " / " + MIN, "-1 / " + MIN,
    "9007199254740993 / 2", "18014398509481987 / 2", "0 / -9007199254740993",
    "1 // 0", "1 % 0", "1 / 0", "0 / 0", "-1 // 0", "5 % 0", "0 % 0",
    # ---- float arithmetic ----
    "0.1 + 0.2", "1.5 - 0.5", "2.5 * 4", "1.0 / 3", "-7.5 // 2", "7.5 // -2", "-7.5 % 2",
    "7.5 % -2", "7.5 % 2", "-7.5 % -2", "5.0 % 5", "-5.0 % 5", "5.0 % -5", "-0.0 % 1",
    "0.0 % -1", "-0.0 // 1", "0.0 // -1", "-0.0 + 0.0", "-0.0 - 0.0", "0.0 - 0.0",
    "-0.0 * 5", "0.0 * -1", "-(0.0)", "-(-0.0)", "1e308 * 10", "-1e308 * 10",
    "1e308 + 1e308", "1e-320 / 1e10", "5e-324 / 2", "1.0 / 0", "1.0 // 0.0", "1.0 % 0.0",
    "1 / 0.0", "0.0 / 0", "-1.5 // 0", "2 % 0.0", INF + " - " + INF, INF + " * 0",
    INF + " % 2", "1 % " + INF, "-1 % " + INF, "1 % -" + INF, INF + " // 1", "1 // " + INF,
    "-1 // " + INF, NAN + " + 1", NAN + " // 1", "1 % " + NAN, "7 // 0.5", "0.5 // 0.1",
    "1 % 0.1", "3.5 // 1", "-3.5 // 1", "1e16 // 3", "1e300 // 1e-300", "2.0 * 3",
    "1e300 * 1e300", "-1e300 * 1e300", "1.7976931348623157e308 + 1e292",
    # ---- mixing ints, floats and bools ----
    "1 + 1.0", "1 + True", "True + True", "True * 3", "False - 1", "True / 2", "True // 2",
    "-True", "-False", "True % 2", "7 // 2.0", "-7 // 2.0", "7 % -2.0", "-7 % 2.0",
    "9007199254740993 + 0.0", MAX + " * 1.0", MAX + " + 0.5", "2 * 0.5", "1 - 0.5",
    "10 / 4.0", "1.5 // True", "1 // False", "1.5 % False", "True / False",
    "9007199254740993 - 9007199254740992.0", "0.5 * " + MIN,
    # ---- concatenation and repetition ----
    '"ab" + "cd"', '"" + ""', '"日本" + "語"', '"é" + c', "[1] + [2, 3]", "[] + []",
    "b + [[4]]", '"a" + 1', '[1] + "a"', '"a" + [1]', "[1] + 1", '1 + "a"', "None + 1",
    "{} + {}", "1.5 + None", '"a" + None', '"ab" * 3', '3 * "ab"', '"ab" * 0', '"ab" * -2',
    "[1, 2] * 2", "2 * [1, 2]", "[0] * -1", '"ab" * True', "False * [1]", '"é" * 3',
    "[[1]] * 2", '"a" * 1.5', '1.5 * "a"', '"a" * "b"', "[1] * [2]", "[1] * None",
    "None * [1]", '[1] * "a"', '"a" * [1]', "{} * 2", "2 * {}", '{} * "a"', "None * 2",
    "2 * None", '"ab" * 100000000', "[0] * 10000001", "[0, 1] * 5000001", '"x" * 67108865',
    '"ab" * ' + MAX, "[1] * " + MAX, "[] * " + MAX, '"" * ' + MAX, '"ab" * ' + MIN,
    '"a" - "b"', "[1] - [1]", "{} - {}", "None - None", "1 - None", '"a" / 2', "[1] // 2",
    "[4] % 2", '2 / "a"', "None // 1", '"a" % 2', '"%d" % 5',
    # ---- dict merge ----
    '{"a": 1} | {"b": 2}', '{"a": 1, "b": 2} | {"a": 3}', "{} | {}", 'a | {"k": 0}',
    '{"z": 0} | a', '{"a": 1} | 1', '1 | {"a": 1}', "1 | 2", "True | False", "[1] | [2]",
    "e | {}", '{"x": 1} | e', '{"a": [1]} | {"a": None} | {"b": 2}',
    # ---- equality ----
    "1 == 1.0", "1 == True", "0 == False", "1 != 1.0", '"a" == "a"', '"a" == 1', "None == None",
    "None == False", "None != 0", "[1, 2] == [1, 2.0]", "[1] == [1, 2]", "[] == {}",
    '{"a": 1, "b": 2} == {"b": 2, "a": 1}', '{"a": 1} != {"a": 2}',
    'e == {"type": "KeyError", "message": "\'k\'", "bases": ["LookupError", "Exception"], '
    '"details": None}', NAN + " == " + NAN, NAN + " != " + NAN, "0.0 == -0.0",
    "9007199254740993 == 9007199254740992.0", "9007199254740992 == 9007199254740992.0",
    MAX + " == 9223372036854775808.0", MIN + " == -9223372036854775808.0",
    '"é" == "e\\u0301"', "[[1]] == [[1.0]]", "1.5 == True",
    # ---- ordering ----
    "1 < 2", "2 <= 2", "3 > 2.5", "1 >= 1.0", "2 < 1", '"abc" < "abd"', '"ab" < "abc"',
    '"B" < "a"', '"é" > "z"', '"😀" > "日"', '"\uffff" < "😀"', '"" < "a"', '"a" <= "a"',
    "[1, 2] < [1, 3]", "[1, 2] < [1, 2, 0]", "[] < [0]", "[2] > [1, 5]", "[1, 2] <= [1, 2]",
    "[1, [2, 3]] < [1, [2, 4]]", '[1, "a"] < [1, "b"]', '[1, "a"] < [2, 1]', "[1, 2] >= [1]",
    '[1, "a"] < [1, 2]', '[1] < ["a"]', '1 < "a"', '"a" < 1', "None < 1", "None < None",
    "{} < {}", "[1] < 1", "1 <= None", '"a" >= [1]', '[None] < [None]', "[None] < [1]",
    "True < 2", "False < True", "1.5 < True", "9007199254740993 > 9007199254740992.0",
    "9007199254740993 < 9007199254740994.0", MAX + " < 9223372036854775808.0",
    MAX + " >= 9223372036854775808.0", MIN + " <= -9223372036854775808.0",
    MIN + " < -9223372036854775808.0", MAX + " > 1e19", "1 < " + INF, MIN + " > -" + INF,
    "1 < " + NAN, "1 > " + NAN, NAN + " >= " + NAN, NAN + " < 1", "-0.0 < 0.0",
    "[" + NAN + "] < [1]", "0.1 < 0.1 + 0.2 < 0.30000000000000004",
    # ---- chained comparisons and short-circuits ----
    "1 < 2 < 3", "1 < 3 < 2", "3 > 2 > 1 > 0", "1 == 1.0 == True", "1 < 2 > 0", '2 > 1 < "a"',
    '1 > 2 < "a"', "1 > 2 < 1 // 0", "1 < 2 < 1 // 0", "1 < 2 == 2.0 != 3", "1 < 2 in [2]",
    '"a" in "abc" in ["abc"]', "1 // 0 < 2 < 3",
    # ---- in / not in ----
    "1 in [1, 2]", "1.0 in [1, 2]", "True in [1]", "3 in b", "4 not in b", "[1] in [[1], 2]",
    "None in [None]", '"1" in [1]', '"k" in a', '"v" in a', "1 in a", "1.5 in a", "None in a",
    "[1] in a", "{} in a", '"type" in e', '"KeyError" in e', '"ll" in "hello"', '"" in "abc"',
    '"" in ""', '"é" in c', '"x" not in c', '"lo" in c', '"llo" in c', '"hélo" in c',
    '"😀" in "a😀b"', '"ab" in "a"', "1 in \"abc\"", 'None in "a"', '[1] in "a"', "1 in 5",
    "1 in None", "1 not in 1.5", '"a" in True', '"a" not in 5', "1 in []", "[] in [[]]",
    '"aab" in "aaaab"', '"abab" in "abaabab"', '"aaaa" in "aaa"',
    '("a" * 100000 + "b") in "a" * 1000000', '("a" * 100000 + "b") in "a" * 1000000 + "b"',
    # ---- and / or / not / conditional ----
    "True and 1", "0 and 1 // 0", "False and (1 // 0)", "True or 1 // 0", "1 or 2", '0 or ""',
    '"" or []', "[] and 1", 'None or "x"', "1 and 2 and 3", "0 or 0.0 or None",
    "(1 // 0) or 1", "True and (1 // 0)", "not 1", "not 0", 'not ""', "not []", "not {}",
    "not None", 'not "a"', "not [0]", "not e", "not 0.0", "not -0.0", "not " + NAN,
    "not not 2", "1 if True else 1 // 0", "1 // 0 if False else 2", '"y" if [] else "n"',
    '"y" if a else "n"', "1 if 0 else 2 if 0 else 3", "b if b else c", "(1 // 0) if 1 else 2",
    "1 if 1 // 0 else 2",
    # ---- len ----
    'len("")', "len(c)", 'len("日本語")', 'len("😀")', 'len("e\\u0301")', "len(b)", "len([])",
    "len(a)", "len({})", "len(e)", "len(5)", "len(None)", "len(1.5)", "len(True)",
    # ---- range ----
    "range(5)", "range(0)", "range(-3)", "range(2, 5)", "range(5, 2)", "range(0, 10, 3)",
    "range(10, 0, -3)", "range(0, 10, -1)", "range(-5, -1)", "range(1, 2, 0)", "range(1.5)",
    'range(1, "a")', "range(True)", "range(False, True, True)", "range(None)",
    "range(1, 2, 1.0)", "range(1.5, 2, 0)",
    "range(9223372036854775806, " + MAX + ")", "range(" + MAX + ", 9223372036854775805, -1)",
    "range(" + MIN + ", -9223372036854775806)", "range(9223372036854775800, " + MAX + ", 3)",
    "range(" + MIN + ", " + MAX + ", " + MAX + ")", "range(" + MAX + ", " + MIN + ", " + MIN + ")",
    "range(" + MIN + ", " + MAX + ")", "range(10000001)", "range(0, 20000002, 2)",
    "range(" + MAX + ", " + MIN + ", -1)", "range(0, " + MAX + ", 922337203685477580)",
    # ---- enumerate ----
    "enumerate(b)", "enumerate(b, 1)", "enumerate(b, -2)", 'enumerate("ab")', "enumerate(c)",
    "enumerate(a)", "enumerate([])", "enumerate(5)", "enumerate(b, 1.5)", "enumerate(5, 1.5)",
    "enumerate(b, True)", "enumerate([1, 2], " + MAX + ")", "enumerate([1], " + MAX + ")",
    "enumerate([], " + MAX + ")", "enumerate(None)", "enumerate(e)",
    # ---- zip ----
    "zip()", "zip(b)", 'zip(b, "ab")', "zip(b, a)", 'zip("abc", [1, 2, 3], [True])',
    "zip([], b)", "zip(b, 5)", "zip(5, b)", "zip(b, b, b)", "zip(None)", "zip(c, c)",
    # ---- min / max ----
    "min(b)", "max(b)", "min(3, 1, 2)", "max(3, 1.5)", "min(1, 1.0)", "min(1.0, 1)",
    "max(1, True)", "max(True, 1)", 'min("bca")', "max(c)", "min(a)", "max(a)",
    'max(["b", "a"], ["b"])', "min([])", 'max("")', "min({})", "min(5)", "min(None)",
    'min(1, "a")', 'max(1, "a")', 'max([1, "a"])', 'min(["a", 1])', "min([[1, 2], [1]])",
    "max([0.5, -1, 3])", "min(-0.0, 0.0)", "min(0.0, -0.0)", "max(" + NAN + ", 1)",
    "max(1, " + NAN + ")", "min(True, False)", "max(None, None)", "min([None])", "max(e)",
    "min(1, 1 // 0)", "max([[]], [[1]])",
    # ---- sum ----
    "sum(b)", "sum([])", "sum([], 5)", "sum([1.5, 2])", "sum([0.1, 0.2, 0.3])",
    "sum([1, 2], 0.5)", "sum([True, True])", "sum([], False)", "sum([True], False)",
    "sum([[1], [2]], [])", 'sum(["a"], "")', 'sum(["a", "b"])', "sum(5)", 'sum(5, "")',
    "sum([" + MAX + ", 1])", "sum([" + MAX + ", 1, -1])", "sum([" + MIN + ", -1])",
    "sum([1e308, 1e308])", 'sum("abc")', "sum(a)", 'sum([], "")', "sum([1], None)",
    "sum([None])", "sum([1, 2.5, True])", "sum([0.1] * 10)", "sum([1e16, 1, -1e16])",
    "sum([[1]], [0])", "sum(range(101))",
    # ---- abs ----
    "abs(-5)", "abs(5)", "abs(-2.5)", "abs(-0.0)", "abs(True)", "abs(False)",
    "abs(-9223372036854775807)", "abs(" + MIN + ")", 'abs("a")', "abs(None)", "abs([1])",
    "abs(-" + INF + ")", "abs(" + NAN + ")",
    # ---- round ----
    "round(0.5)", "round(1.5)", "round(2.5)", "round(-0.5)", "round(-1.5)", "round(-2.5)",
    "round(3.7)", "round(-3.7)", "round(0.49999999999999994)", "round(4503599627370497.0)",
    "round(2.675, 2)", "round(0.125, 2)", "round(0.375, 2)", "round(1234, -2)",
    "round(1250, -2)", "round(1350, -2)", "round(-1250, -2)", "round(-1350, -2)",
    "round(1234, 2)", "round(5, -1)", "round(15, -1)", "round(25, -1)", "round(-5, -1)",
    "round(" + MAX + ", -1)", "round(" + MAX + ", -19)", "round(4000000000000000000, -19)",
    "round(5000000000000000000, -19)", "round(5000000000000000001, -19)",
    "round(-5000000000000000001, -19)", "round(1, -100)", "round(" + MIN + ", -20)",
    "round(" + MIN + ", -18)", "round(" + MAX + ", -18)", "round(2.5, 0)", "round(-2.5, 0)",
    "round(-0.4, 0)", "round(1.5, None)", "round(5, None)", "round(True)", "round(True, 1)",
    "round(1.23456, 3)", "round(123.456, -1)", "round(155.0, -1)", "round(145.0, -1)",
    "round(1e300, 2)", "round(1e300)", "round(1.5e18)", "round(9.2e18)", "round(9.3e18)",
    "round(-9.223372036854775808e18)", "round(1e-10, 5)", "round(-1e-10, 5)",
    "round(0.5, 400)", "round(1.5, -400)", "round(-1.5, -400)", "round(-0.0, 2)",
    "round(1.7976931348623157e308, -308)", "round(1.7976931348623157e308, -307)",
    "round(5e-324, 323)", "round(5e-324, 324)", "round(1e-323, 323)",
    "round(" + INF + ")", "round(" + NAN + ")", "round(" + INF + ", 2)",
    "round(" + NAN + ", 2)", 'round("a")', "round(None)", "round([1])", "round(1.5, 1.5)",
    'round(1.5, "a")', "round(1, 1.5)", 'round("a", "b")', "round(0.1 + 0.2, 15)",
    "round(1.0000000000000002, 15)", "round(123.45, 1)", "round(0.285, 2)", "round(1.005, 2)",
    "round(2.5e-8, 8)", "round(35.0, -1)", "round(45.0, -1)", "round(1.45, 1)",
    "round(8.5, 0)", "round(-8.5, 0)", "round(12345.6789, -4)", "round(50000.0, -5)",
    "round(150000.0, -5)", "round(0.1, 17)", "round(0.1, 20)", "round(1e22, -22)",
    "round(123456789.987654321, 4)", "round(-123.5)",
    # ---- str ----
    "str()", "str(1)", "str(-5)", "str(" + MIN + ")", "str(1.0)", "str(0.1)", "str(1e16)",
    "str(1e15)", "str(123456789012345678.0)", "str(1e-5)", "str(0.0001)", "str(-0.0)",
    "str(1.5e300)", "str(" + INF + ")", "str(-" + INF + ")", "str(" + NAN + ")",
    "str(123456789.123456789)", "str(5e-324)", "str(1.7976931348623157e308)",
    "str(0.1 + 0.2)", "str(1 / 3)", "str(True)", "str(False)", "str(None)", 'str("x")',
    'str("")', "str(b)", 'str([1, "a", None, 1.0, True])', "str(a)", 'str(["it\'s", "\\n"])',
    'str({"é": "日"})', "str(e)", "str([[]])", "str([" + INF + ", -0.0])", 'str(["\\0"])',
    "str(c)",
    # ---- int ----
    "int()", "int(5)", "int(-5)", "int(True)", "int(False)", "int(3.9)", "int(-3.9)",
    "int(-0.5)", "int(1e18)", "int(9.2e18)", "int(9.3e18)", "int(-9223372036854775808.0)",
    "int(9223372036854775807.0)", "int(" + INF + ")", "int(-" + INF + ")", "int(" + NAN + ")",
    'int("42")', 'int("  42  ")', 'int("-42")', 'int("+42")', 'int("1_000")',
    'int("1__000")', 'int("_1")', 'int("1_")', 'int("")', 'int(" ")', 'int("4.5")',
    'int("0x10")', 'int("0x10", 16)', 'int("0x10", 0)', 'int("10", 16)', 'int("ff", 16)',
    'int("FF", 16)', 'int("z", 36)', 'int("Z", 36)', 'int("10", 2)', 'int("12", 2)',
    'int("0b101", 0)', 'int("0o17", 0)', 'int("0O17", 8)', 'int("017", 0)', 'int("0", 0)',
    'int("00", 0)', 'int("0_0", 0)', 'int("0_7", 0)', 'int("0x_f", 0)', 'int("0x__f", 0)',
    'int("0x", 16)', 'int("0b", 0)', 'int("-0x10", 0)', 'int("0b1", 16)', 'int("- 1")',
    'int("+-1")', 'int("1 2")', 'int("\\t\\n12\\r ")', 'int("١٢٣")', 'int("\\u00a012\\u2003")',
    'int("\\u00855")', 'int("\\u001c5")', 'int("12", 37)', 'int("12", 1)', 'int("12", -1)',
    'int("12", True)', 'int("12", None)', 'int("' + MAX + '")', 'int("9223372036854775808")',
    'int("' + MIN + '")', 'int("-9223372036854775809")', 'int("7fffffffffffffff", 16)',
    'int("8000000000000000", 16)', 'int("-8000000000000000", 16)',
    'int("0000000000000000000000000001")', 'int("1" * 4301)', 'int("1" * 4300)',
    'int("0" * 4301)', 'int("1" * 5000, 16)', 'int("1" * 5000 + "x")', "int(5, 10)",
    "int(1.5, 10)", 'int("5", 1.5)', 'int(5, "a")', "int([1])", "int(None)", "int(a)",
    'int("é")', 'int("1é")', 'int("12\\0")', 'int("٣", 16)', 'int("x" * 300)',
    'int("1" * 20, 2)', 'int("YY", 36)', 'int("1_0", 0)', 'int("1_0_0")',
    # ---- float ----
    "float()", "float(1)", "float(-3)", "float(True)", "float(9007199254740993)",
    "float(" + MAX + ")", "float(2.5)", 'float("1.5")', 'float("  1.5  ")', 'float("-1.5")',
    'float("+1.5")', 'float("1e3")', 'float("1E-3")', 'float(".5")', 'float("5.")',
    'float("inf")', 'float("-inf")', 'float("Infinity")', 'float("-iNfInItY")',
    'float("nan")', 'float("-nan")', 'float("NaN")', 'float("infinit")', 'float("nan(1)")',
    'float("1_000.5")', 'float("1__0")', 'float("_1")', 'float("1_")', 'float("1_.5")',
    'float("1._5")', 'float("1e1_0")', 'float("1e_10")', 'float("0x10")', 'float("1e")',
    'float("e5")', 'float(".")', 'float("")', 'float(" ")', 'float("1.5.5")',
    'float("1e400")', 'float("-1e400")', 'float("1e-400")', 'float("4.9e-324")',
    'float("2.2250738585072014e-308")', 'float("0.1")', 'float("1" * 400)', 'float("١.٥")',
    'float("\\u20031.5\\u00a0")', 'float("in f")', 'float("+-1")', 'float("--1")',
    'float("1e+-1")', 'float("1.5\\0")', "float([1])", "float(None)", "float(a)",
    'float("i_nf")', 'float("-0")', 'float("0e0")', 'float("000.000")',
    'float("1234567890123456789012345678901234567890")', 'float("2.5e-324")',
    'float("1e99999999999999999999")', 'float("inf ")', 'float("\\tnan\\n")',
    # ---- bool ----
    "bool()", "bool(0)", "bool(1)", "bool(-1)", "bool(0.0)", "bool(-0.0)", "bool(0.1)",
    'bool("")', 'bool("0")', "bool([])", "bool([0])", "bool({})", "bool(a)", "bool(None)",
    "bool(e)", "bool(" + NAN + ")",
    # ---- sorted ----
    "sorted(b)", "sorted([])", "sorted([3, 1.5, True, 0])", 'sorted(["b", "a", "B"])',
    'sorted("héllo")', "sorted(a)", "sorted([[2], [1, 2], [1]])", 'sorted([1, "a"])',
    'sorted(["a", 1])', 'sorted([1, 2, "a"])', 'sorted([2, 1, "a"])', 'sorted([1, "a", 0])',
    "sorted([None, None])", "sorted([None])", "sorted(5)", "sorted([1, 1.0, True])",
    "sorted([True, 1, 1.0])", "sorted([3, 2, 1])", "sorted([2, 2, 1])", "sorted([0.0, -0.0])",
    "sorted([-0.0, 0.0])", "sorted([1, " + NAN + ", 0])", "sorted([" + NAN + ", 2, 1])",
    "sorted([5, 3, 8, 1, 9, 2, 7, 4, 6, 0])", "sorted(range(70, 0, -1))", "sorted(e)",
    "sorted([1, 1.0, True] * 30 + [0] * 5)", "sorted([[1], [1.0], [True], [0]] * 20)",
    "sorted([" + ", ".join(str((i * 37) % 101) for i in range(101)) + "])",
    'sorted([{"a": 1}, {"b": 2}])', "sorted(None)", 'sorted([[1, "a"], [1, 2]])',
    # ---- list ----
    "list()", "list(b)", 'list("héllo")', 'list("")', "list(a)", "list({})", "list(5)",
    "list(None)", "list(e)", 'list("😀日")',
    # ---- keys / values / items ----
    "keys(a)", "values(a)", "items(a)", "keys({})", 'items({"x": [1]})', "keys(e)",
    "values(e)", "keys(b)", 'values("a")', "items(None)", 'items({"b": 1, "a": 2})',
    # ---- isexception ----
    "isexception(e)", "isexception(a)",
    'isexception({"type": "KeyError", "message": "\'k\'", "bases": ["LookupError", '
    '"Exception"], "details": None})', "isexception(None)", "isexception(e | {})",
    "isexception(1)", "isexception([e][0])",
    # ---- evaluation order and nesting ----
    "(1 // 0) + \"a\"", "\"a\" + (1 // 0)", "len(1 // 0)", "[1][0:1] + [[2][5]]",
    "{\"a\": b[9], \"b\": 1 // 0}", "min(1, 2) + max([3]) * len(c) - abs(-1)",
    "str(sum(range(10))) + str(len(b))", "sorted(keys(a | {\"0\": 0}))",
    "int(str(-12345)) == -12345", "float(str(0.1)) == 0.1", 'int(float("1e18"))',
    "enumerate(zip(b, c))", "-b[0]", "-a.n", "- -1", "2 * -3", "-2 * 3", "1 - -1",
    "[1, 2][-0]", "not 1 == 2", "not 1 in b", "-(1 // 0)", 'max("abc", "abd")',
    "round(2.5, -1)", "round(-0.0)", 'float("1e-320")', "c * 2", '"é" * 0',
    "enumerate(b, " + MIN + ")", "1 < 2 and 2 < 3 or 1 // 0", "(1 or 1 // 0) + 1",
]


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "eval_cases.txt")
    lines = [
        "# Generated by gen_eval_cases.py from Python %d.%d.%d; do not edit."
        % sys.version_info[:3],
        "# EXPR<TAB>V<TAB>json | EXPR<TAB>X<TAB>json (error value) | EXPR<TAB>R<TAB>repr | "
        "EXPR<TAB>E<TAB>ErrorType<TAB>message",
        "# Bindings: a = {'k': 'v', 'n': 2, 'l': [1, 2, 3], 'd': {'x': 1.5}}, b = [3, 1, 2], "
        "c = 'héllo', e = KeyError error value (message \"'k'\").",
    ]
    seen = set()
    for src in CASES:
        if src in seen:
            sys.exit("duplicate case: " + src)
        seen.add(src)
        lines.append(line_for(src))
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("%s: %d cases" % (out, len(lines) - 3))


if __name__ == "__main__":
    main()
