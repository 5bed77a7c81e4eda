# SPDX-License-Identifier: MIT
"""djinn serve (python/djinn/serve) started as its users start it, on
the session's djinnd and the chat model scripts/mkmodel.py --chat wrote,
driven through the real openai SDK: chat and completions, streamed and
not, against djinn generate on the same rendered prompt; errors as the
SDK raises them; tool calls parsed, forced and sent back; API keys.

Skipped, naming the package, where fastapi, uvicorn, jinja2, tokenizers
or openai do not import (make test installs them: mk/python.mk)."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Dict, Iterator, List

import pytest

for _mod in ("openai", "fastapi", "uvicorn", "jinja2", "tokenizers"):
    try:
        __import__(_mod)
    except ImportError:
        pytest.skip(f"djinn serve's tests need the {_mod} package (pip "
                    "install 'djinn[serve]' openai; make test installs "
                    "them)", allow_module_level=True)

import openai  # noqa: E402

from conftest import ROOT, Daemon, ints, settle  # noqa: E402
from djinn.serve.checkpoint import Checkpoint, parse_tool_calls  # noqa
from djinn.serve.engine import TextFilter  # noqa: E402

MODEL = "chat-qwen"
KEYS = {"alice": "sk-alice-" + "a" * 24, "bob": "sk-bob-" + "b" * 24,
        "carol": "sk-carol-" + "c" * 24,
        # send nothing before test_conversation_goes_on
        "dave": "sk-dave-" + "d" * 24, "erin": "sk-erin-" + "e" * 24}


class Server:
    def __init__(self, daemon: Daemon, tmp: pathlib.Path) -> None:
        keys = tmp / "keys"
        keys.write_text("".join(
            f"{t} {hashlib.sha256(k.encode()).hexdigest()}\n"
            for t, k in KEYS.items()) + "# a comment\n")
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "serve.log"
        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "djinn.serve", "--djinnd", daemon.addr,
             "--model-dir", str(daemon.models), "--model", MODEL,
             "--api-keys", str(keys), "--fd", str(self.sock.fileno()),
             "--delegate", "--log-level", "warning"],
            pass_fds=[self.sock.fileno()], env=env,
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("djinn serve exited:\n" +
                                   self.log.read_text())
            try:
                urllib.request.urlopen(self.url + "/health", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("djinn serve did not answer:\n" +
                                       self.log.read_text())
                time.sleep(0.05)

    def client(self, tenant: str = "alice") -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1",
                             api_key=KEYS.get(tenant, tenant),
                             max_retries=0, timeout=60)

    def post(self, path: str, body: bytes, key: str = KEYS["alice"]
             ) -> Any:
        """A raw request: (status, JSON answer)."""
        req = urllib.request.Request(
            self.url + path, data=body, method="POST",
            headers={"Authorization": f"Bearer {key}",
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.sock.close()


@pytest.fixture(scope="module")
def server(daemon: Daemon, tmp_path_factory: Any) -> Iterator[Server]:
    s = Server(daemon, tmp_path_factory.mktemp("serve"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def ck(daemon: Daemon) -> Checkpoint:
    return Checkpoint(str(daemon.models / MODEL))


def reference(daemon: Daemon, ck: Checkpoint, ids: List[int], n: int,
              *extra: str) -> List[int]:
    """djinn generate's tokens for prompt @ids, to the first end of turn
    (kept), at most @n."""
    out = ints(daemon.tool("generate", "-m", MODEL, "-t",
                           ",".join(map(str, ids)), "-n", str(n), *extra))
    for i, t in enumerate(out):
        if t in ck.eos:
            return out[:i + 1]
    return out


def text_of(ck: Checkpoint, toks: List[int]) -> str:
    return ck.decode([t for t in toks if t not in ck.eos])


CHAT = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"}]


# ---------------------------------------------------------------------------
# Chat


def test_models(server: Server) -> None:
    c = server.client()
    ids = [m.id for m in c.models.list()]
    assert ids == [MODEL]
    assert c.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError) as e:
        c.models.retrieve("no-such-model")
    assert "no-such-model" in str(e.value)


def test_chat_greedy_equals_generate(server: Server, daemon: Daemon,
                                     ck: Checkpoint) -> None:
    ids = ck.encode(ck.render(CHAT))
    want = reference(daemon, ck, ids, 24)
    r = server.client().chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=24, temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    ch = r.choices[0]
    assert ch.message.role == "assistant"
    assert ch.message.content == text_of(ck, want)
    assert ch.finish_reason == ("stop" if want[-1] in ck.eos else "length")
    assert r.usage.prompt_tokens == len(ids)
    assert r.usage.completion_tokens == len(want)
    assert r.usage.total_tokens == len(ids) + len(want)


def test_chat_sampled(server: Server, session: Any,
                      ck: Checkpoint) -> None:
    """A seed gives djinnd's own draws, one token a call (djinnd seeds
    each call's stream from the seed and the position), so the same seed
    gives the same reply and another seed another."""
    ids = ck.encode(ck.render(CHAT))
    ctx = session.model(MODEL).context()
    ctx.prefill(ids)
    want: List[int] = []
    while len(want) < 20 and not (want and want[-1] in ck.eos):
        want += ctx.generate(1, temperature=0.9, top_p=0.95,
                             seed=1234).tolist()
    ctx.free()
    c = server.client()
    r = c.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=20,
                                  temperature=0.9, top_p=0.95, seed=1234)
    assert r.choices[0].message.content == text_of(ck, want)
    assert r.usage.completion_tokens == len(want)
    again = c.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=20, temperature=0.9,
        top_p=0.95, seed=1234)
    assert again.choices[0].message.content == \
        r.choices[0].message.content
    other = c.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=20, temperature=0.9,
        top_p=0.95, seed=4321)
    assert other.choices[0].message.content != \
        r.choices[0].message.content


def test_chat_stream(server: Server, ck: Checkpoint) -> None:
    c = server.client()
    full = c.chat.completions.create(model=MODEL, messages=CHAT,
                                     max_tokens=30, temperature=0)
    chunks = list(c.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=30, temperature=0,
        stream=True, stream_options={"include_usage": True}))
    assert all(k.object == "chat.completion.chunk" for k in chunks)
    assert len({k.id for k in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(k.choices[0].delta.content or "" for k in chunks
                   if k.choices)
    assert text == full.choices[0].message.content
    reasons = [k.choices[0].finish_reason for k in chunks if k.choices]
    assert reasons[-1] == full.choices[0].finish_reason
    assert all(r is None for r in reasons[:-1])
    # the usage comes last, alone
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == \
        full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens
    assert all(k.usage is None for k in chunks[:-1])
    # without include_usage: no usage chunk
    plain = list(c.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=5, temperature=0,
        stream=True))
    assert all(k.choices for k in plain)


def test_chat_n_and_logprobs(server: Server, ck: Checkpoint) -> None:
    c = server.client()
    r = c.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=8,
                                  temperature=1.0, seed=7, n=3,
                                  logprobs=True, top_logprobs=3)
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    texts = [ch.message.content for ch in r.choices]
    assert len(set(texts)) > 1, texts  # each choice its own draw
    for ch in r.choices:
        lp = ch.logprobs.content
        assert 1 <= len(lp) <= 8
        for e in lp:
            assert e.logprob <= 0
            assert len(e.top_logprobs) == 3
            tops = [t.logprob for t in e.top_logprobs]
            assert tops == sorted(tops, reverse=True)
            assert e.logprob <= tops[0] + 1e-9
    assert r.usage.completion_tokens == sum(
        len(ch.logprobs.content) for ch in r.choices)
    # greedy: the token taken is the most likely
    g = c.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=6,
                                  temperature=0, logprobs=True,
                                  top_logprobs=1)
    for e in g.choices[0].logprobs.content:
        assert e.token == e.top_logprobs[0].token
        assert e.logprob == pytest.approx(e.top_logprobs[0].logprob)


def test_stop(server: Server, ck: Checkpoint) -> None:
    c = server.client()
    full = c.chat.completions.create(model=MODEL, messages=CHAT,
                                     max_tokens=40, temperature=0)
    text = full.choices[0].message.content
    # a stop string from the middle of what greedy writes
    printable = [i for i in range(4, len(text) - 2)
                 if text[i:i + 2].isprintable() and "\ufffd" not in
                 text[i:i + 2]]
    assert printable, repr(text)
    stop = text[printable[0]:printable[0] + 2]
    cut = text.find(stop)
    r = c.chat.completions.create(model=MODEL, messages=CHAT,
                                  max_tokens=40, temperature=0, stop=[stop])
    assert r.choices[0].message.content == text[:cut]
    assert r.choices[0].finish_reason == "stop"
    chunks = list(c.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=40, temperature=0,
        stop=stop, stream=True))
    assert "".join(k.choices[0].delta.content or "" for k in chunks) == \
        text[:cut]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_logit_bias(server: Server, ck: Checkpoint) -> None:
    a = ck.encode("a")
    assert len(a) == 1
    r = server.client().chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=5, temperature=0,
        logit_bias={str(a[0]): 100})
    assert r.choices[0].message.content == "aaaaa"
    assert r.choices[0].finish_reason == "length"


# ---------------------------------------------------------------------------
# Completions


def test_completions(server: Server, daemon: Daemon,
                     ck: Checkpoint) -> None:
    c = server.client()
    prompt = "The weather in Paris is"
    ids = ck.encode(prompt)
    want = reference(daemon, ck, ids, 16)
    r = c.completions.create(model=MODEL, prompt=prompt, max_tokens=16,
                             temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].text == text_of(ck, want)
    assert r.usage.prompt_tokens == len(ids)
    assert r.usage.completion_tokens == len(want)
    # token ids, echo, logprobs, two prompts at once
    r = c.completions.create(model=MODEL, prompt=[ids, ids[:3]],
                             max_tokens=4, temperature=0, echo=True,
                             logprobs=2)
    assert len(r.choices) == 2
    assert r.choices[0].text.startswith(prompt)
    assert r.choices[0].text[len(prompt):] == text_of(ck, want[:4])
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == 4
    assert lp.text_offset[0] == len(prompt)
    # keyed by text: two tokens that both read U+FFFD are one key
    assert all(1 <= len(t) <= 2 for t in lp.top_logprobs)
    assert all(max(t.values()) >= v - 1e-9 for t, v in
               zip(lp.top_logprobs, lp.token_logprobs))
    assert r.usage.prompt_tokens == len(ids) + 3
    streamed = "".join(k.choices[0].text for k in c.completions.create(
        model=MODEL, prompt=prompt, max_tokens=16, temperature=0,
        stream=True))
    assert streamed == text_of(ck, want)


# ---------------------------------------------------------------------------
# Errors, as the SDK raises them


def test_errors(server: Server) -> None:
    c = server.client()
    cases = [
        (dict(temperature=3), "temperature"),
        (dict(max_tokens=0), "max_tokens"),
        (dict(n=0), "n"),
        (dict(top_logprobs=2), "top_logprobs"),
        (dict(stop=["a", "b", "c", "d", "e"]), "stop"),
        (dict(logit_bias={"99999": 1}), "logit_bias"),
        (dict(frequency_penalty=0.5), "frequency_penalty"),
        (dict(max_tokens=100000), "messages"),
        (dict(response_format={"type": "json_object"}), "response_format"),
        (dict(tool_choice="required"), "tool_choice"),
    ]
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=MODEL, messages=CHAT,
                                      **extra)
        assert e.value.status_code == 400
        assert e.value.body["param"] == param, (extra, e.value.body)
        assert e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL, messages=CHAT,
                                  max_tokens=100000)
    assert e.value.code == "context_length_exceeded"
    assert "maximum context length is 2048 tokens" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model=MODEL, messages=[])
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model=MODEL, messages=[
            {"role": "wizard", "content": "hi"}])
    with pytest.raises(openai.NotFoundError) as e:
        c.chat.completions.create(model="gpt-4o", messages=CHAT)
    assert e.value.code == "model_not_found"
    status, body = server.post("/v1/chat/completions", b"{not json")
    assert status == 400 and body["error"]["code"] == "invalid_json"
    status, body = server.post("/v1/nothing", b"{}")
    assert status == 404 and "error" in body
    # still serving
    assert c.chat.completions.create(model=MODEL, messages=CHAT,
                                     max_tokens=1).choices


def test_keys(server: Server, daemon: Daemon) -> None:
    with pytest.raises(openai.AuthenticationError):
        server.client("sk-wrong").models.list()
    status, body = server.post("/v1/chat/completions", b"{}", key="")
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    # each key's requests run in its tenant's session
    used = ("alice", "bob", "carol")
    for t in used:
        server.client(t).chat.completions.create(
            model=MODEL, messages=CHAT, max_tokens=1)
    # each key's session is its tenant's on djinnd (--delegate): its
    # quotas and shares, not the server's
    tenants = {s["label"]: s["tenant"] for s in
               daemon.ctl("session", "list")}
    assert all(tenants.get(t) == t for t in used), tenants


# ---------------------------------------------------------------------------
# Tool calls

TOOLS = [
    {"type": "function", "function": {
        "name": "get_time", "description": "The time now.",
        "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}}, "required": ["city"]}}},
]


def test_parse_tool_calls() -> None:
    names = {"get_weather", "get_time"}
    content, calls = parse_tool_calls(
        'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": '
        '"get_time", "arguments": {}}\n</tool_call>', names)
    assert content == "Let me look."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"}), ("get_time", {})]
    assert calls[0].id != calls[1].id
    _, calls = parse_tool_calls('<tool_call>{"name": "get_time", '
                                '"arguments": "{}"}</tool_call>', names)
    assert calls[0].arguments == "{}"
    # not calls: the text as it came
    for text in ['<tool_call>{"name": "get_time", "arguments": {}</tool_call>',
                 '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
                 '<tool_call>{"name": "get_time"}</tool_call> and more',
                 '<tool_call>{"arguments": {}}</tool_call>',
                 'no calls at all']:
        content, calls = parse_tool_calls(text, names)
        assert (content, calls) == (text, []), text


def test_text_filter() -> None:
    f = TextFilter(["STOP"], "<tool_call>")
    out = [f.push(d) for d in ["ab", "cS", "T", "OPxyz"]]
    assert out == ["ab", "c", "", ""] and f.stopped and f.text == "abc"
    f = TextFilter([], "<tool_call>")
    assert f.push("hi <tool") == "hi "
    assert f.push("_call>{}") == ""
    assert f.finish() == ("", "<tool_call>{}") and f.tool_at == 3
    f = TextFilter(["x"], None)
    assert f.push("abc") == "abc" and f.finish() == ("", "")
    # what was held back, as it might have begun a stop string or a
    # call, comes out at the end
    f = TextFilter(["world"], None)
    assert f.push("Hello wor") == "Hello " and f.finish() == ("wor", "")
    f = TextFilter([], "<tool_call>")
    assert f.push("a < b, so <") == "a < b, so "
    assert f.finish() == ("<", "")


def test_tool_round_trip(server: Server, daemon: Daemon,
                         ck: Checkpoint) -> None:
    """A forced call (get_time takes no arguments: tool_choice writes it
    whole) comes back as the SDK's tool_calls; its result goes back as a
    tool message, rendered through the template into the next turn."""
    c = server.client()
    r = c.chat.completions.create(
        model=MODEL, messages=CHAT, tools=TOOLS, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content is None
    [call] = ch.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_time"
    assert json.loads(call.function.arguments) == {}
    # streamed, the same call
    chunks = list(c.chat.completions.create(
        model=MODEL, messages=CHAT, tools=TOOLS, temperature=0, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_time"}}))
    deltas = [tc for k in chunks for tc in (k.choices[0].delta.tool_calls
                                            or [])]
    assert [(d.index, d.function.name, d.function.arguments)
            for d in deltas] == [(0, "get_time", "{}")]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # the result, sent back
    turn2 = CHAT + [ch.message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.id,
                     "content": "12:00"}]
    want_ids = ck.encode(ck.render(
        [dict(m, tool_calls=[{"function": {
            "name": "get_time", "arguments": {}}}]) if m["role"] ==
         "assistant" else m for m in turn2], TOOLS))
    assert "<tool_response>\n12:00\n</tool_response>" in ck.decode(want_ids)
    r2 = c.chat.completions.create(model=MODEL, messages=turn2,
                                   tools=TOOLS, tool_choice="none",
                                   max_tokens=6, temperature=0)
    # none: the tools are not rendered, their results are
    assert r2.usage.prompt_tokens == len(ck.encode(ck.render(
        [dict(m, tool_calls=[{"function": {
            "name": "get_time", "arguments": {}}}]) if m["role"] ==
         "assistant" else m for m in turn2])))
    assert r2.choices[0].finish_reason in ("stop", "length")
    auto = c.chat.completions.create(model=MODEL, messages=turn2,
                                     tools=TOOLS, max_tokens=6,
                                     temperature=0)
    assert auto.usage.prompt_tokens == len(want_ids)
    want = reference(daemon, ck, want_ids, 6)
    assert auto.choices[0].message.content == text_of(ck, want)


# ---------------------------------------------------------------------------
# Conversations go on in their contexts


def cached(r: Any) -> int:
    return r.usage.prompt_tokens_details.cached_tokens


def waiting(daemon: Daemon, label: str) -> int:
    """Contexts of @label's session in an IO_WAIT of their own."""
    return sum(x["ctx_waiting"] for x in daemon.ctl("session", "list")
               if x["label"] == label)


def test_conversation_goes_on(server: Server, daemon: Daemon,
                              ck: Checkpoint) -> None:
    """Three turns with tool calls between them: turns two and three
    prefill only their new tokens, the conversation's context waits in
    IO_WAIT while its tools run, and the last answer is the one the whole
    conversation gets from scratch. Another key's requests go on from
    none of it."""
    c = server.client("erin")
    get_time = {"type": "function", "function": {"name": "get_time"}}
    msgs = [{"role": "system", "content": "Three turns, two calls."},
            {"role": "user", "content": "What time is it, twice?"}]
    held = 0
    for turn in range(2):
        r = c.chat.completions.create(
            model=MODEL, messages=msgs, tools=TOOLS, tool_choice=get_time,
            temperature=0, extra_headers={"X-Djinn-Expected-Wait": "30"})
        if turn:  # the context held the whole conversation so far
            assert cached(r) == held
        [call] = r.choices[0].message.tool_calls
        held = r.usage.prompt_tokens + r.usage.completion_tokens
        # the tool runs: the conversation's context waits
        assert settle(lambda: waiting(daemon, "erin"),
                      lambda n: n == 1) == 1
        msgs += [r.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id,
                  "content": f"12:0{turn}"}]
    last = c.chat.completions.create(model=MODEL, messages=msgs,
                                     tools=TOOLS, max_tokens=8,
                                     temperature=0)
    assert cached(last) == held
    assert last.usage.prompt_tokens > held
    if last.choices[0].finish_reason != "tool_calls":
        assert waiting(daemon, "erin") == 0  # its step ended the wait
    # from scratch: djinn generate on the whole conversation, rendered
    ids = ck.encode(ck.render(
        [dict(m, tool_calls=[{"function": {
            "name": "get_time", "arguments": {}}}]) if m["role"] ==
         "assistant" else m for m in msgs], TOOLS))
    assert len(ids) == last.usage.prompt_tokens
    want = text_of(ck, reference(daemon, ck, ids, 8))
    assert last.choices[0].message.content == want
    # a key that never sent anything: nothing of erin's
    fresh = server.client("dave").chat.completions.create(
        model=MODEL, messages=msgs, tools=TOOLS, max_tokens=8,
        temperature=0)
    assert cached(fresh) == 0
    assert fresh.choices[0].message.content == want
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(
            model=MODEL, messages=msgs, max_tokens=1,
            extra_headers={"X-Djinn-Expected-Wait": "soon"})


def test_conversation_branches(server: Server, ck: Checkpoint) -> None:
    """Two conversations that share a beginning: the second goes on from
    the first's context as far as they agree (a fork, cut back), and the
    first still goes on whole."""
    c = server.client("bob")
    base = [{"role": "system", "content": "Branches."},
            {"role": "user", "content": "Tell me about Paris."}]
    one = c.chat.completions.create(model=MODEL, messages=base,
                                    max_tokens=4, temperature=0)
    other = base[:1] + [{"role": "user", "content": "Tell me about Rome."}]
    two = c.chat.completions.create(model=MODEL, messages=other,
                                    max_tokens=4, temperature=0)
    a, b = ck.encode(ck.render(base)), ck.encode(ck.render(other))
    common = next(i for i in range(len(a)) if a[i] != b[i])
    assert cached(two) == common
    follow = base + [{"role": "assistant",
                      "content": one.choices[0].message.content},
                     {"role": "user", "content": "And its weather?"}]
    three = c.chat.completions.create(model=MODEL, messages=follow,
                                      max_tokens=4, temperature=0)
    # the reply's text, tokenised again, may not be the ids the model
    # wrote: it goes on at least from the whole prompt of the first turn
    assert cached(three) >= len(a)


# ---------------------------------------------------------------------------
# The Responses API


def test_responses(server: Server, ck: Checkpoint) -> None:
    """/v1/responses through the SDK: the same reply as chat for the same
    messages, streamed and not; a forced function call whose output goes
    back by previous_response_id, prefilling only the new tokens, and
    answering as the whole conversation sent again; another key's
    response is not found."""
    c = server.client("bob")
    chat = c.chat.completions.create(model=MODEL, messages=CHAT,
                                     max_tokens=16, temperature=0)
    r = c.responses.create(model=MODEL, instructions=CHAT[0]["content"],
                           input=CHAT[1]["content"], max_output_tokens=16,
                           temperature=0)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.output_text == chat.choices[0].message.content
    assert r.status == ("incomplete" if chat.choices[0].finish_reason ==
                        "length" else "completed")
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.usage.output_tokens == chat.usage.completion_tokens
    events = list(c.responses.create(
        model=MODEL, instructions=CHAT[0]["content"],
        input=CHAT[1]["content"], max_output_tokens=16, temperature=0,
        stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response." + r.status
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events
                   if e.type == "response.output_text.delta") == \
        r.output_text
    assert events[-1].response.output_text == r.output_text

    tools = [{"type": "function", "name": "get_time",
              "parameters": {"type": "object", "properties": {}}}]
    ask = [{"role": "user", "content": "What time is it? Responses."}]
    r1 = c.responses.create(model=MODEL, input=ask, tools=tools,
                            tool_choice={"type": "function",
                                         "name": "get_time"},
                            temperature=0)
    [fc] = [o for o in r1.output if o.type == "function_call"]
    assert fc.name == "get_time" and json.loads(fc.arguments) == {}
    assert fc.call_id.startswith("call_")
    result = {"type": "function_call_output", "call_id": fc.call_id,
              "output": "12:00"}
    r2 = c.responses.create(model=MODEL, previous_response_id=r1.id,
                            input=[result], tools=tools,
                            max_output_tokens=4, temperature=0)
    assert r2.usage.input_tokens_details.cached_tokens == \
        r1.usage.input_tokens + r1.usage.output_tokens
    whole = c.responses.create(
        model=MODEL, tools=tools, max_output_tokens=4, temperature=0,
        input=ask + [{"type": "function_call", "call_id": fc.call_id,
                      "name": "get_time", "arguments": "{}"}, result])
    assert whole.output_text == r2.output_text
    assert whole.usage.input_tokens == r2.usage.input_tokens

    with pytest.raises(openai.NotFoundError):
        c.responses.create(model=MODEL, input="x",
                           previous_response_id="resp_nothing")
    with pytest.raises(openai.NotFoundError):
        server.client("carol").responses.create(
            model=MODEL, input="x", previous_response_id=r1.id)
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=MODEL, input=[{"type": "image"}])
    assert e.value.body["param"] == "input"
    with pytest.raises(openai.BadRequestError):
        c.responses.create(model=MODEL, input="x",
                           tools=[{"type": "web_search"}])


def test_responses_items_and_events() -> None:
    """An assistant's text and the calls after it are one turn; a stream
    whose text is only blank before its calls still ends whole, its
    message the text its deltas carried."""
    import anyio

    from djinn.serve import responses
    from djinn.serve.checkpoint import ToolCall
    from djinn.serve.engine import Done, Load, Piece

    msgs = responses.items_to_messages([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "output_text",
                                           "text": "Let me look."}]},
        {"type": "function_call", "call_id": "c1", "name": "f",
         "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"}])
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool"]
    assert [c["id"] for c in msgs[1]["tool_calls"]] == ["c1", "c2"]

    call = ToolCall("call_x", "f", "{}")

    def finish(text: str, done: Done) -> Dict[str, Any]:
        return {"status": "completed",
                "output": responses._output(text, done)}

    async def run() -> List[str]:
        def gen() -> Iterator[Any]:  # a generator, as the engine's
            yield Piece(0, "\n\n")
            yield Done(0, "tool_calls", 3, "", [call])

        return [s async for s in responses._events(
            gen(), {}, finish, Load().ticket())]

    frames = anyio.run(run)
    data = [json.loads(f.split("data: ", 1)[1]) for f in frames]
    assert data[-1]["type"] == "response.completed"
    out = data[-1]["response"]["output"]
    assert [o["type"] for o in out] == ["message", "function_call"]
    assert out[0]["content"][0]["text"] == "\n\n"


# ---------------------------------------------------------------------------
# Many at once, and clients that leave


def test_concurrent(server: Server) -> None:
    c = server.client()
    want = c.chat.completions.create(model=MODEL, messages=CHAT,
                                     max_tokens=16, temperature=0)
    got: Dict[int, str] = {}

    def one(i: int) -> None:
        chunks = c.chat.completions.create(
            model=MODEL, messages=CHAT, max_tokens=16, temperature=0,
            stream=bool(i % 2))
        got[i] = "".join(k.choices[0].delta.content or "" for k in chunks) \
            if i % 2 else chunks.choices[0].message.content

    ts = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert got == {i: want.choices[0].message.content for i in range(8)}


def test_client_leaves(server: Server, daemon: Daemon,
                       ck: Checkpoint) -> None:
    """A stream the client drops stops, and its context is the
    conversation's again: the same prompt then goes on from it."""
    c = server.client("bob")
    msgs = [{"role": "user", "content": "A stream to leave."}]
    stream = c.chat.completions.create(model=MODEL, messages=msgs,
                                       max_tokens=1500, temperature=0,
                                       stream=True)
    next(iter(stream))
    assert settle(lambda: metric(server, "vllm:num_requests_running"),
                  lambda v: v >= 1) >= 1
    stream.close()
    n = len(ck.encode(ck.render(msgs)))

    def again() -> Any:
        return c.chat.completions.create(
            model=MODEL, messages=msgs, max_tokens=1,
            temperature=0).usage.prompt_tokens_details.cached_tokens

    assert settle(again, lambda v: v == n - 1, 30) == n - 1


def metric(server: Server, name: str) -> float:
    """/metrics' sample of @name for the model."""
    text = urllib.request.urlopen(server.url + "/metrics",
                                  timeout=30).read().decode()
    want = f'{name}{{model_name="{MODEL}"}} '
    for line in text.splitlines():
        if line.startswith(want):
            return float(line[len(want):])
    raise AssertionError(f"no {want!r} in /metrics:\n{text}")


def test_metrics(server: Server) -> None:
    """The gauges a router reads: requests waiting and running (none once
    every request is answered), the conversations' KV cache over the
    device, and prefix hits counted in tokens."""
    c = server.client("carol")
    before = metric(server, "vllm:prefix_cache_hits_total")
    asked = metric(server, "vllm:prefix_cache_queries_total")
    msgs = [{"role": "user", "content": "Count my tokens."}]
    r1 = c.chat.completions.create(model=MODEL, messages=msgs,
                                   max_tokens=2, temperature=0)
    r2 = c.chat.completions.create(model=MODEL, messages=msgs,
                                   max_tokens=2, temperature=0)
    assert cached(r2) == r2.usage.prompt_tokens - 1
    assert metric(server, "vllm:prefix_cache_queries_total") - asked == \
        r1.usage.prompt_tokens + r2.usage.prompt_tokens
    assert metric(server, "vllm:prefix_cache_hits_total") - before == \
        cached(r1) + cached(r2)
    assert 0 < metric(server, "vllm:kv_cache_usage_perc") < 1
    assert metric(server, "vllm:generation_tokens_total") >= 4
    # nothing in flight: waiting and running settle to 0 (a stream left
    # by test_client_leaves included)
    for g in ("vllm:num_requests_waiting", "vllm:num_requests_running"):
        assert settle(lambda: metric(server, g), lambda v: v == 0) == 0


# ---------------------------------------------------------------------------
# The command line refuses what it cannot serve, saying why


def serve_cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    return subprocess.run([sys.executable, "-m", "djinn.serve",
                           "--djinnd", daemon.addr, *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_cli_refuses(daemon: Daemon, tmp_path: pathlib.Path) -> None:
    models = str(daemon.models)
    r = serve_cli(daemon, "--model-dir", models)
    assert r.returncode == 2 and "--api-keys FILE, or --open" in r.stderr
    r = serve_cli(daemon, "--model-dir", models, "--open", "--host",
                  "0.0.0.0")
    assert r.returncode == 2 and "loopback addresses only" in r.stderr
    r = serve_cli(daemon, "--model-dir", models, "--api-keys",
                  str(tmp_path / "none"))
    assert r.returncode == 1 and "none" in r.stderr
    bad = tmp_path / "keys"
    bad.write_text("alice 0123\n")
    r = serve_cli(daemon, "--model-dir", models, "--api-keys", str(bad))
    assert r.returncode == 1 and f"{bad}:1: not TENANT SHA256" in r.stderr
    # a model without a tokenizer, and one djinnd does not have
    r = serve_cli(daemon, "--model-dir", models, "--open", "--model",
                  "tiny-gpt2")
    assert r.returncode == 1 and "no tokenizer.json" in r.stderr
    # a tenant djinnd does not let this user act for
    keys = tmp_path / "mallory"
    keys.write_text("mallory " + "ab" * 32 + "\n")
    r = serve_cli(daemon, "--model-dir", models, "--model", MODEL,
                  "--api-keys", str(keys), "--delegate")
    assert r.returncode == 1 and "tenant mallory" in r.stderr and \
        "[tenant.mallory] delegates" in r.stderr, r.stderr
    other = tmp_path / "models"
    other.mkdir()
    (other / "ghost").symlink_to(daemon.models / MODEL)
    r = serve_cli(daemon, "--model-dir", str(other), "--open")
    assert r.returncode == 1 and "ghost" in r.stderr, r.stderr
