#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Placement over several hosts (Documentation/kubernetes.rst,
"Choosing a node"): N sessions of M models arrive in a random order at H
djinnd, each on its own loopback address behind one DNS name; each
session opens its model and prefills a context, and stays. Once with
libdjinn's placement (dns:NAME:PORT with the session's model), once
round-robin over the hosts' addresses, each on fresh hosts, in the same
run. Reports model loads (djinn_model_loads_total over the hosts),
memory use per host at the end and its spread, and how often a session
arrived while one host was past its pressure threshold and another had
room.

    make bench-place [PLACE_BENCH_ARGS='--sessions 64 --models 4']

JSON lines on stdout (and --out). Needs root, unshare and dnsmasq
(python/tests/place_cluster.py).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, List

ROOT = pathlib.Path(__file__).resolve().parents[1]


def model_args(i: int) -> str:
    """Model i of the run: Llama shapes of growing size (9 to 16 MB)."""
    return (f"--arch llama --layers {3 + i} --embd 256 --heads 4 "
            f"--kv-heads 2 --inner 512 --vocab 1024 --ctx 256 "
            f"--seed {11 + i}")


def run(policy: str, args: argparse.Namespace,
        arrivals: List[str]) -> Dict[str, Any]:
    from place_cluster import Cluster

    hosts = {2 + h: (args.memory, [f"memory.pressure_warning={args.warn}"])
             for h in range(args.hosts)}
    models = {f"m{i}": model_args(i) for i in range(args.models)}
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"place-{policy}-"))
    c = Cluster(tmp, hosts, models)
    names = list(hosts)
    placed: Dict[int, int] = {h: 0 for h in names}
    violations = placed_hot = 0
    t0 = time.monotonic()

    def pressures() -> Dict[int, str]:
        return {x: c.ctl(x, "health")["devices"][0]["pressure"]
                for x in names}

    try:
        with c.client() as cl:
            before = pressures()
            for k, model in enumerate(arrivals):
                if policy == "placement":
                    addr = f"dns:djinn.test:{c.port}"
                else:
                    addr = c.addr(names[k % len(names)])
                got = cl("connect", addr=addr, model=model)
                if "error" in got:
                    continue
                h = next(x for x in names if c.addr(x) == got["addr"])
                # placed on a host past its threshold while another was
                # below it: what the client's choice decides
                if before[h] != "normal" and "normal" in before.values():
                    placed_hot += 1
                sess = cl.ok("session", conn=got["conn"])["session"]
                out = cl("model", session=sess, name=model,
                         tokens=args.tokens)
                if "error" in out:
                    continue
                placed[h] += 1
                # after it: a host past its threshold while another is
                # below (the state, which one crossing leaves for good)
                before = pressures()
                if "normal" in before.values() and any(
                        p != "normal" for p in before.values()):
                    violations += 1
        loads = {h: int(c.metric(h, "djinn_model_loads_total"))
                 for h in names}
        used = {}
        for h in names:
            v = c.ctl(h, "health")["devices"][0]
            used[h] = round(1 - v["free"] / v["capacity"], 4)
    finally:
        c.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "policy": policy,
        "hosts": args.hosts,
        "sessions": len(arrivals),
        "models": args.models,
        "model_loads": sum(loads.values()),
        "loads_per_host": [loads[h] for h in names],
        "sessions_per_host": [placed[h] for h in names],
        "memory_used": [used[h] for h in names],
        "memory_spread": round(max(used.values()) - min(used.values()), 4),
        "placed_past_pressure_while_another_calm": placed_hot,
        "arrivals_after_which_a_host_was_past_pressure_another_calm":
            violations,
        "refused": len(arrivals) - sum(placed.values()),
        "seconds": round(time.monotonic() - t0, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--models", type=int, default=4)
    ap.add_argument("--memory", default="96M", help="each host's")
    ap.add_argument("--warn", type=int, default=75,
                    help="memory.pressure_warning, percent")
    ap.add_argument("--tokens", type=int, default=200,
                    help="prefilled per session")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    args = ap.parse_args()
    os.environ["DJINN_BUILD"] = os.path.abspath(args.build)
    sys.path.insert(0, str(ROOT / "python" / "tests"))
    from place_cluster import missing

    why = missing()
    if why:
        print(f"bench-place: {why}", file=sys.stderr)
        return 77
    # arrivals: models by a skewed popularity (the first most wanted),
    # in a random order; the same list for both policies
    rng = random.Random(args.seed)
    weights = [1.0 / (i + 1) for i in range(args.models)]
    arrivals = rng.choices([f"m{i}" for i in range(args.models)], weights,
                           k=args.sessions)
    rows = [run(p, args, arrivals) for p in ("placement", "round-robin")]
    p, r = rows
    rows.append({
        "summary": "placement vs round-robin",
        "fewer_model_loads": round(r["model_loads"] /
                                   max(1, p["model_loads"]), 2),
        "placement_spread": p["memory_spread"],
        "round_robin_spread": r["memory_spread"],
        "placement_placed_past_pressure": p[
            "placed_past_pressure_while_another_calm"],
        "round_robin_placed_past_pressure": r[
            "placed_past_pressure_while_another_calm"],
        "target": ">= 2x fewer loads; no host past pressure while "
                  "another has room",
    })
    lines = [json.dumps(row) for row in rows]
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as out:
            out.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
