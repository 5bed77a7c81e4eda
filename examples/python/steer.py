#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Breakpoints and steering: every decode step pauses after a layer,
the hidden state there is read (lazily: only what is looked at crosses)
and replaced by a nudged one, and the step goes on from it. The same run
without steering gives other tokens.

    python3 examples/python/steer.py [--addr ADDR] [--model tiny-gpt2]
        [--layer 1] [--strength 4.0]
"""

import argparse

import numpy as np

import djinn

PROMPT = [3, 141, 59, 26, 5]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", default=None)
    ap.add_argument("--model", default="tiny-gpt2")
    ap.add_argument("--layer", type=int, default=1)
    ap.add_argument("--strength", type=float, default=4.0)
    a = ap.parse_args()
    with djinn.connect(a.addr) as conn, conn.session("steer") as s:
        m = s.model(a.model)
        plain = m.context()
        plain.prefill(PROMPT)
        print("plain:  ", plain.generate(12).tolist())

        # a direction to push along: any vector of the hidden size
        v = np.random.default_rng(0).standard_normal(m.info.hidden)
        v = (a.strength * v / np.linalg.norm(v)).astype(np.float32)

        ctx = m.context()
        ctx.prefill(PROMPT)
        steps = ctx.generate(12, break_at=a.layer)
        for pause in steps:
            h = pause.hidden.numpy()          # (1, hidden) for a decode
            pause.resume(h + v)
        print("steered:", steps.tokens.tolist())
        print(f"(after layer {a.layer} of {m.info.n_layer}, |v| = "
              f"{a.strength})")


if __name__ == "__main__":
    main()
