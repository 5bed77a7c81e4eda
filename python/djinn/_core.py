# SPDX-License-Identifier: MIT
"""Connections, sessions, tensors, requests and lazy results.

Every object wraps a libdjinn object and knows the one it belongs to: a
result its request (or the context step that made it), a tensor or a
request its session, a session its connection. libdjinn frees an
object's children with it, so a call first checks that the object and
everything above it is still open and raises djinn.Closed if not: no
call ever reaches libdjinn with a pointer it has freed.
"""

from __future__ import annotations

import contextlib
import ctypes
import weakref
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import numpy as np

from . import _lib
from .errors import Error, InvalidArgument, closed, error

if TYPE_CHECKING:
    from .graph import Graph
    from .model import Model

# ---------------------------------------------------------------------------
# Calls


def _last_error() -> str:
    msg = _lib.lib().djinn_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def call(name: str, *args: Any) -> int:
    """libdjinn's @name: its non-negative result, or raise its Error."""
    ret = getattr(_lib.lib(), name)(*args)
    if ret is not None and ret < 0:
        raise error(ret, _last_error(), name)
    return 0 if ret is None else int(ret)


def _out() -> ctypes.c_void_p:
    return ctypes.c_void_p()


def got(out: ctypes.c_void_p) -> int:
    """The object a libdjinn call made, from its out parameter."""
    if not out.value:
        raise Error(5, "libdjinn returned no object", "")  # EIO
    return int(out.value)


# ---------------------------------------------------------------------------
# Dtypes

DTYPES: Dict[int, str] = {
    1: "float32",
    2: "float16",
    3: "bfloat16",
    4: "int32",
    5: "int64",
    6: "uint8",
}
_CODES = {v: k for k, v in DTYPES.items()}
_SIZES = {1: 4, 2: 2, 3: 2, 4: 4, 5: 8, 6: 1}


def _np_dtype(code: int) -> np.dtype:
    """How a djinn dtype is held in numpy: bfloat16's bits as uint16."""
    return np.dtype("uint16" if code == 3 else DTYPES[code])


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def desc_of(shape: Sequence[int], code: int) -> _lib.TensorDesc:
    if len(shape) > _lib.DJINN_MAX_DIMS:
        raise InvalidArgument(
            22, f"{len(shape)} dims: djinn tensors have at most "
            f"{_lib.DJINN_MAX_DIMS}")
    d = _lib.TensorDesc()
    d.dtype = code
    d.ndim = len(shape)
    for i, n in enumerate(shape):
        d.dims[i] = int(n)
    return d


def shape_of(d: _lib.TensorDesc) -> Tuple[int, ...]:
    return tuple(int(d.dims[i]) for i in range(d.ndim))


def as_array(x: Any) -> Tuple[np.ndarray, int]:
    """@x (a numpy array, a torch tensor, anything with __dlpack__ or
    that numpy takes) as a C-contiguous array and its djinn dtype code.
    Refuses, with the reason, what djinn cannot hold as it is."""
    code = 0
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch  # present: x is one of its tensors

        if not x.is_contiguous():
            raise InvalidArgument(
                22, "the torch tensor is not contiguous: pass "
                "x.contiguous()")
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            x, code = x.view(torch.int16).numpy().view(np.uint16), 3
        else:
            x = x.numpy()
    elif not isinstance(x, np.ndarray):
        if hasattr(x, "__dlpack__"):
            x = np.from_dlpack(x)
        else:
            x = np.asarray(x)
    if not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))  # djinn's are native
    if not x.flags.c_contiguous:
        raise InvalidArgument(
            22, "the array is not C-contiguous (a view with strides?): "
            "pass np.ascontiguousarray(a)")
    if not code:
        name = x.dtype.name
        if name not in _CODES:
            raise InvalidArgument(
                22, f"dtype {name} is not one djinn holds (float32, "
                "float16, bfloat16, int32, int64, uint8)")
        code = _CODES[name]
    if not x.flags.aligned:
        x = x.copy()
    return x, code


# ---------------------------------------------------------------------------
# Connections


@dataclass(frozen=True)
class ServerInfo:
    """What djinnd said when the connection began."""

    version: int
    features: int
    max_payload: int
    capacity: int
    granularity: int
    backend: str


@dataclass(frozen=True)
class StatusModel:
    """A served model a djinnd has loaded (Connection.status())."""

    name: str
    bytes: int
    holders: int
    streamed: bool


@dataclass(frozen=True)
class NodeStatus:
    """What a djinnd holds now (Connection.status(), djinn_status(3))."""

    ready: bool
    serves_models: bool
    capacity: int
    free: int
    tenant_free: int
    pressure: int
    nr_dev: int
    sessions: int
    max_sessions: int
    queued: int
    pressure_room: int
    data_bytes: int
    models: Tuple[StatusModel, ...]


@dataclass(frozen=True)
class ConnStats:
    """What moved over a connection so far (frame bytes, headers
    included)."""

    bytes_sent: int
    bytes_received: int
    requests: int
    responses: int
    map_faults: int
    map_bytes: int


def connect(
    addr: Optional[str] = None,
    *,
    tls_ca: Optional[str] = None,
    tls_cert: Optional[str] = None,
    tls_key: Optional[str] = None,
    token: Optional[str] = None,
    reconnect: Optional[float] = None,
    model: Optional[str] = None,
) -> "Connection":
    """Connect to djinnd.

    Args:
        addr: "unix:/path", "tcp:host:port" or "tls:host:port"; None:
            $DJINN_ADDR, else libdjinn's default, where djinnd listens
            by default (djinn_connect(3): /run/djinn/djinnd.sock for
            root, $XDG_RUNTIME_DIR/djinn/djinnd.sock for other users).
        tls_ca, tls_cert, tls_key, token: for "tls:" addresses (None:
            $DJINN_TLS_CA, $DJINN_TLS_CERT, $DJINN_TLS_KEY, $DJINN_TOKEN).
        reconnect: seconds to try to reconnect when djinnd drops the
            connection (a restart), attaching its sessions again; 0:
            never; None: $DJINN_RECONNECT_MS, else 60.
        model: for "dns:NAME:PORT" and "srv:NAME" addresses, which name
            several djinnd, the model the sessions will open: a djinnd
            that has it loaded is chosen first, then the one with the
            most memory free (djinn_connect_opts(3)). None: $DJINN_MODEL.

    Returns a Connection; use it as a context manager, or close() it.
    Its ``addr`` is the address it dialled (the djinnd chosen, for dns:
    and srv:); a token (``token``, $DJINN_TOKEN, $DJINN_TOKEN_FILE) also
    goes to a unix socket that takes one (djinnd's server.token_auth).
    """
    return Connection(addr, tls_ca, tls_cert, tls_key, token, reconnect,
                      model)


def _b(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else s.encode()


class Connection:
    """A connection to djinnd (djinn_connect()). Thread-safe."""

    def __init__(self, addr: Optional[str], tls_ca: Optional[str],
                 tls_cert: Optional[str], tls_key: Optional[str],
                 token: Optional[str],
                 reconnect: Optional[float] = None,
                 model: Optional[str] = None) -> None:
        self._ptr: Optional[int] = None
        out = _out()
        ms = 0 if reconnect is None else (int(reconnect * 1000) or -1)
        o = _lib.ConnectOpts(ctypes.sizeof(_lib.ConnectOpts), _b(tls_ca),
                             _b(tls_cert), _b(tls_key), _b(token), ms,
                             _b(model))
        call("djinn_connect_opts", _b(addr), ctypes.byref(o),
             ctypes.byref(out))
        self._ptr = got(out)
        self.addr: str = _lib.lib().djinn_conn_addr(self._ptr).decode()

    def _p(self) -> int:
        if self._ptr is None:
            raise closed("the connection")
        return self._ptr

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def close(self) -> None:
        """Disconnect. Sessions stay open on the daemon until their
        leases run out (see attach()); every object of this connection
        is unusable after."""
        if self._ptr is not None:
            p, self._ptr = self._ptr, None
            _lib.lib().djinn_disconnect(p)

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    @property
    def transport(self) -> str:
        """"unix", "tcp", "tls, kernel" or "tls, user"."""
        return _lib.lib().djinn_conn_transport(self._p()).decode()

    @property
    def reconnects(self) -> int:
        """How many times libdjinn reconnected after djinnd dropped the
        connection, attaching its sessions again."""
        return int(_lib.lib().djinn_conn_reconnects(self._p()))

    def status(self) -> "NodeStatus":
        """What the djinnd holds now (djinn_status()): memory, pressure,
        sessions, queue and the served models loaded."""
        out = _out()
        call("djinn_status", self._p(), ctypes.byref(out))
        p = got(out)
        try:
            s = _lib.StatusInfo.from_address(p)
            off = ctypes.sizeof(_lib.StatusInfo)
            al = ctypes.alignment(_lib.StatusModel)
            off = (off + al - 1) // al * al
            ms = (_lib.StatusModel * s.nr_models).from_address(p + off)
            return NodeStatus(
                s.ready, s.serves_models, s.capacity, s.free, s.tenant_free,
                s.pressure, s.nr_dev, s.sessions, s.max_sessions, s.queued,
                s.pressure_room, s.data_bytes, tuple(StatusModel(m.name.decode(), m.bytes, m.holders,
                                  m.streamed) for m in ms))
        finally:
            _lib.free(p)

    def server_info(self) -> ServerInfo:
        i = _lib.ServerInfo()
        call("djinn_conn_server_info", self._p(), ctypes.byref(i))
        return ServerInfo(i.version, i.features, i.max_payload, i.capacity,
                          i.granularity, i.backend.decode())

    def ping(self) -> None:
        """One round trip with djinnd."""
        call("djinn_conn_ping", self._p())

    def stats(self) -> ConnStats:
        s = _lib.ConnStats()
        call("djinn_conn_stats", self._p(), ctypes.byref(s))
        return ConnStats(s.bytes_sent, s.bytes_received, s.requests,
                         s.responses, s.map_faults, s.map_bytes)

    def session(self, tenant: Optional[str] = None, *, priority: int = 4,
                lease: Optional[float] = None,
                device: Optional[int] = None,
                delegated: bool = False) -> "Session":
        """Open a session (a context manager that closes it).

        Args:
            tenant: the session's label (djinnd decides the tenant from
                who the kernel says the client is); None: $USER.
            priority: 0 (lowest) to 7.
            lease: the lease period to ask for, seconds (None: djinnd's).
            device: a device index of a djinnd with several; None:
                $DJINN_DEVICE, else the one with the most free memory.
            delegated: @tenant names the tenant the session is opened
                for (a front-end acting for its clients: this program's
                user must be one of the tenant's delegates in
                djinnd.conf, over a unix socket; djinn_session_open_as()).
        """
        if delegated:
            if not tenant:
                raise InvalidArgument(22, "a delegated session names its "
                                      "tenant")
            if device is not None:
                raise InvalidArgument(22, "a delegated session is placed "
                                      "by $DJINN_DEVICE or djinnd")
            return Session._open_as(self, tenant, priority, lease)
        return Session._open(self, tenant, priority, lease, device)

    def attach(self, session_id: int, token: bytes) -> "Session":
        """Use a session opened elsewhere, proving it with its token
        (Session.token)."""
        if len(token) != _lib.DJINN_TOKEN_LEN:
            raise InvalidArgument(
                22, f"a session token has {_lib.DJINN_TOKEN_LEN} bytes, "
                f"not {len(token)}")
        t = (ctypes.c_uint8 * _lib.DJINN_TOKEN_LEN).from_buffer_copy(token)
        out = _out()
        call("djinn_session_attach", self._p(), session_id, t,
             ctypes.byref(out))
        return Session(self, got(out))


# ---------------------------------------------------------------------------
# Sessions

PHASES = {
    "unknown": 0,
    "prefill": 1,
    "decode": 2,
    "vision": 3,
    "training": 4,
    "io_wait": 5,
    "compute": 6,
    "idle": 7,
}


class Session:
    """A leased session: its tensors, graphs, models and contexts live
    on the daemon until it closes, or until the Python objects are
    released, freed or collected. libdjinn renews its lease. A session
    that is collected unclosed lives on until its lease runs out (as a
    C program's would; see Connection.attach()): close it."""

    def __init__(self, conn: Connection, ptr: int) -> None:
        self.conn = conn
        self._ptr: Optional[int] = ptr

    @classmethod
    def _open(cls, conn: Connection, tenant: Optional[str], priority: int,
              lease: Optional[float], device: Optional[int]) -> "Session":
        if not 0 <= priority <= 7:
            raise InvalidArgument(22, f"priority {priority}: 0 to 7")
        o = _lib.SessionOpts(_b(tenant), priority, _ns(lease))
        out = _out()
        if device is None:
            call("djinn_session_open_on", conn._p(), ctypes.byref(o),
                 _env_device(), ctypes.byref(out))
        else:
            call("djinn_session_open_on", conn._p(), ctypes.byref(o),
                 device, ctypes.byref(out))
        return cls(conn, got(out))

    @classmethod
    def _open_as(cls, conn: Connection, tenant: str, priority: int,
                 lease: Optional[float]) -> "Session":
        if not 0 <= priority <= 7:
            raise InvalidArgument(22, f"priority {priority}: 0 to 7")
        o = _lib.SessionOpts(_b(tenant), priority, _ns(lease))
        out = _out()
        call("djinn_session_open_as", conn._p(), _b(tenant),
             ctypes.byref(o), ctypes.byref(out))
        return cls(conn, got(out))

    def _p(self) -> int:
        if self._ptr is None:
            raise closed("the session")
        self.conn._p()
        return self._ptr

    @property
    def closed(self) -> bool:
        return self._ptr is None or self.conn.closed

    def close(self) -> None:
        """End the session on the daemon: everything it held goes."""
        if self._ptr is not None and not self.conn.closed:
            p, self._ptr = self._ptr, None
            call("djinn_session_close", p)
        self._ptr = None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _info(self) -> _lib.SessionInfo:
        i = _lib.SessionInfo()
        call("djinn_session_info", self._p(), ctypes.byref(i))
        return i

    @property
    def id(self) -> int:
        return int(self._info().id)

    @property
    def token(self) -> bytes:
        """Its secret, for Connection.attach()."""
        return bytes(self._info().token)

    def heartbeat(self) -> None:
        """Renew the lease now (libdjinn does it anyway)."""
        call("djinn_session_heartbeat", self._p())

    def signal(self, phase: Union[str, int],
               expected: Optional[float] = None) -> None:
        """Tell the scheduler the session is about to be in @phase
        ("prefill", "decode", "io_wait", "compute", "idle", ...) for about
        @expected seconds (None: unknown)."""
        call("djinn_signal", self._p(), _phase(phase), _ns(expected))

    @contextlib.contextmanager
    def tool_call(self, expected: float) -> Iterator[None]:
        """An agent's tool call: IO_WAIT with the estimate (seconds)
        while the block runs, so djinnd may move the session's KV caches
        to host memory for the wait and bring them back by its end;
        COMPUTE when it ends, however it ends."""
        if not expected or expected <= 0:
            raise InvalidArgument(
                22, f"expected={expected!r}: a tool call's estimate is "
                "a positive number of seconds")
        call("djinn_tool_call_begin", self._p(), _ns(expected))
        try:
            yield
        finally:
            if not self.closed:
                call("djinn_tool_call_end", self._p())

    # tensors, graphs and models: see their modules

    def tensor(self, x: Any, *, text: bool = True) -> "Tensor":
        """Put array @x on the daemon (numpy, torch, or anything with
        __dlpack__; C-contiguous). text=True: in the shared, read-only,
        deduplicated text segment, by fingerprint (bytes the daemon holds
        already do not cross the wire); text=False: private data."""
        return Tensor._upload(self, x, text)

    def zeros(self, shape: Sequence[int], dtype: str = "float32") -> "Tensor":
        """A data tensor of zeros (nothing but its shape crosses)."""
        if dtype not in _CODES:
            raise InvalidArgument(22, f"dtype {dtype!r} is not djinn's")
        return Tensor._put(self, shape, _CODES[dtype], None, False)

    def graph(self) -> "Graph":
        """A graph builder of this session (djinn.graph.Graph)."""
        from .graph import Graph

        return Graph(self)

    def model(self, name: str) -> "Model":
        """Open model @name of djinnd's model directory."""
        from .model import Model

        return Model._open(self, name)

    def upload_model(self, path: str) -> "Model":
        """Open the model in local directory @path (config.json and its
        safetensors), sending djinnd only the files it lacks."""
        from .model import Model

        return Model._upload(self, path)


def _phase(phase: Union[str, int]) -> int:
    """A phase by name (PHASES) or number."""
    if isinstance(phase, str):
        if phase not in PHASES:
            raise InvalidArgument(
                22, f"phase {phase!r}: one of {', '.join(PHASES)}")
        return PHASES[phase]
    return phase


def _env_device() -> int:
    import os

    v = os.environ.get("DJINN_DEVICE")
    if v is None:
        return -1
    try:
        return int(v)
    except ValueError:
        raise InvalidArgument(22, f"$DJINN_DEVICE={v!r}: a device index")


def _ns(seconds: Optional[float]) -> int:
    if seconds is None:
        return 0
    if seconds < 0:
        raise InvalidArgument(22, f"{seconds} s: a duration is >= 0")
    return int(seconds * 1e9)


# ---------------------------------------------------------------------------
# Tensors


class Tensor:
    """A tensor put on the daemon by this client."""

    def __init__(self, session: Session, ptr: int) -> None:
        self.session = session
        self._ptr: Optional[int] = ptr
        d = _lib.lib().djinn_tensor_desc
        d.restype = ctypes.POINTER(_lib.TensorDesc)
        d.argtypes = [ctypes.c_void_p]
        desc = d(ptr).contents
        self.shape = shape_of(desc)
        self._code = int(desc.dtype)

    @classmethod
    def _upload(cls, session: Session, x: Any, text: bool) -> "Tensor":
        a, code = as_array(x)
        return cls._put(session, a.shape, code, a, text)

    @classmethod
    def _put(cls, session: Session, shape: Sequence[int], code: int,
             a: Optional[np.ndarray], text: bool) -> "Tensor":
        """The one upload: @shape of djinn dtype @code, the bytes of the
        C-contiguous array @a (None: zeros, data only)."""
        d = desc_of(shape, code)
        out = _out()
        call("djinn_tensor_upload", session._p(), ctypes.byref(d),
             None if a is None else a.ctypes.data, 1 if text else 0,
             ctypes.byref(out))
        return cls(session, got(out))

    def _p(self) -> int:
        if self._ptr is None:
            raise closed("the tensor")
        self.session._p()
        return self._ptr

    @property
    def dtype(self) -> str:
        return DTYPES[self._code]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * _SIZES[self._code]

    @property
    def deduplicated(self) -> bool:
        """A text upload that found its bytes on the daemon already."""
        i = _lib.TensorInfo()
        call("djinn_tensor_info", self._p(), ctypes.byref(i))
        return bool(i.flags & 1)

    def numpy(self) -> np.ndarray:
        """Its bytes, downloaded (bfloat16 as float32)."""
        a = np.empty(self.shape, _np_dtype(self._code))
        if a.nbytes:
            call("djinn_tensor_download", self._p(), 0, a.nbytes,
                 a.ctypes.data_as(ctypes.c_void_p))
        return _bf16_to_f32(a) if self._code == 3 else a

    def write(self, x: Any, offset: int = 0) -> None:
        """Overwrite a data tensor's elements from @offset with @x."""
        a, code = as_array(x)
        if code != self._code:
            raise InvalidArgument(
                22, f"a {DTYPES[code]} array into a {self.dtype} tensor")
        sz = _SIZES[code]
        if offset < 0 or offset * sz + a.nbytes > self.nbytes:
            raise InvalidArgument(
                22, f"elements [{offset}, {offset + a.size}) of a tensor "
                f"of {self.nbytes // sz}")
        call("djinn_tensor_write", self._p(), offset * sz, a.nbytes,
             a.ctypes.data_as(ctypes.c_void_p))

    def release(self) -> None:
        """Drop it on the daemon."""
        if self._ptr is not None and not self.session.closed:
            p, self._ptr = self._ptr, None
            call("djinn_tensor_release", p)
        self._ptr = None

    def __del__(self) -> None:  # collected: dropped on the daemon too
        with contextlib.suppress(Exception):
            self.release()

    def __repr__(self) -> str:
        return f"<djinn.Tensor {self.dtype}{list(self.shape)}>"


# ---------------------------------------------------------------------------
# Requests and lazy results


class Request:
    """A submitted graph: its results are stubs that know their shape
    now; their bytes move only when read."""

    def __init__(self, session: Session, ptr: int) -> None:
        self.session = session
        self._ptr: Optional[int] = ptr
        i = _lib.RequestInfo()
        call("djinn_request_info", ptr, ctypes.byref(i))
        self._n = int(i.nr_results)
        self._inputs: List[Any] = []  # Graph.submit()'s
        # the stubs, made on first use and kept while in use: a result
        # holds its request, not the other way round (so that a dropped
        # result and request go at once, without the cycle collector)
        self._stubs: "weakref.WeakValueDictionary[int, Result]" = \
            weakref.WeakValueDictionary()

    def _p(self) -> int:
        if self._ptr is None:
            raise closed("the request")
        self.session._p()
        return self._ptr

    def __getitem__(self, k: int) -> "Result":
        if not -self._n <= k < self._n:
            raise IndexError(f"result {k} of a request of {self._n}")
        k %= self._n
        r = self._stubs.get(k)
        if r is None:
            r = Result(self, _lib.lib().djinn_request_results(self._p(), k))
            self._stubs[k] = r
        return r

    @property
    def results(self) -> List["Result"]:
        """Its results, in the order of Graph.output()."""
        return [self[k] for k in range(self._n)]

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator["Result"]:
        return iter(self.results)

    def wait(self, timeout: Optional[float] = None) -> "Request":
        """Wait for it to run (None: no limit); raise its error."""
        p = self._p()
        t = _lib.WAIT_FOREVER if timeout is None else _ns(timeout)
        ret = _lib.lib().djinn_wait(p, t)
        if ret < 0:
            raise error(ret, self._error() or _last_error(), "djinn_wait")
        return self

    def _error(self) -> str:
        m = _lib.lib().djinn_request_error(self._p())
        return m.decode("utf-8", "replace") if m else ""

    @property
    def done(self) -> bool:
        """Whether it ran (raises its error if it failed)."""
        ret = _lib.lib().djinn_poll(self._p())
        if ret == -11:  # EAGAIN: pending
            return False
        if ret < 0:
            raise error(ret, self._error() or _last_error(), "djinn_poll")
        return True

    @property
    def run_ns(self) -> int:
        i = _lib.RequestInfo()
        call("djinn_request_info", self._p(), ctypes.byref(i))
        return int(i.run_ns)

    def free(self) -> None:
        """Free it and its stubs (results not read are released on the
        daemon once nothing needs them)."""
        if self._ptr is not None and not self.session.closed:
            p, self._ptr = self._ptr, None
            _lib.lib().djinn_request_free(p)
        self._ptr = None

    def __del__(self) -> None:  # its results hold it while they live
        with contextlib.suppress(Exception):
            self.free()


class Result:
    """A lazy result: its shape and dtype are known here, its bytes stay
    on the daemon until read, and a read moves only what it asks.

    ``r[i]``, ``r[a:b]`` (on the first axes, step 1) and ``r.read(offset,
    count)`` fetch just those elements; ``r.numpy()``, ``np.asarray(r)``
    and DLPack (``np.from_dlpack(r)``, ``torch.from_dlpack(r)``) fetch it
    all, once. bfloat16 results come out as float32 (numpy has no
    bfloat16); ``read_bytes()`` gives the raw bytes.
    """

    def __init__(self, owner: Any, ptr: int, epoch: int = 0,
                 step: bool = False) -> None:
        # a request's result holds its request; a context's step result
        # (logits, a pause's hidden state) only refers to its context,
        # which holds its latest ones, and is released when collected
        self._step = step
        self._owner: Any = weakref.ref(owner) if step else owner
        self._epoch = epoch
        self._ptr: Optional[int] = ptr
        desc = _lib.lib().djinn_result_desc(ptr).contents
        self.shape: Tuple[int, ...] = shape_of(desc)
        self._code = int(desc.dtype)
        self._full: Optional[np.ndarray] = None
        self._npdt = _np_dtype(self._code)
        self._item = _SIZES[self._code]
        #: elements
        self.size = int(np.prod(self.shape, dtype=np.int64))
        #: bytes
        self.nbytes = self.size * self._item

    def _owner_obj(self) -> Any:
        return self._owner() if self._step else self._owner

    def _p(self) -> int:
        if self._ptr is None:
            raise closed("the result")
        owner = self._owner_obj()
        if owner is None:
            raise closed("the result (its context was freed)")
        if getattr(owner, "_epoch", 0) != self._epoch:
            raise closed("the result (its context was reset or freed)")
        owner._p()
        return self._ptr

    @property
    def dtype(self) -> str:
        return DTYPES[self._code]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def read_bytes(self, offset: int = 0, n: Optional[int] = None) -> bytes:
        """@n raw bytes at @offset (None: to the end)."""
        if n is None:
            n = self.nbytes - offset
        if offset < 0 or n < 0 or offset + n > self.nbytes:
            raise InvalidArgument(
                22, f"bytes [{offset}, {offset + n}) of a result of "
                f"{self.nbytes}")
        buf = ctypes.create_string_buffer(n)
        if n:
            call("djinn_result_read", self._p(), offset, n, buf)
        return buf.raw[:n]

    def read(self, offset: int = 0, count: Optional[int] = None,
             out: Optional[np.ndarray] = None) -> np.ndarray:
        """@count elements from element @offset of the flattened result
        (None: to its end), as a 1-D array; only they cross. @out, a
        C-contiguous array of the result's dtype (uint16 for bfloat16)
        and of at least @count elements, receives them instead of a new
        array (its first @count elements are returned)."""
        if count is None:
            count = self.size - offset
        if offset < 0 or count < 0 or offset + count > self.size:
            raise InvalidArgument(
                22, f"elements [{offset}, {offset + count}) of a result "
                f"of {self.size}")
        if out is None:
            a = np.empty(count, self._npdt)
        else:
            if (not isinstance(out, np.ndarray) or out.dtype != self._npdt
                    or not out.flags.c_contiguous or not out.flags.writeable
                    or out.size < count or self._code == 3):
                raise InvalidArgument(
                    22, f"out= wants a writable C-contiguous {self._npdt} "
                    f"array of {count} elements at least (not for a "
                    "bfloat16 result: read_bytes())")
            a = out if out.size == count and out.ndim == 1 \
                else out.reshape(-1)[:count]
        if count:
            sz = self._item
            ret = _lib.lib().djinn_result_read(self._p(), offset * sz,
                                               count * sz, a.ctypes.data)
            if ret < 0:
                raise error(ret, _last_error(), "djinn_result_read")
        return _bf16_to_f32(a) if self._code == 3 else a

    def __getitem__(self, key: Any) -> np.ndarray:
        if self._full is not None:
            return self._full[key]
        lead, rest = _leading(key, self.shape)
        if lead is None:
            return self.numpy()[key]
        start, stop, drop = lead
        row = int(np.prod(self.shape[1:], dtype=np.int64))
        a = self.read(start * row, (stop - start) * row)
        a = a.reshape((stop - start,) + tuple(self.shape[1:]))
        if drop:
            return a[0][rest] if rest else a[0]
        return a[(slice(None),) + tuple(rest)] if rest else a

    def numpy(self) -> np.ndarray:
        """The whole result (read once, then kept)."""
        if self._full is None:
            self._full = self.read().reshape(self.shape)
        return self._full

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __dlpack__(self, stream: Any = None, **kw: Any) -> Any:
        return self.numpy().__dlpack__(**({"stream": stream}
                                           if stream is not None else {}))

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (1, 0)  # kDLCPU: read into host memory

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d result")
        return self.shape[0]

    def release(self) -> None:
        """Drop its bytes on the daemon now; reading it then is
        NotFound."""
        if self._ptr is not None:
            call("djinn_result_release", self._p())
            self._released = True

    _released = False

    def __del__(self) -> None:
        # a step result nobody holds any more: its bytes go now, not at
        # the context's reset (a decode loop keeping logits would pile
        # them up); a request's go with the request
        if self._step and self._ptr is not None and not self._released:
            with contextlib.suppress(Exception):
                self.release()
            self._ptr = None

    def __repr__(self) -> str:
        return f"<djinn.Result {self.dtype}{list(self.shape)}>"


def _leading(key: Any, shape: Tuple[int, ...]) -> Tuple[Any, Any]:
    """For ``r[key]``: the rows of the first axis it needs, contiguous,
    as (start, stop, drop_axis), and what indexes those rows; (None, _)
    when it needs the whole result."""
    if not shape:
        return None, None
    rest: Any = ()
    if isinstance(key, tuple):
        if not key:
            return None, None
        key, rest = key[0], key[1:]
    n = shape[0]
    if isinstance(key, (int, np.integer)):
        i = int(key)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {int(key)} of an axis of {n}")
        return (i, i + 1, True), rest
    if isinstance(key, slice):
        start, stop, step = key.indices(n)
        if step != 1:
            return None, None
        return (start, max(start, stop), False), rest
    return None, None
