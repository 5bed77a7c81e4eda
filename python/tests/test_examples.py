# SPDX-License-Identifier: MIT
"""examples/python/ run against the test daemon: each exits 0 and says
what it shows."""

import os
import subprocess
import sys

from conftest import ROOT


def _run(daemon, name, *args):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    r = subprocess.run([sys.executable, str(ROOT / "examples/python" / name),
                        "--addr", daemon.addr, *args], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_agents(daemon):
    out = _run(daemon, "agents.py", "--agents", "3", "--turns", "2")
    assert out.count("agent ") == 3 and "3 agents, 2 turns each" in out


def test_steer(daemon):
    out = _run(daemon, "steer.py")
    plain = out.split("plain:")[1].splitlines()[0]
    steered = out.split("steered:")[1].splitlines()[0]
    assert plain.strip() != steered.strip()


def test_lazy(daemon):
    out = _run(daemon, "lazy.py")
    lines = {l.split()[0]: int(l.split()[-3]) for l in out.splitlines()
             if l.endswith("bytes crossed")}
    assert lines["r.read(12345,"] < 200
    assert lines["np.from_dlpack(r)"] >= 4 << 20
    assert "the same bytes" in out
