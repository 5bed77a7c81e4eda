#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""serve-bench: agents through the openai SDK against djinn serve, with
and without conversations, and against llama.cpp's OpenAI server.

    bench/serve-bench.py --build build [--agents 4,8,16,32] [--turns 5]
                         [--llamacpp PYTHON] [--out FILE]

Each of N agents runs TURNS turns at once with the others. A turn:
the user asks; the model answers with a tool call (forced with
tool_choice, since random weights never write one); the tool sleeps a
time drawn for it (uniform, --tool-ms); its output (about 64 tokens)
goes back, and the model answers with a reply of at most 32 tokens. The
agents share a system prompt of about 256 tokens and one API key, as one
harness's agents do. Every request streams, greedy.

Reported per server and N, as JSON lines: p50 and p99 of the time to
first token (to the first chunk that carries text, a tool call or the
end) and of the turn time (the turn's two requests, the tool's sleep
left out), the prompt tokens sent and how many the server prefilled
(prompt_tokens - cached_tokens), and the wall time. Then, per N, the
ratios the issue's targets name: stateless over djinn for tokens
prefilled (target >= 3 at 16 agents) and for p99 turn time (>= 2), and
llama.cpp's p99 over djinn's.

The servers: "djinn" (djinn serve over a djinnd of the build, the CPU
backend), "stateless" (the same with --contexts 0: every prompt is
prefilled whole, as a server without conversations does), and, with
--llamacpp PYTHON (an interpreter with llama-cpp-python[server]), the
same weights converted to GGUF served by llama_cpp.server with its
prompt cache on. The model is a Qwen2 of random weights with the chat
tokenizer scripts/mkmodel.py --chat writes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEL = "bench-qwen"
# 8 layers 384 wide (16M parameters): prefill costs what it would for a
# small real model, and a run of every N takes minutes on two cores
MODEL_ARGS = ("--arch qwen2 --layers 8 --embd 384 --heads 6 --kv-heads 2 "
              "--inner 1024 --vocab 320 --ctx 4096 --seed 17 --chat")
KEY = "sk-bench-" + "0" * 32
TOOL = {"type": "function", "function": {
    "name": "lookup", "description": "Look the question up.",
    "parameters": {"type": "object", "properties": {}}}}
FORCE = {"type": "function", "function": {"name": "lookup"}}

WORDS = ("the weather in the north is rain and the south is sun while the "
         "city of Paris has a cool wind from the sea and the trains run on "
         "time for the most part though the third line is closed this "
         "week").split()


def text_of(ids_wanted: int, tok: Any, seed: int) -> str:
    """Text of about @ids_wanted tokens of @tok, words drawn by @seed."""
    rng = random.Random(seed)
    words: List[str] = []
    while len(tok.encode(" ".join(words)).ids) < ids_wanted:
        words.append(rng.choice(WORDS))
    return " ".join(words)


def pct(xs: List[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]


def free_port() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(256)
    return s


def wait_http(url: str, proc: subprocess.Popen, log: pathlib.Path,
              timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited:\n" +
                               log.read_text()[-4000:])
        try:
            urllib.request.urlopen(url, timeout=5)
            return
        except urllib.error.HTTPError:  # it answers (a key it wants)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer:\n" +
                                   log.read_text()[-4000:])
            time.sleep(0.1)


class Agent:
    """One agent's turns, timed."""

    def __init__(self, i: int, base: str, model: str, system: str,
                 tool_out: str, turns: int, tool_ms: List[int],
                 seed: int) -> None:
        import openai

        self.client = openai.OpenAI(base_url=base, api_key=KEY,
                                    max_retries=0, timeout=600)
        self.model = model
        self.rng = random.Random(seed * 1000 + i)
        self.msgs: List[Dict[str, Any]] = [
            {"role": "system", "content": system}]
        self.i = i
        self.turns = turns
        self.tool_ms = tool_ms
        self.tool_out = tool_out
        self.ttft: List[float] = []
        self.turn_s: List[float] = []
        self.prompt = 0
        self.prefilled = 0
        self.unreported = 0  # answers without usage
        self.error: Optional[str] = None

    def request(self, **kw: Any) -> Dict[str, Any]:
        t0 = time.monotonic()
        first = None
        content, calls, usage = [], [], None
        # repeat_penalty: llama.cpp's server is greedy only without its
        # default 1.1 (djinn serve ignores a field the API does not have)
        for ch in self.client.chat.completions.create(
                model=self.model, messages=self.msgs, temperature=0,
                stream=True, stream_options={"include_usage": True},
                extra_body={"repeat_penalty": 1.0}, **kw):
            if ch.usage is not None:
                usage = ch.usage
            for c in ch.choices:
                d = c.delta
                if first is None and (d.content or d.tool_calls or
                                      c.finish_reason):
                    first = time.monotonic()
                if d.content:
                    content.append(d.content)
                for tc in d.tool_calls or []:
                    calls.append(tc)
        end = time.monotonic()
        self.ttft.append((first or end) - t0)
        if usage is None:  # llama.cpp's server streams no usage
            self.unreported += 1
        else:
            self.prompt += usage.prompt_tokens
            cached = 0
            if usage.prompt_tokens_details is not None:
                cached = usage.prompt_tokens_details.cached_tokens or 0
            self.prefilled += usage.prompt_tokens - cached
        return {"s": end - t0, "content": "".join(content), "calls": calls}

    def run(self) -> None:
        try:
            for turn in range(self.turns):
                self.msgs.append({"role": "user", "content":
                                  f"Agent {self.i}, question {turn}: what "
                                  "does the lookup say?"})
                a = self.request(tools=[TOOL], tool_choice=FORCE,
                                 max_tokens=32)
                call = a["calls"][0] if a["calls"] else None
                cid = (call.id if call is not None and call.id else
                       f"call_{self.i}_{turn}")
                # content "": llama.cpp's server takes no null
                self.msgs.append({"role": "assistant", "content": "",
                                  "tool_calls": [{
                                      "id": cid, "type": "function",
                                      "function": {"name": "lookup",
                                                   "arguments": "{}"}}]})
                time.sleep(self.rng.uniform(*self.tool_ms) / 1000)
                self.msgs.append({"role": "tool", "tool_call_id": cid,
                                  "content": self.tool_out})
                b = self.request(tools=[TOOL], tool_choice="auto",
                                 max_tokens=32)
                self.msgs.append({"role": "assistant",
                                  "content": b["content"]})
                self.turn_s.append(a["s"] + b["s"])
        except Exception as e:  # reported, not raised: the run goes on
            self.error = f"{type(e).__name__}: {e}"


def run_agents(base: str, model: str, n: int, a: Any, system: str,
               tool_out: str) -> Dict[str, Any]:
    agents = [Agent(i, base, model, system, tool_out, a.turns,
                    a.tool_ms, a.seed) for i in range(n)]
    t0 = time.monotonic()
    ts = [threading.Thread(target=x.run) for x in agents]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    errors = [x.error for x in agents if x.error]
    ttft = [v for x in agents for v in x.ttft]
    turn = [v for x in agents for v in x.turn_s]
    return {
        "agents": n, "turns": a.turns, "requests": len(ttft),
        "errors": len(errors), "first_error": errors[0] if errors else None,
        "ttft_p50_ms": round(pct(ttft, 0.5) * 1000, 1),
        "ttft_p99_ms": round(pct(ttft, 0.99) * 1000, 1),
        "turn_p50_ms": round(pct(turn, 0.5) * 1000, 1),
        "turn_p99_ms": round(pct(turn, 0.99) * 1000, 1),
        "turn_mean_ms": round(statistics.fmean(turn) * 1000, 1)
        if turn else 0.0,
        # null where the server reports no usage (llama.cpp streaming)
        "prompt_tokens": None if any(x.unreported for x in agents) else
        sum(x.prompt for x in agents),
        "prefilled_tokens": None if any(x.unreported for x in agents) else
        sum(x.prefilled for x in agents),
        "wall_s": round(wall, 2),
    }


class Djinn:
    """djinnd of the build and djinn serve on it."""

    def __init__(self, a: Any, models: pathlib.Path, tmp: pathlib.Path
                 ) -> None:
        self.tmp = tmp
        sock = tmp / "d.sock"
        self.addr = f"unix:{sock}"
        self.log = tmp / "djinnd.log"
        self.proc = subprocess.Popen(
            [str(a.build / "djinnd" / "djinnd"), "-f", "-l", self.addr,
             "-a", str(tmp / "a.sock"), "--backend", "cpu", "-m", a.mem,
             "--model-dir", str(models)],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not sock.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("djinnd did not start:\n" +
                                   self.log.read_text())
            time.sleep(0.05)
        self.serve: Optional[subprocess.Popen] = None

    def start_serve(self, a: Any, models: pathlib.Path, contexts: int
                    ) -> str:
        keys = self.tmp / "keys"
        keys.write_text(f"bench {hashlib.sha256(KEY.encode()).hexdigest()}"
                        "\n")
        s = free_port()
        log = self.tmp / f"serve-{contexts}.log"
        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"),
                   DJINN_LIBRARY=str(a.build / "libdjinn.so"))
        self.serve = subprocess.Popen(
            [sys.executable, "-m", "djinn.serve", "--djinnd", self.addr,
             "--model-dir", str(models), "--model", MODEL, "--api-keys",
             str(keys), "--fd", str(s.fileno()), "--contexts",
             str(contexts), "--log-level", "warning"],
            pass_fds=[s.fileno()], env=env, stdout=open(log, "w"),
            stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        s.close()
        wait_http(url + "/health", self.serve, log)
        return url + "/v1"

    def stop_serve(self) -> None:
        if self.serve is not None:
            self.serve.terminate()
            self.serve.wait(30)
            self.serve = None

    def stop(self) -> None:
        self.stop_serve()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def llamacpp(a: Any, models: pathlib.Path, tmp: pathlib.Path
             ) -> Optional[subprocess.Popen]:
    """llama.cpp's server on the model converted to GGUF: (proc, base
    url), or None after printing why not."""
    conv = ROOT / "bench" / "serve_gguf.py"
    gguf = tmp / f"{MODEL}.gguf"
    env = dict(os.environ, LLAMA_CPP_DIR=str(a.llamacpp_src or ""))
    r = subprocess.run([a.llamacpp, str(conv), str(models / MODEL),
                        str(gguf)], capture_output=True, text=True, env=env)
    if r.returncode:
        print(json.dumps({"bench": "serve", "server": "llama.cpp",
                          "skipped": "converting to GGUF failed: " +
                          r.stderr[-500:]}), flush=True)
        return None
    s = free_port()
    port = s.getsockname()[1]
    s.close()
    log = tmp / "llamacpp.log"
    proc = subprocess.Popen(
        [a.llamacpp, "-m", "llama_cpp.server", "--model", str(gguf),
         "--model_alias", MODEL, "--host", "127.0.0.1", "--port",
         str(port), "--n_ctx", "4096", "--cache", "true",
         "--cache_type", "ram", "--n_threads", str(os.cpu_count() or 1),
         "--api_key", KEY],
        stdout=open(log, "w"), stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{port}/v1/models", proc, log)
    proc.base = f"http://127.0.0.1:{port}/v1"  # type: ignore[attr-defined]
    return proc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    p.add_argument("--agents", default="4,8,16,32")
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--tool-ms", default="200:1000",
                   help="a tool's sleep, drawn uniform in MIN:MAX ms")
    p.add_argument("--mem", default="2G", help="djinnd's device memory")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--llamacpp", metavar="PYTHON",
                   help="an interpreter with llama-cpp-python[server] and "
                   "llama.cpp's converter's packages")
    p.add_argument("--llamacpp-src", metavar="DIR", type=pathlib.Path,
                   help="llama.cpp's source (convert_hf_to_gguf.py; the "
                   "sdist's vendor/llama.cpp)")
    p.add_argument("--servers", default="djinn,stateless,llama.cpp")
    p.add_argument("--out", type=pathlib.Path)
    a = p.parse_args()
    a.tool_ms = [int(x) for x in a.tool_ms.split(":")]
    a.build = a.build.resolve()
    ns = [int(x) for x in a.agents.split(",")]
    servers = a.servers.split(",")
    out = open(a.out, "w") if a.out else None

    def emit(d: Dict[str, Any]) -> None:
        line = json.dumps(d)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="serve-bench-"))
    models = tmp / "models"
    models.mkdir()
    subprocess.run([sys.executable, str(ROOT / "scripts" / "mkmodel.py"),
                    *MODEL_ARGS.split(), str(models / MODEL)], check=True,
                   stdout=subprocess.DEVNULL)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(models / MODEL / "tokenizer.json"))
    system = "You are an agent. " + text_of(252, tok, a.seed)
    tool_out = text_of(64, tok, a.seed + 1)
    emit({"bench": "serve", "model": MODEL, "model_args": MODEL_ARGS,
          "system_tokens": len(tok.encode(system).ids),
          "tool_output_tokens": len(tok.encode(tool_out).ids),
          "reply_max_tokens": 32, "turns": a.turns,
          "tool_ms": a.tool_ms, "cpus": os.cpu_count()})
    results: Dict[str, Dict[int, Dict[str, Any]]] = {}
    d = Djinn(a, models, tmp)
    try:
        for server in servers:
            if server not in ("djinn", "stateless", "llama.cpp"):
                raise SystemExit(f"serve-bench: no server {server}")
            if server == "llama.cpp" and not a.llamacpp:
                emit({"bench": "serve", "server": server,
                      "skipped": "no --llamacpp PYTHON"})
                continue
            # each N on a server just started: nothing kept from before
            for n in ns:
                lc = None
                if server == "llama.cpp":
                    lc = llamacpp(a, models, tmp)
                    if lc is None:
                        break
                    base = lc.base  # type: ignore[attr-defined]
                else:
                    base = d.start_serve(a, models,
                                         32 if server == "djinn" else 0)
                try:
                    r = run_agents(base, MODEL, n, a, system, tool_out)
                finally:
                    d.stop_serve()
                    if lc is not None:
                        lc.terminate()
                        lc.wait(30)
                r = dict({"bench": "serve", "server": server}, **r)
                results.setdefault(server, {})[n] = r
                emit(r)
    finally:
        d.stop()
    for n in ns:
        dj = results.get("djinn", {}).get(n)
        st = results.get("stateless", {}).get(n)
        lc = results.get("llama.cpp", {}).get(n)
        if not dj:
            continue
        row: Dict[str, Any] = {"bench": "serve", "ratio": True, "agents": n}
        if st and dj["prefilled_tokens"] and dj["turn_p99_ms"]:
            row["prefill_ratio"] = round(
                st["prefilled_tokens"] / dj["prefilled_tokens"], 2)
            row["p99_turn_ratio"] = round(
                st["turn_p99_ms"] / dj["turn_p99_ms"], 2)
            if n == 16:
                row["target_prefill"] = 3.0
                row["target_p99_turn"] = 2.0
                row["met"] = row["prefill_ratio"] >= 3.0 and \
                    row["p99_turn_ratio"] >= 2.0
        if lc and dj["turn_p99_ms"]:
            row["llamacpp_p99_turn_ratio"] = round(
                lc["turn_p99_ms"] / dj["turn_p99_ms"], 2)
            row["llamacpp_p50_ttft_ratio"] = round(
                lc["ttft_p50_ms"] / max(0.1, dj["ttft_p50_ms"]), 2)
        emit(row)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
