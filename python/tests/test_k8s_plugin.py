# SPDX-License-Identifier: MIT
"""The kubelet device plugin (djinn.k8s.deviceplugin) against a fake
kubelet and a real djinnd of this build.

The fake kubelet is what Kubernetes' device manager tests use: a
Registration server on a temporary kubelet.sock that records Register
requests, a PodResourcesLister whose List answers the pods a test sets,
and a DevicePlugin client (ListAndWatch read in a thread). The plugin
runs as `python -m djinn.k8s.deviceplugin` on a djinnd started with a
token_auth listener (the pods' socket) and server.max_sessions=5, with
a reap grace of GRACE seconds; test_allocations_in_process drives the
plugin's Allocations in this process instead, on a clock of its own.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import queue
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

from conftest import BACKEND, DJINNCTL, DJINND, ROOT, settle, stop_proc

grpc = pytest.importorskip("grpc", reason="needs grpcio (pip install "
                           "grpcio)")
pytest.importorskip("grpc_tools", reason="needs grpcio-tools (pip install "
                    "grpcio-tools)")

import djinn  # noqa: E402
from djinn.k8s import deviceplugin  # noqa: E402
from djinn.k8s._proto import (api, api_grpc, podresources,  # noqa: E402
                              podresources_grpc)

RESOURCE = "djinn.io/session"
SESSIONS = 5
WAIT = 20.0  # the bound on every asynchronous effect, seconds
# the plugin's --reap-grace, seconds: WAIT bounds reaping too
GRACE = 2.0
# the paths a pod sees (deviceplugin.py's, fixed by the design)
POD_DIR = "/run/djinn/pods"
SECRETS = "/var/run/secrets/djinn.io"

Devices = Dict[str, str]


class Djinnd:
    """djinnd with an admin socket, a client socket and the pods' socket
    (server.token_auth), at most SESSIONS sessions."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.admin = tmp / "admin.sock"
        self.sock = tmp / "d.sock"
        self.pods_dir = tmp / "pods"
        self.pods_sock = self.pods_dir / "djinnd.sock"
        self.log = tmp / "djinnd.log"
        self.models = tmp / "models"
        self.pods_dir.mkdir()
        self.models.mkdir()
        self.start()

    def start(self) -> None:
        """Start it and wait (WAIT s at most) until it listens."""
        pods = f"unix:{self.pods_sock}"
        self.proc = subprocess.Popen(
            [DJINND, "-f", "-l", f"unix:{self.sock}", "-l", pods,
             "-a", str(self.admin), "--backend", BACKEND, "-m", "256M",
             "--model-dir", str(self.models),
             "-o", f"server.max_sessions={SESSIONS}",
             "-o", f"server.token_auth={pods}"],
            stdout=open(self.log, "a"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("djinnd exited:\n" + self.log.read_text())
            try:
                for path in (self.sock, self.pods_sock, self.admin):
                    with socket.socket(socket.AF_UNIX) as s:
                        s.connect(str(path))
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("djinnd did not listen:\n" + self.log.read_text())

    def ctl(self, *args: str) -> Any:
        out = subprocess.run([DJINNCTL, "-s", str(self.admin), "--json",
                              *args], check=True, capture_output=True,
                             text=True).stdout
        return json.loads(out)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        stop_proc(self.proc)


class Registration(api_grpc.RegistrationServicer):
    """Register records its requests."""

    def __init__(self) -> None:
        self.requests: "queue.Queue[Any]" = queue.Queue()

    def Register(self, request: Any, context: Any) -> Any:
        self.requests.put(request)
        return api.Empty()


class Lister(podresources_grpc.PodResourcesListerServicer):
    """List answers self.pods, and counts its answers."""

    def __init__(self) -> None:
        self.pods: List[Any] = []
        self.calls = 0

    def List(self, request: Any, context: Any) -> Any:
        self.calls += 1
        return podresources.ListPodResourcesResponse(
            pod_resources=list(self.pods))

    def answers(self, n: int) -> None:
        """Wait until List has answered @n more times (WAIT s at most)."""
        want = self.calls + n
        if settle(lambda: self.calls, lambda c: c >= want, WAIT) < want:
            pytest.fail(f"List was not asked {n} times in {WAIT:g} s")


def pod(namespace: str, name: str, *devices: List[str]) -> Any:
    """A pod of a container holding @devices of RESOURCE (one container
    per list; none holding any if none)."""
    return podresources.PodResources(
        name=name, namespace=namespace,
        containers=[podresources.ContainerResources(
            name=f"c{i}", devices=[podresources.ContainerDevices(
                resource_name=RESOURCE, device_ids=d)])
            for i, d in enumerate(devices)])


def serve(path: pathlib.Path, add: Callable[[Any], None]) -> Any:
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(4))
    add(server)
    server.add_insecure_port(f"unix:{path}")
    server.start()
    return server


class Kubelet:
    """The fake kubelet: Registration on DIR/kubelet.sock, the pod
    resources API on its own socket, and a client of the plugin's
    DJINN/djinn.sock."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.dir = tmp / "device-plugins"
        self.dir.mkdir()
        self.sock = self.dir / "kubelet.sock"
        self.pods_sock = tmp / "pod-resources.sock"
        self.registration = Registration()
        self.lister = Lister()
        self._reg = self._serve_registration()
        self._pods = serve(self.pods_sock, lambda s: podresources_grpc.
                           add_PodResourcesListerServicer_to_server(
                               self.lister, s))
        self._channel: Optional[Any] = None

    def _serve_registration(self) -> Any:
        self.sock.unlink(missing_ok=True)
        return serve(self.sock, lambda s: api_grpc.
                     add_RegistrationServicer_to_server(
                         self.registration, s))

    def restart(self) -> None:
        """A new kubelet.sock, as a restarted kubelet makes."""
        self._reg.stop(None).wait()
        self._reg = self._serve_registration()

    def plugin(self) -> Any:
        """A DevicePlugin client of the plugin's socket (a new channel:
        the plugin serves anew on each registration)."""
        if self._channel:
            self._channel.close()
        self._channel = grpc.insecure_channel(
            f"unix:{self.dir / 'djinn.sock'}")
        return api_grpc.DevicePluginStub(self._channel)

    def stop(self) -> None:
        if self._channel:
            self._channel.close()
        self._reg.stop(None).wait()
        self._pods.stop(None).wait()


class Watch:
    """A ListAndWatch stream, read in a thread into a queue."""

    def __init__(self, stub: Any) -> None:
        self.call = stub.ListAndWatch(api.Empty())
        self.q: "queue.Queue[Optional[Devices]]" = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for r in self.call:
                self.q.put({d.ID: d.health for d in r.devices})
        except grpc.RpcError:
            pass  # cancelled, or the plugin went
        self.q.put(None)

    def until(self, want: Devices, timeout: float = WAIT
              ) -> Optional[Devices]:
        """The lists sent until @want, or the stream's end, for @timeout
        s at most: the last one (the caller asserts)."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                got = self.q.get(timeout=max(deadline - time.monotonic(),
                                             0))
            except queue.Empty:
                return last
            if got is None:
                return last
            last = got
            if last == want:
                return last

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(10)


def all_of(health: str) -> Devices:
    return {f"session-{i}": health for i in range(SESSIONS)}


class Env:
    def __init__(self, tmp: pathlib.Path, daemon: Djinnd,
                 kubelet: Kubelet) -> None:
        self.tmp = tmp
        self.daemon = daemon
        self.kubelet = kubelet
        self.alloc_root = tmp / "allocations"
        # as the DaemonSet's hostPath (DirectoryOrCreate) leaves it
        self.alloc_root.mkdir()
        self.alloc_root.chmod(0o755)
        self.log = tmp / "plugin.log"
        self.start()

    def start(self) -> None:
        """Start the plugin (its log goes on in plugin.log)."""
        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "djinn.k8s.deviceplugin",
             "--kubelet-dir", str(self.kubelet.dir),
             "--pod-resources-socket", str(self.kubelet.pods_sock),
             "--admin-socket", str(self.daemon.admin),
             "--djinnctl", DJINNCTL, "--alloc-root", str(self.alloc_root),
             "--pods-dir", str(self.daemon.pods_dir), "--interval", "0.2",
             "--reap-grace", str(GRACE), "--find-tries", "3",
             "--find-wait", "0.1", "--log-level", "debug"],
            env=env, stdout=open(self.log, "a"), stderr=subprocess.STDOUT)

    def logs(self) -> str:
        return "plugin:\n" + self.log.read_text()

    def stop(self) -> None:
        stop_proc(self.proc)


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    for p in (DJINND, DJINNCTL):
        if not os.access(p, os.X_OK):
            pytest.fail(f"{p} is not there (run make, or set $DJINN_BUILD "
                        "or the program's variable to an absolute path)")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="djinn-k8s-"))
    daemon = Djinnd(tmp)
    kubelet = Kubelet(tmp)
    e = Env(tmp, daemon, kubelet)
    yield e
    e.stop()
    kubelet.stop()
    daemon.stop()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def registered(env: Env) -> Any:
    """The plugin's Register request (the next one)."""
    try:
        return env.kubelet.registration.requests.get(timeout=WAIT)
    except queue.Empty:
        pytest.fail("the plugin did not register\n" + env.logs())


def test_registers(env: Env, registered: Any) -> None:
    assert registered.version == "v1beta1"
    assert registered.resource_name == RESOURCE
    assert registered.endpoint == "djinn.sock"
    assert registered.options.pre_start_required
    assert registered.options.get_preferred_allocation_available
    assert stat.S_ISSOCK((env.kubelet.dir / "djinn.sock").stat().st_mode)

    stub = env.kubelet.plugin()
    opts = stub.GetDevicePluginOptions(api.Empty(), timeout=WAIT)
    assert opts.pre_start_required and opts.get_preferred_allocation_available

    # djinnd's max_sessions devices, all healthy
    w = Watch(stub)
    try:
        assert w.until(all_of("Healthy")) == all_of("Healthy"), env.logs()
    finally:
        w.close()

    ids = [f"session-{i}" for i in range(SESSIONS)]
    r = stub.GetPreferredAllocation(api.PreferredAllocationRequest(
        container_requests=[api.ContainerPreferredAllocationRequest(
            available_deviceIDs=ids, must_include_deviceIDs=["session-3"],
            allocation_size=2)]), timeout=WAIT)
    got = list(r.container_responses[0].deviceIDs)
    assert len(got) == 2 and "session-3" in got and set(got) <= set(ids)


def allocate(stub: Any, devices: List[str]) -> Any:
    r = stub.Allocate(api.AllocateRequest(container_requests=[
        api.ContainerAllocateRequest(devices_ids=devices)]), timeout=WAIT)
    assert len(r.container_responses) == 1
    return r.container_responses[0]


def test_allocate(env: Env) -> None:
    stub = env.kubelet.plugin()
    c = allocate(stub, ["session-1", "session-0"])
    assert dict(c.envs) == {
        "DJINN_ADDR": f"unix:{POD_DIR}/djinnd.sock",
        "DJINN_TOKEN_FILE": f"{SECRETS}/token"}
    mounts = [(m.container_path, m.host_path, m.read_only) for m in c.mounts]
    assert len(mounts) == 2
    assert mounts[0] == (POD_DIR, str(env.daemon.pods_dir), True)
    assert mounts[1][0] == SECRETS and mounts[1][2]
    alloc = pathlib.Path(mounts[1][1])
    assert alloc.parent == env.alloc_root
    assert stat.S_IMODE(alloc.stat().st_mode) == 0o755
    assert not c.devices and not c.annotations and not c.cdi_devices
    # each Allocate a directory of its own, the same devices too
    again = allocate(stub, ["session-0", "session-1"]).mounts[1].host_path
    other = allocate(stub, ["session-2"]).mounts[1].host_path
    assert len({str(alloc), again, other}) == 3
    for d in (again, other):
        assert pathlib.Path(d).parent == env.alloc_root


def test_alloc_root_is_private(env: Env) -> None:
    """The root existed 0755 (hostPath's DirectoryOrCreate): the plugin
    made it 0700."""
    st = os.lstat(env.alloc_root)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
    assert stat.S_IMODE(st.st_mode) == 0o700


@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_alloc_root_refused(env: Env, kind: str) -> None:
    """A root that is a symbolic link or no directory stops the plugin
    at start, untouched."""
    target = env.tmp / f"elsewhere-{kind}"
    root = env.tmp / f"root-{kind}"
    if kind == "symlink":
        target.mkdir(mode=0o755)
        target.chmod(0o755)
        root.symlink_to(target)
    else:
        root.write_text("")
    p = subprocess.run(
        [sys.executable, "-m", "djinn.k8s.deviceplugin",
         "--kubelet-dir", str(env.tmp / "nowhere"),
         "--pod-resources-socket", str(env.tmp / "nowhere.sock"),
         "--admin-socket", str(env.daemon.admin), "--djinnctl", DJINNCTL,
         "--alloc-root", str(root)],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "python")),
        capture_output=True, text=True, timeout=WAIT)
    assert p.returncode == 1, p.stderr
    assert str(root) in p.stderr
    if kind == "symlink":
        assert "symbolic link" in p.stderr
        assert stat.S_IMODE(target.stat().st_mode) == 0o755
        assert not any(target.iterdir())


def refused(addr: str, token: Optional[str] = None) -> bool:
    """Whether djinnd refuses a session to a client of @addr."""
    try:
        with djinn.connect(addr, token=token, reconnect=0) as c, \
                c.session():
            return False
    except djinn.PermissionDenied:
        return True


def test_token_for_the_pods_namespace(env: Env,
                                      monkeypatch: pytest.MonkeyPatch
                                      ) -> None:
    stub = env.kubelet.plugin()
    devices = ["session-4"]
    alloc = pathlib.Path(allocate(stub, devices).mounts[1].host_path)
    env.kubelet.lister.pods = [pod("other", "x", ["session-2"]),
                               pod("team-a", "web", devices)]
    stub.PreStartContainer(api.PreStartContainerRequest(
        devices_ids=devices), timeout=WAIT)

    token_file = alloc / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o444
    token = token_file.read_text()
    assert len(token) == 65 and token.endswith("\n"), token
    int(token, 16)
    assert [t["tenant"] for t in env.daemon.ctl("token", "list")].count(
        "team-a") == 1

    # the pod's client: DJINN_ADDR and DJINN_TOKEN_FILE, as Allocate said
    addr = f"unix:{env.daemon.pods_sock}"
    monkeypatch.setenv("DJINN_TOKEN_FILE", str(token_file))
    with djinn.connect(addr, reconnect=0) as c, c.session() as s:
        listed = {e["id"]: e for e in env.daemon.ctl("session", "list")}
        assert listed[s.id]["tenant"] == "team-a"
    monkeypatch.delenv("DJINN_TOKEN_FILE")
    assert refused(addr), "a client without a token got a session"

    # the container started again: the same token
    stub.PreStartContainer(api.PreStartContainerRequest(
        devices_ids=devices), timeout=WAIT)
    assert token_file.read_text() == token

    # the pod gone: the token revoked, the directory removed
    env.kubelet.lister.pods = [pod("other", "x", ["session-2"])]
    assert settle(alloc.exists, lambda e: not e, WAIT) is False, env.logs()
    assert refused(addr, token.strip()), "a revoked token still served"
    assert "team-a" not in [t["tenant"] for t in
                            env.daemon.ctl("token", "list")]


def test_prestart_without_pod(env: Env) -> None:
    stub = env.kubelet.plugin()
    env.kubelet.lister.pods = []
    with pytest.raises(grpc.RpcError) as e:
        stub.PreStartContainer(api.PreStartContainerRequest(
            devices_ids=["session-3"]), timeout=WAIT)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert "session-3" in e.value.details()


def prestart(stub: Any, devices: List[str]) -> None:
    stub.PreStartContainer(api.PreStartContainerRequest(
        devices_ids=devices), timeout=WAIT)


def tokens_of(env: Env, tenant: str) -> List[int]:
    """The ids of djinnd's tokens of @tenant."""
    return [t["id"] for t in env.daemon.ctl("token", "list")
            if t["tenant"] == tenant]


def test_next_pod_gets_its_own_directory(env: Env) -> None:
    """A pod of another namespace given the devices of a pod gone gets
    another directory and another token; the first pod's is revoked and
    its directory removed, and never held the second's token."""
    stub = env.kubelet.plugin()
    devices = ["session-2"]
    first = pathlib.Path(allocate(stub, devices).mounts[1].host_path)
    env.kubelet.lister.pods = [pod("team-d", "old", devices)]
    prestart(stub, devices)
    token1 = (first / "token").read_text()
    (id1,) = tokens_of(env, "team-d")

    # the pod goes (not reaped yet: the grace), the kubelet hands its
    # devices to the next
    env.kubelet.lister.pods = []
    second = pathlib.Path(allocate(stub, devices).mounts[1].host_path)
    assert second != first and second.parent == env.alloc_root
    env.kubelet.lister.pods = [pod("team-e", "new", devices)]
    prestart(stub, devices)
    token2 = (second / "token").read_text()
    assert token2 != token1
    assert len(tokens_of(env, "team-e")) == 1
    try:
        assert (first / "token").read_text() == token1
    except FileNotFoundError:
        pass  # reaped already

    assert settle(first.exists, lambda e: not e, WAIT) is False, env.logs()
    assert id1 not in tokens_of(env, "team-d")
    addr = f"unix:{env.daemon.pods_sock}"
    assert refused(addr, token1.strip()), "a revoked token still served"
    assert not refused(addr, token2.strip())
    assert (second / "token").read_text() == token2
    env.kubelet.lister.pods = []
    assert settle(second.exists, lambda e: not e, WAIT) is False, \
        env.logs()


def test_transient_omission_is_not_reaped(env: Env) -> None:
    """A List that leaves the pod out, or holds no device at all, for
    less than the grace revokes nothing."""
    stub = env.kubelet.plugin()
    devices = ["session-1"]
    alloc = pathlib.Path(allocate(stub, devices).mounts[1].host_path)
    steady = pod("team-f", "steady", devices)
    env.kubelet.lister.pods = [steady]
    prestart(stub, devices)
    token = (alloc / "token").read_text()
    (tid,) = tokens_of(env, "team-f")

    for without in ([pod("other", "y", ["session-4"])], []):
        began = time.monotonic()
        env.kubelet.lister.pods = without
        env.kubelet.lister.answers(3)  # reaper passes saw it gone
        env.kubelet.lister.pods = [steady]
        took = time.monotonic() - began
        env.kubelet.lister.answers(2)  # and back
        if took >= GRACE:
            pytest.skip(f"three List answers took {took:.1f} s, not less "
                        f"than the grace ({GRACE:g} s)")
        assert (alloc / "token").read_text() == token, env.logs()
        assert tokens_of(env, "team-f") == [tid], env.logs()
    assert not refused(f"unix:{env.daemon.pods_sock}", token.strip())

    env.kubelet.lister.pods = []
    assert settle(alloc.exists, lambda e: not e, WAIT) is False, env.logs()
    assert tokens_of(env, "team-f") == []


def test_init_container(env: Env) -> None:
    """An init container's devices, which List does not report, are
    found in the app containers the kubelet handed them on to; an init
    container and an app container given the same devices (allocated
    both at the pod's admission, a directory each) share the token."""
    stub = env.kubelet.plugin()
    init_devices = ["session-3"]
    app_devices = ["session-3", "session-0"]
    init = pathlib.Path(allocate(stub, init_devices).mounts[1].host_path)
    app = pathlib.Path(allocate(stub, app_devices).mounts[1].host_path)
    env.kubelet.lister.pods = [pod("team-g", "batch", app_devices)]
    prestart(stub, init_devices)
    prestart(stub, app_devices)
    assert (init / "token").read_text() != (app / "token").read_text()
    assert len(tokens_of(env, "team-g")) == 2

    # two app containers, neither holding both of the init container's
    env.kubelet.lister.pods = [pod("team-g", "batch", app_devices),
                               pod("team-h", "split", ["session-2"],
                                   ["session-4"])]
    both = ["session-2", "session-4"]
    split = pathlib.Path(allocate(stub, both).mounts[1].host_path)
    prestart(stub, both)
    assert len(tokens_of(env, "team-h")) == 1

    same = ["session-1"]
    first = pathlib.Path(allocate(stub, same).mounts[1].host_path)
    then = pathlib.Path(allocate(stub, same).mounts[1].host_path)
    env.kubelet.lister.pods.append(pod("team-i", "same", same))
    prestart(stub, same)  # the init container's
    token = (first / "token").read_text()
    assert (then / "token").read_text() == token
    prestart(stub, same)  # the app container's
    assert (then / "token").read_text() == token
    assert len(tokens_of(env, "team-i")) == 1

    env.kubelet.lister.pods = []
    for d in (init, app, split, first, then):
        assert settle(d.exists, lambda e: not e, WAIT) is False, env.logs()
    assert tokens_of(env, "team-g") == tokens_of(env, "team-h") == \
        tokens_of(env, "team-i") == []


def test_allocate_without_prestart_is_removed(env: Env) -> None:
    """A directory no PreStartContainer followed, its devices held by no
    pod, goes after the grace; so does one that no record names."""
    stub = env.kubelet.plugin()
    env.kubelet.lister.pods = [pod("other", "z", ["session-4"])]
    alloc = pathlib.Path(allocate(stub, ["session-1"]).mounts[1].host_path)
    stray = env.alloc_root / "stray"
    stray.mkdir()
    (stray / "token").write_text("x\n")
    # the directory goes first, then its record: wait for each
    for d in (alloc, stray, env.alloc_root / f"{alloc.name}.json"):
        assert settle(d.exists, lambda e: not e, WAIT) is False, env.logs()
    env.kubelet.lister.pods = []


def test_kubelet_restart(env: Env) -> None:
    while not env.kubelet.registration.requests.empty():
        env.kubelet.registration.requests.get()
    env.kubelet.restart()
    try:
        again = env.kubelet.registration.requests.get(timeout=WAIT)
    except queue.Empty:
        pytest.fail("no registration after the kubelet's restart\n" +
                    env.logs())
    assert again.resource_name == RESOURCE
    w = Watch(env.kubelet.plugin())
    try:
        assert w.until(all_of("Healthy")) == all_of("Healthy"), env.logs()
    finally:
        w.close()


def test_plugin_restart(env: Env) -> None:
    """A plugin started again still revokes the tokens it gave before."""
    stub = env.kubelet.plugin()
    devices = ["session-0"]
    alloc = pathlib.Path(allocate(stub, devices).mounts[1].host_path)
    env.kubelet.lister.pods = [pod("team-b", "job", devices)]
    stub.PreStartContainer(api.PreStartContainerRequest(
        devices_ids=devices), timeout=WAIT)
    token = (alloc / "token").read_text().strip()
    env.stop()
    assert not (env.kubelet.dir / "djinn.sock").exists()
    env.kubelet.lister.pods = []
    env.start()
    assert settle(alloc.exists, lambda e: not e, WAIT) is False, env.logs()
    assert refused(f"unix:{env.daemon.pods_sock}", token), \
        "a revoked token still served"


def test_health_follows_djinnd(env: Env) -> None:
    """Last: it kills djinnd (and starts it again)."""
    w = Watch(env.kubelet.plugin())
    try:
        assert w.until(all_of("Healthy")) == all_of("Healthy"), env.logs()
        env.daemon.kill()
        assert w.until(all_of("Unhealthy")) == all_of("Unhealthy"), \
            env.logs()
        env.daemon.start()
        assert w.until(all_of("Healthy")) == all_of("Healthy"), env.logs()
    finally:
        w.close()


# --- Allocations in this process, on a clock of the test's ---------------

class FakeCtl:
    """djinnctl's token commands on a dict; revoke waits for self.go."""

    def __init__(self) -> None:
        self.tokens: Dict[int, Dict[str, Any]] = {}
        self.calls: List[Any] = []
        self.go = threading.Event()
        self.go.set()
        self.next = 1 << 40

    def run(self, *args: str) -> Any:
        self.calls.append(args)
        if args[:2] == ("token", "mint"):
            self.next += 7919
            self.tokens[self.next] = {"id": self.next, "tenant": args[2],
                                      "created_ns": time.time_ns(),
                                      "expires_ns": 0}
            return {"id": self.next, "tenant": args[2],
                    "token": os.urandom(32).hex(), "expires_ns": 0}
        if args[:2] == ("token", "list"):
            return [dict(t) for t in self.tokens.values()]
        if args[:2] == ("token", "revoke"):
            assert self.go.wait(WAIT)
            if self.tokens.pop(int(args[2]), None) is None:
                raise deviceplugin.CtlError(f"no minted token {args[2]}")
            return None
        raise AssertionError(args)

    def revoked(self) -> List[int]:
        return [int(c[2]) for c in self.calls if c[:2] == ("token",
                                                           "revoke")]


class FakePods:
    def __init__(self) -> None:
        self.containers: List[Any] = []

    def set(self, *containers: Any) -> None:
        self.containers = [(ns, p, frozenset(ids))
                           for ns, p, ids in containers]

    def holders(self) -> Any:
        return deviceplugin.Holders(self.containers)


def test_holders_find() -> None:
    h = deviceplugin.Holders([("a", "p", frozenset({"s0", "s1"})),
                              ("a", "p", frozenset({"s2"})),
                              ("b", "q", frozenset({"s1"})),
                              ("c", "r", frozenset())])
    assert h.find(frozenset({"s1"}))[0] == ("b", "q")  # exact first
    assert h.find(frozenset({"s0"}))[0] == ("a", "p")  # a superset
    assert h.find(frozenset({"s0", "s2"}))[0] == ("a", "p")  # the pod's
    who, why = h.find(frozenset({"s1", "s3"}))
    assert who is None and why == "no pod holds them"
    h2 = deviceplugin.Holders([("a", "p", frozenset({"s0", "s1"})),
                               ("b", "q", frozenset({"s0", "s2"}))])
    who, why = h2.find(frozenset({"s0"}))
    assert who is None and "a/p" in why and "b/q" in why
    assert h.holds(("a", "p"), frozenset({"s0", "s2"}))
    assert not h.holds(("b", "q"), frozenset({"s0"}))
    assert not deviceplugin.Holders([("c", "r", frozenset())])


def test_allocations_in_process(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "allocations"
    root.mkdir()
    root.chmod(0o755)
    now = [100.0]
    ctl, pods = FakeCtl(), FakePods()

    def allocations() -> Any:
        return deviceplugin.Allocations(
            deviceplugin.Root(root), ctl, pods, "k8s-", grace=10.0,
            find_tries=1, find_wait=0.0, wait=WAIT, clock=lambda: now[0])

    def reap() -> None:
        a.reap(pods.holders(), now[0])

    a = allocations()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    d = a.prepare(["s0"])
    assert stat.S_IMODE(d.stat().st_mode) == 0o755
    pods.set(("ns", "p", ["s0"]))
    g = a.grant(["s0"])
    assert g.tenant == "k8s-ns" and g.created_ns == \
        ctl.tokens[g.token_id]["created_ns"]
    token = (d / "token").read_text()
    # its container again: the same token
    assert a.grant(["s0"]) == g and (d / "token").read_text() == token
    # djinnd lost it (a reboot): another, in the same directory
    ctl.tokens.clear()
    g2 = a.grant(["s0"])
    assert g2.token_id != g.token_id and (d / "token").read_text() != token
    # the id now names another token (created anew): neither reused nor
    # revoked
    ctl.tokens[g2.token_id]["created_ns"] += 1
    g3 = a.grant(["s0"])
    assert g3.token_id != g2.token_id and g2.token_id in ctl.tokens
    assert g2.token_id not in ctl.revoked()
    # a restarted plugin reads it back
    a = allocations()
    assert [r.grant for r in a.records()] == [g3]
    # another pod named by List, no Allocate since: refused
    pods.set(("ns2", "p2", ["s0"]))
    with pytest.raises(deviceplugin.Refused):
        a.grant(["s0"])

    # the pod gone: missing 10 s since its first pass gone, and 10 s
    # since the grace restarted (a new kubelet)
    pods.set(("other", "q", ["s9"]))
    reap()
    now[0] = 105.0
    reap()
    a.restart_grace()
    now[0] = 114.0
    reap()
    assert d.exists() and g3.token_id in ctl.tokens
    now[0] = 115.0
    reap()
    assert not d.exists() and g3.token_id not in ctl.tokens
    assert not (root / f"{d.name}.json").exists()

    # an empty List is believed after the grace only
    now[0] = 200.0
    d = a.prepare(["s1"])
    pods.set(("ns", "p", ["s1"]))
    g = a.grant(["s1"])
    pods.set(("other", "q", ["s9"]))
    reap()  # missing from 200
    now[0] = 205.0
    pods.set()
    reap()  # empty from 205
    now[0] = 211.0
    reap()
    assert d.exists() and g.token_id in ctl.tokens
    # ... and seen again, the clock starts anew
    pods.set(("ns", "p", ["s1"]))
    now[0] = 212.0
    reap()
    pods.set()
    now[0] = 221.0
    reap()
    now[0] = 230.0
    reap()
    assert d.exists()
    now[0] = 231.0
    reap()
    assert not d.exists() and g.token_id not in ctl.tokens

    # directories without token: kept while a pod holds their devices
    # (an init container's and an app container's, allocated at the
    # pod's admission), both given the token; removed after the grace
    # once none does
    now[0] = 300.0
    d1, d2 = a.prepare(["s2"]), a.prepare(["s2"])
    d3 = a.prepare(["s4"])
    pods.set(("ns", "p", ["s2"]))
    for now[0] in (300.0, 320.0):
        reap()
    assert d1.exists() and d2.exists() and not d3.exists()
    g = a.grant(["s2"])
    assert (d1 / "token").read_text() == (d2 / "token").read_text()
    assert a.grant(["s2"]) == g
    # one losing its file: the token goes from both, another in both
    (d1 / "token").unlink()
    g2 = a.grant(["s2"])
    assert g2 != g and g.token_id not in ctl.tokens
    assert (d1 / "token").read_text() == (d2 / "token").read_text()
    g = g2

    # the reaper's djinnctl calls hold no lock: Allocate and
    # PreStartContainer of other devices go on meanwhile
    pods.set(("ns", "p", ["s3"]))
    ctl.go.clear()
    reaper = threading.Thread(target=lambda: [reap() for now[0] in
                                              (340.0, 350.0)])
    reaper.start()
    try:
        assert settle(lambda: g.token_id in ctl.revoked(), bool, WAIT)
        began = time.monotonic()
        a.prepare(["s3"])
        assert a.grant(["s3"]).namespace == "ns"
        assert time.monotonic() - began < WAIT / 2
        assert d1.exists() and d2.exists()
    finally:
        ctl.go.set()
        reaper.join(WAIT)
    assert not d1.exists() and not d2.exists()
    assert g.token_id not in ctl.tokens
