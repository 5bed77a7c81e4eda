#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Several agents share one model on one djinnd, each in its own session
(threads here; processes or hosts alike). An agent thinks (decodes), then
calls a tool: `session.tool_call(expected=...)` tells djinnd it will wait
that long, so djinnd may move its KV cache to host memory for the wait
and bring it back by the end (Documentation/sched.rst). The weights are
loaded once for all of them.

    python3 examples/python/agents.py [--addr unix:run/djinnd.sock]
        [--model tiny-gpt2] [--agents 4] [--turns 3]

With `make run`'s daemon up, from the checkout: PYTHONPATH=python.
"""

import argparse
import random
import threading
import time

import djinn


def agent(conn, model, k, turns, out):
    rng = random.Random(k)
    with conn.session(f"agent-{k}") as s:
        ctx = s.model(model).context()
        ctx.prefill([3 + k, 141, 59, 26])
        tokens = []
        for t in range(turns):
            tokens += ctx.generate(8, temperature=0.7, seed=k * 100 + t)\
                .tolist()
            wait = rng.uniform(0.2, 0.6)
            with s.tool_call(expected=wait):  # the tool runs elsewhere
                time.sleep(wait)
            ctx.prefill([rng.randrange(256) for _ in range(4)])  # its answer
        out[k] = tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", default=None)
    ap.add_argument("--model", default="tiny-gpt2")
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    a = ap.parse_args()
    out = {}
    with djinn.connect(a.addr) as conn:
        threads = [threading.Thread(target=agent,
                                    args=(conn, a.model, k, a.turns, out))
                   for k in range(a.agents)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - t0
    for k in sorted(out):
        print(f"agent {k}: {out[k]}")
    print(f"{a.agents} agents, {a.turns} turns each, in {took:.2f} s")


if __name__ == "__main__":
    main()
