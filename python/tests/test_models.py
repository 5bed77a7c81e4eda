# SPDX-License-Identifier: MIT
"""Models and contexts: the same tokens and logits as the C client
(tools/djinn over libdjinn) for the same model, prompt and sampling seed;
forks, resets; breakpoints and steering; uploads by fingerprint; errors
with the daemon's messages."""

import numpy as np
import pytest

import djinn

from conftest import ints

PROMPT = [3, 141, 59, 26, 5]


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama"])
@pytest.mark.parametrize("sampling", [
    {},
    {"temperature": 0.8, "top_k": 40, "seed": 7},
    {"temperature": 1.3, "top_p": 0.9, "seed": 11},
])
def test_tokens_equal_the_c_client(daemon, session, tmp_path, name,
                                   sampling):
    """The same calls give the same tokens: one decode of 12 as the C
    client makes it, and (with --logits) twelve decodes of one, whose
    logits must be its logits bit for bit."""
    args = ["generate", "-m", name, "-t", ",".join(map(str, PROMPT)),
            "-n", "12"]
    for k, v in sampling.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    m = session.model(name)

    want = ints(daemon.tool(*args))
    ctx = m.context()
    ctx.prefill(PROMPT)
    assert ctx.generate(12, **sampling).tolist() == want
    assert len(ctx) == len(PROMPT) + 12

    want = ints(daemon.tool(*args, "--logits", str(tmp_path / "logits")))
    rows = np.fromfile(tmp_path / "logits", np.float32).reshape(
        13, m.info.vocab)
    ctx = m.context()
    first = ctx.prefill(PROMPT, logits=True)
    assert first is ctx.logits and first.shape == (1, m.info.vocab)
    assert ctx.prefill([PROMPT[0]]) is None and ctx.logits is None
    ctx.reset()
    ctx.prefill(PROMPT, logits=True)
    got, logits = [], [ctx.logits.numpy().reshape(-1)]
    for _ in range(12):
        got += ctx.generate(1, logits=True, **sampling).tolist()
        logits.append(ctx.logits.numpy().reshape(-1))
    assert got == want
    assert np.array_equal(np.stack(logits), rows)


def test_info_fork_reset(session):
    m = session.model("tiny-llama")
    i = m.info
    assert (i.name, i.arch, i.dtype, i.n_layer, i.vocab) == (
        "tiny-llama", "llama", "float32", 3, 256)
    assert i.n_kv_head == 2 and i.resident == 3 and i.ring == 0
    assert i.bytes == i.weights and len(i.fingerprint) == 64
    a = m.context(32)
    a.prefill(PROMPT)
    b = a.fork()
    assert len(b) == len(PROMPT)
    ta = a.generate(6)
    tb = b.generate(6)
    assert ta.tolist() == tb.tolist()
    a.reset()
    assert len(a) == 0
    a.prefill(PROMPT)
    assert a.generate(6).tolist() == ta.tolist()


def test_truncate(session):
    ctx = session.model("tiny-llama").context(32)
    ctx.prefill(PROMPT, logits=True)
    t = ctx.generate(5).tolist()
    with pytest.raises(djinn.InvalidArgument, match="holds"):
        ctx.truncate(len(PROMPT) + 6)
    assert len(ctx) == len(PROMPT) + 5
    ctx.truncate(len(PROMPT) + 1)
    assert len(ctx) == len(PROMPT) + 1 and ctx.logits is None
    ctx.prefill(t[1:2])
    assert ctx.generate(3).tolist() == t[2:]


def test_breakpoints_resume_unchanged(session):
    m = session.model("tiny-gpt2")
    ref = m.context()
    ref.prefill(PROMPT)
    want = ref.generate(5)
    ctx = m.context()
    pauses = list(ctx.prefill(PROMPT, break_at=1))
    assert [p.layer for p in pauses] == [1]
    assert pauses[0].hidden.shape == (len(PROMPT), m.info.hidden)
    steps = ctx.generate(5, break_at=0)
    n = 0
    for p in steps:
        assert p.layer == 0 and p.hidden.shape == (1, m.info.hidden)
        n += 1
    assert n == 5 and steps.done
    assert steps.tokens.tolist() == want.tolist()


def test_steering(session):
    m = session.model("tiny-llama")
    a, b = m.context(), m.context()
    sa = a.prefill(PROMPT, break_at=1, logits=True)
    sb = b.prefill(PROMPT, break_at=1, logits=True)
    pa, pb = next(sa), next(sb)
    h = pa.hidden.numpy()
    # its own hidden state back: the same bits as not steering
    pa.resume(h.copy())
    pb.resume()
    assert np.array_equal(a.logits.numpy(), b.logits.numpy())
    # a steered one: other logits, and the decode goes on from it
    c = m.context()
    sc = c.prefill(PROMPT, break_at=1, logits=True)
    for p in sc:
        p.resume(p.hidden.numpy() + 3.0)
    assert not np.array_equal(c.logits.numpy(), a.logits.numpy())
    assert len(c.generate(3)) == 3
    # wrong shapes and dtypes: refused, the pause still there
    d = m.context()
    pd = next(d.prefill(PROMPT, break_at=0))
    with pytest.raises(djinn.InvalidArgument):
        pd.resume(np.zeros((2, 2), np.float32))
    with pytest.raises(djinn.InvalidArgument):
        pd.resume(np.zeros(pd.hidden.shape, np.int32))
    with pytest.raises(djinn.Busy):
        d.generate(1)
    pd.resume()
    with pytest.raises(djinn.Error):
        pd.resume()
    assert len(d.generate(1)) == 1


def test_upload_by_fingerprint(daemon, session):
    path = daemon.models / "tiny-llama"
    m = session.upload_model(path)
    assert m.name.startswith("upload-")
    byname = session.model("tiny-llama")
    assert m.info.fingerprint == byname.info.fingerprint
    c1, c2 = m.context(), byname.context()
    c1.prefill(PROMPT)
    c2.prefill(PROMPT)
    assert c1.generate(6).tolist() == c2.generate(6).tolist()
    # again, from another connection: only fingerprints cross
    with djinn.connect(daemon.addr) as conn, conn.session() as s:
        before = conn.stats().bytes_sent
        again = s.upload_model(path)
        moved = conn.stats().bytes_sent - before
        assert again.name == m.name
    assert moved < 4096, moved
    with pytest.raises(djinn.InvalidArgument):
        session.upload_model(daemon.dir / "nowhere")


def test_errors_carry_the_daemons_messages(session):
    with pytest.raises(djinn.NotFound) as e:
        session.model("no-such-model")
    assert "no-such-model" in e.value.message
    with pytest.raises(djinn.InvalidArgument):
        session.model("../etc")
    m = session.model("tiny-gpt2")
    with pytest.raises(djinn.InvalidArgument) as e:
        m.context(1000)
    assert "1 to 64" in e.value.message
    ctx = m.context(8)
    with pytest.raises(djinn.InvalidArgument) as e:
        ctx.prefill([1, 2, 300])
    assert "300" in e.value.message
    with pytest.raises(djinn.InvalidArgument):
        ctx.prefill([[1, 2]])
    with pytest.raises(djinn.InvalidArgument):
        ctx.prefill([])
    ctx.prefill([1, 2, 3, 4, 5])
    with pytest.raises(djinn.NoSpace):
        ctx.generate(4)
    assert len(ctx) == 5  # unchanged
    with pytest.raises(djinn.InvalidArgument):
        ctx.generate(1, top_p=0)
    with pytest.raises(djinn.InvalidArgument):
        ctx.generate(1, break_at=2)
    with pytest.raises(djinn.Busy):
        m.close()
    ctx.free()
    with pytest.raises(djinn.Closed):
        ctx.generate(1)
    m.close()
    with pytest.raises(djinn.Closed):
        m.context()


def test_stale_pause_after_reset(session):
    m = session.model("tiny-gpt2")
    ctx = m.context()
    old = next(ctx.generate(2, break_at=0)) if ctx.prefill(PROMPT) is None \
        else None
    ctx.reset()
    ctx.prefill(PROMPT)
    new = ctx.generate(2, break_at=0)
    with pytest.raises(djinn.Closed):
        old.resume()
    with pytest.raises(djinn.Closed):
        old.hidden.numpy()
    assert new.run().done and len(new.tokens) == 2
    assert len(ctx.generate(1)) == 1


def test_model_close_after_the_daemon_went(tmp_path):
    """A close that fails (the daemon died) still frees the model once:
    closing again, or collecting it, touches nothing freed."""
    from conftest import Daemon

    d = Daemon(tmp_path)
    try:
        conn = djinn.connect(d.addr)
        s = conn.session()
        m = s.model("tiny-gpt2")
        d.stop()
        with pytest.raises(djinn.Error):
            m.close()
        m.close()  # nothing: it was freed
        del m
        conn.close()
    finally:
        if d.proc.poll() is None:
            d.stop()

