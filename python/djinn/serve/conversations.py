# SPDX-License-Identifier: MIT
"""A tenant's live conversations: the contexts its requests left on
djinnd, each with the token ids it holds, so that the next request of a
conversation prefills only what is new.

A request takes the idle context whose ids share the longest prefix with
its prompt (the ids, not the text: text tokenised again can come out
another way, and only equal ids give equal logits). Whole, the context
goes on in place; shared only in part, the context is forked on the
device and the fork cut back to the shared prefix, so both branches
live on. Idle contexts go least recently used first past the tenant's
bound, after their time to live, and when djinnd needs the room."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

from .. import errors as djerr
from ..model import Context


@dataclass(eq=False)
class Conv:
    """A context of @model and the ids it holds, in order."""

    model: str
    ctx: Context
    ids: List[int] = field(default_factory=list)
    used: float = 0.0
    # its reply asked for tools: since when it waits in IO_WAIT
    waiting_since: Optional[float] = None


def shared(a: np.ndarray, b: np.ndarray) -> int:
    """The length of the longest common prefix of @a and @b."""
    n = min(len(a), len(b))
    if not n:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


class Conversations:
    """The idle contexts of one tenant, at most @limit, each freed after
    @ttl seconds unused."""

    #: a tool's time before any was measured, seconds
    FIRST_TOOL_ESTIMATE = 2.0

    def __init__(self, limit: int, ttl: float) -> None:
        self.limit = limit
        self.ttl = ttl
        self.lock = threading.Lock()
        self.idle: List[Conv] = []
        self.busy: List[Conv] = []  # in a request's hands (for metrics)
        self._tool_s = 0.0  # the tools' time, averaged (0: none yet)

    def tool_estimate(self) -> float:
        """How long this tenant's tools take, from the ones measured:
        the time from a reply that asked for tools to the request that
        went on from it, averaged."""
        with self.lock:
            return self._tool_s or self.FIRST_TOOL_ESTIMATE

    def _tool_took(self, s: float) -> None:  # lock held
        self._tool_s = s if not self._tool_s else 0.75 * self._tool_s + \
            0.25 * s

    def take(self, model: str, prompt: List[int]) -> Tuple[Optional[Conv],
                                                           int]:
        """The idle context of @model sharing the most of @prompt, taken
        (no other request gets it until it is given back), and how much
        it shares: never the whole prompt, since a step needs a token to
        run. (None, 0) when none shares a token."""
        want = np.asarray(prompt, dtype=np.int64)
        self.sweep()
        with self.lock:
            best, most, key = None, 0, None
            for c in self.idle:
                if c.model != model:
                    continue
                n = min(shared(np.asarray(c.ids, dtype=np.int64), want),
                        len(prompt) - 1)
                # the most shared; then one the prompt goes on from
                # whole, one not waiting on tools, the latest used
                k = (n, n == len(c.ids), c.waiting_since is None, c.used)
                if n > 0 and (key is None or k > key):
                    best, most, key = c, n, k
            if best is not None:
                self.idle.remove(best)
                if best.waiting_since is not None and \
                        most == len(best.ids):
                    # its conversation is back from its tools: they took
                    # this long (a branch that forks it is not)
                    self._tool_took(time.monotonic() - best.waiting_since)
                    best.waiting_since = None
            return best, most

    def busy_add(self, c: Conv) -> None:
        with self.lock:
            self.busy.append(c)

    def unbusy(self, c: Conv) -> None:
        with self.lock:
            if c in self.busy:
                self.busy.remove(c)

    def give_back(self, c: Conv) -> None:
        """@c is idle again; past the bound, the least recently used
        go."""
        c.used = time.monotonic()
        with self.lock:
            self.idle.append(c)
            over = self.idle[:-self.limit] if self.limit else list(
                self.idle)
            if over:
                self.idle = self.idle[len(over):]
        for o in over:
            _free(o)

    def evict_one(self) -> bool:
        """Free the least recently used idle context (djinnd needs the
        room); False when there is none."""
        with self.lock:
            if not self.idle:
                return False
            c = self.idle.pop(0)
        _free(c)
        return True

    def sweep(self) -> None:
        """Free the contexts unused for longer than the time to live."""
        now = time.monotonic()
        with self.lock:
            old = [c for c in self.idle if now - c.used > self.ttl]
            if old:
                self.idle = [c for c in self.idle if c not in old]
        for c in old:
            _free(c)

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for c in idle:
            _free(c)


def _free(c: Conv) -> None:
    try:
        c.ctx.free()
    except djerr.Error:
        pass  # its session went: so did it
