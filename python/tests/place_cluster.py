# SPDX-License-Identifier: MIT
"""Several djinnd on this machine, each on its own loopback address, a
DNS server (dnsmasq) answering for them, and a client that asks that
server through the system's resolver (place_driver.py in a mount
namespace whose /etc/resolv.conf names it): test_place.py and
bench/place-bench.py. Needs root, unshare(1) and dnsmasq; missing()
names what is not there.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

from conftest import DJINNCTL, DJINND, MKMODEL, ROOT, settle, stop_proc

HERE = pathlib.Path(__file__).resolve().parent


def missing() -> str:
    """What this machine lacks for a cluster, or ""."""
    if os.geteuid():
        return "needs root (a mount namespace, DNS on port 53)"
    for tool in ("unshare", "mount"):
        if not shutil.which(tool):
            return f"no {tool}"
    if not (shutil.which("dnsmasq") or os.access("/usr/sbin/dnsmasq",
                                                   os.X_OK)):
        return "no dnsmasq (Debian: dnsmasq-base)"
    probe = subprocess.run(["unshare", "--mount", "true"],
                           capture_output=True)
    if probe.returncode:
        return "unshare --mount fails here: " + probe.stderr.decode()
    return ""


class Cluster:
    """djinnd on loopback addresses 127.A.B.H (H: @hosts' keys, each
    with its memory and --set settings; tls: for those in @tls, else
    plain TCP) and dnsmasq on 127.A.B.153:53, answering djinn.test (every
    host not in @tls), hH.djinn.test and the SRV records
    _djinn._tcp.djinn.test (host @srv_first at priority 0, the others
    at 10), and @names (each name: its hosts)."""

    def __init__(self, tmp: pathlib.Path,
                 hosts: Dict[int, Tuple[str, List[str]]],
                 models: Dict[str, str], srv_first: int = 0,
                 tls: Tuple[int, ...] = (),
                 names: Optional[Dict[str, List[int]]] = None) -> None:
        self.tmp = tmp
        self.tls = tls
        self.names = names or {}
        self.hosts = hosts
        self.srv_first = srv_first
        # an address block of its own: a parallel run does not collide
        r = random.Random(os.getpid() ^ time.monotonic_ns())
        self.net = f"127.{r.randrange(1, 250)}.{r.randrange(1, 250)}"
        self.port = 7411
        self.models = tmp / "models"
        self.models.mkdir()
        for name, args in models.items():
            subprocess.run([sys.executable, str(MKMODEL), *args.split(),
                            str(self.models / name)], check=True,
                           stdout=subprocess.DEVNULL)
        self.procs: Dict[int, subprocess.Popen[bytes]] = {}
        for h in hosts:
            self.start(h)
        self.dns = self._dns()

    def ip(self, h: int) -> str:
        return f"{self.net}.{h}"

    def addr(self, h: int) -> str:
        scheme = "tls" if h in self.tls else "tcp"
        return f"{scheme}:{self.ip(h)}:{self.port}"

    def admin(self, h: int) -> str:
        return str(self.tmp / f"a{h}.sock")

    def start(self, h: int) -> None:
        mem, extra = self.hosts[h]
        log = open(self.tmp / f"djinnd{h}.log", "a")
        self.procs[h] = subprocess.Popen(
            [DJINND, "-f", "-l", self.addr(h), "-a", self.admin(h),
             "--backend", "cpu", "-m", mem, "--model-dir",
             str(self.models), "--metrics", f"tcp:{self.ip(h)}:9464",
             *[a for s in extra for a in ("--set", s)]],
            stdout=log, stderr=subprocess.STDOUT)
        assert settle(lambda: self._listens(h), bool, timeout=20), \
            f"djinnd {h} did not listen"

    def _listens(self, h: int) -> bool:
        if self.procs[h].poll() is not None:
            raise RuntimeError((self.tmp / f"djinnd{h}.log").read_text())
        try:
            socket.create_connection((self.ip(h), self.port), 1).close()
            s = socket.socket(socket.AF_UNIX)
            s.connect(self.admin(h))
            s.close()
            return True
        except OSError:
            return False

    def metric(self, h: int, name: str) -> float:
        """The sum of metric family @name's samples on host @h."""
        url = f"http://{self.ip(h)}:9464/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        return sum(float(line.rsplit(" ", 1)[1])
                   for line in text.splitlines()
                   if line.startswith(name + "{") or
                   line.startswith(name + " "))

    def kill(self, h: int) -> None:
        self.procs[h].send_signal(signal.SIGKILL)
        self.procs[h].wait(10)

    def ctl(self, h: int, *args: str) -> Any:
        out = subprocess.run([DJINNCTL, "-s", self.admin(h), "-j", *args],
                             check=True, capture_output=True,
                             text=True).stdout
        return json.loads(out) if out.strip() else None

    def _dns(self) -> "subprocess.Popen[bytes]":
        dns = self.ip(153)
        args = [shutil.which("dnsmasq") or "/usr/sbin/dnsmasq",
                "--keep-in-foreground", "--no-resolv", "--no-hosts",
                "--bind-interfaces", f"--listen-address={dns}",
                "--port=53", "--log-facility=" + str(self.tmp / "dns.log"),
                "--log-queries", "--pid-file="]
        for name, hs in self.names.items():
            args += [f"--host-record={name},{self.ip(h)}" for h in hs]
        for h in self.hosts:
            if h in self.tls:  # named in @names alone
                continue
            args.append(f"--host-record=djinn.test,{self.ip(h)}")
            args.append(f"--host-record=h{h}.djinn.test,{self.ip(h)}")
            # srv_first first (priority 0), the others behind it
            prio = 0 if h == self.srv_first else 10
            args.append(f"--srv-host=_djinn._tcp.djinn.test,h{h}.djinn.test,"
                        f"{self.port},{prio},1")
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        (self.tmp / "resolv.conf").write_text(f"nameserver {dns}\n")

        def answers() -> bool:
            if proc.poll() is not None:
                raise RuntimeError("dnsmasq: " + proc.stderr.read().decode()
                                   if proc.stderr else "dnsmasq exited")
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:  # a query for "." of type A: any answer will do
                s.settimeout(0.2)
                s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00"
                         b"\x00\x00\x00\x01\x00\x01", (dns, 53))
                return bool(s.recv(512))
            except OSError:
                return False
            finally:
                s.close()

        assert settle(answers, bool, timeout=20), "dnsmasq did not answer"
        return proc

    def client(self) -> "Client":
        return Client(self.tmp / "resolv.conf")

    def stop(self) -> None:
        for p in [*self.procs.values(), self.dns]:
            stop_proc(p)


class Client:
    """place_driver.py in a mount namespace that sees the test's DNS."""

    def __init__(self, resolv: pathlib.Path) -> None:
        # a probe's bound, never reached but under heavy load: every
        # host answers well within it, and the choice waits only for them
        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"),
                   DJINN_PROBE_MS=os.environ.get("DJINN_PROBE_MS", "20000"))
        script = (f"mount --bind {resolv} /etc/resolv.conf && exec "
                  f"{sys.executable} {HERE / 'place_driver.py'}")
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env, text=True)

    def __call__(self, op: str, **kw: Any) -> Dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the driver exited on {op}")
        out: Dict[str, Any] = json.loads(line)
        return out

    def ok(self, op: str, **kw: Any) -> Dict[str, Any]:
        out = self(op, **kw)
        assert "error" not in out, (op, kw, out)
        return out

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(20)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
