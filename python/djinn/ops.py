# SPDX-License-Identifier: MIT
"""The op set, as functions over graph values (include/djinn/proto.h,
enum djinn_opcode, says each op's shapes and dtypes).

Arguments that are not values of the graph (numpy arrays, torch tensors,
djinn tensors or results) are added to it as inputs: the first value
argument names the graph.
"""

from __future__ import annotations

import ctypes
import operator
import struct
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _lib
from .errors import InvalidArgument
from .graph import Graph, Value


def _graph(*xs: Any) -> Graph:
    for x in xs:
        if isinstance(x, Value):
            return x.graph
    raise InvalidArgument(22, "no graph value among the arguments")


def matmul(a: Any, b: Any, trans_a: bool = False,
           trans_b: bool = False) -> Value:
    """a (..., M, K) @ b (K, N), either transposed first."""
    g = _graph(a, b)
    return g._check(_lib.lib().djinn_op_matmul(
        g._p(), g._value(a).index, g._value(b).index, trans_a, trans_b),
        "djinn_op_matmul")


def _arith(op: Any, a: Any, b: Any) -> Value:
    """@op (operator.add, ...) of two operands, one of them a value."""
    return op(_graph(a, b)._value(a), b)


def add(a: Any, b: Any) -> Value:
    return _arith(operator.add, a, b)


def sub(a: Any, b: Any) -> Value:
    return _arith(operator.sub, a, b)


def mul(a: Any, b: Any) -> Value:
    return _arith(operator.mul, a, b)


def div(a: Any, b: Any) -> Value:
    return _arith(operator.truediv, a, b)


def scale(x: Value, alpha: float) -> Value:
    """x * alpha."""
    g = _graph(x)
    return g._check(_lib.lib().djinn_op_scale(g._p(), x.index, alpha),
                    "djinn_op_scale")


def _unary(name: str, x: Value) -> Value:
    g = _graph(x)
    return g._check(getattr(_lib.lib(), "djinn_op_" + name)(g._p(), x.index),
                    "djinn_op_" + name)


def gelu(x: Value) -> Value:
    return _unary("gelu", x)


def relu(x: Value) -> Value:
    return _unary("relu", x)


def silu(x: Value) -> Value:
    return _unary("silu", x)


def softmax(x: Value) -> Value:
    """Over the last axis."""
    return _unary("softmax", x)


def argmax(x: Value) -> Value:
    """Over the last axis, as int64."""
    return _unary("argmax", x)


SAMPLE_GAMMA = 0x9E3779B97F4A7C15
SAMPLE_BAD_PARAMS = -(2 ** 63)


def sample_params(rows: Sequence[Tuple[float, int, float, int]]) -> Any:
    """The parameters of sample(), a row for each of @rows, each
    (temperature, top_k, top_p, rng): an (n, 24) uint8 array."""
    out = np.zeros((len(rows), 24), np.uint8)
    for i, (temperature, top_k, top_p, rng) in enumerate(rows):
        out[i] = np.frombuffer(struct.pack("<ffIIQ", temperature, top_p,
                                           top_k, 0, rng), np.uint8)
    return out


def sample(logits: Value, params: Any) -> Value:
    """A token per row of @logits (..., V), as int64, with a row of
    @params (..., 24) uint8 each (sample_params()): the draw djinnd's
    decode makes (Documentation/protocol.rst, "sample"). A row whose
    logits hold a NaN gives -1 - its index; bad parameters
    SAMPLE_BAD_PARAMS."""
    g = _graph(logits, params)
    return g._check(_lib.lib().djinn_op_sample(
        g._p(), logits.index, g._value(params).index), "djinn_op_sample")


def layernorm(x: Value, gamma: Any, beta: Any, eps: float = 1e-5) -> Value:
    g = _graph(x)
    return g._check(_lib.lib().djinn_op_layernorm(
        g._p(), x.index, g._value(gamma).index, g._value(beta).index, eps),
        "djinn_op_layernorm")


def rmsnorm(x: Value, gamma: Any, eps: float = 1e-6) -> Value:
    g = _graph(x)
    return g._check(_lib.lib().djinn_op_rmsnorm(
        g._p(), x.index, g._value(gamma).index, eps), "djinn_op_rmsnorm")


def embedding(table: Any, ids: Any) -> Value:
    """Rows of @table (V, C) for int32 @ids."""
    g = _graph(table, ids)
    return g._check(_lib.lib().djinn_op_embedding(
        g._p(), g._value(table).index, g._value(ids).index),
        "djinn_op_embedding")


def _dims(xs: Sequence[int]) -> Any:
    return (ctypes.c_int32 * len(xs))(*xs)


def reshape(x: Value, shape: Sequence[int]) -> Value:
    """One entry may be -1."""
    g = _graph(x)
    return g._check(_lib.lib().djinn_op_reshape(
        g._p(), x.index, len(shape), _dims(shape)), "djinn_op_reshape")


def permute(x: Value, perm: Sequence[int]) -> Value:
    """Result axis k is input axis perm[k]."""
    g = _graph(x)
    return g._check(_lib.lib().djinn_op_permute(
        g._p(), x.index, len(perm), _dims(perm)), "djinn_op_permute")


def slice(x: Value, axis: int, start: int, end: int) -> Value:
    """[start, end) of @axis."""
    g = _graph(x)
    return g._check(_lib.lib().djinn_op_slice(g._p(), x.index, axis, start,
                                              end), "djinn_op_slice")


def concat(xs: Sequence[Any], axis: int = 0) -> Value:
    """2 to 4 values along @axis."""
    g = _graph(*xs)
    vals = (ctypes.c_int * len(xs))(*[g._value(x).index for x in xs])
    return g._check(_lib.lib().djinn_op_concat(g._p(), vals, len(xs), axis),
                    "djinn_op_concat")


def attention(q: Value, k: Any, v: Any, scale: Optional[float] = None,
              causal: bool = False) -> Value:
    """softmax(q k^T * scale (+ causal mask)) v; scale None: 1/sqrt(D)."""
    g = _graph(q, k, v)
    return g._check(_lib.lib().djinn_op_attention(
        g._p(), g._value(q).index, g._value(k).index, g._value(v).index,
        0.0 if scale is None else scale, causal), "djinn_op_attention")
