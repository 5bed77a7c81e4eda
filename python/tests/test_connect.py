# SPDX-License-Identifier: MIT
"""Connections and sessions: what djinnd says, what moves, errors with
the daemon's messages, closed objects, agents' tool calls seen by the
daemon."""

import errno
import os
import socket
import threading
import time

import numpy as np
import pytest

import djinn

from conftest import BACKEND, settle


def test_connect_refused(tmp_path):
    with pytest.raises(djinn.Error) as e:
        djinn.connect(f"unix:{tmp_path}/nobody.sock")
    assert e.value.errno in (errno.ENOENT, errno.ECONNREFUSED)
    with pytest.raises(djinn.InvalidArgument):
        djinn.connect("carrier-pigeon:home")


def test_reconnect_after_crash(tmp_path):
    """djinnd killed and started afresh on the same socket: a connection
    comes back by itself (reconnects), its session, which the new djinnd
    does not have, raises NotFound saying it was lost, and new sessions
    work on the same Connection; one with reconnecting off raises
    ConnectionLost."""
    from conftest import Daemon

    d = Daemon(tmp_path)
    try:
        c = djinn.connect(d.addr, reconnect=20)
        off = djinn.connect(d.addr, reconnect=0)
        s = c.session()
        sid = s.id
        t = s.tensor(np.arange(4, dtype=np.float32), text=False)
        assert c.reconnects == 0
        d.crash()
        with pytest.raises(djinn.ConnectionLost):
            off.ping()
        d.start()
        # the keeper dials again at once, for the session's lease
        assert settle(lambda: c.reconnects, lambda n: n == 1) == 1
        with pytest.raises(djinn.NotFound) as e:
            t.numpy()
        assert f"session {sid} was lost" in str(e.value)
        with c.session() as s2:
            s2.heartbeat()
            x = s2.tensor(np.ones(3, np.float32), text=False)
            assert x.numpy().tolist() == [1.0, 1.0, 1.0]
        c.ping()
        c.close()
        off.close()
    finally:
        d.stop()


def test_server_info_ping_stats(conn):
    info = conn.server_info()
    assert info.backend.split(":")[0] == BACKEND  # "cuda:0"
    assert info.capacity == 256 << 20 or BACKEND != "cpu"
    assert info.granularity > 0 and info.version >= 1
    assert conn.transport == "unix"
    before = conn.stats()
    conn.ping()
    after = conn.stats()
    assert after.requests == before.requests + 1
    assert after.responses == before.responses + 1
    assert after.bytes_sent > before.bytes_sent


def test_session_id_and_attach(daemon, conn):
    s = conn.session("alice", priority=6)
    sid, token = s.id, s.token
    assert len(token) == 16
    s.heartbeat()
    assert s.token == token  # the secret alone, not the lease after it
    listed = {e["id"]: e for e in daemon.ctl("session", "list")}
    assert listed[sid]["label"] == "alice" and listed[sid]["priority"] == 6
    with djinn.connect(daemon.addr) as other:
        t = other.attach(sid, token)
        assert t.id == sid
        with pytest.raises(djinn.PermissionDenied):
            other.attach(sid, bytes(16))
        for bad in (b"short", token + bytes(16)):
            with pytest.raises(djinn.InvalidArgument):
                other.attach(sid, bad)
    s.close()
    assert sid not in {e["id"] for e in daemon.ctl("session", "list")}


def test_bad_arguments(conn):
    with pytest.raises(djinn.InvalidArgument) as e:
        conn.session(priority=9)
    assert "0 to 7" in str(e.value)
    with conn.session() as s:
        with pytest.raises(djinn.InvalidArgument):
            s.signal("thinking")
        with pytest.raises(djinn.InvalidArgument):
            with s.tool_call(expected=0):
                pass


def test_closed_objects(daemon):
    c = djinn.connect(daemon.addr)
    s = c.session()
    m = s.model("tiny-gpt2")
    ctx = m.context()
    t = s.tensor(np.zeros(4, np.float32), text=False)
    s.close()
    for call in (lambda: s.id, lambda: ctx.generate(1), lambda: len(ctx),
                 lambda: t.numpy(), lambda: m.context(),
                 lambda: s.signal("idle")):
        with pytest.raises(djinn.Closed) as e:
            call()
        assert "closed" in str(e.value)
    s.close()  # twice: nothing
    c.close()
    with pytest.raises(djinn.Closed):
        c.ping()
    with pytest.raises(djinn.Closed):
        c.session()


def _phase(daemon, sid, want):
    """The session's phase on the daemon, once it is @want or after a
    bound (a signal through /dev/djinn reaches djinnd after the call)."""
    return settle(lambda: {e["id"]: e for e in daemon.ctl(
        "session", "list")}[sid]["phase"], lambda p: p == want)


def test_tool_call_seen_by_the_daemon(daemon, session):
    sid = session.id
    with session.tool_call(expected=30):
        assert _phase(daemon, sid, "io_wait") == "io_wait"
    assert _phase(daemon, sid, "compute") == "compute"
    # the block's exception goes on; COMPUTE is sent all the same
    with pytest.raises(KeyError):
        with session.tool_call(expected=5):
            raise KeyError("tool failed")
    assert _phase(daemon, sid, "compute") == "compute"
    session.signal("decode", expected=0.5)
    assert _phase(daemon, sid, "decode") == "decode"
    session.signal("idle")
    assert _phase(daemon, sid, "idle") == "idle"
    session.heartbeat()


def test_a_silent_host_costs_a_dns_address_its_probe_time_alone(
        monkeypatch):
    """dns:NAME:PORT asks every address at once, each for
    $DJINN_PROBE_MS at most: a host that accepts and never answers makes
    it fail then, naming the host, and leaves no thread or connection
    behind."""
    monkeypatch.setenv("DJINN_PROBE_MS", "300")
    threads = len(os.listdir("/proc/self/task"))
    srv = socket.socket()
    held = []
    try:
        srv.bind(("127.0.0.1", 0))
        srv.listen(64)
        port = srv.getsockname()[1]
        threading.Thread(target=lambda: [held.append(srv.accept()[0])
                                         for _ in range(64)],
                         daemon=True).start()
        for _ in range(3):
            t0 = time.monotonic()
            with pytest.raises(djinn.Error) as e:
                djinn.connect(f"dns:127.0.0.1:{port}")
            assert time.monotonic() - t0 < 3
            assert e.value.errno == errno.EHOSTUNREACH
            assert f"tcp:127.0.0.1:{port}" in str(e.value)
            assert "no answer in time" in str(e.value)
        # the probes' threads and connections are gone, not waiting on
        # it: the acceptor's is the one thread more than before
        assert settle(lambda: len(os.listdir("/proc/self/task")),
                      lambda n: n <= threads + 1, timeout=5) <= threads + 1
    finally:
        srv.close()
        for s in held:
            s.close()
