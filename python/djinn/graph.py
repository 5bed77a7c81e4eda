# SPDX-License-Identifier: MIT
"""Graphs of ops, built value by value, run on the daemon.

    with session.graph() as g:
        x = g.input(np.ones((4, 64), np.float32), text=False)
        w = g.input(weights)            # text: uploaded by fingerprint
        y = djinn.ops.gelu(x @ w)
        out, = g.run(y)                 # lazy: nothing read yet
        print(out[0])                   # one row crosses

Values take ``@`` (matmul), ``+ - * /`` with values, ``*`` and ``/``
with a number (scale); numpy arrays and torch tensors in an expression
are put on the daemon as inputs (text, deduplicated). Shapes and dtypes
are checked when the graph is submitted, with the daemon's own code and
messages (djinn.InvalidArgument: "node 3 (matmul): inner dims 64 and 32
differ").
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any, Dict, List, Optional, Tuple

from . import _lib
from ._core import Request, Result, Session, Tensor, call, got
from .errors import InvalidArgument, closed, error


class Graph:
    """A graph builder of a session (djinn_graph_new()); one thread at a
    time builds it. It may be submitted any number of times."""

    def __init__(self, session: Session) -> None:
        out = ctypes.c_void_p()
        call("djinn_graph_new", session._p(), ctypes.byref(out))
        self.session = session
        self._ptr: Optional[int] = got(out)
        self._outputs: Dict[int, int] = {}  # value -> result index
        self._keep: List[Any] = []  # tensors it uploaded, results it uses

    def _p(self) -> int:
        if self._ptr is None:
            raise closed("the graph")
        self.session._p()
        return self._ptr

    def free(self) -> None:
        """Free the builder and let go of the inputs it put on the
        daemon (its submitted requests live on)."""
        if self._ptr is not None and not self.session.closed:
            p, self._ptr = self._ptr, None
            _lib.lib().djinn_graph_free(p)
        self._ptr = None
        self._keep = []

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.free()

    def __enter__(self) -> "Graph":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.free()

    def _check(self, v: int, what: str) -> "Value":
        if v < 0:
            msg = _lib.lib().djinn_graph_error(self._ptr)
            raise error(v, msg.decode() if msg else "", what)
        return Value(self, v)

    def input(self, x: Any, *, text: bool = True) -> "Value":
        """An input: a djinn.Tensor, a lazy djinn.Result of an earlier
        request (its bytes stay on the daemon), or an array put on the
        daemon now (text=True: shared and deduplicated by fingerprint;
        text=False: the session's own)."""
        if isinstance(x, Result):
            self._keep.append(x)
            return self._check(
                _lib.lib().djinn_graph_input_result(self._p(), x._p()),
                "djinn_graph_input_result")
        if not isinstance(x, Tensor):
            x = self.session.tensor(x, text=text)
        elif x.session is not self.session:
            raise InvalidArgument(22, "a tensor of another session")
        self._keep.append(x)
        return self._check(_lib.lib().djinn_graph_input(self._p(), x._p()),
                           "djinn_graph_input")

    def _value(self, x: Any) -> "Value":
        if isinstance(x, Value):
            if x.graph is not self:
                raise InvalidArgument(22, "a value of another graph")
            return x
        return self.input(x)

    def output(self, v: "Value") -> int:
        """Keep @v as a result; its index among the results."""
        v = self._value(v)
        if v.index not in self._outputs:
            k = _lib.lib().djinn_graph_output(self._p(), v.index)
            self._check(k, "djinn_graph_output")
            self._outputs[v.index] = k
        return self._outputs[v.index]

    def submit(self) -> Request:
        """Submit the graph; returns at once. Its results are every
        output() so far, in that order."""
        out = ctypes.c_void_p()
        ret = _lib.lib().djinn_submit(self._p(), ctypes.byref(out))
        if ret < 0:
            msg = _lib.lib().djinn_graph_error(self._ptr)
            raise error(ret, msg.decode() if msg else "", "djinn_submit")
        req = Request(self.session, got(out))
        # the inputs it uploaded and the results it reads stay on the
        # daemon while the request (and so any result of it) lives:
        # freeing the graph must not drop what a pending request needs
        req._inputs = list(self._keep)
        return req

    def run(self, *values: "Value") -> Tuple[Result, ...]:
        """Make @values outputs, submit, and return their lazy results
        (the request is freed with them)."""
        idx = [self.output(v) for v in values]
        req = self.submit()
        return tuple(req.results[k] for k in idx)


class Value:
    """A value of a graph: an input or a node's result."""

    __array_priority__ = 1000  # ndarray @ Value comes here

    def __init__(self, graph: Graph, index: int) -> None:
        self.graph = graph
        self.index = index

    def _bin(self, name: str, other: Any, swap: bool = False) -> "Value":
        o = self.graph._value(other)
        a, b = (o, self) if swap else (self, o)
        return self.graph._check(
            getattr(_lib.lib(), name)(self.graph._p(), a.index, b.index),
            name)

    def __matmul__(self, other: Any) -> "Value":
        from . import ops

        return ops.matmul(self, self.graph._value(other))

    def __rmatmul__(self, other: Any) -> "Value":
        from . import ops

        return ops.matmul(self.graph._value(other), self)

    def __add__(self, other: Any) -> "Value":
        return self._bin("djinn_op_add", other)

    def __radd__(self, other: Any) -> "Value":
        return self._bin("djinn_op_add", other, True)

    def __sub__(self, other: Any) -> "Value":
        return self._bin("djinn_op_sub", other)

    def __rsub__(self, other: Any) -> "Value":
        return self._bin("djinn_op_sub", other, True)

    def __mul__(self, other: Any) -> "Value":
        if isinstance(other, (int, float)):
            from . import ops

            return ops.scale(self, float(other))
        return self._bin("djinn_op_mul", other)

    def __rmul__(self, other: Any) -> "Value":
        return self.__mul__(other)

    def __truediv__(self, other: Any) -> "Value":
        if isinstance(other, (int, float)):
            from . import ops

            return ops.scale(self, 1.0 / float(other))
        return self._bin("djinn_op_div", other)

    def __repr__(self) -> str:
        return f"<djinn.graph.Value {self.index}>"

