# SPDX-License-Identifier: MIT
"""djinn-device-plugin: the kubelet device plugin that gives pods djinnd
sessions.

    djinn-device-plugin --admin-socket /run/djinn/admin.sock
    python -m djinn.k8s.deviceplugin --sessions 64 --tenant-prefix k8s-

It advertises the extended resource djinn.io/session as devices
session-0 .. session-(N-1), N being djinnd's server.max_sessions
(``djinnctl health``) or --sessions, all Healthy while djinnd says it is
ready. A container given one gets djinnd's pod socket (DJINN_ADDR) and a
bearer token of its namespace's tenant (DJINN_TOKEN_FILE): each Allocate
mounts a new directory of its own (a random name under the allocations'
root, /run/djinn/allocations, which lives as long as djinnd's minted
tokens: until the node's reboot), and PreStartContainer finds the pod
holding the devices through the kubelet's PodResources API, mints the
token (``djinnctl token mint``) and writes it in the directories of
those devices that no other pod's token went to. Once the pod has no
longer held them for a grace period (--reap-grace) the token is revoked
and the directory removed. The kubelet's restart (a new kubelet.sock)
is followed by a new registration, and the grace counts anew.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import os
import pathlib
import re
import secrets
import signal
import stat
import subprocess
import sys
import threading
import time
from typing import (Any, Callable, Dict, FrozenSet, Iterable, Iterator, List,
                    Optional, Tuple)

try:
    import grpc

    from ._proto import api, api_grpc, podresources, podresources_grpc
except ImportError as e:
    raise ImportError(f"djinn.k8s needs grpcio and grpcio-tools: {e}") from e

log = logging.getLogger("djinn.k8s.deviceplugin")

API_VERSION = "v1beta1"
RESOURCE = "djinn.io/session"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
KUBELET_DIR = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET = "kubelet.sock"  # in KUBELET_DIR
ENDPOINT = "djinn.sock"  # this plugin's socket, in KUBELET_DIR
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
ADMIN_SOCKET = "/run/djinn/admin.sock"
# the allocations' directories: on tmpfs, as djinnd's minted tokens are
# (/run/djinn/minted-tokens), so that none outlives the node's reboot
ALLOC_ROOT = "/run/djinn/allocations"
NAME_RE = re.compile(r"[0-9a-f]{32}\Z")  # an allocation's directory
# djinnd's token_auth socket's directory, on the host and in the pod
PODS_DIR = "/run/djinn/pods"
POD_SOCKET = "djinnd.sock"
SECRETS_DIR = "/var/run/secrets/djinn.io"  # in the pod
TOKEN = "token"
# more devices than this only when --sessions says so: djinnd's default
# server.max_sessions (65536) would make each ListAndWatch answer 1.7 MB
MAX_DEVICES = 1024
# PreStartContainer looks for the pod this many times, this far apart
# (--find-tries, --find-wait): the kubelet records an allocation around
# the call
FIND_TRIES, FIND_WAIT = 10, 0.5
# an allocation is reaped once its pod has been missing from List this
# long (--reap-grace): a kubelet just restarted answers before it knows
# all its pods
REAP_GRACE = 60.0


class CtlError(Exception):
    """djinnctl failed, or djinnd did not answer."""


class Djinnctl:
    """djinnctl on djinnd's admin socket, its output in JSON."""

    def __init__(self, binary: str, admin: str, timeout: float) -> None:
        self.binary = binary
        self.admin = admin
        self.timeout = timeout

    def _run(self, args: Tuple[str, ...]) -> Tuple[int, Any, str]:
        """(exit status, the JSON it printed or None, its stderr)."""
        cmd = [self.binary, "-s", self.admin, "--json", *args]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True,
                               timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise CtlError(f"djinnctl {' '.join(args)}: no answer in "
                           f"{self.timeout:g} s") from None
        except OSError as e:
            raise CtlError(f"{self.binary}: {e}") from None
        try:
            out = json.loads(p.stdout) if p.stdout.strip() else None
        except ValueError:
            out = None
        return p.returncode, out, p.stderr.strip()

    def run(self, *args: str) -> Any:
        """djinnctl ARGS: the JSON it printed; CtlError unless it exits
        0."""
        rc, out, err = self._run(args)
        if rc != 0:
            raise CtlError(f"djinnctl {' '.join(args)}: "
                           f"{err or f'exit status {rc}'}")
        return out

    def health(self) -> Tuple[bool, Optional[int], str]:
        """(ready, server.max_sessions or None where djinnd did not
        answer, why not ready)."""
        try:
            rc, out, err = self._run(("health",))
        except CtlError as e:
            return False, None, str(e)
        doc = out if isinstance(out, dict) else {}
        n = doc.get("max_sessions")
        limit = n if isinstance(n, int) and rc in (0, 1) else None
        why = "" if rc == 0 else (doc.get("reason") or err or
                                  f"djinnctl health: exit status {rc}")
        return rc == 0, limit, why


class Devices:
    """The devices advertised: how many, and whether healthy. A change
    wakes every ListAndWatch stream."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0
        self._healthy = False
        self._version = 0

    @property
    def count(self) -> int:
        return self._count

    def set(self, count: int, healthy: bool) -> bool:
        """Set them; whether that changed them."""
        with self._cond:
            if (count, healthy) == (self._count, self._healthy):
                return False
            self._count, self._healthy = count, healthy
            self._version += 1
            self._cond.notify_all()
            return True

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def watch(self, active: Callable[[], bool]) -> Iterator[Any]:
        """ListAndWatchResponses: the list now, then on every change,
        while active() holds (a stream's end calls wake())."""
        seen = -1
        while active():
            with self._cond:
                if self._version == seen:
                    self._cond.wait(1.0)
                    continue
                seen = self._version
                health = HEALTHY if self._healthy else UNHEALTHY
                reply = api.ListAndWatchResponse(devices=[
                    api.Device(ID=f"session-{i}", health=health)
                    for i in range(self._count)])
            yield reply


class Holders:
    """Which pod holds which djinn.io/session devices, as one List of
    the kubelet's PodResources API answered: each container's set of
    device ids, and each pod's (all its containers' together)."""

    def __init__(self, containers: Iterable[Tuple[str, str, FrozenSet[str]]]
                 ) -> None:
        self.containers = [(ns, pod, ids) for ns, pod, ids in containers
                           if ids]
        self.pods: Dict[Tuple[str, str], FrozenSet[str]] = {}
        for ns, pod, ids in self.containers:
            self.pods[ns, pod] = self.pods.get((ns, pod), frozenset()) | ids

    def __bool__(self) -> bool:
        return bool(self.containers)

    def find(self, devices: FrozenSet[str]
             ) -> Tuple[Optional[Tuple[str, str]], str]:
        """(namespace, pod) that @devices were given to, else None and
        why not: the pod of the container holding exactly @devices, else
        the pod whose containers hold all of them (an init container's
        devices, which List does not report, are handed on to the pod's
        app containers). A device is in one pod at a time: two pods
        answering is a kubelet not to be believed, and neither is
        chosen."""
        if not devices:
            return None, "no device ids"
        exact = {(ns, pod) for ns, pod, ids in self.containers
                 if ids == devices}
        if not exact:
            exact = {who for who, ids in self.pods.items()
                     if ids >= devices}
        if len(exact) == 1:
            return next(iter(exact)), ""
        if exact:
            return None, ("pods " + ", ".join(f"{ns}/{pod}" for ns, pod in
                                              sorted(exact)) +
                          " all hold them")
        return None, "no pod holds them"

    def holds(self, who: Tuple[str, str], devices: FrozenSet[str]) -> bool:
        """Whether the pod @who holds @devices (all of them)."""
        return bool(devices) and self.pods.get(who, frozenset()) >= devices

    def held(self, devices: FrozenSet[str]) -> bool:
        """Whether some pod holds @devices (all of them)."""
        return bool(devices) and any(ids >= devices
                                     for ids in self.pods.values())


class PodResources:
    """The kubelet's PodResources API."""

    def __init__(self, socket: str, timeout: float) -> None:
        self._channel = grpc.insecure_channel(f"unix:{socket}")
        self._stub = podresources_grpc.PodResourcesListerStub(self._channel)
        self._timeout = timeout

    def holders(self) -> Holders:
        """Who holds which djinn.io/session device ids now. List reports
        the app containers (and the init containers that keep running
        beside them), not the other init containers."""
        reply = self._stub.List(podresources.ListPodResourcesRequest(),
                                timeout=self._timeout)
        out = []
        for pod in reply.pod_resources:
            for c in pod.containers:
                # an entry per NUMA node of the devices
                ids = frozenset(i for d in c.devices
                                if d.resource_name == RESOURCE
                                for i in d.device_ids)
                out.append((pod.namespace, pod.name, ids))
        return Holders(out)

    def close(self) -> None:
        self._channel.close()


class Refused(Exception):
    """PreStartContainer cannot be answered with a token, and asking
    again will not change that."""


class RootError(OSError):
    """The allocations' root is not a directory of this plugin's alone."""


@dataclasses.dataclass
class Grant:
    """The token an allocation's pod was given: djinnd's id of it, with
    the tenant and the creation time ``djinnctl token list`` gave right
    after the mint (an id alone could name another token, after djinnd
    lost its minted tokens), and its SHA-256 (the token file holds it
    still)."""

    namespace: str
    pod: str
    tenant: str
    token_id: int
    created_ns: int
    token_sha256: str

    def listed(self, tokens: Any) -> bool:
        """Whether djinnd's ``token list`` @tokens still has this
        token."""
        return any(isinstance(t, dict) and t.get("id") == self.token_id and
                   t.get("tenant") == self.tenant and
                   t.get("created_ns") == self.created_ns
                   for t in tokens)


@dataclasses.dataclass
class Record:
    """One Allocate's directory, ROOT/NAME (NAME random), recorded as
    ROOT/NAME.json: its device ids, when it was made, and the token
    written there, if any."""

    name: str
    devices: FrozenSet[str]
    allocated_ns: int  # time.time_ns(), made to increase: their order
    grant: Optional[Grant] = None
    # not recorded: the clock when allocated or granted (0 read back)
    touched: float = 0.0
    # the clock at the first reaper pass of those since that found its
    # pod gone; None while found
    missing_since: Optional[float] = None
    busy: bool = False  # a grant or a revocation is at it, lock released

    def to_json(self) -> str:
        return json.dumps({
            "devices": sorted(self.devices),
            "allocated_ns": self.allocated_ns,
            "grant": self.grant and dataclasses.asdict(self.grant)}) + "\n"

    @classmethod
    def from_json(cls, name: str, text: str) -> "Record":
        doc = json.loads(text)
        g = doc["grant"]
        devices = frozenset(doc["devices"])
        if not devices or not all(isinstance(d, str) for d in devices):
            raise ValueError("no device ids")
        return cls(name, devices, int(doc["allocated_ns"]),
                   Grant(**g) if g is not None else None)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Root:
    """The allocations' root directory, held open: a directory of this
    plugin's user (root) alone, mode 0700, not a symbolic link. Every
    path below it is opened relative to it without following a symbolic
    link."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            st = os.lstat(path)
        self._check(st)
        self.fd = os.open(path, _DIR_FLAGS)
        try:
            if self._id(os.fstat(self.fd)) != self._id(st):
                raise RootError(f"{path} changed while opened")
            os.fchmod(self.fd, 0o700)  # hostPath made it 0755
        except BaseException:
            os.close(self.fd)
            raise

    @staticmethod
    def _id(st: os.stat_result) -> Tuple[int, int]:
        return st.st_dev, st.st_ino

    def _check(self, st: os.stat_result) -> None:
        if stat.S_ISLNK(st.st_mode):
            raise RootError(f"{self.path} is a symbolic link")
        if not stat.S_ISDIR(st.st_mode):
            raise RootError(f"{self.path} is not a directory")
        if st.st_uid != os.geteuid():
            raise RootError(f"{self.path} belongs to uid {st.st_uid}, not "
                            f"{os.geteuid()}")

    def check(self) -> None:
        """RootError unless the path still names the directory held
        open (the path is what the kubelet mounts from)."""
        st = os.lstat(self.path)
        self._check(st)
        if self._id(st) != self._id(os.fstat(self.fd)):
            raise RootError(f"{self.path} is no longer the directory "
                            "opened at start")

    def names(self) -> List[str]:
        return os.listdir(self.fd)

    def _open_dir(self, name: str) -> int:
        fd = os.open(name, _DIR_FLAGS, dir_fd=self.fd)
        if os.fstat(fd).st_uid != os.geteuid():
            os.close(fd)
            raise RootError(f"{self.path / name} is not this plugin's")
        return fd

    def mkdir(self, name: str) -> None:
        """ROOT/@name, new, mode 0755 (a pod of any uid reads it)."""
        os.mkdir(name, 0o700, dir_fd=self.fd)
        fd = self._open_dir(name)
        try:
            os.fchmod(fd, 0o755)
        finally:
            os.close(fd)

    def write(self, name: str, text: str, mode: int,
              subdir: Optional[str] = None) -> None:
        """@text as ROOT/[@subdir/]@name, whole or not at all (a new
        temporary file renamed)."""
        dfd = self._open_dir(subdir) if subdir else self.fd
        try:
            tmp = f".{name}-{secrets.token_hex(4)}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                         os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
            try:
                with os.fdopen(fd, "w") as f:
                    os.fchmod(f.fileno(), mode)
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
                os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                os.unlink(tmp, dir_fd=dfd)
                raise
        finally:
            if dfd != self.fd:
                os.close(dfd)

    def read(self, name: str, subdir: Optional[str] = None) -> str:
        """ROOT/[@subdir/]@name, a regular file."""
        dfd = self._open_dir(subdir) if subdir else self.fd
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=dfd)
        finally:
            if dfd != self.fd:
                os.close(dfd)
        with os.fdopen(fd) as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise RootError(f"{self.path / (subdir or '') / name} is "
                                "not a regular file")
            return f.read()

    def remove(self, name: str) -> None:
        """ROOT/@name and what is below it, if there."""
        _remove(self.fd, name)


def _remove(parent: int, name: str) -> None:
    """@name in the directory @parent and, a directory, what is in it,
    never following a symbolic link."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        for n in os.listdir(fd):
            _remove(fd, n)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Allocations:
    """The allocations: each Allocate's own directory (ROOT/NAME, NAME
    random, mounted into the pod) and the token written there, recorded
    in ROOT/NAME.json (mode 0600, outside the pod's view) so that a
    restarted plugin still revokes it. PreStartContainer writes in the
    directories of its device set that no other pod's token went to,
    made since the last that one did; the kubelet allocates all a pod's
    containers at admission, so that an init container and an app
    container given the same devices have a directory each before
    either starts.

    The lock guards the records and the files, and is never held across
    djinnctl or the kubelet: a record being granted or revoked is busy
    meanwhile, and waited for (@wait seconds at most)."""

    def __init__(self, root: Root, ctl: Djinnctl, pods: PodResources,
                 tenant_prefix: str, grace: float = REAP_GRACE,
                 find_tries: int = FIND_TRIES, find_wait: float = FIND_WAIT,
                 wait: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self._ctl = ctl
        self._pods = pods
        self._prefix = tenant_prefix
        self.grace = grace
        self._find_tries = find_tries
        self._find_wait = find_wait
        self._wait = wait
        self._clock = clock
        self._cond = threading.Condition()
        self._records: Dict[str, Record] = {}
        self._last_ns = 0  # the latest allocated_ns
        self._unknown: Dict[str, float] = {}  # name: first seen
        self._epoch = clock()  # the grace counts from here at least
        self._empty_since: Optional[float] = None
        for n in self.root.names():
            if not (n.endswith(".json") and NAME_RE.match(n[:-5])):
                continue
            try:
                rec = Record.from_json(n[:-5], self.root.read(n))
            except (OSError, ValueError, TypeError, KeyError) as e:
                log.warning("%s: not an allocation's record, ignored: %s",
                            self.root.path / n, e)
                continue
            self._records[rec.name] = rec
            self._last_ns = max(self._last_ns, rec.allocated_ns)

    def prepare(self, devices: List[str]) -> pathlib.Path:
        """A new directory for an Allocate of @devices (0755, empty)."""
        want = frozenset(devices)
        if not want:
            raise Refused("Allocate names no device")
        with self._cond:
            self.root.check()
            name = secrets.token_hex(16)
            self._last_ns = max(time.time_ns(), self._last_ns + 1)
            rec = Record(name, want, self._last_ns, touched=self._clock())
            # the record first: no directory is without one
            self.root.write(f"{name}.json", rec.to_json(), 0o600)
            try:
                self.root.mkdir(name)
            except BaseException:
                self.root.remove(f"{name}.json")
                raise
            self._records[name] = rec
        log.debug("%s: %s", name, ",".join(sorted(want)))
        return self.root.path / name

    def _find(self, devices: FrozenSet[str]) -> Tuple[str, str]:
        """(namespace, pod) that @devices were given to."""
        why = ""
        for i in range(self._find_tries):
            if i:
                time.sleep(self._find_wait)
            who, why = self._pods.holders().find(devices)
            if who:
                return who
        raise LookupError(
            f"{RESOURCE} {','.join(sorted(devices))}: {why} in the "
            f"kubelet's pod resources (asked {self._find_tries} times in "
            f"{(self._find_tries - 1) * self._find_wait:g} s)")

    def _of(self, devices: FrozenSet[str]) -> List[Record]:
        """The records of @devices, the oldest first (lock held)."""
        return sorted((r for r in self._records.values()
                       if r.devices == devices),
                      key=lambda r: (r.allocated_ns, r.name))

    def _claim(self, devices: FrozenSet[str], who: Tuple[str, str]
               ) -> List[Record]:
        """The records of @devices a token of the pod @who may go to,
        made busy: those made since the last whose token went to another
        pod, and none of those."""
        deadline = time.monotonic() + self._wait
        with self._cond:
            while True:
                recs: List[Record] = []
                for r in self._of(devices):
                    if r.grant and (r.grant.namespace, r.grant.pod) != who:
                        recs = []
                    else:
                        recs.append(r)
                if not recs:
                    raise Refused(
                        f"{RESOURCE} {','.join(sorted(devices))}: no "
                        "Allocate made a directory for them since their "
                        "last pod's (or it was removed since)")
                busy = [r for r in recs if r.busy]
                if not busy:
                    for r in recs:
                        r.busy = True
                    return recs
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CtlError(f"{self.root.path / busy[0].name}: its "
                                   "token is being revoked or given (again "
                                   "later)")
                self._cond.wait(left)

    def _release(self, recs: List[Record]) -> None:
        with self._cond:
            for rec in recs:
                rec.busy = False
            self._cond.notify_all()

    def tokens(self) -> List[Any]:
        """``djinnctl token list``."""
        out = self._ctl.run("token", "list")
        if not isinstance(out, list):
            raise CtlError("djinnctl token list: not a list")
        return out

    def grant(self, devices: List[str]) -> Grant:
        """Give the pod holding @devices a token of its namespace's
        tenant, written in each directory of @devices that _claim()
        names: the one it has there if djinnd still has it (its
        container started again), else a new one. The grant of the
        latest."""
        want = frozenset(devices)
        ns, pod = self._find(want)
        recs = self._claim(want, (ns, pod))
        try:
            return self._give(recs, ns, pod, self._prefix + ns)
        finally:
            self._release(recs)

    def _has_token(self, rec: Record, g: Grant) -> bool:
        try:
            return _sha256(self.root.read(TOKEN, rec.name).strip()) == \
                g.token_sha256
        except (OSError, UnicodeDecodeError):
            return False

    def _give(self, recs: List[Record], ns: str, pod: str,
              tenant: str) -> Grant:
        need = recs
        if any(r.grant for r in recs):
            tokens = self.tokens()
            need = [r for r in recs if not (
                r.grant and r.grant.tenant == tenant and
                r.grant.listed(tokens) and self._has_token(r, r.grant))]
            # a token revoked goes from every directory it is in
            stale = {r.grant.token_id for r in need if r.grant}
            need = [r for r in recs if r in need or
                    (r.grant and r.grant.token_id in stale)]
            for r in need:
                if r.grant and not self._revoke(r.grant, tokens):
                    raise CtlError(f"token {r.grant.token_id} of {ns}/{pod} "
                                   "is not revoked")
        if not need:
            g = recs[-1].grant
            assert g
            return g
        t = self._ctl.run("token", "mint", tenant)
        try:
            tid, token = int(t["id"]), str(t["token"])
        except (TypeError, KeyError, ValueError):
            raise CtlError(f"djinnctl token mint: {t!r}") from None
        try:
            created = [x.get("created_ns") for x in self.tokens()
                       if isinstance(x, dict) and x.get("id") == tid and
                       x.get("tenant") == tenant]
            if len(created) != 1 or not isinstance(created[0], int):
                raise CtlError(f"token {tid}, just minted, is not listed")
        except CtlError:
            try:
                self._ctl.run("token", "revoke", str(tid))
            except CtlError as e:
                log.warning("token %d, just minted, not revoked: %s", tid, e)
            raise
        g = Grant(ns, pod, tenant, tid, created[0], _sha256(token))
        with self._cond:
            for r in need:
                r.grant = g
                r.touched = self._clock()
                r.missing_since = None
                # the record first: every token written is revoked some
                # day
                self.root.write(f"{r.name}.json", r.to_json(), 0o600)
                self.root.write(TOKEN, token + "\n", 0o444, r.name)
                log.info("%s/%s: token %d of tenant %s in %s", ns, pod, tid,
                         tenant, self.root.path / r.name)
        return recs[-1].grant or g

    def _revoke(self, g: Grant, tokens: List[Any]) -> bool:
        """Revoke @g's token if djinnd still lists it (@tokens): whether
        it is gone."""
        if not g.listed(tokens):
            log.info("%s/%s: token %d gone already", g.namespace, g.pod,
                     g.token_id)
            return True
        try:
            self._ctl.run("token", "revoke", str(g.token_id))
        except CtlError as e:
            # djinnctl fails alike for a token gone and for djinnd not
            # answering: the list tells
            try:
                gone = not g.listed(self.tokens())
            except CtlError:
                gone = False
            if not gone:
                log.warning("%s/%s: token %d not revoked (again later): "
                            "%s", g.namespace, g.pod, g.token_id, e)
                return False
        log.info("%s/%s: token %d revoked", g.namespace, g.pod, g.token_id)
        return True

    def restart_grace(self) -> None:
        """Count the grace anew from now: the kubelet's answers since
        are to be believed from scratch (a new kubelet, or none)."""
        with self._cond:
            self._epoch = self._clock()

    def _present(self, rec: Record, holders: Holders) -> bool:
        if rec.grant:
            return holders.holds((rec.grant.namespace, rec.grant.pod),
                                 rec.devices)
        # no token yet: while a pod holds the devices, unless a token
        # went to a later directory of them (and not to this one: no
        # PreStartContainer will write here)
        return holders.held(rec.devices) and not any(
            r.grant for r in self._of(rec.devices)
            if (r.allocated_ns, r.name) > (rec.allocated_ns, rec.name))

    def reap(self, holders: Holders, asked: float) -> None:
        """Revoke the tokens of allocations whose pod no longer holds
        their devices, in @holders (List asked at the clock's @asked) and
        every pass before for the grace period at least, and remove their
        directories; and the directories no allocation has, as long."""
        now = self._clock()
        victims = []
        with self._cond:
            if not holders and self._records:
                # a kubelet just restarted may answer before it knows
                # its pods: believed after the grace only
                if self._empty_since is None:
                    self._empty_since = now
                trusted = now - max(self._empty_since, self._epoch) >= \
                    self.grace
            else:
                self._empty_since = None
                trusted = True
            for rec in self._records.values():
                if rec.busy or rec.touched > asked:
                    continue
                if self._present(rec, holders):
                    rec.missing_since = None
                    continue
                if rec.missing_since is None:
                    rec.missing_since = now
                if (trusted and now - max(rec.missing_since, self._epoch) >=
                        self.grace):
                    rec.busy = True
                    victims.append(rec)
            self._sweep(now)
        if not victims:
            return
        try:
            tokens = self.tokens() if any(r.grant for r in victims) else []
        except CtlError as e:
            log.warning("revoking: %s (again later)", e)
            self._release(victims)
            return
        for rec in victims:
            g = rec.grant
            gone = g is None or self._revoke(g, tokens)
            if g and gone:  # another directory may have had it too
                tokens = [x for x in tokens if not g.listed([x])]
            with self._cond:
                try:
                    if gone:
                        self._drop(rec)
                finally:
                    rec.busy = False
                    self._cond.notify_all()

    def _drop(self, rec: Record) -> None:
        """Remove @rec's directory and record (lock held)."""
        try:
            self.root.remove(rec.name)
            self.root.remove(f"{rec.name}.json")
        except OSError as e:
            log.warning("%s: %s (again later)", self.root.path / rec.name, e)
            return
        del self._records[rec.name]
        who = f"{rec.grant.namespace}/{rec.grant.pod}: " if rec.grant else ""
        log.info("%s%s removed", who, self.root.path / rec.name)

    def _sweep(self, now: float) -> None:
        """Remove what is in the root without a record for the grace
        period (lock held)."""
        try:
            names = set(self.root.names())
        except OSError as e:
            log.warning("%s: %s", self.root.path, e)
            return
        for n in list(self._unknown):
            if n not in names:
                del self._unknown[n]
        for n in names:
            if n in self._records or (n.endswith(".json") and
                                      n[:-5] in self._records):
                continue
            if now - self._unknown.setdefault(n, now) < self.grace:
                continue
            try:
                self.root.remove(n)
                log.info("%s: no allocation's: removed", self.root.path / n)
            except OSError as e:
                log.warning("%s: %s", self.root.path / n, e)
            self._unknown.pop(n, None)

    def records(self) -> List[Record]:
        """A copy of the records (for tests)."""
        with self._cond:
            return [dataclasses.replace(r) for r in self._records.values()]


class Plugin:
    """The DevicePlugin service."""

    def __init__(self, devices: Devices, allocs: Allocations,
                 pods_dir: str) -> None:
        self.devices = devices
        self.allocs = allocs
        self.pods_dir = pods_dir

    def GetDevicePluginOptions(self, request: Any,
                               context: grpc.ServicerContext) -> Any:
        return api.DevicePluginOptions(
            pre_start_required=True, get_preferred_allocation_available=True)

    def ListAndWatch(self, request: Any,
                     context: grpc.ServicerContext) -> Iterator[Any]:
        context.add_callback(self.devices.wake)
        return self.devices.watch(context.is_active)

    def GetPreferredAllocation(self, request: Any,
                               context: grpc.ServicerContext) -> Any:
        # the devices are alike: the ones it must have, then the first
        out = api.PreferredAllocationResponse()
        for r in request.container_requests:
            must = list(r.must_include_deviceIDs)
            rest = [d for d in r.available_deviceIDs if d not in must]
            out.container_responses.add(
                deviceIDs=must + rest[:max(r.allocation_size - len(must),
                                           0)])
        return out

    def Allocate(self, request: Any, context: grpc.ServicerContext) -> Any:
        out = api.AllocateResponse()
        for r in request.container_requests:
            try:
                d = self.allocs.prepare(list(r.devices_ids))
            except Refused as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            except OSError as e:
                context.abort(grpc.StatusCode.INTERNAL, str(e))
            out.container_responses.add(
                envs={"DJINN_ADDR": f"unix:{PODS_DIR}/{POD_SOCKET}",
                      "DJINN_TOKEN_FILE": f"{SECRETS_DIR}/{TOKEN}"},
                mounts=[api.Mount(container_path=PODS_DIR,
                                  host_path=self.pods_dir, read_only=True),
                        api.Mount(container_path=SECRETS_DIR,
                                  host_path=str(d), read_only=True)])
        return out

    def PreStartContainer(self, request: Any,
                          context: grpc.ServicerContext) -> Any:
        try:
            self.allocs.grant(list(request.devices_ids))
        except LookupError as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        except Refused as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except CtlError as e:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
        except grpc.RpcError as e:
            context.abort(grpc.StatusCode.UNAVAILABLE,
                          f"the kubelet's pod resources: {e.details()}")
        except OSError as e:
            context.abort(grpc.StatusCode.INTERNAL, str(e))
        return api.PreStartContainerResponse()


def _identity(path: pathlib.Path) -> Optional[Tuple[int, int, int]]:
    """Which file @path is, None if none: its inode, and its ctime, which
    tells a file made anew on a freed inode number."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


class Server:
    """The plugin's life: serve on ENDPOINT, register with the kubelet
    (again for each new kubelet.sock, or when ours went), and every
    interval poll djinnd's health and reap the allocations of pods
    gone (a new kubelet.sock or pod resources socket, or a List failed,
    restarts their grace)."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.dir = pathlib.Path(a.kubelet_dir)
        self.sock = self.dir / ENDPOINT
        self.interval = a.interval
        self.timeout = a.timeout
        self.sessions: Optional[int] = a.sessions
        self.ctl = Djinnctl(a.djinnctl, a.admin_socket, a.timeout)
        self.pods = PodResources(a.pod_resources_socket, a.timeout)
        self.pods_socket = pathlib.Path(a.pod_resources_socket)
        self.devices = Devices()
        self.allocs = Allocations(
            Root(pathlib.Path(a.alloc_root)), self.ctl, self.pods,
            a.tenant_prefix, grace=a.reap_grace, find_tries=a.find_tries,
            find_wait=a.find_wait, wait=a.timeout)
        self.plugin = Plugin(self.devices, self.allocs, a.pods_dir)
        self.stopping = threading.Event()
        self._server: Optional[grpc.Server] = None
        # (kubelet.sock, ours) when registered
        self._registered: Optional[Tuple[Any, Any]] = None
        # (kubelet.sock, the pod resources socket) at the last List
        self._sockets: Optional[Tuple[Any, Any]] = None

    def poll_health(self) -> None:
        ready, limit, why = self.ctl.health()
        count = self.devices.count
        if self.sessions is not None:
            count = self.sessions
        elif limit is not None:
            count = min(limit, MAX_DEVICES)
            if limit > MAX_DEVICES and count != self.devices.count:
                log.info("djinnd takes %d sessions: %d devices (--sessions "
                         "says more)", limit, count)
        if self.devices.set(count, ready):
            log.info("%d devices, %s%s", count,
                     HEALTHY if ready else UNHEALTHY,
                     "" if ready else f": {why}")

    def _serve(self) -> None:
        if self._server:
            self._server.stop(None).wait()
        self.sock.unlink(missing_ok=True)
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(8))
        api_grpc.add_DevicePluginServicer_to_server(self.plugin, server)
        server.add_insecure_port(f"unix:{self.sock}")
        server.start()
        self._server = server

    def ensure_registered(self) -> None:
        """Register unless registered with this kubelet.sock from this
        socket; serve anew first."""
        kubelet = _identity(self.dir / KUBELET_SOCKET)
        if kubelet is None:
            if self._registered:
                log.info("%s gone: waiting for the kubelet",
                         self.dir / KUBELET_SOCKET)
                self._registered = None
            return
        if self._registered == (kubelet, _identity(self.sock)):
            return
        self._registered = None
        try:
            self._serve()
        except RuntimeError as e:  # grpc could not bind
            log.error("serving on %s: %s (again in %g s)", self.sock, e,
                      self.interval)
            return
        req = api.RegisterRequest(
            version=API_VERSION, endpoint=ENDPOINT, resource_name=RESOURCE,
            options=api.DevicePluginOptions(
                pre_start_required=True,
                get_preferred_allocation_available=True))
        try:
            with grpc.insecure_channel(
                    f"unix:{self.dir / KUBELET_SOCKET}") as ch:
                api_grpc.RegistrationStub(ch).Register(req,
                                                       timeout=self.timeout)
        except grpc.RpcError as e:
            log.error("registering with the kubelet: %s (again in %g s)",
                      e.details(), self.interval)
            return
        self._registered = (kubelet, _identity(self.sock))
        log.info("registered %s at %s", RESOURCE, self.sock)

    def _socket_ids(self) -> Tuple[Any, Any]:
        return (_identity(self.dir / KUBELET_SOCKET),
                _identity(self.pods_socket))

    def reap(self) -> None:
        """Reap on a List of the same kubelet as the last pass's; the
        grace counts anew otherwise."""
        before = self._socket_ids()
        asked = time.monotonic()
        try:
            holders = self.pods.holders()
        except grpc.RpcError as e:
            log.warning("the kubelet's pod resources: %s", e.details())
            self._sockets = None
            self.allocs.restart_grace()
            return
        after = self._socket_ids()
        if before != self._sockets or after != before:
            if self._sockets is not None:
                log.info("the kubelet's sockets changed: no allocation is "
                         "reaped for %g s", self.allocs.grace)
            self._sockets = after
            self.allocs.restart_grace()
            return
        try:
            self.allocs.reap(holders, asked)
        except OSError as e:
            log.warning("reaping: %s (again in %g s)", e, self.interval)

    def run(self) -> None:
        while not self.stopping.is_set():
            self.poll_health()
            self.ensure_registered()
            self.reap()
            self.stopping.wait(self.interval)

    def close(self) -> None:
        if self._server:
            self._server.stop(None).wait()
            self.sock.unlink(missing_ok=True)
        self.pods.close()


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="djinn-device-plugin",
        description=f"The kubelet device plugin of {RESOURCE}: djinnd "
        "sessions for pods.")
    p.add_argument("--kubelet-dir", default=KUBELET_DIR, metavar="DIR",
                   help="the kubelet's device plugin directory, where "
                   f"{KUBELET_SOCKET} is and {ENDPOINT} is made (default "
                   f"{KUBELET_DIR})")
    p.add_argument("--pod-resources-socket", default=POD_RESOURCES_SOCKET,
                   metavar="PATH", help="the kubelet's PodResources API "
                   f"(default {POD_RESOURCES_SOCKET})")
    p.add_argument("-s", "--admin-socket", default=ADMIN_SOCKET,
                   metavar="PATH",
                   help=f"djinnd's admin socket (default {ADMIN_SOCKET})")
    p.add_argument("--djinnctl", default="djinnctl", metavar="PATH",
                   help="the djinnctl program (default: djinnctl, on "
                   "$PATH)")
    p.add_argument("--alloc-root", default=ALLOC_ROOT, metavar="DIR",
                   help="where each allocation's token directory is made: "
                   "root's alone (mode 0700 is set), on a file system "
                   "that a reboot empties, as djinnd's minted tokens "
                   f"(default {ALLOC_ROOT})")
    p.add_argument("--pods-dir", default=PODS_DIR, metavar="DIR",
                   help=f"the host directory of djinnd's pod socket "
                   f"({POD_SOCKET}, a server.token_auth listener), mounted "
                   f"at {PODS_DIR} in pods (default {PODS_DIR})")
    p.add_argument("--sessions", type=int, default=None, metavar="N",
                   help="advertise N devices (default: djinnd's "
                   f"server.max_sessions, at most {MAX_DEVICES})")
    p.add_argument("--tenant-prefix", default="", metavar="PREFIX",
                   help="a pod's tenant is PREFIX followed by its "
                   "namespace (default: no prefix)")
    p.add_argument("--interval", type=float, default=5.0,
                   metavar="SECONDS", help="how often djinnd's health is "
                   "asked, the kubelet's socket looked at and the tokens "
                   "of pods gone revoked (default 5)")
    p.add_argument("--reap-grace", type=float, default=REAP_GRACE,
                   metavar="SECONDS", help="revoke a token once its pod "
                   "has been missing from the kubelet's pod resources this "
                   "long, and as long since the kubelet's sockets last "
                   f"changed (default {REAP_GRACE:g})")
    p.add_argument("--find-tries", type=int, default=FIND_TRIES,
                   metavar="N", help="PreStartContainer asks the kubelet's "
                   "pod resources this many times for the pod (default "
                   f"{FIND_TRIES})")
    p.add_argument("--find-wait", type=float, default=FIND_WAIT,
                   metavar="SECONDS", help="... this far apart (default "
                   f"{FIND_WAIT:g})")
    p.add_argument("--timeout", type=float, default=10.0,
                   metavar="SECONDS", help="the longest djinnctl and the "
                   "kubelet may take to answer (default 10)")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info",
                            "debug"])
    a = p.parse_args(argv)
    if a.sessions is not None and a.sessions < 0:
        p.error("--sessions is 0 or more")
    if a.interval <= 0 or a.timeout <= 0:
        p.error("--interval and --timeout are more than 0")
    if a.reap_grace < 0 or a.find_wait < 0 or a.find_tries < 1:
        p.error("--reap-grace and --find-wait are 0 or more, --find-tries "
                "1 or more")

    logging.basicConfig(level=a.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(message)s")
    try:
        server = Server(a)
    except OSError as e:
        log.error("%s", e)
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.stopping.set())
    try:
        server.run()
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
