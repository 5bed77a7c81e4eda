# SPDX-License-Identifier: MIT
"""libdjinn through ctypes: finding the library and declaring its calls.

The package binds libdjinn.so with ctypes, which ships with Python: no
compiled extension to build or keep in step with the interpreter, and
nothing but libdjinn itself to install. The cost is a few microseconds a
call (measured: Documentation/python.rst, "Benchmark"), which is small
beside a round trip to djinnd.

The library is looked for, in order, at $DJINN_LIBRARY (a path, and
only there when set), in the build tree of the checkout this package sits
in or was built from (build/libdjinn.so: PYTHONPATH=python, or `pip
install ./python`, which records it), and by its installed soname,
libdjinn.so.0 (`make install`). The first that loads is
checked for the symbol version this package needs (DJINN_0.2, through
dlvsym): an older library is refused with what was found and where.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pathlib
import threading
from typing import Any, List, Optional, Tuple

SONAME = "libdjinn.so.0"
#: The symbol version whose calls this package uses (djinn_ctx_truncate()
#: and djinn_ctx_signal() came with it).
NEEDED_VERSION = "DJINN_0.4"
#: Each version, and a function the library has at it.
_VERSIONS = (("DJINN_0.1", "djinn_model_info"),
             ("DJINN_0.2", "djinn_model_info"),
             ("DJINN_0.3", "djinn_ctx_truncate"),
             ("DJINN_0.4", "djinn_status"))

DJINN_MAX_DIMS = 8
DJINN_FP_LEN = 32
DJINN_TOKEN_LEN = 16
DJINN_TENANT_LEN = 64
DJINN_MODEL_NAME_MAX = 64
WAIT_FOREVER = 2**64 - 1


class LibraryError(ImportError):
    """libdjinn could not be found, loaded, or is too old."""


# ---------------------------------------------------------------------------
# Structs (include/djinn/djinn.h and proto.h)


class TensorDesc(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_uint8),
        ("ndim", ctypes.c_uint8),
        ("_reserved", ctypes.c_uint8 * 6),
        ("dims", ctypes.c_uint64 * DJINN_MAX_DIMS),
    ]


class ConnectOpts(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("tls_ca", ctypes.c_char_p),
        ("tls_cert", ctypes.c_char_p),
        ("tls_key", ctypes.c_char_p),
        ("token", ctypes.c_char_p),
        ("reconnect_ms", ctypes.c_long),
        ("model", ctypes.c_char_p),
    ]


class StatusModel(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 64),
        ("bytes", ctypes.c_uint64),
        ("holders", ctypes.c_uint),
        ("streamed", ctypes.c_bool),
    ]


class StatusInfo(ctypes.Structure):
    """struct djinn_status_info, without its models (they follow it)."""

    _fields_ = [
        ("ready", ctypes.c_bool),
        ("serves_models", ctypes.c_bool),
        ("capacity", ctypes.c_uint64),
        ("free", ctypes.c_uint64),
        ("tenant_free", ctypes.c_uint64),
        ("pressure", ctypes.c_uint),
        ("nr_dev", ctypes.c_uint),
        ("sessions", ctypes.c_uint),
        ("max_sessions", ctypes.c_uint),
        ("queued", ctypes.c_uint),
        ("nr_models", ctypes.c_uint),
        ("pressure_room", ctypes.c_uint64),
        ("data_bytes", ctypes.c_uint64),
    ]


class ServerInfo(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint32),
        ("features", ctypes.c_uint32),
        ("max_payload", ctypes.c_uint64),
        ("capacity", ctypes.c_uint64),
        ("granularity", ctypes.c_uint64),
        ("backend", ctypes.c_char * 17),
    ]


class ConnStats(ctypes.Structure):
    _fields_ = [
        ("bytes_sent", ctypes.c_uint64),
        ("bytes_received", ctypes.c_uint64),
        ("requests", ctypes.c_uint64),
        ("responses", ctypes.c_uint64),
        ("map_faults", ctypes.c_uint64),
        ("map_bytes", ctypes.c_uint64),
    ]


class SessionOpts(ctypes.Structure):
    _fields_ = [
        ("tenant", ctypes.c_char_p),
        ("priority", ctypes.c_uint),
        ("lease_ns", ctypes.c_uint64),
    ]


class SessionInfo(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("token", ctypes.c_uint8 * DJINN_TOKEN_LEN),
        ("lease_ns", ctypes.c_uint64),
        ("deadline_ns", ctypes.c_uint64),
        ("tenant", ctypes.c_char * DJINN_TENANT_LEN),
    ]


class TensorInfo(ctypes.Structure):
    _fields_ = [
        ("handle", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("segment", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("fp", ctypes.c_uint8 * DJINN_FP_LEN),
    ]


class NodeOpts(ctypes.Structure):
    _fields_ = [("phase", ctypes.c_uint), ("residency", ctypes.c_uint)]


class RequestInfo(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("nr_results", ctypes.c_uint),
        ("peak_bytes", ctypes.c_uint64),
        ("run_ns", ctypes.c_uint64),
    ]


class ModelInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * DJINN_MODEL_NAME_MAX),
        ("arch", ctypes.c_uint32),
        ("dtype", ctypes.c_uint32),
        ("vocab", ctypes.c_uint32),
        ("n_layer", ctypes.c_uint32),
        ("hidden", ctypes.c_uint32),
        ("n_head", ctypes.c_uint32),
        ("n_kv_head", ctypes.c_uint32),
        ("max_tokens", ctypes.c_uint32),
        ("bytes", ctypes.c_uint64),
        ("fp", ctypes.c_uint8 * DJINN_FP_LEN),
        ("weights", ctypes.c_uint64),
        ("ring", ctypes.c_uint64),
        ("resident", ctypes.c_uint32),
    ]


class Sampling(ctypes.Structure):
    _fields_ = [
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_uint32),
        ("top_p", ctypes.c_float),
        ("_reserved", ctypes.c_uint32),
        ("seed", ctypes.c_uint64),
    ]


class StepOpts(ctypes.Structure):
    _fields_ = [("logits", ctypes.c_bool), ("break_layer", ctypes.c_uint)]


class Step(ctypes.Structure):
    _fields_ = [
        ("state", ctypes.c_uint),
        ("nr_tokens", ctypes.c_uint32),
        ("len", ctypes.c_uint32),
        ("layer", ctypes.c_uint32),
        ("run_ns", ctypes.c_uint64),
        ("logits", ctypes.c_void_p),
        ("hidden", ctypes.c_void_p),
    ]


_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_I = ctypes.c_int
_U32 = ctypes.c_uint32
_U64 = ctypes.c_uint64
_F = ctypes.c_float
_B = ctypes.c_bool
_S = ctypes.c_char_p
_R = ctypes.POINTER

# name: (restype, argtypes)
_CALLS = {
    "djinn_connect": (_I, [_S, _PP]),
    "djinn_connect_opts": (_I, [_S, _R(ConnectOpts), _PP]),
    "djinn_conn_transport": (_S, [_P]),
    "djinn_conn_addr": (_S, [_P]),
    "djinn_status": (_I, [_P, _PP]),
    "djinn_conn_reconnects": (_U64, [_P]),
    "djinn_disconnect": (None, [_P]),
    "djinn_conn_server_info": (_I, [_P, _R(ServerInfo)]),
    "djinn_conn_ping": (_I, [_P]),
    "djinn_conn_stats": (_I, [_P, _R(ConnStats)]),
    "djinn_session_open_on": (_I, [_P, _R(SessionOpts), _I, _PP]),
    "djinn_session_open_as": (_I, [_P, ctypes.c_char_p, _R(SessionOpts),
                                   _PP]),
    "djinn_session_attach": (_I, [_P, _U64, _R(ctypes.c_uint8), _PP]),
    "djinn_session_close": (_I, [_P]),
    "djinn_session_info": (_I, [_P, _R(SessionInfo)]),
    "djinn_session_heartbeat": (_I, [_P]),
    "djinn_signal": (_I, [_P, ctypes.c_uint, _U64]),
    "djinn_tool_call_begin": (_I, [_P, _U64]),
    "djinn_tool_call_end": (_I, [_P]),
    "djinn_tensor_upload": (_I, [_P, _R(TensorDesc), _P, _I, _PP]),
    "djinn_tensor_download": (_I, [_P, _U64, _U64, _P]),
    "djinn_tensor_write": (_I, [_P, _U64, _U64, _P]),
    "djinn_tensor_release": (_I, [_P]),
    "djinn_tensor_info": (_I, [_P, _R(TensorInfo)]),
    "djinn_graph_new": (_I, [_P, _PP]),
    "djinn_graph_free": (None, [_P]),
    "djinn_graph_input": (_I, [_P, _P]),
    "djinn_graph_input_result": (_I, [_P, _P]),
    "djinn_graph_annotate": (_I, [_P, _R(NodeOpts)]),
    "djinn_graph_output": (_I, [_P, _I]),
    "djinn_graph_error": (_S, [_P]),
    "djinn_op_matmul": (_I, [_P, _I, _I, _B, _B]),
    "djinn_op_add": (_I, [_P, _I, _I]),
    "djinn_op_sub": (_I, [_P, _I, _I]),
    "djinn_op_mul": (_I, [_P, _I, _I]),
    "djinn_op_div": (_I, [_P, _I, _I]),
    "djinn_op_scale": (_I, [_P, _I, _F]),
    "djinn_op_gelu": (_I, [_P, _I]),
    "djinn_op_relu": (_I, [_P, _I]),
    "djinn_op_silu": (_I, [_P, _I]),
    "djinn_op_softmax": (_I, [_P, _I]),
    "djinn_op_layernorm": (_I, [_P, _I, _I, _I, _F]),
    "djinn_op_rmsnorm": (_I, [_P, _I, _I, _F]),
    "djinn_op_embedding": (_I, [_P, _I, _I]),
    "djinn_op_reshape": (_I, [_P, _I, ctypes.c_uint, _R(ctypes.c_int32)]),
    "djinn_op_permute": (_I, [_P, _I, ctypes.c_uint, _R(ctypes.c_int32)]),
    "djinn_op_slice": (_I, [_P, _I, _I, ctypes.c_int64, ctypes.c_int64]),
    "djinn_op_concat": (_I, [_P, _R(_I), ctypes.c_uint, _I]),
    "djinn_op_attention": (_I, [_P, _I, _I, _I, _F, _B]),
    "djinn_op_argmax": (_I, [_P, _I]),
    "djinn_op_sample": (_I, [_P, _I, _I]),
    "djinn_submit": (_I, [_P, _PP]),
    "djinn_wait": (_I, [_P, _U64]),
    "djinn_poll": (_I, [_P]),
    "djinn_request_error": (_S, [_P]),
    "djinn_request_results": (_P, [_P, ctypes.c_uint]),
    "djinn_request_info": (_I, [_P, _R(RequestInfo)]),
    "djinn_request_free": (None, [_P]),
    "djinn_result_desc": (_R(TensorDesc), [_P]),
    "djinn_result_read": (_I, [_P, _U64, _U64, _P]),
    "djinn_result_release": (_I, [_P]),
    "djinn_last_error": (_S, []),
    "djinn_model_open": (_I, [_P, _S, _PP]),
    "djinn_model_upload": (_I, [_P, _S, _PP]),
    "djinn_model_info": (_I, [_P, _R(ModelInfo)]),
    "djinn_model_close": (_I, [_P]),
    "djinn_ctx_new": (_I, [_P, _U32, _PP]),
    "djinn_ctx_fork": (_I, [_P, _PP]),
    "djinn_ctx_reset": (_I, [_P]),
    "djinn_ctx_truncate": (_I, [_P, ctypes.c_uint32]),
    "djinn_ctx_signal": (_I, [_P, ctypes.c_uint, ctypes.c_uint64]),
    "djinn_ctx_free": (_I, [_P]),
    "djinn_ctx_len": (_I, [_P]),
    "djinn_ctx_prefill": (_I, [_P, _R(ctypes.c_int32), _U32, _R(StepOpts), _R(Step)]),
    "djinn_ctx_decode": (
        _I,
        [_P, _U32, _R(Sampling), _P, _R(StepOpts), _R(Step)],
    ),
    "djinn_ctx_resume": (_I, [_P, _P, _R(Step)]),
}


def _candidates() -> List[Tuple[str, str]]:
    """Where to look, in order: (path or soname, how it was found)."""
    out: List[Tuple[str, str]] = []
    env = os.environ.get("DJINN_LIBRARY")
    if env:
        out.append((env, "$DJINN_LIBRARY"))
        return out  # an explicit choice is the only one
    here = pathlib.Path(__file__).resolve().parent
    trees = [here.parent.parent / "build"]  # python/djinn in a checkout
    try:  # pip install ./python: the checkout it was built from
        from ._buildtree import BUILD  # type: ignore[import-not-found]

        if BUILD:
            trees.append(pathlib.Path(BUILD))
    except ImportError:
        pass
    for tree in trees:
        lib = tree / "libdjinn.so"
        if lib.exists():
            out.append((str(lib), "the build tree"))
            break
    out.append((SONAME, "the installed soname"))
    found = ctypes.util.find_library("djinn")
    if found and found != SONAME:
        out.append((found, "ldconfig"))
    return out


def _versions(lib: ctypes.CDLL) -> List[str]:
    """The symbol versions of libdjinn that @lib defines."""
    libc = ctypes.CDLL(None)
    try:
        dlvsym = libc.dlvsym
    except AttributeError:  # not glibc: no versions to ask for
        return [v for v, _ in _VERSIONS]
    dlvsym.restype = ctypes.c_void_p
    dlvsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    return [
        v
        for v, sym in _VERSIONS
        if dlvsym(lib._handle, sym.encode(), v.encode())
    ]


def _load() -> Tuple[ctypes.CDLL, str]:
    tried: List[str] = []
    for name, how in _candidates():
        try:
            lib = ctypes.CDLL(name)
        except OSError as e:
            tried.append(f"{name} ({how}): {e}")
            continue
        have = _versions(lib)
        if NEEDED_VERSION not in have:
            raise LibraryError(
                f"libdjinn at {name} ({how}) is too old: it has "
                f"{', '.join(have) or 'no version of it'}, and this "
                f"package needs {NEEDED_VERSION}; rebuild the checkout "
                "(make) or set DJINN_LIBRARY to a newer libdjinn.so"
            )
        missing = [c for c in _CALLS if not hasattr(lib, c)]
        if missing:
            raise LibraryError(
                f"libdjinn at {name} ({how}) lacks {', '.join(missing)}"
            )
        return lib, name
    raise LibraryError(
        "libdjinn not found; looked for: "
        + "; ".join(tried)
        + ". Build the checkout (make), install it (make install), or "
        "set DJINN_LIBRARY to the path of libdjinn.so"
    )


_lib: Optional[ctypes.CDLL] = None
_path = ""
_lock = threading.Lock()


def lib() -> Any:
    """The loaded library, its calls declared (loaded on first use)."""
    global _lib, _path
    if _lib is None:
        with _lock:
            if _lib is None:
                l, p = _load()
                for name, (res, args) in _CALLS.items():
                    f = getattr(l, name)
                    f.restype = res
                    f.argtypes = args
                _path = p
                _lib = l
    return _lib


_free: Optional[Any] = None


def free(p: int) -> None:
    """libc's free() of what libdjinn malloc()ed for the caller."""
    global _free
    if _free is None:
        f = ctypes.CDLL(None).free
        f.restype = None
        f.argtypes = [ctypes.c_void_p]
        _free = f
    _free(p)


def path() -> str:
    """Where the loaded library came from."""
    lib()
    return _path
