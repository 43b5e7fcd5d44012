# SPDX-License-Identifier: MIT
"""Values and errors without a runner: what travels, what is refused and how it is named."""
import asyncio

import msgpack
import pytest

import cairn
from cairn import _values
from cairn.worker import error_map


@pytest.mark.parametrize("v", [
    None, True, False, 0, -1, 2**63 - 1, -2**63, 0.1, 1e308, -0.0, float("inf"), "", "é✓𝄞",
    [], {}, [1, [2, [3]]], {"a": {"b": [None, 1.5, "x"]}},
])
def test_values_round_trip_exactly(v):
    back = _values.unpack(_values.pack(v))
    assert back == v and type(back) is type(v)


def test_floats_stay_floats_and_ints_ints():
    assert _values.unpack(_values.pack([1, 1.0])) == [1, 1.0]
    assert [type(x) for x in _values.unpack(_values.pack([1, 1.0]))] == [int, float]
    assert msgpack.unpackb(_values.pack(0.1))  # float64 on the wire, not float32
    assert _values.pack(0.1)[0] == 0xcb


def test_tuples_travel_as_lists():
    assert _values.unpack(_values.pack((1, (2,)))) == [1, [2]]


@pytest.mark.parametrize("v, words", [
    (2**63, "outside the 64-bit range"),
    (-2**63 - 1, "outside the 64-bit range"),
    ({1: 2}, "keys must be str"),
    ({"a": {1, 2}}, "value['a'] is of type set"),
    (b"bytes", "of type bytes"),
    ([object()], "value[0] is of type object"),
])
def test_unencodable_values_are_named(v, words):
    with pytest.raises(_values.ValueTypeError) as e:
        _values.pack(v)
    assert words in str(e.value)


def test_depth_is_limited_to_32_levels():
    v = 0
    for _ in range(31):
        v = [v]
    _values.pack(v)  # 32 levels: the top list is level 1 and the int level 32
    with pytest.raises(_values.ValueTypeError, match="deeper than 32"):
        _values.pack([v])


def test_errors_carry_the_class_hierarchy_as_bases():
    try:
        raise ConnectionRefusedError("db refused")
    except ConnectionRefusedError as e:
        m = error_map(e)
    assert m["type"] == "ConnectionRefusedError"
    assert m["bases"] == ["ConnectionError", "OSError", "Exception"]
    assert m["message"] == "db refused"
    assert "Traceback" in m["details"] and "db refused" in m["details"]
    assert "retryable" not in m


def test_non_retryable_keeps_the_wrapped_type_and_says_so():
    m = error_map(cairn.NonRetryable(KeyError("card")))
    assert m["type"] == "KeyError" and m["bases"] == ["LookupError", "Exception"]
    assert m["retryable"] is False
    m = error_map(cairn.NonRetryable("declined"))
    assert m["type"] == "NonRetryable" and m["message"] == "declined"
    assert m["retryable"] is False


def test_context_outside_an_action_is_an_error():
    with pytest.raises(LookupError, match="only available inside an action"):
        cairn.context()


def test_bad_worker_settings_are_refused():
    with pytest.raises(ValueError, match="must start with"):
        cairn.Worker("http://x")
    with pytest.raises(ValueError, match="slots"):
        cairn.Worker("tcp://127.0.0.1:1", slots=0)
    with pytest.raises(ValueError, match="module-qualified"):
        cairn.Registry().action("charge")


def test_stop_from_another_thread_and_before_running():
    import threading
    import time

    w = cairn.Worker("tcp://127.0.0.1:9", registry=cairn.Registry())  # nothing listens there
    w.registry.action("t.noop")(lambda: None)
    done = []
    t = threading.Thread(target=lambda: done.append(asyncio.run(w.run_async())))
    t.start()
    time.sleep(0.5)  # reconnecting with backoff
    t0 = time.monotonic()
    w.stop()
    t.join(5)
    assert done == [None] and time.monotonic() - t0 < 2
    w2 = cairn.Worker("tcp://127.0.0.1:9", registry=w.registry)
    w2.stop()  # before it runs: it stops at once
    assert asyncio.run(asyncio.wait_for(w2.run_async(), 5)) is None


def test_names_are_checked_like_the_c_sdk():
    with pytest.raises(ValueError, match="256 bytes"):
        cairn.Worker("tcp://127.0.0.1:1", name="x" * 300)
    r = cairn.Registry()
    r.action("a." + "b" * 300)(lambda: None)
    w = cairn.Worker("tcp://127.0.0.1:1", registry=r)
    with pytest.raises(ValueError, match="256 bytes"):
        asyncio.run(w.run_async())


@pytest.mark.parametrize("level", ["debug", "info", "warn", "warning", "error", "WARN", "Info"])
def test_log_levels_are_the_runners_words(level, capsys):
    """CAIRN_LOG_LEVEL takes the words cairn-runner takes (ir/base/log.h): the level passes, and
    the worker stops at the next check (no --url) instead."""
    from cairn import _cli
    assert _cli.main(["--log-level", level]) == 2
    assert "--url and --module are required" in capsys.readouterr().err


def test_an_unknown_log_level_is_refused(capsys):
    from cairn import _cli
    assert _cli.main(["--log-level", "verbose"]) == 2
    assert "--log-level must be debug, info, warn (or warning) or error, not 'verbose'" in \
        capsys.readouterr().err
