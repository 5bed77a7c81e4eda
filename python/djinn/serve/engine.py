# SPDX-License-Identifier: MIT
"""Generation for djinn serve: prompts run as contexts of a djinnd
session, one session per tenant (API key), one token a step so that a
turn ends at its end-of-turn token, its stop strings or its budget
without appending what nobody asked for.

A step with no logit bias is djinnd's own decode (CTX_DECODE of one
token, sampled on the device from the context's last logits, seeded per
position); with a logit bias the server reads the logits, biases and
picks the token, and prefills it. Logprobs come from the logits the
token was drawn from, before temperature."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Set, Tuple, \
    TypeVar, Union

import numpy as np

from .. import errors as djerr
from .._core import Connection, Session, connect
from ..model import Model
from .checkpoint import Checkpoint, Detokenizer, ToolCall, parse_tool_calls
from .conversations import Conv, Conversations
from .errors import ApiError, from_djinn


@dataclass
class Params:
    """One request's sampling and stopping, checked (api.py)."""

    max_tokens: Optional[int] = None  # None: the room the context has
    temperature: float = 1.0
    top_p: float = 1.0
    seed: Optional[int] = None
    stop: List[str] = field(default_factory=list)
    logprobs: bool = False
    top_logprobs: int = 0
    logit_bias: Dict[int, float] = field(default_factory=dict)
    n: int = 1
    tools: Optional[Set[str]] = None  # tool names: parse tool calls
    forced: List[int] = field(default_factory=list)  # the reply begins so
    forced_done: bool = False  # ... and is whole (a call with no freedom)
    expected_wait: Optional[float] = None  # a tool's time, said by the client


@dataclass
class Logprob:
    token: int
    logprob: float
    top: List[Tuple[int, float]]


@dataclass
class Piece:
    """Choice @index grew by @text (maybe empty: held back) with token
    @token (None: text that waited for the end)."""

    index: int
    text: str
    token: Optional[int] = None
    logprob: Optional[Logprob] = None


@dataclass
class Done:
    """Choice @index ended for @reason ("stop", "length",
    "tool_calls"), after @tokens generated; @rest is content not given
    out yet, @calls its tool calls; @cached of its prompt's tokens were
    a live context's already, not prefilled again."""

    index: int
    reason: str
    tokens: int
    rest: str = ""
    calls: List[ToolCall] = field(default_factory=list)
    cached: int = 0


Event = Union[Piece, Done]
#: the server's own session (checking the models at start; --open)
SERVER_TENANT = "djinn-serve"
T = TypeVar("T")
log = logging.getLogger("djinn.serve")


class TextFilter:
    """A choice's text as it may be given out: cut at the first stop
    string, held back while its end may begin one, and, where tools are
    on, content only up to the first <tool_call> (what follows is parsed
    at the end)."""

    def __init__(self, stop: List[str], tool_open: Optional[str]) -> None:
        self.stop = [s for s in stop if s]
        self.watch = self.stop + ([tool_open] if tool_open else [])
        self.tool_open = tool_open
        self.text = ""
        self.sent = 0
        self.stopped = False
        self.tool_at: Optional[int] = None
        self._maxstop = max((len(s) for s in self.stop), default=0)

    def push(self, delta: str) -> str:
        if self.stopped or not delta:
            return ""
        start = max(0, len(self.text) - self._maxstop + 1)
        self.text += delta
        cut = min((i for i in (self.text.find(s, start) for s in self.stop)
                   if i >= 0), default=-1)
        if cut >= 0:
            self.text = self.text[:cut]
            self.stopped = True
        return self._emit(self.stopped)

    def _held(self) -> int:
        n = 0
        for s in self.watch:
            for k in range(min(len(s) - 1, len(self.text)), n, -1):
                if self.text.endswith(s[:k]):
                    n = k
                    break
        return n

    def _emit(self, final: bool) -> str:
        limit = len(self.text) if final else len(self.text) - self._held()
        if self.tool_open is not None:
            j = self.text.find(self.tool_open)
            if j >= 0:
                self.tool_at = j if self.tool_at is None else self.tool_at
                limit = min(limit, self.tool_at)
        if limit <= self.sent:
            return ""
        out = self.text[self.sent:limit]
        self.sent = limit
        return out

    def finish(self) -> Tuple[str, str]:
        """What was not given out: the content held back, and (tools on)
        the text from the first <tool_call> on."""
        if self.tool_open is not None and self.tool_at is None:
            j = self.text.find(self.tool_open)
            self.tool_at = j if j >= 0 else None
        end = len(self.text) if self.tool_at is None else self.tool_at
        end = max(end, self.sent)
        content, tools = self.text[self.sent:end], self.text[end:]
        self.sent = len(self.text)
        return content, tools


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def _logprob(logits: np.ndarray, tid: int, top: int) -> Logprob:
    lp = _log_softmax(logits)
    tops: List[Tuple[int, float]] = []
    if top:
        idx = np.argsort(-lp, kind="stable")[:top]
        tops = [(int(i), float(lp[i])) for i in idx]
    return Logprob(tid, float(lp[tid]), tops)


def _pick(logits: np.ndarray, p: Params, rng: np.random.Generator) -> int:
    """The next token from biased @logits: the first largest at
    temperature 0, else drawn from the fewest most likely reaching
    top_p."""
    if p.temperature == 0:
        return int(np.argmax(logits))
    lp = _log_softmax(logits / p.temperature)
    order = np.argsort(-lp, kind="stable")
    probs = np.exp(lp[order])
    if p.top_p < 1:
        keep = int(np.searchsorted(np.cumsum(probs), p.top_p)) + 1
        order, probs = order[:keep], probs[:keep]
    probs = probs / probs.sum()
    return int(order[rng.choice(len(order), p=probs)])


class Load:
    """Requests waiting (taken, no step run yet) and running, for the
    metrics: each request's Ticket moves once from one to the other, and
    out."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting = 0
        self.running = 0
        self.prompt_tokens = 0  # prompt tokens asked for, in all
        self.cached_tokens = 0  # ... of them a live context's already
        self.generated = 0

    def ticket(self) -> "Ticket":
        with self.lock:
            self.waiting += 1
        return Ticket(self)


class Ticket:
    """One request's place in Load: start() when its first step runs,
    done() however it ends (again is nothing)."""

    def __init__(self, load: Load) -> None:
        self.load = load
        self.state = 0  # 0 waiting, 1 running, 2 done

    def start(self) -> None:
        with self.load.lock:
            if self.state == 0:
                self.load.waiting -= 1
                self.load.running += 1
                self.state = 1

    def done(self) -> None:
        with self.load.lock:
            if self.state == 0:
                self.load.waiting -= 1
            elif self.state == 1:
                self.load.running -= 1
            self.state = 2


class Tenant:
    """An API key's session on djinnd, the models open in it, and its
    conversations' contexts."""

    def __init__(self, conn: Connection, label: str, contexts: int,
                 ttl: float, delegated: bool = False) -> None:
        self.label = label
        self.session: Session = conn.session(label, delegated=delegated)
        self.models: Dict[str, Model] = {}
        self.lock = threading.Lock()
        self.convs = Conversations(contexts, ttl)

    def model(self, name: str) -> Model:
        with self.lock:
            m = self.models.get(name)
            if m is None:
                m = self.session.model(name)
                self.models[name] = m
            return m

    def close(self) -> None:
        self.convs.close()
        self.session.close()

    def room(self, what: Callable[[], T]) -> T:
        """what(), freeing the least recently used idle contexts while
        djinnd has no room for it."""
        while True:
            try:
                return what()
            except (djerr.OutOfMemory, djerr.NoSpace,
                    djerr.QuotaExceeded):
                if not self.convs.evict_one():
                    raise


class Engine:
    """The models served, on one connection to djinnd at @addr. Each
    tenant keeps up to @contexts idle contexts for @ttl seconds (0: no
    conversation goes on: every prompt is prefilled whole)."""

    def __init__(self, addr: Optional[str], models: Dict[str, Checkpoint],
                 reconnect: Optional[float] = None, contexts: int = 32,
                 ttl: float = 600.0, delegated: bool = False) -> None:
        self.checkpoints = models
        self.contexts = contexts
        self.ttl = ttl
        # each key's sessions are its tenant's on djinnd (a delegation
        # djinnd.conf grants this server's user), not the server's
        self.delegated = delegated
        self.loads = {name: Load() for name in models}
        self.token_bytes: Dict[str, int] = {}  # a context token's KV bytes
        self.conn = connect(addr, reconnect=reconnect)
        self._tenants: Dict[str, Tenant] = {}
        self._opening: Dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.max_tokens: Dict[str, int] = {}
        # each model opened once now: a name djinnd does not have, or
        # weights its checkpoint's tokenizer does not fit, fail the start
        t = self.tenant(SERVER_TENANT)
        for name, ck in models.items():
            info = t.model(name).info
            if info.vocab < ck.vocab:
                raise ValueError(
                    f"model {name}: its tokenizer has {ck.vocab} tokens, "
                    f"its weights {info.vocab}")
            self.max_tokens[name] = info.max_tokens
            self.token_bytes[name] = 2 * info.n_layer * info.n_kv_head * (
                info.hidden // info.n_head) * (
                4 if info.dtype == "float32" else 2)
        self.capacity = self.conn.server_info().capacity

    def tenant(self, label: str) -> Tenant:
        """@label's tenant, its session opened at its first request
        (outside the engine's lock: a round trip to djinnd)."""
        with self._lock:
            t = self._tenants.get(label)
            if t is not None:
                return t
            opening = self._opening.setdefault(label, threading.Lock())
        with opening:  # one opener per tenant; the others wait for it
            with self._lock:
                t = self._tenants.get(label)
            if t is None:
                t = Tenant(self.conn, label, self.contexts, self.ttl,
                           self.delegated and label != SERVER_TENANT)
                with self._lock:
                    self._tenants[label] = t
            return t

    def close(self) -> None:
        with self._lock:
            for t in self._tenants.values():
                t.close()
            self._tenants.clear()
        self.conn.close()

    # ------------------------------------------------------------------

    def check_room(self, model: str, prompt: int, p: Params,
                   what: str) -> int:
        """The tokens a choice may generate, or a 400 naming the
        model's context length."""
        room = self.max_tokens[model] - prompt
        want = p.max_tokens if p.max_tokens is not None else room
        if room <= 0 or want > room:
            asked = (f"you requested {prompt + want} tokens ({prompt} in "
                     f"{what}, {want} in the completion)"
                     if p.max_tokens is not None else
                     f"your {what} resulted in {prompt} tokens")
            raise ApiError(
                400, f"This model's maximum context length is "
                f"{self.max_tokens[model]} tokens. However, {asked}. "
                f"Please reduce the length of the {what}.",
                "messages" if what == "messages" else "prompt",
                "context_length_exceeded")
        return want

    def kv_usage(self, model: str) -> float:
        """The KV cache bytes the tenants' contexts of @model hold, idle
        and in use, over the device's capacity."""
        held = 0
        with self._lock:
            tenants = list(self._tenants.values())
        for t in tenants:
            with t.convs.lock:
                convs = t.convs.idle + t.convs.busy
            held += sum(len(c.ids) for c in convs if c.model == model)
        held *= self.token_bytes[model]
        return held / self.capacity if self.capacity else 0.0

    def generate(self, tenant: str, model: str, prompt: List[int],
                 p: Params, first_index: int = 0,
                 ticket: Optional[Ticket] = None) -> Iterator[Event]:
        """Run @prompt and its @p.n choices, in order, as events, going on
        from the tenant's context that shares the most of it. Errors
        djinnd gives come out as ApiError. However the iteration ends,
        the contexts are the tenant's conversations again (freed after an
        error: what they hold is not known)."""
        ck = self.checkpoints[model]
        budget = self.check_room(model, len(prompt) + len(p.forced), p,
                                 "messages")
        mine: List[Conv] = []
        ok = False
        t: Optional[Tenant] = None
        try:
            if ticket is not None:
                ticket.start()
            t = self.tenant(tenant)
            m = t.model(model)
            conv, cached = t.convs.take(model, prompt)
            load = self.loads[model]
            with load.lock:
                load.prompt_tokens += len(prompt)
                load.cached_tokens += cached
            if conv is not None and cached < len(conv.ids):
                # a branch: the fork goes on, the original stays
                try:
                    fork = t.room(conv.ctx.fork)
                finally:
                    t.convs.give_back(conv)
                conv = Conv(model, fork, conv.ids[:cached])
                mine.append(conv)
                conv.ctx.truncate(cached)
            elif conv is None:
                conv = Conv(model, t.room(m.context))
            if conv not in mine:
                mine.append(conv)
            t.convs.busy_add(conv)
            want_logits = p.logprobs or bool(p.logit_bias)
            feed = prompt[cached:] + p.forced
            t.room(lambda: conv.ctx.prefill(feed, logits=want_logits))
            conv.ids = prompt + p.forced
            first = conv.ctx.logits.numpy().reshape(-1) \
                if want_logits and conv.ctx.logits is not None else None
            forks: List[Conv] = []
            for _ in range(p.n - 1):
                f = Conv(model, t.room(conv.ctx.fork), list(conv.ids))
                mine.append(f)
                t.convs.busy_add(f)
                forks.append(f)
            for i, c in enumerate(forks + [conv]):
                yield from self._choice(c, ck, p, first_index + i, first,
                                        budget, cached, t)
            ok = True
        except djerr.Error as e:
            raise from_djinn(e) from None
        except GeneratorExit:  # the client left: the contexts are sound
            ok = True
            raise
        finally:
            for c in mine:
                assert t is not None
                t.convs.unbusy(c)
                if ok and self.contexts:
                    t.convs.give_back(c)
                else:
                    try:
                        c.ctx.free()
                    except djerr.Error:
                        pass

    def _choice(self, conv: Conv, ck: Checkpoint, p: Params, index: int,
                logits: Optional[np.ndarray], budget: int, cached: int,
                t: Tenant) -> Iterator[Event]:
        ctx = conv.ctx
        load = self.loads[conv.model]
        det = Detokenizer(ck, tools=p.tools is not None)
        out = TextFilter(p.stop, ck.tool_open if p.tools else None)
        for f in p.forced:
            yield Piece(index, out.push(det.add(f)), f)
        made = len(p.forced)
        reason = "length"
        seed = p.seed if p.seed is not None else \
            int.from_bytes(np.random.bytes(8), "little")
        seed = (seed + index * 0x9E3779B97F4A7C15) & (2**64 - 1)
        rng = np.random.default_rng(seed)
        bias = None
        if p.logit_bias:
            bias = np.zeros(ctx.model.info.vocab, np.float32)
            for tid, b in p.logit_bias.items():
                bias[tid] = b
        need = p.logprobs or bias is not None
        if p.forced_done:
            reason = "stop"
            budget = 0
        while made < budget and not out.stopped:
            if bias is not None:
                assert logits is not None
                tid = _pick(logits + bias, p, rng)
                nxt = ctx.prefill([tid], logits=True)
            else:
                tid = int(ctx.generate(
                    1, temperature=p.temperature, top_p=p.top_p,
                    seed=seed, logits=need)[0])
                nxt = ctx.logits
            made += 1
            conv.ids.append(tid)
            with load.lock:
                load.generated += 1
            lp = _logprob(logits, tid, p.top_logprobs) \
                if p.logprobs and logits is not None else None
            logits = nxt.numpy().reshape(-1) if need and nxt is not None \
                else None
            if tid in ck.eos:
                reason = "stop"
                yield Piece(index, "", tid, lp)
                break
            yield Piece(index, out.push(det.add(tid)), tid, lp)
        if out.stopped:
            reason = "stop"
        text = out.push(det.flush())
        if text:
            yield Piece(index, text)
        rest, tool_text = out.finish()
        calls: List[ToolCall] = []
        if p.tools is not None and tool_text:
            _, calls = parse_tool_calls(tool_text, p.tools)
        if calls:
            reason = "tool_calls"
            self._tool_wait(t, conv, p)
        else:
            rest += tool_text
        yield Done(index, reason, made, rest, calls, cached)

    @staticmethod
    def _tool_wait(t: Tenant, conv: Conv, p: Params) -> None:
        """The reply asks for tools: until the conversation's next
        request, its context waits (IO_WAIT, with the client's estimate
        or the tenant's tools' measured time), so that djinnd may move
        its KV cache out for the wait and bring it back by its end. The
        next step on the context ends the wait."""
        expected = p.expected_wait or t.convs.tool_estimate()
        try:
            conv.ctx.signal("io_wait", expected)
        except djerr.Error as e:  # advisory: the reply stands
            log.warning("IO_WAIT for a conversation of %s: %s", t.label,
                        e)
            return
        conv.waiting_since = time.monotonic()
