# SPDX-License-Identifier: MIT
"""Tensors, graphs of ops and lazy results: bytes moved only when read,
and only those asked; DLPack through numpy; the daemon's messages for a
bad graph; arrays djinn cannot take refused with the reason."""

import numpy as np
import pytest

import djinn
from conftest import settle
from djinn import ops


def test_upload_download_write(session):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = session.tensor(a, text=False)
    assert t.shape == (2, 3, 4) and t.dtype == "float32" and t.nbytes == 96
    assert np.array_equal(t.numpy(), a)
    t.write(np.full(4, -1, np.float32), offset=4)
    b = a.copy().reshape(-1)
    b[4:8] = -1
    assert np.array_equal(t.numpy().reshape(-1), b)
    z = session.zeros((5, 2), "int32")
    assert np.array_equal(z.numpy(), np.zeros((5, 2), np.int32))
    for dt in ("float16", "int64", "uint8"):
        x = np.arange(6).astype(dt)
        assert np.array_equal(session.tensor(x, text=False).numpy(), x)
    t.release()
    with pytest.raises(djinn.Closed):
        t.numpy()


def test_text_dedup(daemon, session, conn):
    w = np.random.default_rng(7).standard_normal((256, 256)).astype(
        np.float32)
    session.tensor(w)
    with djinn.connect(daemon.addr) as c2, c2.session() as s2:
        before = c2.stats()
        again = s2.tensor(w)
        moved = c2.stats().bytes_sent - before.bytes_sent
        assert again.deduplicated
        assert np.array_equal(again.numpy(), w)
    # the fingerprint crossed, not the 256 KiB
    assert moved < 1024, moved


def test_refusals(session):
    with pytest.raises(djinn.InvalidArgument) as e:
        session.tensor(np.zeros((4, 4), np.float32)[:, ::2])
    assert "C-contiguous" in str(e.value)
    with pytest.raises(djinn.InvalidArgument) as e:
        session.tensor(np.zeros(3, np.float64))
    assert "float64" in str(e.value)
    with pytest.raises(djinn.InvalidArgument):
        session.tensor(np.zeros((1,) * 9, np.float32))
    with pytest.raises(djinn.InvalidArgument):
        session.zeros((2,), "complex64")
    t = session.tensor(np.zeros(4, np.float32), text=False)
    with pytest.raises(djinn.InvalidArgument):
        t.write(np.zeros(4, np.int32))
    for off in (2 ** 62, -1, 3):  # past the end, however it would wrap
        with pytest.raises(djinn.InvalidArgument):
            t.write(np.ones(2, np.float32), offset=off)
    assert np.array_equal(t.numpy(), np.zeros(4, np.float32))
    # another byte order: converted, not sent swapped
    be = np.arange(3, dtype=">f4")
    assert np.array_equal(session.tensor(be, text=False).numpy(), [0, 1, 2])


def _splitmix_next(state):
    z = (state + ops.SAMPLE_GAMMA) % 2 ** 64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2 ** 64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2 ** 64
    return z ^ (z >> 31)


def test_sample_op(session):
    """ops.sample(): greedy is argmax; temperature over every token is
    the draw the protocol documents (one splitmix64 output, the first
    token in id order whose running mass passes it), reproduced here
    in numpy; a NaN and bad parameters come back in-band."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 300)) * 3).astype(np.float32)
    x[3, 77] = np.nan
    params = ops.sample_params([(0.0, 0, 1.0, 0), (1.0, 0, 1.0, 11),
                                (0.5, 0, 1.0, 12), (1.0, 0, 1.0, 13),
                                (-1.0, 0, 1.0, 14)])
    with session.graph() as g:
        (tok,) = g.run(ops.sample(g.input(x, text=False), params))
    t = tok.numpy()
    assert tok.dtype == "int64" and t.shape == (5,)
    assert t[0] == x[0].argmax()
    for row, temp, seed in ((1, 1.0, 11), (2, 0.5, 12)):
        w = np.exp((x[row].astype(np.float64) - x[row].max()) / temp)
        u = (_splitmix_next(seed) >> 11) * 2.0 ** -53 * w.sum()
        assert t[row] == int(np.searchsorted(np.cumsum(w), u, "right"))
    assert t[3] == -1 - 77
    assert t[4] == ops.SAMPLE_BAD_PARAMS


def test_graph_ops(session):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = rng.standard_normal((8, 3)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    with session.graph() as g:
        xv = g.input(x, text=False)
        y = xv @ w + b
        r1, r2, r3, r4 = g.run(y, ops.relu(y) * 2.0, ops.softmax(y),
                               ops.argmax(y))
        ref = x @ w + b
        np.testing.assert_allclose(r1.numpy(), ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(r2.numpy(), np.maximum(ref, 0) * 2,
                                   rtol=1e-5, atol=1e-5)
        e = np.exp(ref - ref.max(-1, keepdims=True))
        np.testing.assert_allclose(r3.numpy(), e / e.sum(-1, keepdims=True),
                                   rtol=1e-5, atol=1e-6)
        assert r4.dtype == "int64"
        assert np.array_equal(r4.numpy().reshape(-1), ref.argmax(-1))
    with session.graph() as g:
        a = g.input(np.arange(12, dtype=np.float32).reshape(3, 4),
                    text=False)
        t = ops.permute(ops.reshape(a, (4, 3)), (1, 0))
        s = ops.slice(a, 1, 1, 3)
        c = ops.concat([a, a], axis=0)
        # ops' arithmetic, an array on either side
        ones = np.ones((3, 4), np.float32)
        ra, rs2 = g.run(ops.add(ones, a), ops.sub(a, ones))
        assert np.array_equal(ra.numpy(), 1 + np.arange(12).reshape(3, 4))
        assert np.array_equal(rs2.numpy(), np.arange(12).reshape(3, 4) - 1)
        gam = np.ones(4, np.float32)
        ln = ops.layernorm(a, gam, np.zeros(4, np.float32))
        rt, rs, rc, rl = g.run(t, s, c, ln)
        base = np.arange(12, dtype=np.float32).reshape(3, 4)
        assert np.array_equal(rt.numpy(), base.reshape(4, 3).T)
        assert np.array_equal(rs.numpy(), base[:, 1:3])
        assert np.array_equal(rc.numpy(), np.concatenate([base, base]))
        m = base.mean(-1, keepdims=True)
        v = base.var(-1, keepdims=True)
        np.testing.assert_allclose(rl.numpy(), (base - m) / np.sqrt(v + 1e-5),
                                   rtol=1e-4, atol=1e-4)


def test_graph_errors(session):
    with session.graph() as g:
        a = g.input(np.zeros((2, 3), np.float32), text=False)
        b = g.input(np.zeros((4, 5), np.float32), text=False)
        y = a @ b
        with pytest.raises(djinn.InvalidArgument) as e:
            g.run(y)
        assert "matmul" in e.value.message, e.value.message
    with session.graph() as g, session.graph() as h:
        a = g.input(np.zeros(2, np.float32), text=False)
        b = h.input(np.zeros(2, np.float32), text=False)
        with pytest.raises(djinn.InvalidArgument):
            a + b


def test_lazy_reads_move_only_what_is_asked(conn, session):
    n = 1 << 20  # 4 MiB of f32
    with session.graph() as g:
        x = g.input(np.arange(n, dtype=np.float32), text=False)
        g.output(x * 1.0)
        req = g.submit().wait()  # its answer crosses now, not in a read
        assert req.done and req.run_ns > 0 and len(req) == 1
        r = req[0]
        assert r.shape == (n,) and r.nbytes == 4 * n
        before = conn.stats().bytes_received
        part = r.read(1000, 256)
        moved = conn.stats().bytes_received - before
        assert np.array_equal(part, np.arange(1000, 1256, dtype=np.float32))
        assert 1024 <= moved < 1024 + 512, moved
        before = conn.stats().bytes_received
        assert r[5] == 5.0
        assert np.array_equal(r[10:14], [10, 11, 12, 13])
        moved = conn.stats().bytes_received - before
        assert moved < 1024, moved
        with pytest.raises(djinn.InvalidArgument):
            r.read(n - 1, 2)
        with pytest.raises(IndexError):
            r[n]


def test_lazy_rows_and_dlpack(conn, session):
    a = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    with session.graph() as g:
        r, = g.run(g.input(a, text=False) * 1.0)
        before = conn.stats().bytes_received
        rows = r[8:10, 4]
        moved = conn.stats().bytes_received - before
        assert np.array_equal(rows, a[8:10, 4])
        assert moved < 2 * 32 * 4 + 512, moved
        d = np.from_dlpack(r)
        assert np.array_equal(d, a)
        assert r.__dlpack_device__() == (1, 0)
        assert np.array_equal(np.asarray(r), a)
        # read once: after numpy() nothing more crosses
        before = conn.stats().bytes_received
        assert np.array_equal(r[3], a[3])
        assert conn.stats().bytes_received == before


def test_pending_request_keeps_its_inputs(session):
    """A graph freed (its uploaded inputs let go) before its request ran:
    the request still has them."""
    big = np.ones((512, 512), np.float32)
    rs = []
    for _ in range(8):  # queued behind each other: some still pending
        with session.graph() as g:
            r, = g.run(ops.softmax(g.input(big, text=False) @ big))
        rs.append(r)
    for r in rs:
        np.testing.assert_allclose(r[0, :4], 1 / 512, rtol=1e-5)


def test_result_as_input_and_release(session):
    with session.graph() as g:
        r, = g.run(g.input(np.ones(8, np.float32), text=False) * 3.0)
    with session.graph() as h:
        r2, = h.run(h.input(r) + h.input(np.ones(8, np.float32),
                                         text=False))
        assert np.array_equal(r2.numpy(), np.full(8, 4, np.float32))
    r.release()
    with pytest.raises(djinn.NotFound):
        r.read()


def test_read_into(conn, session):
    a = np.arange(1000, dtype=np.float32)
    with session.graph() as g:
        r, = g.run(g.input(a, text=False) * 2.0)
        buf = np.zeros(300, np.float32)
        got = r.read(100, 300, out=buf)
        assert got is buf and np.array_equal(buf, a[100:400] * 2)
        big = np.zeros(1000, np.float32)
        assert np.array_equal(r.read(0, 10, out=big), a[:10] * 2)
        assert np.array_equal(big[10:], np.zeros(990, np.float32))
        for bad in (np.zeros(300, np.float64), np.zeros(10, np.float32),
                    np.zeros((300, 2), np.float32)[:, 0]):
            with pytest.raises(djinn.InvalidArgument):
                r.read(100, 300, out=bad)


def _tensors(daemon, sid, at_most=None):
    """The session's tensors on the daemon; with @at_most, once they are
    down to it (or after a bound: the caller's assert says how many)."""
    def count():
        return {e["id"]: e for e in daemon.ctl("session", "list")}[sid][
            "tensors"]
    if at_most is None:
        return count()
    return settle(count, lambda n: n <= at_most)


def test_collected_objects_go_on_the_daemon(daemon, session):
    """Results, tensors and contexts a program drops are freed on the
    daemon as soon as the last reference goes (no cycle waits for the
    collector), so a loop does not fill the session."""
    sid = session.id
    base = _tensors(daemon, sid)
    w = session.tensor(np.ones((64, 64), np.float32))
    for i in range(50):
        with session.graph() as g:
            r, = g.run(g.input(np.full((8, 64), i, np.float32),
                               text=False) @ w)
            assert r[0, 0] == 64 * i
        del r, g
    assert _tensors(daemon, sid, base + 2) <= base + 2
    m = session.model("tiny-gpt2")
    for _ in range(20):
        ctx = m.context()
        ctx.prefill([1, 2, 3], logits=True)
        ctx.logits.read(0, 4)
    del ctx
    assert _tensors(daemon, sid, base + 2) <= base + 2
    # 4 MiB results, 300 of them, on a 256 MiB device: only if each goes
    for i in range(300):
        with session.graph() as g:
            r, = g.run(g.input(np.zeros(1 << 20, np.float32), text=False)
                       * 1.0)
            assert r[i] == 0.0
    del r, g  # the last result holds its request, and that its input
    # a long decode keeping its logits at every step
    ctx = m.context()
    ctx.prefill([1, 2, 3])
    for _ in range(40):
        ctx.generate(1, logits=True)
        ctx.logits.read(0, 2)
    assert _tensors(daemon, sid, base + 3) <= base + 3
