#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Lazy results: a graph's result stays on the daemon until read, and a
read moves only what it asks. The connection's counters show it.

    python3 examples/python/lazy.py [--addr ADDR]
"""

import argparse

import numpy as np

import djinn
from djinn import ops


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", default=None)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 256)).astype(np.float32)
    w = rng.standard_normal((256, 256)).astype(np.float32)
    with djinn.connect(a.addr) as conn, conn.session("lazy") as s:
        with s.graph() as g:
            y = ops.gelu(g.input(x, text=False) @ w)   # w: by fingerprint
            r, = g.run(y)
            print(f"result: {r.shape} {r.dtype}, {r.nbytes} bytes, "
                  "all on the daemon")

            def moved(what, f):
                before = conn.stats().bytes_received
                v = f()
                print(f"{what:<24} {conn.stats().bytes_received - before:>9}"
                      " bytes crossed")
                return v

            row = moved("r[17]", lambda: r[17])
            moved("r[100:104, :8]", lambda: r[100:104, :8])
            moved("r.read(12345, 10)", lambda: r.read(12345, 10))
            full = moved("np.from_dlpack(r)", lambda: np.from_dlpack(r))
            ref = np.asarray(full[17])
            assert np.array_equal(row, ref)
            print("the same bytes, read in part or whole")


if __name__ == "__main__":
    main()
