# SPDX-License-Identifier: MIT
"""python3 -m cairn.worker: a worker process for the actions that modules register with
@cairn.action (docs/python.md). Each flag has an environment variable; the flag wins."""
import argparse
import importlib
import logging
import os
import ssl
import sys

# (flag, environment variable, default, help); --url and --module may repeat (the variables
# take comma-separated lists).
SETTINGS = [
    ("url", "CAIRN_WORKER_URL", None, "runner to connect to (tcp://, ipc://, tls+tcp://); "
     "repeat it to serve several runners at once"),
    ("module", "CAIRN_WORKER_MODULES", None, "module whose @cairn.action functions to serve "
     "(imported as by `import`); repeatable"),
    ("slots", "CAIRN_WORKER_SLOTS", "8", "actions run at once, per runner"),
    ("prefetch", "CAIRN_WORKER_PREFETCH", "0", "attempts the runner may queue here beyond the "
     "slots"),
    ("credential", "CAIRN_WORKER_CREDENTIAL", None, "the runner's shared worker credential"),
    ("name", "CAIRN_WORKER_NAME", None, "this worker's name in the runner's logs"),
    ("tls-ca", "CAIRN_WORKER_TLS_CA", None, "PEM CA that signed the runner's certificate"),
    ("tls-cert-key", "CAIRN_WORKER_TLS_CERT_KEY", None, "PEM file with this worker's "
     "certificate and key (when the runner requires client certificates)"),
    ("tls-server-name", "CAIRN_WORKER_TLS_SERVER_NAME", None, "name to check in the runner's "
     "certificate (default: the URL's host)"),
    ("grace", "CAIRN_WORKER_GRACE_S", "10", "seconds running actions get to finish after "
     "SIGTERM"),
    ("log-level", "CAIRN_LOG_LEVEL", "info", "debug, info, warn (or warning) or error, as for "
     "cairn-runner"),
]


def parser():
    p = argparse.ArgumentParser(
        prog="python3 -m cairn.worker",
        description="Serves the actions that the given modules register with @cairn.action.",
        epilog="Exit status: 0 stopped by SIGTERM or SIGINT (after finishing what ran), "
               "1 refused by a runner, 2 usage error, 3 a second signal (stopped at once).")
    for flag, env, default, text in SETTINGS:
        multi = flag in ("url", "module")
        p.add_argument("--" + flag, action="append" if multi else "store", default=None,
                       help=f"{text} [${env}" + (f", default {default}]" if default else "]"))
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    vals = {}
    for flag, env, default, _ in SETTINGS:
        key = flag.replace("-", "_")
        v = getattr(args, key)
        if v is None and os.environ.get(env):
            v = os.environ[env].split(",") if flag in ("url", "module") else os.environ[env]
        vals[key] = v if v is not None else default
    # The runner's words (ir/base/log.h): Python's "warning" or "warn", in any case.
    levels = {"debug": "DEBUG", "info": "INFO", "warn": "WARNING", "warning": "WARNING",
              "error": "ERROR"}
    if vals["log_level"].lower() not in levels:
        print(f"python3 -m cairn.worker: --log-level must be debug, info, warn (or warning) or "
              f"error, not {vals['log_level']!r}", file=sys.stderr)
        return 2
    logging.basicConfig(level=levels[vals["log_level"].lower()], stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not vals["url"] or not vals["module"]:
        print("python3 -m cairn.worker: --url and --module are required (see --help)",
              file=sys.stderr)
        return 2
    import cairn  # the package's registry, whatever name this file runs under
    for m in vals["module"]:
        try:
            importlib.import_module(m)
        except Exception as e:  # noqa: BLE001 (any import failure is a usage error here)
            print(f"python3 -m cairn.worker: cannot import {m}: {e!r}", file=sys.stderr)
            return 2
    tls = None
    if vals["tls_ca"] or vals["tls_cert_key"]:
        try:
            tls = ssl.create_default_context(cafile=vals["tls_ca"])
            if vals["tls_cert_key"]:
                tls.load_cert_chain(vals["tls_cert_key"])
        except (OSError, ssl.SSLError) as e:
            print(f"python3 -m cairn.worker: cannot load the TLS files: {e}", file=sys.stderr)
            return 2
    try:
        w = cairn.Worker(vals["url"], registry=cairn.default_registry,
                         credential=vals["credential"], slots=int(vals["slots"]),
                         prefetch=int(vals["prefetch"]), tls=tls,
                         tls_server_name=vals["tls_server_name"], name=vals["name"],
                         grace=float(vals["grace"]))
    except ValueError as e:
        print(f"python3 -m cairn.worker: {e}", file=sys.stderr)
        return 2
    if not cairn.default_registry.fns:
        print("python3 -m cairn.worker: the modules register no action (@cairn.action)",
              file=sys.stderr)
        return 2
    return w.run()
