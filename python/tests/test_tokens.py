# SPDX-License-Identifier: MIT
"""Bearer tokens djinnd mints (djinnctl token mint|list|revoke), the
socket whose clients they name (server.token_auth), its health
(djinnctl health, GET /readyz) and STATUS: one djinnd of its own, with
a token socket beside its uid-named one, and the metrics endpoint."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import signal
import socket
import stat
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any, Iterator, List

import pytest

import djinn

from conftest import DJINNCTL, DJINND, free_port, settle, stop_proc


class TokenDaemon:
    def __init__(self, tmp: pathlib.Path, *extra: str) -> None:
        self.tmp = tmp
        self.extra = extra
        self.uid_sock = tmp / "d.sock"
        self.pods = tmp / "pods.sock"
        self.admin = tmp / "a.sock"
        self.port = free_port()
        self.log = tmp / "djinnd.log"
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [DJINND, "-f", "-l", f"unix:{self.uid_sock}", "-l",
             f"unix:{self.pods}", "--set",
             f"server.token_auth=unix:{self.pods}", "-a", str(self.admin),
             "--backend", "cpu", "-m", "64M", "--handover",
             str(self.tmp / "handover.sock"), "--metrics",
             f"tcp:127.0.0.1:{self.port}",
             *[a for e in self.extra for a in ("--set", e)]],
            stdout=open(self.log, "a"), stderr=subprocess.STDOUT)
        assert settle(self.ready, bool, timeout=20), self.log.read_text()

    def ready(self) -> bool:
        return self.health().returncode == 0

    def health(self) -> "subprocess.CompletedProcess[str]":
        return subprocess.run([DJINNCTL, "-s", str(self.admin), "-j",
                               "health"], capture_output=True, text=True)

    def ctl(self, *args: str, check: bool = True
            ) -> "subprocess.CompletedProcess[str]":
        return subprocess.run([DJINNCTL, "-s", str(self.admin), *args],
                              capture_output=True, text=True, check=check)

    def mint(self, tenant: str, *extra: str) -> Any:
        return json.loads(self.ctl("-j", "token", "mint", tenant,
                                   *extra).stdout)

    def tenants(self) -> List[str]:
        out = self.ctl("-j", "session", "list").stdout
        return sorted(s["tenant"] for s in json.loads(out))

    def stop(self) -> None:
        stop_proc(self.proc)


@pytest.fixture
def td(tmp_path: pathlib.Path) -> Iterator[TokenDaemon]:
    d = TokenDaemon(tmp_path)
    yield d
    d.stop()


def test_a_token_names_the_tenant_on_the_token_socket(
        td: TokenDaemon) -> None:
    t = td.mint("team-a")
    assert len(t["token"]) == 64 and t["tenant"] == "team-a"
    assert 1 <= t["id"] < 1 << 48 and t["expires_ns"] == 0
    with djinn.connect(f"unix:{td.pods}", token=t["token"]) as c:
        with c.session():
            assert td.tenants() == ["team-a"]
        st = c.status()  # a tenant is known: STATUS answers
        assert st.ready and st.capacity == 64 << 20
    # the token file (DJINN_TOKEN_FILE), as a device plugin writes it
    f = td.tmp / "token"
    f.write_text(t["token"] + "\n")
    os.environ["DJINN_TOKEN_FILE"] = str(f)
    try:
        with djinn.connect(f"unix:{td.pods}") as c, c.session():
            assert td.tenants() == ["team-a"]
    finally:
        del os.environ["DJINN_TOKEN_FILE"]


def test_without_a_good_token_nothing_but_hello(td: TokenDaemon) -> None:
    with djinn.connect(f"unix:{td.pods}") as c:
        with pytest.raises(djinn.PermissionDenied) as e:
            c.session()
        assert "no tenant until a bearer token names it" in str(e.value)
        with pytest.raises(djinn.PermissionDenied):
            c.status()
    with pytest.raises(djinn.PermissionDenied) as e:
        djinn.connect(f"unix:{td.pods}", token="f" * 64)
    assert "names no tenant" in str(e.value)
    assert td.tenants() == []


def test_the_uid_socket_keeps_naming_by_uid(td: TokenDaemon) -> None:
    t = td.mint("team-a")
    with djinn.connect(f"unix:{td.uid_sock}", token=t["token"]) as c, \
            c.session():
        assert td.tenants() == [f"uid:{os.getuid()}"]


def test_a_token_client_cannot_borrow_its_uid(td: TokenDaemon) -> None:
    t = td.mint("team-a")
    with djinn.connect(f"unix:{td.pods}", token=t["token"]) as c:
        with pytest.raises(djinn.PermissionDenied) as e:
            c.session("team-b", delegated=True)
        assert "not TCP, not server.token_auth's" in str(e.value)
        # another tenant's session, even of its own uid: not attachable
        with djinn.connect(f"unix:{td.uid_sock}") as u, u.session() as s:
            with pytest.raises(djinn.PermissionDenied):
                c.attach(s.id, s.token)


def test_revoke_expire_and_list(td: TokenDaemon) -> None:
    a = td.mint("team-a")
    b = td.mint("team-b", "--ttl", "1s")
    assert b["expires_ns"] > time.time_ns()
    listed = td.ctl("token", "list").stdout
    assert "team-a" in listed and a["token"] not in listed
    assert b["token"] not in listed
    ids = {e["id"]: e["tenant"]
           for e in json.loads(td.ctl("-j", "token", "list").stdout)}
    assert ids == {a["id"]: "team-a", b["id"]: "team-b"}
    kept = djinn.connect(f"unix:{td.pods}", token=a["token"])
    td.ctl("token", "revoke", str(a["id"]))
    with pytest.raises(djinn.PermissionDenied):
        djinn.connect(f"unix:{td.pods}", token=a["token"])
    with kept, kept.session():  # a connection it named stays
        assert td.tenants() == ["team-a"]
    r = td.ctl("token", "revoke", str(a["id"]), check=False)
    assert r.returncode == 1 and "ENOENT" in r.stderr
    # b runs out after its second
    assert settle(lambda: td.ctl("-j", "token", "list").stdout,
                  lambda out: json.loads(out) == [], timeout=10) == "[]\n"
    with pytest.raises(djinn.PermissionDenied):
        djinn.connect(f"unix:{td.pods}", token=b["token"])


def test_mint_refuses_what_djinnd_names_itself(td: TokenDaemon) -> None:
    for name in ("uid:0", "tcp:10.0.0.1", "unknown"):
        r = td.ctl("token", "mint", name, check=False)
        assert r.returncode == 1 and "EINVAL" in r.stderr, (name, r)
    r = td.ctl("token", "mint", "a", "--ttl", "400d", check=False)
    assert r.returncode == 2, r
    assert td.ctl("-j", "token", "list").stdout == "[]\n"


def test_minted_tokens_outlive_djinnd(td: TokenDaemon) -> None:
    t = td.mint("team-a")
    kept = td.tmp / "minted-tokens"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert t["token"] not in kept.read_text()  # its hash alone
    td.stop()
    td.start()
    with djinn.connect(f"unix:{td.pods}", token=t["token"]) as c, \
            c.session():
        assert td.tenants() == ["team-a"]


def test_a_planned_restart_keeps_the_tokens_tenant(td: TokenDaemon) -> None:
    t = td.mint("team-a")
    c = djinn.connect(f"unix:{td.pods}", token=t["token"])
    s = c.session()
    pid = json.loads(td.ctl("-j", "restart", "now").stdout)["pid"]
    assert pid != td.proc.pid
    assert settle(lambda: td.proc.poll(), lambda rc: rc is not None,
                  timeout=30) == 0
    assert settle(td.ready, bool, timeout=30)
    # the connection was carried over, named by its token, not its uid
    s2 = c.session()
    assert td.tenants() == ["team-a", "team-a"]
    assert c.reconnects == 0
    s.close()
    s2.close()
    c.close()
    # the successor is not td.proc, which has exited: stop it
    os.kill(pid, signal.SIGTERM)
    assert settle(lambda: td.health().returncode, lambda rc: rc != 0,
                  timeout=20) == 1


def test_health_and_readyz(td: TokenDaemon) -> None:
    r = td.health()
    assert r.returncode == 0, r.stderr
    h = json.loads(r.stdout)
    assert h["ready"] is True and h["reason"] == ""
    assert h["max_sessions"] == 65536 and h["sessions"] == 0
    assert [d["name"] for d in h["devices"]] == ["cpu"]
    assert h["devices"][0]["capacity"] == 64 << 20
    url = f"http://127.0.0.1:{td.port}/readyz"
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200 and resp.read() == b"ready\n"
    # gone: not ready, and djinnctl says why
    td.proc.send_signal(signal.SIGTERM)
    td.proc.wait(10)
    r = td.health()
    assert r.returncode == 1 and "cannot connect" in r.stderr


def _relay(listen: str, target: str, seen: "list[bytes]",
           uid: int = -1) -> "subprocess.Popen[str]":
    """A process relaying a unix socket at @listen to @target, printing
    what clients sent as hex lines (into @seen). With @uid, it connects
    to @target first (for the one client it then serves), and listens as
    that user: the kernel names @uid as the socket's server."""
    code = f"""
import os, socket, sys, threading
ups = []
if {uid} >= 0:
    ups.append(socket.socket(socket.AF_UNIX))
    ups[0].connect({target!r})
    os.setgid({uid}); os.setuid({uid})
srv = socket.socket(socket.AF_UNIX)
srv.bind({listen!r}); srv.listen(8)
print("ready", flush=True)
def pipe(a, b, log):
    while True:
        d = a.recv(65536)
        if not d:
            b.close(); return
        if log:
            print(d.hex(), flush=True)
        b.sendall(d)
while True:
    c, _ = srv.accept()
    if ups:
        u = ups.pop()
    else:
        u = socket.socket(socket.AF_UNIX); u.connect({target!r})
    threading.Thread(target=pipe, args=(c, u, True), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c, False), daemon=True).start()
"""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout and p.stdout.readline().strip() == "ready"

    def read() -> None:
        assert p.stdout
        for line in p.stdout:
            seen.append(bytes.fromhex(line.strip()))

    threading.Thread(target=read, daemon=True).start()
    return p


def test_a_token_goes_only_to_a_token_socket_of_root_or_this_user(
        td: TokenDaemon, tmp_path: pathlib.Path) -> None:
    t = td.mint("team-a")
    secret = t["token"].encode()
    # a socket that names its peers by uid never sees the token
    seen: List[bytes] = []
    relay = _relay(str(tmp_path / "uid-relay.sock"), str(td.uid_sock), seen)
    try:
        with djinn.connect(f"unix:{tmp_path}/uid-relay.sock",
                           token=t["token"]) as c, c.session():
            assert td.tenants() == [f"uid:{os.getuid()}"]
        assert seen and secret not in b"".join(seen)
    finally:
        relay.kill()
    # the token socket, through this user's relay: sent, and it works
    seen = []
    relay = _relay(str(tmp_path / "tok-relay.sock"), str(td.pods), seen)
    try:
        with djinn.connect(f"unix:{tmp_path}/tok-relay.sock",
                           token=t["token"]) as c, c.session():
            assert td.tenants() == ["team-a"]
        assert secret in b"".join(seen)
    finally:
        relay.kill()
    if os.geteuid():
        return  # another user's relay needs root to start
    # another user's socket, in a shared directory, that relays the
    # token socket (so it claims to take tokens): refused, unsent
    shared = pathlib.Path(tempfile.mkdtemp(prefix="djinn-shared-"))
    shared.chmod(0o1777)
    seen = []
    relay = _relay(str(shared / "evil.sock"), str(td.pods), seen, uid=65534)
    try:
        with pytest.raises(djinn.PermissionDenied) as e:
            djinn.connect(f"unix:{shared}/evil.sock", token=t["token"],
                          reconnect=0)
        assert "neither root nor this user" in str(e.value)
        assert seen and secret not in b"".join(seen)  # HELLO alone
    finally:
        relay.kill()
        shutil.rmtree(shared, ignore_errors=True)


def test_token_socket_clients_wait_for_auth_apart_from_uids(
        tmp_path: pathlib.Path) -> None:
    """Connections of the token socket that have not sent AUTH count
    against no uid's cap (the uid socket's clients of the same user are
    not locked out by them), at most 64 of them wait at once, and each is
    closed when it has not sent AUTH within frame_timeout."""
    td = TokenDaemon(tmp_path, "server.max_connections_per_uid=4",
                     "server.frame_timeout=1s")
    idle = []
    try:
        for _ in range(64):
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(td.pods))
            idle.append(s)
        with djinn.connect(f"unix:{td.uid_sock}") as c, c.session():
            assert td.tenants() == [f"uid:{os.getuid()}"]
        # the 65th waits for none: refused (-EUSERS, with why), closed
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(td.pods))
        s.settimeout(10)
        got = b""
        while d := s.recv(4096):
            got += d
        s.close()
        assert b"connections of this socket have not sent AUTH yet" in got
        assert (-errno.EUSERS).to_bytes(4, "little", signed=True) in got
        # the silent ones are closed within their frame_timeout (1 s)
        for s in idle:
            s.settimeout(10)
            got = b""
            while True:
                d = s.recv(4096)
                if not d:
                    break
                got += d
            assert got, "closed without a word"
    finally:
        for s in idle:
            s.close()
        td.stop()
