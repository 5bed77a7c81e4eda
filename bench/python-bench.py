#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""python-bench: the djinn package's cost beside the C client's, on the
same calls (TARGETS.md, "Python": a decode step at most 1.2 times the C
client's time, and at most 10 us added per call).

    ping     conn.ping()                    djinn_conn_ping()
    decode   ctx.generate(1)                djinn_ctx_decode() of 1 token
    read     result.read(out=buf), 1 MiB    djinn_result_read() of 1 MiB

The C side is bench/py-baseline.c, a library loaded into this process:
each of its functions makes one libdjinn call on the package's own
connection, context or result and times it in C. The two sides take
turns call by call, so they run the same calls on the same objects under
the same load, and the difference is what the Python layer adds (ctypes
and the package's checks); each goes first in every other pair, since a
call right after another may wait for the daemon to finish that one. Each figure is the median of --n calls a
side. The model is make run's shape (GPT-2, 4 layers, hidden 256,
vocabulary 4096), written once by scripts/mkmodel.py into --cache; the
decode context is reset and prefilled again (untimed) when it is full.
djinnd is started from --build with --cpu-mem 1G.

One JSON object per line (STYLE.md, Benchmarks): the Python side's
time with the C side's as its baseline and their ratio, and the time
added against the 10 us target: the median over pairs of a Python call's
time less the C call's just before it, so that what drifts during the
run (a decode context's length, the clock) cancels.

Usage: python-bench.py [--build DIR] [--cache DIR] [--n N]
"""

import argparse
import ctypes
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL_ARGS = ("--arch gpt2 --layers 4 --embd 256 --heads 8 --vocab 4096 "
              "--ctx 256 --seed 1")
MODEL = "pybench-gpt2"


def emit(metric, value, base, base_name, target=None, note=None):
    line = {"bench": "python", "metric": metric, "value": round(value, 3),
            "unit": "us", "baseline": round(base, 3),
            "baseline_name": base_name,
            "ratio": round(value / base, 4) if base else None}
    if target:
        line["target"], line["met"] = target
    if note:
        line["note"] = note
    print(json.dumps(line), flush=True)


def start(build, models):
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="djinn-pybench-"))
    sock = tmp / "d.sock"
    d = subprocess.Popen([str(build / "djinnd/djinnd"), "-f", "-l",
                          f"unix:{sock}", "-a", str(tmp / "a.sock"), "-m",
                          "1G", "--log-level", "notice", "--model-dir",
                          str(models)], stdout=open(tmp / "log", "w"),
                         stderr=subprocess.STDOUT)
    for _ in range(1000):
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(sock))
            s.close()
            return d, f"unix:{sock}"
        except OSError:
            if d.poll() is not None:
                sys.exit("python-bench: djinnd exited:\n" +
                         (tmp / "log").read_text())
            time.sleep(0.01)
    sys.exit("python-bench: djinnd did not listen")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--cache", default=None)
    ap.add_argument("--n", type=int, default=5000)
    a = ap.parse_args()
    build = pathlib.Path(a.build).resolve()
    cache = pathlib.Path(a.cache or build / "bench-cache").resolve()
    os.environ.setdefault("DJINN_LIBRARY", str(build / "libdjinn.so"))
    sys.path.insert(0, str(ROOT / "python"))
    import numpy as np

    import djinn

    models = cache / "models"
    if not (models / MODEL / "config.json").exists():
        models.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(ROOT / "scripts/mkmodel.py"),
                        *MODEL_ARGS.split(), str(models / MODEL)],
                       check=True, stdout=subprocess.DEVNULL)
    c = ctypes.CDLL(str(build / "bench/libpy-baseline.so"))
    for f in ("pyb_ping", "pyb_decode", "pyb_read"):
        getattr(c, f).restype = ctypes.c_int64
    c.pyb_ping.argtypes = [ctypes.c_void_p]
    c.pyb_decode.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    c.pyb_read.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_uint64]

    d, addr = start(build, models)
    try:
        res = measure(djinn, np, c, addr, a.n)
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait(10)
    for key, name, target in (
            ("ping", "ping", None),
            ("decode", "decode_step", 1.2),
            ("read", "read_1mib", None)):
        cs, ps = res[key]
        py = statistics.median(ps) / 1e3
        cc = statistics.median(cs) / 1e3
        # each Python call less the C call just before it: what drifts
        # (a context's length, the clock) cancels
        added = statistics.median(p - c for c, p in zip(cs, ps)) / 1e3
        note = (f"median of {a.n} calls a side, taking turns with the C "
                f"client's in one process")
        emit(f"{name}_us", py, cc, "the C client (libdjinn), same calls",
             (f"ratio <= {target}", py <= target * cc) if target else None,
             note)
        emit(f"{name}_added_us", added, 10.0, "the target, 10 us",
             ("value <= 10", added <= 10.0),
             "the median of each Python call's time less the C call's "
             "just before it")


def turns(i):
    """Who goes first in pair @i: C (0) in even pairs, Python in odd."""
    return (0, 1) if i % 2 == 0 else (1, 0)


def timed(f):
    t0 = time.perf_counter_ns()
    f()
    return time.perf_counter_ns() - t0


def ok(ns, what):
    if ns < 0:
        sys.exit(f"python-bench: {what}: error {ns}")
    return ns


def measure(djinn, np, c, addr, n):
    """Both sides' times, call by call in turn: {key: (c, python)}."""
    out = {k: ([], []) for k in ("ping", "decode", "read")}
    with djinn.connect(addr) as conn, conn.session() as s:
        for i in range(n + 1):
            for side in turns(i):
                if side == 0:
                    out["ping"][0].append(ok(c.pyb_ping(conn._ptr), "ping"))
                else:
                    out["ping"][1].append(timed(conn.ping))

        m = s.model(MODEL)
        ctx = m.context()
        ctx.prefill([3])
        tok = ctypes.c_int32()
        for i in range(n + 1):
            for side in turns(i):
                if len(ctx) + 1 >= m.info.max_tokens:
                    ctx.reset()
                    ctx.prefill([3])
                if side == 0:
                    out["decode"][0].append(
                        ok(c.pyb_decode(ctx._ptr, ctypes.byref(tok)),
                           "decode"))
                else:
                    out["decode"][1].append(timed(lambda: ctx.generate(1)))
        ctx.free()

        with s.graph() as g:
            r, = g.run(g.input(s.zeros((1 << 18,))) * 1.0)
            buf = np.empty(r.size, np.float32)  # both read into one
            cbuf = np.empty(r.size, np.float32)
            r.read(out=buf)
            for i in range(n + 1):
                for side in turns(i):
                    if side == 0:
                        out["read"][0].append(
                            ok(c.pyb_read(r._p(), cbuf.ctypes.data,
                                          r.nbytes), "read"))
                    else:
                        out["read"][1].append(
                            timed(lambda: r.read(out=buf)))
    for k in out:  # the first of each: a warm-up
        out[k] = (out[k][0][1:], out[k][1][1:])
    return out


if __name__ == "__main__":
    main()
