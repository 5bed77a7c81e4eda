# SPDX-License-Identifier: MIT
"""djinn serve: the OpenAI API (/v1/chat/completions, /v1/completions,
/v1/models) over djinnd, for agents written against the openai SDK.

    djinn-serve --model-dir /var/lib/djinn/models --api-keys keys
    python -m djinn.serve --open --port 8000

Each model is a directory of djinnd's model directory with the
checkpoint's tokenizer.json (and its chat template); requests run as
contexts of a djinnd session per tenant. Documentation/serve.rst says
it all. Needs fastapi, uvicorn, jinja2 and tokenizers (pip install
'djinn[serve]').
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import ipaddress
import os
import sys
from typing import Dict, List, Optional

from .checkpoint import Checkpoint, CheckpointError

NEEDS = ("fastapi", "uvicorn", "jinja2", "tokenizers")
DEFAULT_MODEL_DIR = "/var/lib/djinn/models"


def missing() -> List[str]:
    """The packages djinn serve needs that do not import."""
    out = []
    for name in NEEDS:
        try:
            __import__(name)
        except ImportError:
            out.append(name)
    return out


class Keys:
    """API keys from a file of TENANT SHA256 lines (the SHA-256 of each
    key in hex; # comments), as djinnd's tls.tokens: the server keeps no
    key itself. A key is checked against every entry in constant
    time."""

    def __init__(self, path: str) -> None:
        self.entries: List[tuple] = []
        with open(path, encoding="utf-8") as f:
            for no, line in enumerate(f, 1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                parts = line.split()
                ok = len(parts) == 2 and len(parts[1]) == 64
                try:
                    digest = bytes.fromhex(parts[1]) if ok else b""
                except ValueError:
                    digest = b""
                if not digest:
                    raise ValueError(f"{path}:{no}: not TENANT SHA256 (64 "
                                     "hex digits)")
                if parts[0] == "djinn-serve":
                    raise ValueError(f"{path}:{no}: djinn-serve is the "
                                     "server's own tenant, not a key's")
                self.entries.append((parts[0], digest))
        if not self.entries:
            raise ValueError(f"{path}: no keys")

    def tenants(self) -> List[str]:
        return sorted({t for t, _ in self.entries})

    def get(self, key: str, default: Optional[str] = None
            ) -> Optional[str]:
        d = hashlib.sha256(key.encode()).digest()
        found = default
        for tenant, digest in self.entries:
            if hmac.compare_digest(d, digest):
                found = tenant
        return found


def _loopback(host: str) -> bool:
    if host in ("localhost", "unix"):  # a unix socket is the host's
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bound(fd: int) -> str:
    """The address listening socket @fd is bound to."""
    import socket

    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError as e:
        raise SystemExit(f"djinn-serve: --fd {fd}: {e.strerror}")
    try:
        name = s.getsockname()
    finally:
        s.close()
    return name[0] if isinstance(name, tuple) else "unix"


def load_models(model_dir: str, names: List[str]) -> Dict[str, Checkpoint]:
    """The checkpoints of @names in @model_dir (all that have a
    tokenizer.json when @names is empty)."""
    if not names:
        try:
            names = sorted(
                n for n in os.listdir(model_dir)
                if os.path.isfile(os.path.join(model_dir, n,
                                               "tokenizer.json")))
        except OSError as e:
            raise CheckpointError(f"{model_dir}: {e.strerror}") from None
        if not names:
            raise CheckpointError(f"{model_dir}: no model with a "
                                  "tokenizer.json to serve")
    return {n: Checkpoint(os.path.join(model_dir, n)) for n in names}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="djinn-serve", description="The OpenAI API over djinnd.")
    p.add_argument("--djinnd", metavar="ADDR", default=None,
                   help="djinnd's address (default: $DJINN_ADDR, else "
                   "libdjinn's default)")
    p.add_argument("--model-dir", default=DEFAULT_MODEL_DIR,
                   help="djinnd's model directory, where each model's "
                   f"tokenizer is read (default {DEFAULT_MODEL_DIR})")
    p.add_argument("--model", action="append", default=[],
                   metavar="NAME", help="a model to serve (repeatable; "
                   "default: every one with a tokenizer.json)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--fd", type=int, default=None,
                   help="serve on this listening socket, already bound "
                   "(instead of --host and --port)")
    p.add_argument("--api-keys", metavar="FILE",
                   help="API keys: TENANT SHA256 lines")
    p.add_argument("--open", action="store_true",
                   help="serve without keys (loopback addresses only)")
    p.add_argument("--delegate", action="store_true",
                   help="open each key's sessions as its tenant on djinnd "
                   "(a delegation djinnd.conf grants this user: "
                   "[tenant.NAME] delegates), so that djinnd's quotas "
                   "and shares hold per key")
    p.add_argument("--contexts", type=int, default=32, metavar="N",
                   help="idle conversation contexts kept per API key "
                   "(default 32; 0: none, every prompt prefilled whole)")
    p.add_argument("--context-ttl", type=float, default=600.0,
                   metavar="SECONDS", help="how long an idle context is "
                   "kept (default 600)")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info",
                            "debug"])
    a = p.parse_args(argv)

    gone = missing()
    if gone:
        print(f"djinn-serve: needs {', '.join(gone)} (pip install "
              "'djinn[serve]')", file=sys.stderr)
        return 69  # EX_UNAVAILABLE
    if a.contexts < 0 or a.context_ttl <= 0:
        p.error("--contexts is 0 or more, --context-ttl more than 0")
    if a.delegate and a.open:
        p.error("--delegate acts for the tenants of --api-keys")
    if bool(a.api_keys) == bool(a.open):
        p.error("give --api-keys FILE, or --open for no keys")
    if a.open and not _loopback(_bound(a.fd) if a.fd is not None
                                else a.host):
        p.error("--open serves loopback addresses only, not "
                f"{_bound(a.fd) if a.fd is not None else a.host}: give "
                "--api-keys")
    keys = None
    try:
        if a.api_keys:
            keys = Keys(a.api_keys)
        models = load_models(a.model_dir, a.model)
    except (OSError, ValueError, CheckpointError) as e:
        print(f"djinn-serve: {e}", file=sys.stderr)
        return 1

    import uvicorn

    from .. import errors as djerr
    from .api import create_app
    from .engine import Engine

    try:
        engine = Engine(a.djinnd, models, contexts=a.contexts,
                        ttl=a.context_ttl, delegated=a.delegate)
    except (djerr.Error, ValueError) as e:
        print(f"djinn-serve: {e}", file=sys.stderr)
        return 1
    if a.delegate:
        # every key's tenant now: a delegation djinnd refuses stops the
        # start, not a client's request
        try:
            for tenant in keys.tenants():  # type: ignore[union-attr]
                engine.tenant(tenant)
        except djerr.Error as e:
            print(f"djinn-serve: --delegate: tenant {tenant}: {e}",
                  file=sys.stderr)
            engine.close()
            return 1
    app = create_app(engine, keys)
    try:
        if a.fd is not None:
            uvicorn.run(app, fd=a.fd, log_level=a.log_level)
        else:
            uvicorn.run(app, host=a.host, port=a.port,
                        log_level=a.log_level)
    finally:
        engine.close()
    return 0


def main_exit() -> None:
    """The djinn-serve console script."""
    sys.exit(main())
