# SPDX-License-Identifier: MIT
"""Choosing a host (djinn_connect_opts(3), "dns:" and "srv:"): four
djinnd, each on its own loopback address, and dnsmasq answering A and
SRV records for djinn.test (place_cluster.py). The client runs in a
mount namespace whose /etc/resolv.conf names that server
(place_driver.py), so libdjinn asks it through the system's resolver,
as in a cluster.

Needs root (a mount namespace, DNS on port 53 of a loopback address),
unshare(1) and dnsmasq (Debian: dnsmasq-base); skips naming what is
missing.
"""

from __future__ import annotations

import hashlib
import pathlib
import secrets
import subprocess
from typing import Iterator

import pytest

from place_cluster import Client, Cluster, missing

MODEL = ("--arch llama --layers 2 --embd 64 --heads 4 --kv-heads 2 "
         "--inner 128 --vocab 256 --ctx 64 --seed {}")
# host (last octet) -> memory, extra settings
HOSTS = {
    2: ("48M", []),
    3: ("96M", []),
    4: ("64M", []),
    # under pressure as soon as a model is loaded; its tenant (root, as
    # the kernel says of a loopback peer) has a memory quota
    5: ("8M", ["memory.pressure_warning=5", "memory.pressure_critical=90",
               "tenant.q.uids=0", "tenant.q.memory=4M"]),
}

pytestmark = pytest.mark.skipif(bool(missing()), reason=missing())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("place"), HOSTS,
                {name: MODEL.format(5 + i) for i, name in
                 enumerate(("ma", "mb"))}, srv_first=2)
    yield c
    c.stop()


@pytest.fixture
def client(cluster: Cluster) -> Iterator[Client]:
    cl = cluster.client()
    yield cl
    cl.close()


def dns(c: Cluster) -> str:
    return f"dns:djinn.test:{c.port}"


def test_memory_decides_without_a_model(cluster: Cluster,
                                        client: Client) -> None:
    got = client.ok("connect", addr=dns(cluster))
    assert got["addr"] == cluster.addr(3)  # the most memory free
    st = client.ok("status", conn=got["conn"])
    assert st["ready"] and st["serves_models"]
    assert st["capacity"] == 96 << 20
    assert st["free"] == st["tenant_free"] == 96 << 20
    assert st["pressure"] == 0 and st["nr_dev"] == 1
    assert st["models"] == []
    # memory.pressure_warning is 80 % by default
    assert st["pressure_room"] == (96 << 20) // 100 * 80
    assert st["data_bytes"] == 0 and st["sessions"] == 0


def test_resident_model_first(cluster: Cluster, client: Client) -> None:
    cluster.ctl(4, "model", "load", "ma")
    got = client.ok("connect", addr=dns(cluster), model="ma")
    assert got["addr"] == cluster.addr(4)  # not the roomier 3
    st = client.ok("status", conn=got["conn"])
    assert [m["name"] for m in st["models"]] == ["ma"]
    assert st["models"][0]["bytes"] > 0 and not st["models"][0]["streamed"]
    assert st["free"] < 64 << 20
    # a model no host has: memory decides
    assert client.ok("connect", addr=dns(cluster),
                     model="mb")["addr"] == cluster.addr(3)


def test_no_host_past_pressure_while_another_has_room(
        cluster: Cluster, client: Client) -> None:
    cluster.ctl(5, "model", "load", "mb")  # past its 5 % warning
    st = client.ok("status",
                   conn=client.ok("connect", addr=cluster.addr(5))["conn"])
    assert st["pressure"] >= 1 and st["pressure_room"] == 0
    assert [m["name"] for m in st["models"]] == ["mb"]
    # its tenant's quota (4M) bounds what it may take, not the device
    assert 0 < st["tenant_free"] <= 4 << 20
    got = client.ok("connect", addr=dns(cluster), model="mb")
    assert got["addr"] != cluster.addr(5)


def test_srv_priority_first(cluster: Cluster, client: Client) -> None:
    # host 2 alone has priority 0, though it has the least memory
    got = client.ok("connect", addr="srv:_djinn._tcp.djinn.test")
    assert got["addr"] == cluster.addr(2)


def test_bad_names_are_clear(client: Client) -> None:
    out = client("connect", addr="dns:nowhere.test:7411")
    assert out["errno"] == "EHOSTUNREACH", out
    assert "nowhere.test" in out["error"]
    out = client("connect", addr="srv:_none._tcp.djinn.test")
    assert out["errno"] == "EHOSTUNREACH", out
    out = client("connect", addr="dns:djinn.test")  # no port
    assert out["errno"] == "EINVAL", out


def test_a_dead_host_costs_new_sessions_a_try_and_moves_nothing(
        cluster: Cluster, client: Client) -> None:
    cluster.ctl(4, "model", "load", "ma")  # whatever ran before
    got = client.ok("connect", addr=dns(cluster), model="ma", reconnect=1)
    assert got["addr"] == cluster.addr(4)
    sess = client.ok("session", conn=got["conn"])["session"]
    client.ok("model", session=sess, name="ma", tokens=8)
    st = client.ok("status", conn=got["conn"])
    assert st["sessions"] == 1 and st["data_bytes"] > 0  # its KV cache
    before = {h: len(cluster.ctl(h, "session", "list") or [])
              for h in (2, 3, 5)}
    cluster.kill(4)
    try:
        # new connections go elsewhere at once
        again = client.ok("connect", addr=dns(cluster), model="ma")
        assert again["addr"] in {cluster.addr(h) for h in (2, 3, 5)}
        # the old session's calls fail on its own host: they never move
        out = client("ping", session=sess)
        assert out.get("errno") in ("ENOTCONN", "ECONNREFUSED",
                                    "ECONNRESET"), out
        after = {h: len(cluster.ctl(h, "session", "list") or [])
                 for h in (2, 3, 5)}
        assert after == before
    finally:
        cluster.start(4)


def _pki(d: pathlib.Path, name: str) -> None:
    """A CA (ca.pem) and a server certificate for DNS name @name
    (server.pem, server.key), with openssl(1)."""
    def ossl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True,
                       capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    ossl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem",
         "-subj", "/CN=djinn test CA", "-days", "2")
    ossl("req", *ec, "-keyout", "server.key", "-out", "server.csr",
         "-subj", f"/CN={name}")
    (d / "ext.cnf").write_text(f"subjectAltName=DNS:{name}\n")
    ossl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey",
         "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", "2",
         "-extfile", "ext.cnf")


def test_tls_checks_the_name_not_the_address(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """dns: over TLS dials the address the name gave and checks djinnd's
    certificate against the name: a name the certificate does not carry
    is refused, though it leads to the same djinnd."""
    tmp = tmp_path_factory.mktemp("place-tls")
    _pki(tmp, "tls.djinn.test")
    token = secrets.token_hex(32)
    (tmp / "tokens").write_text(
        "team-t " + hashlib.sha256(token.encode()).hexdigest() + "\n")
    c = Cluster(tmp, {2: ("32M", [f"tls.certificate={tmp}/server.pem",
                                  f"tls.key={tmp}/server.key",
                                  f"tls.tokens={tmp}/tokens"])}, {},
                tls=(2,), names={"tls.djinn.test": [2],
                                 "other.djinn.test": [2]})
    try:
        with c.client() as cl:
            got = cl.ok("connect", addr=f"dns:tls.djinn.test:{c.port}",
                        tls_ca=str(tmp / "ca.pem"), token=token)
            assert got["addr"] == f"tls:{c.ip(2)}:{c.port}"
            sess = cl.ok("session", conn=got["conn"])["session"]
            assert sess and [s["tenant"] for s in
                             c.ctl(2, "session", "list")] == ["team-t"]
            bad = cl("connect", addr=f"dns:other.djinn.test:{c.port}",
                     tls_ca=str(tmp / "ca.pem"), token=token)
            assert bad.get("errno") == "EHOSTUNREACH", bad
            assert "other.djinn.test" in bad["error"]
    finally:
        c.stop()
