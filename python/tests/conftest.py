# SPDX-License-Identifier: MIT
"""The package against a real djinnd (the checkout's build), started once
for the run with two small models written by scripts/mkmodel.py.

$DJINN_BUILD names the build tree (default: build/ of the checkout);
$DJINND, $DJINNCTL and $DJINN_TOOL override the programs in it, and
$DJINN_TEST_BACKEND ("cuda": scripts/gpu-kit.sh python) djinnd's backend
(default cpu, 256 MiB).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterator, List

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DJINN_BUILD", ROOT / "build"))
DJINND = os.environ.get("DJINND", str(BUILD / "djinnd" / "djinnd"))
DJINNCTL = os.environ.get("DJINNCTL", str(BUILD / "tools" / "djinnctl"))
DJINN_TOOL = os.environ.get("DJINN_TOOL", str(BUILD / "tools" / "djinn"))
MKMODEL = ROOT / "scripts" / "mkmodel.py"
BACKEND = os.environ.get("DJINN_TEST_BACKEND", "cpu")

sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("DJINN_LIBRARY", str(BUILD / "libdjinn.so"))

MODELS = {
    "tiny-gpt2": "--arch gpt2 --layers 2 --embd 64 --heads 4 --vocab 256 "
    "--ctx 64 --seed 3",
    "tiny-llama": "--arch llama --layers 3 --embd 64 --heads 4 "
    "--kv-heads 2 --inner 128 --vocab 256 --ctx 64 --seed 5",
    # with a tokenizer and chat template, for djinn serve (test_serve.py)
    "chat-qwen": "--arch qwen2 --layers 2 --embd 64 --heads 4 "
    "--kv-heads 2 --inner 128 --vocab 320 --ctx 2048 --seed 7 --chat",
}


# djinn serve's API keys' tenants (test_serve.py): this user may open
# sessions of each for it (--delegate)
SERVE_TENANTS = ("alice", "bob", "carol", "dave", "erin")


class Daemon:
    """A djinnd of the test run."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.dir = tmp
        self.models = tmp / "models"
        self.sock = tmp / "d.sock"
        self.admin = tmp / "a.sock"
        self.addr = f"unix:{self.sock}"
        self.log = tmp / "djinnd.log"
        self.models.mkdir()
        for name, args in MODELS.items():
            subprocess.run([sys.executable, str(MKMODEL), *args.split(),
                            str(self.models / name)], check=True,
                           stdout=subprocess.DEVNULL)
        self.start()

    def start(self) -> None:
        """Start djinnd and wait (20 s at most) until it listens."""
        self.proc = subprocess.Popen(
            [DJINND, "-f", "-l", self.addr, "-a", str(self.admin),
             "--backend", BACKEND, "-m", "256M", "--model-dir",
             str(self.models),
             *[a for t in SERVE_TENANTS for a in
               ("--set", f"tenant.{t}.delegates={os.getuid()}")]],
            stdout=open(self.log, "a"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("djinnd exited:\n" + self.log.read_text())
            try:
                # the admin socket is made after the client one
                for path in (self.sock, self.admin):
                    s = socket.socket(socket.AF_UNIX)
                    try:
                        s.connect(str(path))
                    finally:
                        s.close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("djinnd did not listen:\n" + self.log.read_text())

    def ctl(self, *args: str) -> Any:
        """djinnctl -j on the daemon's admin socket, parsed."""
        out = subprocess.run([DJINNCTL, "-s", str(self.admin), "-j",
                              *args], check=True, capture_output=True,
                             text=True).stdout
        return json.loads(out)

    def tool(self, *args: str) -> str:
        """The C client (tools/djinn) on the daemon: its stdout."""
        return subprocess.run([DJINN_TOOL, "-a", self.addr, *args],
                              check=True, capture_output=True,
                              text=True).stdout

    def crash(self) -> None:
        """SIGKILL djinnd: it leaves its socket files behind."""
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_proc(proc: "subprocess.Popen[Any]", timeout: float = 10) -> None:
    """SIGTERM @proc and reap it; SIGKILL when it outlives @timeout s."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _have(path: str) -> bool:
    return os.access(path, os.X_OK)


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    for p in (DJINND, DJINNCTL, DJINN_TOOL):
        if not _have(p):  # a failure, not a skip: nothing would be tested
            pytest.fail(f"{p} is not there (run make, or set $DJINN_BUILD "
                        "or the program's variable to an absolute path)")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="djinn-py-"))
    d = Daemon(tmp)
    yield d
    d.stop()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def conn(daemon: Daemon) -> Iterator[Any]:
    import djinn

    with djinn.connect(daemon.addr) as c:
        yield c


@pytest.fixture
def session(conn: Any) -> Iterator[Any]:
    with conn.session("pytest") as s:
        yield s


def settle(fn: Callable[[], Any], ok: Callable[[Any], bool],
           timeout: float = 10.0) -> Any:
    """fn() until ok() holds of its value, for at most @timeout seconds:
    an effect on the daemon that comes after the call that caused it (a
    release the library sends once a request's answer is in) is waited
    for, never read once. The last value, whether ok() held or not: the
    caller asserts on it."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if ok(v) or time.monotonic() >= deadline:
            return v
        time.sleep(0.01)


def ints(text: str) -> List[int]:
    """The C client's comma-separated tokens."""
    return [int(t) for t in text.strip().split(",") if t]
