# SPDX-License-Identifier: MIT
"""A client for test_place.py and bench/place-bench.py, run where the
resolver asks the test's DNS server (a mount namespace whose
/etc/resolv.conf names it): one JSON request a line on stdin, one JSON
answer a line on stdout, so that connections and sessions live across
requests while the caller kills and starts hosts.

Requests ({"op": ...}):
  connect  addr, model?, reconnect?, tls_ca?, token?
                                     -> {"conn": N, "addr": chosen}
  status   conn                      -> the NodeStatus as a dict
  session  conn                      -> {"session": N}
  model    session, name, tokens?    -> a context of the model with
                                        `tokens` tokens prefilled
  ping     session                   -> {} once the session answers
A failure answers {"error": message, "errno": name}.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import sys
from typing import Any, Dict

import djinn


def main() -> None:
    conns: Dict[int, Any] = {}
    sessions: Dict[int, Any] = {}
    keep = []  # models and contexts stay open while the driver runs
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "connect":
                c = djinn.connect(req["addr"], model=req.get("model"),
                                  reconnect=req.get("reconnect"),
                                  tls_ca=req.get("tls_ca"),
                                  token=req.get("token"))
                conns[len(conns) + 1] = c
                out: Dict[str, Any] = {"conn": len(conns), "addr": c.addr}
            elif op == "status":
                out = dataclasses.asdict(conns[req["conn"]].status())
            elif op == "session":
                s = conns[req["conn"]].session()
                sessions[len(sessions) + 1] = s
                out = {"session": len(sessions)}
            elif op == "model":
                s = sessions[req["session"]]
                m = s.model(req["name"])
                ctx = m.context()
                n = int(req.get("tokens", 0))
                if n:
                    ctx.prefill(list(range(1, n + 1)))
                keep.append((m, ctx))
                out = {}
            elif op == "ping":
                sessions[req["session"]].heartbeat()
                out = {}
            else:
                out = {"error": f"unknown op {op}", "errno": "EINVAL"}
        except djinn.Error as e:
            out = {"error": str(e),
                   "errno": errno.errorcode.get(e.errno, str(e.errno))}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
