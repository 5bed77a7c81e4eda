# SPDX-License-Identifier: MIT
"""deploy/ (Documentation/kubernetes.rst): the image, the Kubernetes
manifests, the Prometheus job and the Grafana dashboard, checked against
the tree they deploy:

- every file parses, and kustomization.yaml lists every manifest;
- the manifests run the image deploy/Containerfile builds, by the name
  it is built with, and the programs where make install puts them;
- the image's last stage installs the Debian package of every library
  the built programs link;
- djinnd.conf of the ConfigMap passes `djinnd --check-config`, and a
  djinnd started with it (its paths moved to a scratch directory, the
  cpu backend) serves its probes, its pods' socket and TLS;
- each path djinnd.conf names is on a volume of the container, writable
  where djinnd writes;
- the DaemonSet keeps systemd/djinnd.service.in's hardening;
- the probes and the Prometheus annotations name djinnd.conf's metrics
  port, and the scrape job's rules, applied to the DaemonSet's pod, make
  one target there;
- the dashboard asks only for metrics and labels djinnd exports
  (djinnd/net/metrics.c).

No cluster is involved: nothing here applies the manifests or builds the
image. PyYAML comes with make test's venv (mk/python.mk).
"""

from __future__ import annotations

import configparser
import errno
import fnmatch
import http.client
import json
import os
import pathlib
import re
import shlex
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from conftest import free_port, settle, stop_proc

try:
    import yaml
except ImportError:
    pytest.skip("no PyYAML: the manifests' test needs it (make test's "
                "venv has it; Debian: python3-yaml)",
                allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
CONTAINERFILE = DEPLOY / "Containerfile"
UNIT = ROOT / "systemd" / "djinnd.service.in"
METRICS_C = ROOT / "djinnd" / "net" / "metrics.c"
BUILD = pathlib.Path(os.environ.get("DJINN_BUILD", ROOT / "build"))
DJINND = os.environ.get("DJINND", str(BUILD / "djinnd" / "djinnd"))

# The key k8s-spec.md adds to djinnd for the pods' socket.
TOKEN_AUTH = "token_auth"


# --- reading the files -------------------------------------------------------

def load_all(path: pathlib.Path) -> List[Any]:
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def kustomization() -> Dict[str, Any]:
    (k,) = load_all(K8S / "kustomization.yaml")
    return k


def objects() -> List[Dict[str, Any]]:
    """Every object kustomization.yaml's resources hold, in order."""
    out = []
    for r in kustomization()["resources"]:
        out += load_all(K8S / r)
    return out


def one(kind: str, name: Optional[str] = None) -> Dict[str, Any]:
    found = [o for o in objects() if o["kind"] == kind and
             (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"want one {kind} {name or ''}, have {len(found)}"
    return found[0]


def daemonset() -> Dict[str, Any]:
    return one("DaemonSet")


def pod_spec() -> Dict[str, Any]:
    return daemonset()["spec"]["template"]["spec"]


def container(name: str) -> Dict[str, Any]:
    (c,) = [c for c in pod_spec()["containers"] if c["name"] == name]
    return c


def volume(name: str) -> Dict[str, Any]:
    (v,) = [v for v in pod_spec()["volumes"] if v["name"] == name]
    return v


def config_path() -> str:
    """The file djinnd's command line names (--config)."""
    cmd = container("djinnd")["command"]
    return cmd[cmd.index("--config") + 1]


def conf_text() -> str:
    cm = one("ConfigMap")
    name = pathlib.PurePosixPath(config_path()).name
    assert name in cm["data"], f"the ConfigMap has no {name}"
    return cm["data"][name]


def parse_conf(text: str) -> List[Tuple[str, str, str]]:
    """djinnd.conf's (section, key, value) lines, as djinnd.conf(5) reads
    them: ; or # starts a comment line, and ' ;' the rest of a line."""
    out, section = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        value = re.split(r"\s;", value)[0]
        out.append((section, key.strip(), value.strip()))
    return out


def conf_values(section: str, key: str) -> List[str]:
    return [v for s, k, v in parse_conf(conf_text())
            if s == section and k == key]


def conf_value(section: str, key: str) -> str:
    (v,) = conf_values(section, key)
    return v


def tcp_port(addr: str) -> int:
    """The port of tcp:HOST:PORT or tls:HOST:PORT."""
    return int(addr.rsplit(":", 1)[1])


def metrics_port() -> int:
    return tcp_port(conf_value("metrics", "listen"))


def tls_port() -> int:
    (addr,) = [a for a in conf_values("server", "listen")
               if a.startswith("tls:")]
    return tcp_port(addr)


def container_port(c: Dict[str, Any], port: Any) -> int:
    """A probe's or Service's port: a number, or a port's name."""
    if isinstance(port, int):
        return port
    (p,) = [p for p in c.get("ports", []) if p["name"] == port]
    return p["containerPort"]


def containerfile_lines() -> List[str]:
    """The Containerfile's instructions: continuation lines joined,
    comments dropped."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    return [ln.strip() for ln in text.splitlines()
            if ln.strip() and not ln.strip().startswith("#")]


def stages() -> List[List[str]]:
    out: List[List[str]] = []
    for ln in containerfile_lines():
        if ln.upper().startswith("FROM "):
            out.append([])
        if out:
            out[-1].append(ln)
    return out


def image_name() -> str:
    """The name the Containerfile's header says to build it with."""
    m = re.search(r"^#\s*build:\s*(.*)$", CONTAINERFILE.read_text(), re.M)
    assert m, "the Containerfile's header has no '# build: ...' line"
    args = shlex.split(m.group(1))
    return args[args.index("-t") + 1]


def exec_form(stage: List[str], instr: str) -> List[str]:
    (ln,) = [ln for ln in stage if ln.upper().startswith(instr + " ")]
    return json.loads(ln[len(instr):].strip())


def apt_packages(stage: List[str]) -> List[str]:
    """The packages a stage's RUN lines apt-get install by name."""
    out = []
    for ln in stage:
        if not ln.upper().startswith("RUN "):
            continue
        for cmd in ln[4:].split("&&"):
            words = cmd.split()
            if words[:2] == ["apt-get", "install"]:
                out += [w for w in words[2:]
                        if not w.startswith("-") and "$" not in w]
    return out


def unit() -> configparser.ConfigParser:
    """systemd/djinnd.service.in; a key given twice keeps the last."""
    cp = configparser.ConfigParser(strict=False, interpolation=None,
                                   delimiters=("=",))
    cp.optionxform = str  # type: ignore[assignment, method-assign]
    cp.read_string(UNIT.read_text())
    return cp


def seconds(v: str) -> float:
    m = re.fullmatch(r"(\d+)(ms|s|min|m|h)?", v.strip())
    assert m, v
    scale = {"ms": 1e-3, "s": 1, None: 1, "min": 60, "m": 60, "h": 3600}
    return int(m.group(1)) * scale[m.group(2)]


def has_djinnd() -> bool:
    return os.access(DJINND, os.X_OK)


# --- the files and the kustomization ---------------------------------------

def test_every_file_parses():
    files = sorted(DEPLOY.rglob("*.yaml"))
    assert len(files) >= 7, files
    for f in files:
        docs = load_all(f)
        assert docs, f"{f}: no document"
        for d in docs:
            assert isinstance(d, dict), f"{f}: a document is not a mapping"
    with open(DEPLOY / "grafana" / "djinn-fleet.json") as f:
        assert json.load(f)["panels"]


def test_kustomization_lists_every_manifest():
    k = kustomization()
    listed = k["resources"]
    assert len(listed) == len(set(listed)), "a resource listed twice"
    for r in listed:
        assert (K8S / r).is_file(), f"kustomization.yaml lists {r}: none"
    present = {p.name for p in K8S.iterdir() if p.suffix in (".yaml", ".yml")}
    present.discard("kustomization.yaml")
    assert present == set(listed), \
        f"in deploy/kubernetes, not listed: {sorted(present - set(listed))}"
    # the rest of the tree: the generators' files, each once
    made = [f for g in k.get("configMapGenerator", []) for f in g["files"]]
    others = {str(p.relative_to(K8S)) for p in K8S.rglob("*")
              if p.is_file() and p.parent != K8S}
    assert sorted(made) == sorted(others), (made, others)
    ns = k["namespace"]
    for o in objects():
        assert o["apiVersion"] and o["metadata"]["name"], o
        if o["kind"] == "Namespace":
            assert o["metadata"]["name"] == ns
        else:
            # kustomize would set it; the files say it themselves, so that
            # kubectl apply -f of one file does the same
            assert o["metadata"].get("namespace") == ns, o["metadata"]


def test_manifests_run_the_containerfile_image():
    name = image_name()
    assert name == "localhost/djinn:dev"  # Documentation/kubernetes.rst
    seen = 0
    for o in objects():
        spec = o.get("spec", {}).get("template", {}).get("spec", {})
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            assert c["image"] == name, f"{c['name']}: {c['image']}"
            # a local name: the kubelet must not try to pull it
            assert c.get("imagePullPolicy") == "IfNotPresent", c["name"]
            seen += 1
    assert seen == 3  # djinnd, the device plugin, the profile's installer
    st = stages()
    assert len(st) == 2
    assert re.fullmatch(r"FROM debian:12 AS build", st[0][0]), st[0][0]
    assert st[1][0] == "FROM debian:12-slim", st[1][0]
    assert not any(ln.upper().startswith("ENTRYPOINT") for ln in st[1])


def installed(assign: List[str]) -> List[str]:
    """Where make install puts its files, with @assign's variables, from
    the Makefile's own list (INSTALL_LIST)."""
    out = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(ROOT), "--eval",
         "djinn-print-install: ; @echo $(INSTALL_LIST)",
         "djinn-print-install", f"BUILD={BUILD}", *assign],
        capture_output=True, text=True, timeout=120,
        # not a sub-make of make test's: none of its flags or jobserver
        env={k: v for k, v in os.environ.items()
             if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")})
    assert out.returncode == 0, out.stderr
    words, dests = out.stdout.split(), []
    i = 0
    while i < len(words):
        n = {"f": 4, "c": 4, "l": 3}[words[i]]
        dests.append(words[i + n - 1])
        i += n
    return dests


def test_programs_are_where_make_install_puts_them():
    build = stages()[0]
    (make,) = [ln for ln in build if ln.startswith("RUN make ")]
    assign = [w for w in shlex.split(make)
              if re.fullmatch(r"[A-Z_]+=\S*", w)
              and not w.startswith(("DESTDIR=", "NVCC="))]
    assert "PREFIX=/usr/local" in assign
    assert "install" in make.split() and "DESTDIR=/out" in make.split()
    dests = installed(assign)
    cmd = exec_form(stages()[1], "CMD")
    assert cmd[0] in dests, f"make install does not install {cmd[0]}"
    djinnd = container("djinnd")["command"]
    assert djinnd[0] in dests, f"make install does not install {djinnd[0]}"
    # no terminal, no systemd: djinnd would detach without it
    for c in (cmd, djinnd):
        assert "--foreground" in c or "-f" in c, c
        assert c[c.index("--config") + 1] == config_path()
    # djinnctl (the device plugin's) on the image's PATH
    (env,) = [ln for ln in stages()[1] if ln.startswith("ENV PATH=")]
    path = env.split("=", 1)[1].split(":")
    assert any(f"{d}/djinnctl" in dests for d in path), path


def test_device_plugin_is_in_the_image():
    build = stages()[0]
    pips = " ".join(ln for ln in build if "pip install" in ln).split()
    for pkg in ("grpcio", "grpcio-tools", "protobuf", "./python"):
        assert pkg in pips, f"the Containerfile does not pip install {pkg}"
    (venv,) = {m.group(1) for m in (re.search(r"-m venv (\S+)", ln)
                                    for ln in build) if m}
    (env,) = [ln for ln in stages()[1] if ln.startswith("ENV PATH=")]
    assert f"{venv}/bin" in env.split("=", 1)[1].split(":")
    assert any(ln == f"COPY --from=build {venv} {venv}"
               for ln in stages()[1])
    plugin = container("device-plugin")["command"]
    assert plugin[0] == "djinn-device-plugin"
    if "--admin-socket" in plugin:
        assert plugin[plugin.index("--admin-socket") + 1] == \
            conf_value("server", "admin_socket")
    k8s = ROOT / "python" / "djinn" / "k8s"
    if not (k8s / "deviceplugin.py").exists():
        pytest.skip("python/djinn/k8s/deviceplugin.py is not in the tree "
                    "yet: its entry point is not checked")
    try:
        import tomllib
    except ImportError:
        pytest.skip("no tomllib (Python 3.11): pyproject.toml's entry "
                    "point is not checked")
    with open(ROOT / "python" / "pyproject.toml", "rb") as f:
        proj = tomllib.load(f)
    scripts = proj["project"].get("scripts", {})
    assert scripts.get("djinn-device-plugin", "").startswith(
        "djinn.k8s.deviceplugin:"), \
        "pyproject.toml has no djinn-device-plugin entry point"
    pkgs = proj.get("tool", {}).get("setuptools", {}).get("packages")
    if isinstance(pkgs, list):
        assert "djinn.k8s" in pkgs, "pyproject.toml leaves out djinn.k8s"
    # the .proto files the image compiles, in the installed package
    data = proj.get("tool", {}).get("setuptools", {}).get(
        "package-data", {}).get("djinn.k8s", [])
    for proto in (k8s / "proto").glob("*.proto"):
        rel = proto.relative_to(k8s).as_posix()
        assert any(fnmatch.fnmatch(rel, pat) for pat in data), \
            f"pyproject.toml's package-data leaves out djinn/k8s/{rel}"
    # its gRPC modules made at build time, where the image looks
    src = "".join(p.read_text() for p in k8s.rglob("*.py"))
    assert "DJINN_K8S_PROTO_OUT" in src
    (gen,) = [ln for ln in build if "import djinn.k8s._proto" in ln]
    made = re.search(r"DJINN_K8S_PROTO_OUT=(\S+)", gen)
    assert made, gen
    out = made.group(1)
    assert out.startswith(venv + "/")
    assert f"ENV DJINN_K8S_PROTO_OUT={out}" in stages()[1]
    if "--admin-socket" not in plugin:
        assert conf_value("server", "admin_socket") in src
    # the directories the DaemonSet mounts for it at their host paths
    for m in container("device-plugin")["volumeMounts"]:
        if m["mountPath"].startswith("/var/lib/djinn/"):
            assert m["mountPath"] in src, \
                f"the plugin does not use {m['mountPath']}"


def needed_libs(binary: str) -> List[str]:
    """The files a binary's DT_NEEDED libraries resolve to here, as the
    dynamic linker names them (dpkg knows /lib/..., not /usr/lib/...)."""
    dyn = subprocess.run(["readelf", "-d", binary], capture_output=True,
                         text=True, check=True).stdout
    names = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", dyn)
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True,
                         check=True).stdout
    where = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
    return [where[n] for n in names if where.get(n, "").startswith("/")]


def package_of(lib: str) -> Optional[str]:
    """The Debian package that holds @lib: by its path, or the file it
    links to (libopenblas.so.0 is an alternative), on either side of
    /usr's merge."""
    real = os.path.realpath(lib)
    for path in (lib, real, real.removeprefix("/usr"), "/usr" + lib):
        r = subprocess.run(["dpkg", "-S", path], capture_output=True,
                           text=True)
        if r.returncode == 0:
            return r.stdout.split(":")[0]
    return None


def test_image_has_the_libraries_the_programs_link():
    if not shutil.which("readelf") or not shutil.which("dpkg"):
        pytest.skip("no readelf or dpkg (binutils, Debian): the image's "
                    "libraries are not checked")
    progs = [DJINND, str(BUILD / "tools" / "djinnctl"),
             str(BUILD / "libdjinn.so"), str(BUILD / "install" / "djinn")]
    progs = [p for p in progs if os.path.exists(p)]
    if DJINND not in progs:
        pytest.skip(f"no {DJINND}: build the tree first")
    runtime = set(apt_packages(stages()[1]))
    # in every Debian image, debian:12-slim included
    base = {"libc6", "libgcc-s1"}
    for prog in progs:
        for lib in needed_libs(prog):
            if os.path.realpath(lib).startswith(str(BUILD)):
                continue  # libdjinn itself: the image has it from /out
            pkg = package_of(lib)
            assert pkg, f"{prog}: {lib}: no Debian package holds it"
            assert pkg in runtime | base, \
                f"{prog} links {lib} ({pkg}), which the image's last " \
                f"stage does not install"


# --- djinnd.conf -------------------------------------------------------------

def check_config(text: str) -> subprocess.CompletedProcess:
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write(text)
        f.flush()
        return subprocess.run([DJINND, "--check-config", "--config", f.name],
                              capture_output=True, text=True, timeout=30)


def test_config_passes_check_config():
    if not has_djinnd():
        pytest.skip(f"no djinnd at {DJINND}")
    text = conf_text()
    r = check_config(text)
    assert r.returncode == 0, r.stderr
    # the effective settings are the file's, not defaults
    for _, key, value in parse_conf(text):
        assert re.search(rf"^{re.escape(key)} = {re.escape(value)}\t",
                         r.stdout, re.M), f"{key} = {value} not in effect"


def test_config_paths_are_on_the_containers_volumes():
    c = container("djinnd")
    mounts = c["volumeMounts"]

    def mount_of(path: str) -> Tuple[Dict[str, Any], str]:
        best = max((m for m in mounts
                    if path == m["mountPath"] or
                    path.startswith(m["mountPath"].rstrip("/") + "/")),
                   key=lambda m: len(m["mountPath"]), default=None)
        assert best, f"{path}: on no volume of the djinnd container"
        return best, os.path.relpath(path, best["mountPath"])

    # what djinnd makes: writable, and the host's, for the other
    # container and the pods
    sockets = [a[5:] for a in conf_values("server", "listen")
               if a.startswith("unix:")]
    sockets.append(conf_value("server", "admin_socket"))
    for path in sockets:
        m, rel = mount_of(path)
        assert not m.get("readOnly"), f"{path}: its volume is read-only"
        host = volume(m["name"]).get("hostPath")
        assert host, f"{path}: not on a host path"
        if path == "/run/djinn/pods/djinnd.sock":  # k8s-spec: the pods'
            assert os.path.join(host["path"], rel) == path
    assert "unix:/run/djinn/pods/djinnd.sock" in conf_values(
        "server", "listen")
    for a in conf_values("server", TOKEN_AUTH):
        assert a in conf_values("server", "listen"), a
    assert conf_values("server", TOKEN_AUTH) == \
        ["unix:/run/djinn/pods/djinnd.sock"]

    # what djinnd reads: the model directory, and the files of the
    # projected volume (the ConfigMap, the TLS Secret's keys)
    m, _ = mount_of(conf_value("server", "model_dir"))
    assert volume(m["name"]).get("hostPath")
    files = [config_path()] + [conf_value("tls", k) for k in
                               ("certificate", "key", "client_ca")]
    for path in files:
        m, rel = mount_of(path)
        proj = volume(m["name"])["projected"]["sources"]
        items = [i["path"] for s in proj for src in s.values()
                 for i in src.get("items", [])]
        assert rel in items, f"{path}: the volume {m['name']} has no {rel}"

    # the device plugin reaches the admin socket on the same volume
    admin = conf_value("server", "admin_socket")
    m, rel = mount_of(admin)
    (pm,) = [p for p in container("device-plugin")["volumeMounts"]
             if p["name"] == m["name"]]
    assert os.path.join(pm["mountPath"], rel) == admin

    # probes and Prometheus come from outside the pod
    for key in ("listen",):
        host = conf_value("metrics", key)[4:].rsplit(":", 1)[0]
        assert host not in ("", "127.0.0.1", "localhost", "[::1]"), \
            "metrics.listen binds loopback: the kubelet cannot probe it"


def test_host_paths():
    u = unit()["Service"]
    runtime = "/run/" + u["RuntimeDirectory"]
    # what each host path is for: djinnd's (the unit's runtime directory,
    # which holds the plugin's allocations too, with the minted tokens
    # they outlive no more than; djinnd.conf's model directory), the
    # kubelet's own sockets
    known = {runtime, conf_value("server", "model_dir"),
             "/var/lib/kubelet/device-plugins",
             "/var/lib/kubelet/pod-resources",
             # where the kubelet finds Localhost seccomp profiles
             "/var/lib/kubelet/seccomp"}
    types = {"", "DirectoryOrCreate", "Directory", "FileOrCreate", "File",
             "Socket", "CharDevice", "BlockDevice"}
    hp = {v["name"]: v["hostPath"] for v in pod_spec()["volumes"]
          if "hostPath" in v}
    assert {h["path"] for h in hp.values()} == known
    for name, h in hp.items():
        assert h.get("type", "") in types, h
        # the kubelet's directories are there before any plugin (its
        # seccomp directory only once a profile is installed)
        if h["path"].startswith("/var/lib/kubelet/"):
            assert h["type"] == ("DirectoryOrCreate"
                                 if h["path"].endswith("/seccomp")
                                 else "Directory"), h
    # the plugin names allocation directories by their host path
    for m in container("device-plugin")["volumeMounts"]:
        if m["name"] in hp:
            assert m["mountPath"] == hp[m["name"]]["path"], m


# --- the unit's hardening ----------------------------------------------------

def test_daemonset_keeps_the_units_hardening():
    u = unit()["Service"]
    spec = pod_spec()
    for key in ("hostPID", "hostIPC", "hostNetwork"):
        assert not spec.get(key), key
    bounding = {c.removeprefix("CAP_") for c in
                u["CapabilityBoundingSet"].split()}
    for c in spec["containers"] + spec.get("initContainers", []):
        sc = c["securityContext"]
        name = c["name"]
        if u.get("NoNewPrivileges") == "yes":
            assert sc["allowPrivilegeEscalation"] is False, name
        if u.get("ProtectSystem") in ("strict", "full", "yes"):
            assert sc["readOnlyRootFilesystem"] is True, name
        caps = sc["capabilities"]
        assert caps["drop"] == ["ALL"], name
        assert set(caps.get("add", [])) <= bounding, name
        if u.get("SystemCallFilter"):
            prof = sc.get("seccompProfile") or \
                spec["securityContext"]["seccompProfile"]
            assert prof["type"] in ("RuntimeDefault", "Localhost"), name
        if u.get("DevicePolicy") == "closed":
            assert not sc.get("privileged"), name
        if u.get("PrivateTmp") == "yes" and c in spec["containers"]:
            (tmp,) = [m for m in c["volumeMounts"]
                      if m["mountPath"] == "/tmp"]
            assert "emptyDir" in volume(tmp["name"]), name
    sc = container("djinnd")["securityContext"]
    # djinnd's system calls are the unit's: a Localhost profile made from
    # its SystemCallFilter= (test_seccomp_profile_is_the_units_filter)
    assert sc["seccompProfile"] == {"type": "Localhost",
                                    "localhostProfile": "djinn/djinnd.json"}
    if u.get("User"):
        assert sc.get("runAsNonRoot") is True
    else:  # root, as under systemd
        assert sc.get("runAsUser", 0) == 0
    # ProtectSystem=strict: writable are the unit's directories and /tmp
    writable = {"/run/" + u["RuntimeDirectory"],
                "/var/lib/" + u["StateDirectory"],
                "/var/log/" + u["LogsDirectory"], "/tmp"}
    for m in container("djinnd")["volumeMounts"]:
        if not m.get("readOnly"):
            assert any(m["mountPath"] == w or m["mountPath"].startswith(
                w + "/") for w in writable), m["mountPath"]
    # TimeoutStopSec: the time djinnd has to finish what is in flight
    assert spec["terminationGracePeriodSeconds"] >= \
        seconds(u["TimeoutStopSec"])
    # WatchdogSec: a loop that stops turning is killed within it
    live = container("djinnd")["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] <= \
        seconds(u["WatchdogSec"])


def test_seccomp_profile_is_the_units_filter():
    """djinnd's profile allows what the unit's SystemCallFilter= allows
    (scripts/mkseccomp.py, with this machine's systemd-analyze), io_uring
    among it, denies the rest with the unit's SystemCallErrorNumber=, and
    the init container installs it where localhostProfile points."""
    shipped = json.loads((K8S / "seccomp" / "djinnd.json").read_text())
    names = set(shipped["syscalls"][0]["names"])
    assert {"io_uring_setup", "io_uring_enter", "io_uring_register"} <= names
    assert {"socket", "mmap", "epoll_wait", "futex"} <= names
    # what @system-service leaves out stays out
    assert not names & {"mount", "ptrace", "kexec_load", "init_module",
                        "bpf", "reboot", "swapon"}
    assert shipped["defaultAction"] == "SCMP_ACT_ERRNO"
    u = unit()["Service"]
    assert shipped["defaultErrnoRet"] == getattr(
        errno, u.get("SystemCallErrorNumber", "EPERM"))
    if not shutil.which("systemd-analyze"):
        pytest.skip("no systemd-analyze: the profile is not made again")
    made = subprocess.run([sys.executable, str(ROOT / "scripts" /
                                               "mkseccomp.py"), "--unit",
                           str(ROOT / "systemd" / "djinnd.service.in")],
                          capture_output=True, text=True, check=True)
    assert json.loads(made.stdout) == shipped, \
        "deploy/kubernetes/seccomp/djinnd.json is not the unit's filter: " \
        "scripts/mkseccomp.py > deploy/kubernetes/seccomp/djinnd.json"
    init = [c for c in pod_spec()["initContainers"]
            if c["name"] == "seccomp-profile"][0]
    script = " ".join(init["command"])
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert volume("kubelet-seccomp")["hostPath"]["path"] == \
        "/var/lib/kubelet/seccomp"
    assert f"{mounts['kubelet-seccomp']}/djinn/djinnd.json" in script
    assert volume("seccomp-profile")["configMap"]["name"] == \
        kustomization()["configMapGenerator"][0]["name"]


SECCOMP_EXEC = """
import errno, json, os, sys
import seccomp
prof = json.load(open(sys.argv[1]))
f = seccomp.SyscallFilter(
    defaction=seccomp.ERRNO(prof.get("defaultErrnoRet", errno.EPERM)))
for rule in prof["syscalls"]:
    for name in rule["names"]:
        try:  # a name this architecture lacks (the profile's are the
            f.add_rule(seccomp.ALLOW, name)  # union of its arches')
        except (ValueError, RuntimeError, OSError):
            pass
f.load()
os.execv(sys.argv[2], sys.argv[2:])
"""


def accepts(path: pathlib.Path) -> bool:
    """Whether a unix socket at @path takes a connection now."""
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def test_djinnd_serves_under_its_seccomp_profile(tmp_path: pathlib.Path):
    """djinnd under deploy/kubernetes/seccomp/djinnd.json, loaded with
    libseccomp as a runtime loads a Localhost profile (python3-seccomp):
    it starts, serves a model step through io_uring, and a call the
    profile leaves out (mount) fails with EPERM."""
    pytest.importorskip("seccomp", reason="python3-seccomp (Debian)")
    if not has_djinnd():
        pytest.skip(f"no djinnd at {DJINND}")
    sys.path.insert(0, str(ROOT / "python"))
    import djinn

    prof = K8S / "seccomp" / "djinnd.json"
    models = tmp_path / "models"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "mkmodel.py"),
                    "--arch", "gpt2", "--layers", "2", "--embd", "64",
                    "--heads", "4", "--vocab", "256", "--ctx", "64",
                    str(models / "tiny")], check=True,
                   stdout=subprocess.DEVNULL)
    sock = tmp_path / "d.sock"
    log = open(tmp_path / "djinnd.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-c", SECCOMP_EXEC, str(prof), DJINND, "-f", "-l",
         f"unix:{sock}", "-a", str(tmp_path / "a.sock"), "--backend",
         "cpu", "-m", "128M", "--model-dir", str(models)],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        # the socket's file is there from bind(), before djinnd
        # listens: wait for a connection it accepts
        assert settle(lambda: accepts(sock) or proc.poll() is not None,
                      bool, timeout=20) and proc.poll() is None, \
            (tmp_path / "djinnd.log").read_text()
        with djinn.connect(f"unix:{sock}") as c, c.session() as s:
            ctx = s.model("tiny").context()
            ctx.prefill([1, 2, 3])
            assert len(ctx.generate(4)) == 4
    finally:
        stop_proc(proc, 15)
    assert proc.returncode == 0, (tmp_path / "djinnd.log").read_text()
    if os.geteuid() == 0:  # root may mount: the profile says no
        target = tmp_path / "mnt"
        target.mkdir()
        r = subprocess.run(
            [sys.executable, "-c", SECCOMP_EXEC, str(prof),
             shutil.which("mount") or "/bin/mount", "-t", "tmpfs", "none",
             str(target)], capture_output=True, text=True)
        assert r.returncode != 0 and "ermission denied" in r.stderr, r


# --- probes, Prometheus, the Service -----------------------------------------

def test_probes_and_annotations_name_the_metrics_port():
    c = container("djinnd")
    port = metrics_port()
    want = {"livenessProbe": "/healthz", "readinessProbe": "/readyz",
            "startupProbe": "/healthz"}
    for probe, path in want.items():
        get = c[probe]["httpGet"]
        assert get["path"] == path, probe
        assert get.get("scheme", "HTTP") == "HTTP", probe
        assert container_port(c, get["port"]) == port, probe
    ann = daemonset()["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert int(ann["prometheus.io/port"]) == port
    assert ann["prometheus.io/path"] == "/metrics"


def test_headless_service_names_the_tls_port():
    svc = one("Service", "djinnd")
    spec = svc["spec"]
    assert spec["clusterIP"] == "None"
    assert spec["publishNotReadyAddresses"] is False
    (p,) = spec["ports"]
    assert p["name"] == "djinn-tls" and p.get("protocol", "TCP") == "TCP"
    assert p["port"] == tls_port()
    assert container_port(container("djinnd"), p["targetPort"]) == tls_port()
    labels = daemonset()["spec"]["template"]["metadata"]["labels"]
    assert spec["selector"].items() <= labels.items()
    assert daemonset()["spec"]["selector"]["matchLabels"].items() <= \
        labels.items()


def test_service_account_has_no_token():
    sa = one("ServiceAccount")
    assert pod_spec()["serviceAccountName"] == sa["metadata"]["name"]
    assert sa["automountServiceAccountToken"] is False
    assert pod_spec()["automountServiceAccountToken"] is False
    kinds = {o["kind"] for o in objects()}
    assert not kinds & {"Role", "ClusterRole", "RoleBinding",
                        "ClusterRoleBinding"}, "RBAC that nothing uses"


def relabel(labels: Dict[str, str], rules: List[Dict[str, Any]]
            ) -> Optional[Dict[str, str]]:
    """Prometheus' relabel_configs (replace, keep, drop) over one
    target's labels: None when it is dropped."""
    labels = dict(labels)
    for r in rules:
        action = r.get("action", "replace")
        value = r.get("separator", ";").join(
            labels.get(s, "") for s in r.get("source_labels", []))
        m = re.fullmatch(r.get("regex", "(.*)"), value)
        if action == "keep" and not m:
            return None
        if action == "drop" and m:
            return None
        if action == "replace" and m:
            out = re.sub(r"\$\{?(\d+)\}?",
                         lambda g: m.group(int(g.group(1))) or "",
                         r.get("replacement", "$1"))
            if out:
                labels[r["target_label"]] = out
            else:
                labels.pop(r["target_label"], None)
    return labels


def sd_targets(ip: str) -> Iterator[Dict[str, str]]:
    """What kubernetes_sd_configs' pod role finds for a DaemonSet pod:
    a target per container port, one for a container without."""
    tmpl = daemonset()["spec"]["template"]
    meta = {"__meta_kubernetes_namespace": daemonset()["metadata"]
            ["namespace"], "__meta_kubernetes_pod_name": "djinnd-x7k2p",
            "__meta_kubernetes_pod_node_name": "gpu-node-1",
            "__meta_kubernetes_pod_ip": ip}
    for k, v in tmpl["metadata"]["annotations"].items():
        meta["__meta_kubernetes_pod_annotation_" +
             re.sub(r"[^a-zA-Z0-9_]", "_", k)] = v
    for c in tmpl["spec"]["containers"]:
        ports = c.get("ports") or [None]
        for p in ports:
            t = dict(meta, __address__=ip if p is None else
                     f"{ip}:{p['containerPort']}",
                     __meta_kubernetes_pod_container_name=c["name"])
            if p:
                t["__meta_kubernetes_pod_container_port_name"] = p["name"]
                t["__meta_kubernetes_pod_container_port_number"] = \
                    str(p["containerPort"])
            yield t


def test_scrape_job_finds_each_djinnd_once():
    (job,) = load_all(DEPLOY / "prometheus" / "scrape.yaml")[0][
        "scrape_configs"]
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "pod"
    assert sd["namespaces"]["names"] == [kustomization()["namespace"]]
    out = [t for t in (relabel(t, job["relabel_configs"])
                       for t in sd_targets("10.8.3.17")) if t]
    assert len(out) == 1, out
    (t,) = out
    assert t["__address__"] == f"10.8.3.17:{metrics_port()}"
    assert t.get("__metrics_path__", "/metrics") == "/metrics"
    assert t["node"] == "gpu-node-1"
    # a pod without the annotation is not scraped
    rules = job["relabel_configs"]
    quiet = [dict(t, __meta_kubernetes_pod_annotation_prometheus_io_scrape="")
             for t in sd_targets("10.8.3.18")]
    assert not [t for t in (relabel(t, rules) for t in quiet) if t]


# --- the dashboard -----------------------------------------------------------

def exported() -> Tuple[Dict[str, str], set]:
    """djinnd/net/metrics.c's families (name: type) and label names."""
    src = METRICS_C.read_text()
    fams = dict(re.findall(r'"(djinn_[a-z0-9_]+)",\s*"(gauge|counter|'
                           r'histogram)"', src))
    for name in re.findall(r'one\(&?b, "(djinn_[a-z0-9_]+)"', src):
        fams.setdefault(name, "gauge")
    for name in re.findall(r'\{ "(djinn_[a-z0-9_]+)", STAT\(', src):
        fams[name] = "counter"
    for name in re.findall(r'\{ "(djinn_tenant_[a-z0-9_]+)",', src):
        fams.setdefault(name, "gauge")
    labels = set(re.findall(r'([a-z_]+)=\\"', src))
    # dev_sample(b, NAME, DEVICE, "LABEL", VALUE, ...)
    labels |= set(re.findall(r'dev_sample\(\s*b,\s*[^,]+,\s*[^,]+,\s*'
                             r'"([a-z_]+)"', src))
    return fams, labels


def test_dashboard_asks_for_what_djinnd_exports():
    fams, labels = exported()
    assert {"djinn_sessions", "djinn_vmu_free_bytes", "djinn_vmu_pressure",
            "djinn_executor_queue_depth"} <= fams.keys()
    assert fams["djinn_request_duration_seconds"] == "histogram"
    assert {"device", "op", "le", "segment", "tenant"} <= labels
    # the scrape job's labels, and Prometheus' own
    (job,) = load_all(DEPLOY / "prometheus" / "scrape.yaml")[0][
        "scrape_configs"]
    labels |= {r["target_label"] for r in job["relabel_configs"]
               if not r.get("target_label", "__").startswith("__")}
    labels |= {"job", "instance"}
    with open(DEPLOY / "grafana" / "djinn-fleet.json") as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"]
              if "definition" in v]
    assert len(exprs) >= 10
    used = set()
    for e in exprs:
        for name in re.findall(r"\bdjinn_[a-z0-9_]+", e):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if base != name and fams.get(base) == "histogram":
                name = base
            assert name in fams, f"{e}: djinnd exports no {name}"
            used.add(name)
        for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", e):
            for lb in re.split(r"\s*,\s*", group.strip()):
                assert lb in labels, f"{e}: no label {lb}"
        for lb in re.findall(r"[{,]\s*([a-z_]+)\s*(?:=~|!~|!=|=)", e):
            assert lb in labels, f"{e}: no label {lb}"
    # the sessions, memory, pressure, queue and latency the page promises
    assert {"djinn_sessions", "djinn_vmu_bytes", "djinn_vmu_pressure",
            "djinn_executor_queue_depth",
            "djinn_request_duration_seconds"} <= used
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


# --- a djinnd on the ConfigMap's file ----------------------------------------

def openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True,
                   capture_output=True, timeout=60)


def make_certs(d: pathlib.Path) -> None:
    """The Secret djinnd-tls's keys (tls.crt, tls.key, ca.crt) and a
    client certificate of tenant test-tenant (client.crt, client.key)."""
    d.mkdir(parents=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
          "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt",
            "-days", "2", "-subj", "/CN=djinn test CA", "-addext",
            "basicConstraints=critical,CA:TRUE", "-addext",
            "keyUsage=critical,keyCertSign", cwd=d)
    for name, cn, ext in (
            ("tls", "djinnd", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
            ("client", "test-tenant", "extendedKeyUsage=clientAuth")):
        openssl("req", *ec, "-keyout", f"{name}.key", "-out",
                f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
        (d / f"{name}.ext").write_text(ext + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt",
                "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
                "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=d)


def http_get(port: int, path: str) -> Tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def test_djinnd_serves_with_the_configmap():
    """djinnd started as the DaemonSet starts it, on the ConfigMap's
    djinnd.conf with every path under a scratch root, the addresses on
    loopback and the cpu backend: its probes answer, the pods' socket is
    there for any uid, and TLS takes a client of the Secret's CA."""
    if not has_djinnd():
        pytest.skip(f"no djinnd at {DJINND}")
    if not shutil.which("openssl"):
        pytest.skip("no openssl command: the TLS Secret is not made")
    root = pathlib.Path(tempfile.mkdtemp(prefix="djk", dir="/tmp"))
    proc = None
    try:
        text = conf_text()
        mport, tport = free_port(), free_port()
        text = re.sub(r"^(\s*listen = )tcp:[^:\s]*:\d+",
                      rf"\g<1>tcp:127.0.0.1:{mport}", text, flags=re.M)
        text = re.sub(r"^(\s*listen = )tls:[^:\s]*:\d+",
                      rf"\g<1>tls:127.0.0.1:{tport}", text, flags=re.M)
        # every absolute path under the scratch root
        text = re.sub(r"(= |unix:)(/[^\s;]+)",
                      lambda m: m.group(1) + str(root) + m.group(2), text)
        # what the kubelet makes: the hostPath directories
        # (DirectoryOrCreate), the ConfigMap's and Secret's files
        for m in container("djinnd")["volumeMounts"]:
            (root / m["mountPath"].lstrip("/")).mkdir(parents=True,
                                                      exist_ok=True)
        make_certs(root / "etc/djinn/tls")
        conf = root / config_path().lstrip("/")
        conf.write_text(text)
        cmd = list(container("djinnd")["command"])
        cmd[0] = DJINND
        cmd[cmd.index("--config") + 1] = str(conf)
        log = open(root / "djinnd.log", "w")
        proc = subprocess.Popen(cmd + ["--backend", "cpu", "-m", "64M"],
                                stdout=log, stderr=subprocess.STDOUT)

        def logged() -> str:
            return (root / "djinnd.log").read_text()

        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"djinnd exited:\n{logged()}"
            try:
                status, body = http_get(mport, "/healthz")
                break
            except OSError:
                time.sleep(0.05)
        assert status == 200, f"no /healthz in 20 s:\n{logged()}"
        assert body.strip() == "ok"

        pods = root / "run/djinn/pods/djinnd.sock"
        st = os.stat(pods)
        assert stat.S_ISSOCK(st.st_mode)
        assert st.st_mode & 0o666 == 0o666, oct(st.st_mode)  # any uid
        admin = root / conf_value("server", "admin_socket").lstrip("/")
        assert stat.S_IMODE(os.stat(admin).st_mode) == 0o600

        tls = root / "etc/djinn/tls"
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(tls / "ca.crt")
        ctx.load_cert_chain(tls / "client.crt", tls / "client.key")
        with socket.create_connection(("127.0.0.1", tport), timeout=5) as s:
            with ctx.wrap_socket(s, server_hostname="localhost") as t:
                assert t.version() == "TLSv1.3"

        # ready once it serves (a bound, not one read)
        ready = settle(lambda: http_get(mport, "/readyz"),
                       lambda r: r[0] == 200, timeout=20)
        assert ready == (200, "ready\n"), ready
    finally:
        if proc:
            stop_proc(proc, 15)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
