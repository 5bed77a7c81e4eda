# SPDX-License-Identifier: MIT
"""Models djinnd runs, and contexts whose KV caches stay on the device.

    m = session.model("tiny-gpt2")
    ctx = m.context()
    ctx.prefill([3, 141, 59])
    tokens = ctx.generate(16, temperature=0.8, top_k=40, seed=1)

Breakpoints and steering: with ``break_at=L`` a step pauses after layer
L, and the step is an iterator of its pauses:

    for pause in ctx.generate(16, break_at=6):
        pause.resume(pause.hidden.numpy() + v)   # or leave it: unchanged

The tokens are then ``steps.tokens``. The weights never cross the wire,
token ids go in and come out (djinn.AutoTokenizer turns text into them).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import weakref
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Union, overload

import numpy as np

from . import _lib
from ._core import (
    DTYPES,
    Result,
    Session,
    Tensor,
    _last_error,
    as_array,
    call,
    got,
)
from .errors import InvalidArgument, closed, error

ARCHS = {1: "gpt2", 2: "llama", 3: "qwen2", 4: "qwen3", 5: "mistral"}


@dataclass(frozen=True)
class ModelInfo:
    """A model as the daemon described it (djinn_model_info())."""

    name: str
    arch: str
    dtype: str
    vocab: int
    n_layer: int
    hidden: int
    n_head: int
    n_kv_head: int
    max_tokens: int
    bytes: int
    fingerprint: str
    weights: int
    ring: int
    resident: int


class Model:
    """A model open in a session; its contexts belong to it."""

    def __init__(self, session: Session, ptr: int) -> None:
        self.session = session
        self._ptr: Optional[int] = ptr
        i = _lib.ModelInfo()
        call("djinn_model_info", ptr, ctypes.byref(i))
        self.info = ModelInfo(
            i.name.decode(), ARCHS.get(i.arch, str(i.arch)),
            DTYPES.get(i.dtype, str(i.dtype)), i.vocab, i.n_layer, i.hidden,
            i.n_head, i.n_kv_head, i.max_tokens, i.bytes,
            bytes(i.fp).hex(), i.weights, i.ring, i.resident)

    @classmethod
    def _open(cls, session: Session, name: str) -> "Model":
        out = ctypes.c_void_p()
        call("djinn_model_open", session._p(), name.encode(),
             ctypes.byref(out))
        return cls(session, got(out))

    @classmethod
    def _upload(cls, session: Session, path: Union[str, os.PathLike]) -> "Model":
        p = os.fspath(path)
        if not os.path.isdir(p):
            raise InvalidArgument(
                22, f"{p}: not a directory (a model directory holds "
                "config.json and its safetensors)")
        out = ctypes.c_void_p()
        call("djinn_model_upload", session._p(), p.encode(),
             ctypes.byref(out))
        return cls(session, got(out))

    def _p(self) -> int:
        if self._ptr is None:
            raise closed(f"model {self.info.name}")
        self.session._p()
        return self._ptr

    @property
    def name(self) -> str:
        return self.info.name

    def context(self, max_tokens: Optional[int] = None) -> "Context":
        """A new, empty context with room for @max_tokens (None: the
        model's longest)."""
        out = ctypes.c_void_p()
        call("djinn_ctx_new", self._p(), max_tokens or 0, ctypes.byref(out))
        return Context(self, got(out))

    def close(self) -> None:
        """Close it (Busy while it has contexts)."""
        if self._ptr is not None and not self.session.closed:
            ret = _lib.lib().djinn_model_close(self._ptr)
            if ret == -errno.EBUSY:  # it stays open
                raise error(ret, _last_error(), "djinn_model_close")
            self._ptr = None  # freed whatever the daemon answered
            if ret < 0:
                raise error(ret, _last_error(), "djinn_model_close")
        self._ptr = None

    def __del__(self) -> None:  # its contexts hold it while they live
        with contextlib.suppress(Exception):
            self.close()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<djinn.Model {self.info.name} {self.info.arch} "
                f"{self.info.n_layer} layers>")


def _tokens(ids: Any, vocab: int) -> Any:
    a = np.asarray(ids)
    if a.ndim != 1:
        raise InvalidArgument(
            22, f"token ids in one dimension, not {a.ndim} (a batch is a "
            "context per row)")
    if a.size and a.dtype.kind not in "iu":
        raise InvalidArgument(22, f"token ids are integers, not {a.dtype}")
    if a.size and (a.min() < 0 or a.max() >= vocab):
        raise InvalidArgument(
            22, f"token ids from 0 to {vocab - 1}, not "
            f"{a.min() if a.min() < 0 else a.max()}")
    return np.ascontiguousarray(a, dtype=np.int32)


class Context:
    """A context: a KV cache on the device that steps append to."""

    def __init__(self, model: Model, ptr: int) -> None:
        self.model = model
        self._ptr: Optional[int] = ptr
        self._epoch = 0  # bumped when its step stubs go
        self.logits: Optional[Result] = None
        # weak: a Steps holds its context, not the other way round
        self._steps_ref: Optional["weakref.ref[Steps]"] = None

    def _p(self) -> int:
        if self._ptr is None:
            raise closed("the context")
        self.model._p()
        return self._ptr

    def __len__(self) -> int:
        return call("djinn_ctx_len", self._p())

    def free(self) -> None:
        """Drop it on the daemon, with its step results."""
        if self._ptr is not None and not self.model.session.closed:
            p, self._ptr = self._ptr, None
            self._epoch += 1
            call("djinn_ctx_free", p)
        self._ptr = None

    def __del__(self) -> None:  # collected: its cache goes
        with contextlib.suppress(Exception):
            self.free()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.free()

    def reset(self) -> None:
        """Empty the cache (abandoning a paused step)."""
        call("djinn_ctx_reset", self._p())
        self._epoch += 1
        self.logits = None
        self._steps = None

    def signal(self, phase: Union[str, int],
               expected: Optional[float] = None) -> None:
        """Session.signal() for this context alone: an IO_WAIT of its
        own (with an estimate, seconds) lets djinnd move this context's
        KV cache to host memory for the wait and bring it back by its
        end; a step on it, or COMPUTE, ends the wait. So one session
        can hold many conversations, each waiting on its own tools."""
        from ._core import _ns, _phase

        call("djinn_ctx_signal", self._p(), _phase(phase), _ns(expected))

    def truncate(self, n: int) -> None:
        """Keep the first @n tokens of the cache (no more than it
        holds), abandoning a paused step; there are no last logits until
        the next step, so prefill before a generate."""
        if not 0 <= n <= 2**32 - 1:
            raise InvalidArgument(22, f"truncate to {n} tokens: 0 or more")
        call("djinn_ctx_truncate", self._p(), n)
        self._epoch += 1
        self.logits = None
        self._steps = None

    def fork(self) -> "Context":
        """A new context with a copy of this one's cache (on the
        device)."""
        out = ctypes.c_void_p()
        call("djinn_ctx_fork", self._p(), ctypes.byref(out))
        return Context(self.model, got(out))

    @property
    def _steps(self) -> Optional["Steps"]:
        return self._steps_ref() if self._steps_ref else None

    @_steps.setter
    def _steps(self, steps: Optional["Steps"]) -> None:
        self._steps_ref = weakref.ref(steps) if steps is not None else None

    def _busy(self) -> None:
        if self._steps is not None and not self._steps.done:
            raise error(-16, "the context is paused at a breakpoint: "
                        "resume its step (or reset the context) first",
                        "")

    def _opts(self, logits: bool, break_at: Optional[int]) -> _lib.StepOpts:
        if not logits and break_at is None:
            return _PLAIN
        o = _lib.StepOpts()
        o.logits = logits
        if break_at is not None:
            n = self.model.info.n_layer
            if not 0 <= break_at < n:
                raise InvalidArgument(
                    22, f"break_at={break_at}: a layer of 0 to {n - 1}")
            o.break_layer = break_at + 1
        return o

    def _stubs(self, st: _lib.Step) -> None:
        self.logits = Result(self, st.logits, self._epoch, step=True) \
            if st.logits else None

    @overload
    def prefill(self, ids: Any, *, logits: bool = ...,
                break_at: None = ...) -> Optional[Result]: ...

    @overload
    def prefill(self, ids: Any, *, logits: bool = ...,
                break_at: int) -> "Steps": ...

    def prefill(self, ids: Any, *, logits: bool = False,
                break_at: Optional[int] = None
                ) -> Union[Optional[Result], "Steps"]:
        """Append token @ids and run them (one forward pass).

        logits=True keeps the logits after the last token as a lazy
        result, (1, vocab) floats read when asked, and returns it (it is
        ``ctx.logits`` too); else returns None. With break_at=L it pauses
        after layer L and returns the step's pauses (Steps) to iterate
        (``steps.logits`` once done)."""
        self._busy()
        t = _tokens(ids, self.model.info.vocab)
        if not t.size:
            raise InvalidArgument(22, "no tokens to prefill")
        st = _lib.Step()
        o = self._opts(logits, break_at)
        call("djinn_ctx_prefill", self._p(),
             t.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), t.size,
             ctypes.byref(o), ctypes.byref(st))
        if break_at is None:
            self._stubs(st)
            return self.logits
        steps = Steps(self, st, None)
        self._steps = steps
        return steps

    @overload
    def generate(self, n: int, *, temperature: float = ..., top_k: int = ...,
                 top_p: float = ..., seed: int = ..., logits: bool = ...,
                 break_at: None = ...) -> np.ndarray: ...

    @overload
    def generate(self, n: int, *, temperature: float = ..., top_k: int = ...,
                 top_p: float = ..., seed: int = ..., logits: bool = ...,
                 break_at: int) -> "Steps": ...

    def generate(self, n: int, *, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int = 0, logits: bool = False,
                 break_at: Optional[int] = None) -> Union[np.ndarray, "Steps"]:
        """Decode @n tokens on the daemon, each sampled from the last
        logits and appended to the cache: greedy at temperature 0, else
        from the top_k most likely (0: all), then the fewest reaching
        top_p; the same seed, context and calls give the same tokens.

        Returns the tokens (int32 array); with break_at=L, the step's
        pauses (Steps), one after layer L for every token, whose
        ``tokens`` are there once it is done."""
        self._busy()
        if not 1 <= n <= _MAX_STEP_TOKENS:
            raise InvalidArgument(
                22, f"{n} tokens to generate: 1 to {_MAX_STEP_TOKENS}")
        if temperature < 0 or not 0 < top_p <= 1 or top_k < 0:
            raise InvalidArgument(
                22, f"temperature={temperature}, top_k={top_k}, "
                f"top_p={top_p}: want temperature >= 0, top_k >= 0, "
                "0 < top_p <= 1")
        sp = _GREEDY if not temperature and not seed and not top_k \
            and top_p == 1.0 else \
            _lib.Sampling(temperature, top_k, top_p, 0, seed)
        buf = np.empty(n, np.int32)
        st = _lib.Step()
        o = self._opts(logits, break_at)
        made = call("djinn_ctx_decode", self._p(), n, ctypes.byref(sp),
                   buf.ctypes.data, ctypes.byref(o), ctypes.byref(st))
        if break_at is None:
            if st.logits:
                self._stubs(st)
            else:
                self.logits = None
            return buf if made == n else buf[:made]
        steps = Steps(self, st, buf)
        self._steps = steps
        return steps


class Pause:
    """A step paused after layer ``layer``: ``hidden`` is the hidden
    state there, (T, hidden) in the weights' dtype, a lazy result.
    resume() goes on, with it as it was or replaced (steering)."""

    def __init__(self, steps: "Steps", seq: int, layer: int,
                 hidden: Result) -> None:
        self._steps = steps
        self._seq = seq
        self.layer = layer
        self.hidden = hidden
        self.resumed = False

    def resume(self, replacement: Any = None) -> None:
        """Go on with the hidden state unchanged (None) or replaced by
        @replacement, an array of its shape (and its dtype; float32 is
        converted for a float16 or bfloat16 model)."""
        if self.resumed:
            raise error(-errno.EINVAL, "this pause was resumed already", "")
        self._steps._resume(self, replacement)


class Steps:
    """A step with breakpoints: iterate its pauses; each that the loop
    does not resume is resumed unchanged on the next turn. ``tokens``
    (a decode's) and ``logits`` are there once ``done``. A reset or free
    of the context abandons it: its pauses are Closed then."""

    def __init__(self, ctx: Context, st: _lib.Step, buf: Any) -> None:
        self._ctx = ctx
        self._epoch = ctx._epoch
        self._buf = buf  # libdjinn writes a decode's tokens here
        self._st = st
        self._seq = 0  # the pause now, counted
        self._cur: Optional[Any] = None  # its (layer, hidden)
        self._given: Optional["weakref.ref[Pause]"] = None
        self._given_seq = -1
        self.done = False
        self._update(st)

    def _update(self, st: _lib.Step) -> None:
        self._st = st
        self._seq += 1
        if st.state == 1:  # paused
            self._cur = (int(st.layer),
                         Result(self._ctx, st.hidden, self._ctx._epoch,
                                step=True))
        else:
            self._cur = None
            self.done = True
            self._ctx._stubs(st)

    def _check(self) -> None:
        ctx = self._ctx
        if ctx._epoch != self._epoch or ctx._steps is not self:
            raise closed("the step (its context was reset or freed)")

    def __iter__(self) -> Iterator[Pause]:
        return self

    def __next__(self) -> Pause:
        if self._given_seq == self._seq and not self.done:
            given = self._given() if self._given else None
            if given is None or not given.resumed:
                self._resume_seq(self._seq, None)
        if self._cur is None:
            raise StopIteration
        p = Pause(self, self._seq, *self._cur)
        self._given = weakref.ref(p)
        self._given_seq = self._seq
        return p

    def run(self) -> "Steps":
        """Resume every pause unchanged, to the end."""
        for _ in self:
            pass
        return self

    @property
    def tokens(self) -> np.ndarray:
        if not self.done:
            raise error(-errno.EBUSY, "the step is paused: iterate it to "
                        "the end (or run()) first", "")
        n = self._st.nr_tokens
        return (self._buf[:n].copy() if self._buf is not None
                else np.empty(0, np.int32))

    @property
    def logits(self) -> Optional[Result]:
        return self._ctx.logits if self.done else None

    def _resume(self, p: Pause, replacement: Any) -> None:
        if p._steps is not self or p._seq != self._seq or self.done:
            raise error(-errno.EINVAL, "not the step's current pause", "")
        self._resume_seq(p._seq, replacement, p.hidden)
        p.resumed = True

    def _resume_seq(self, seq: int, replacement: Any,
                    hidden: Optional[Result] = None) -> None:
        self._check()
        ctx = self._ctx
        t = None
        if replacement is not None:
            assert hidden is not None
            a, code = as_array(replacement)
            if tuple(a.shape) != hidden.shape:
                raise InvalidArgument(
                    22, f"a replacement of shape {tuple(a.shape)} for a "
                    f"hidden state of {hidden.shape}")
            want = hidden._code
            if code != want:
                if code != 1 or want not in (2, 3):
                    raise InvalidArgument(
                        22, f"a {DTYPES[code]} replacement for a "
                        f"{DTYPES[want]} hidden state")
                a = _convert(a, want)
            t = Tensor._put(ctx.model.session, a.shape, want, a, False)
        st = _lib.Step()
        try:
            call("djinn_ctx_resume", ctx._p(), t._p() if t else None,
                 ctypes.byref(st))
        finally:
            if t is not None:
                t.release()
        self._update(st)


# include/djinn/proto.h: DJINN_MAX_STEP_TOKENS
_MAX_STEP_TOKENS = 1 << 20

# greedy decoding, and a step that keeps nothing: read-only for libdjinn
_GREEDY = _lib.Sampling(0.0, 0, 1.0, 0, 0)
_PLAIN = _lib.StepOpts()


def _convert(a: np.ndarray, code: int) -> np.ndarray:
    """float32 @a as float16 (2) or bfloat16 bits (3, round to nearest
    even)."""
    if code == 2:
        return a.astype(np.float16)
    u = a.astype(np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r


