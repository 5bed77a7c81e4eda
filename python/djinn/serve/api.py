# SPDX-License-Identifier: MIT
"""The HTTP side of djinn serve: OpenAI's /v1/models,
/v1/chat/completions and /v1/completions on FastAPI, each request
checked field by field into an error in OpenAI's format, generation run
in worker threads (libdjinn's calls release the GIL), streams as
server-sent events."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, AsyncIterator, Callable, Dict, Iterator, List, \
    Optional, Set, Tuple

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, \
    StreamingResponse
from starlette.background import BackgroundTask
from starlette.concurrency import iterate_in_threadpool
from starlette.exceptions import HTTPException

from .. import __version__
from .checkpoint import Checkpoint
from .engine import SERVER_TENANT, Done, Engine, Event, Params, Piece, \
    Ticket
from .errors import ApiError

FINGERPRINT = f"djinn-{__version__}"
MAX_N = 16
MAX_STOP = 4


# ---------------------------------------------------------------------------
# Checking what came


def _field(body: Dict[str, Any], name: str, kinds: Tuple[type, ...],
           what: str, default: Any = None) -> Any:
    v = body.get(name, default)
    if v is None:
        return default
    # bool is an int to Python, never to JSON
    if isinstance(v, bool) and bool not in kinds:
        raise ApiError(400, f"{name}: {what}, not {json.dumps(v)}", name,
                       "invalid_type")
    if not isinstance(v, kinds):
        raise ApiError(400, f"{name}: {what}, not {json.dumps(v)[:64]}",
                       name, "invalid_type")
    return v


def _number(body: Dict[str, Any], name: str, lo: float, hi: float,
            default: float) -> float:
    v = _field(body, name, (int, float), f"a number from {lo} to {hi}",
               default)
    if not lo <= v <= hi:
        raise ApiError(400, f"{name}: {v} is not from {lo} to {hi}", name,
                       "invalid_value")
    return float(v)


def _int(body: Dict[str, Any], name: str, lo: int, hi: Optional[int],
         default: Optional[int]) -> Optional[int]:
    rng = f"from {lo} to {hi}" if hi is not None else f"of at least {lo}"
    v = _field(body, name, (int,), f"an integer {rng}", default)
    if v is not None and (v < lo or (hi is not None and v > hi)):
        raise ApiError(400, f"{name}: {v} is not {rng}", name,
                       "invalid_value")
    return v


def _unsupported(body: Dict[str, Any], name: str, ok: Callable[[Any], bool],
                 why: str) -> None:
    v = body.get(name)
    if v is not None and not ok(v):
        raise ApiError(400, f"{name}: {why}", name, "unsupported_parameter")


def _params(body: Dict[str, Any], ck: Checkpoint, vocab: int) -> Params:
    p = Params()
    mct = _int(body, "max_completion_tokens", 1, None, None)
    p.max_tokens = mct if mct is not None else \
        _int(body, "max_tokens", 1, None, None)
    p.temperature = _number(body, "temperature", 0.0, 2.0, 1.0)
    p.top_p = _number(body, "top_p", 0.0, 1.0, 1.0)
    if p.top_p == 0:  # only the most likely: greedy
        p.temperature, p.top_p = 0.0, 1.0
    p.seed = _int(body, "seed", -(2**63), 2**64 - 1, None)
    if p.seed is not None:
        p.seed &= 2**64 - 1
    stop = body.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(
                isinstance(s, str) and s for s in stop):
            raise ApiError(400, "stop: a string or a list of non-empty "
                           "strings", "stop", "invalid_type")
        if len(stop) > MAX_STOP:
            raise ApiError(400, f"stop: at most {MAX_STOP} sequences, not "
                           f"{len(stop)}", "stop", "invalid_value")
        p.stop = stop
    p.n = _int(body, "n", 1, MAX_N, 1) or 1
    bias = _field(body, "logit_bias", (dict,),
                  "an object of token ids to numbers", {})
    for k, v in bias.items():
        try:
            tid = int(k)
        except ValueError:
            tid = -1
        if not 0 <= tid < vocab or str(tid) != str(k).strip():
            raise ApiError(400, f"logit_bias: {k!r} is not a token id "
                           f"from 0 to {vocab - 1}", "logit_bias",
                           "invalid_value")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                not -100 <= v <= 100:
            raise ApiError(400, f"logit_bias[{k}]: a number from -100 to "
                           f"100, not {json.dumps(v)}", "logit_bias",
                           "invalid_value")
        p.logit_bias[tid] = float(v)
    for name in ("presence_penalty", "frequency_penalty"):
        _unsupported(body, name, lambda v: v == 0,
                     "not supported by djinn serve: leave it out or 0")
    _unsupported(body, "best_of", lambda v: v == body.get("n", 1),
                 "not supported by djinn serve: leave it out or equal to n")
    rf = body.get("response_format")
    _unsupported(body, "response_format",
                 lambda v: isinstance(v, dict) and v.get("type") == "text",
                 f"{json.dumps(rf)[:64]}: only {{\"type\": \"text\"}} is "
                 "supported by djinn serve")
    return p


def _stream_opts(body: Dict[str, Any]) -> Tuple[bool, bool]:
    stream = _field(body, "stream", (bool,), "true or false", False)
    so = _field(body, "stream_options", (dict,), "an object", None)
    usage = False
    if so is not None:
        if not stream:
            raise ApiError(400, "stream_options: only with stream: true",
                           "stream_options", "invalid_value")
        usage = _field(so, "include_usage", (bool,), "true or false",
                       False)
    return stream, usage


def _content(m: Dict[str, Any], i: int) -> Optional[str]:
    """A message's content as text: a string, or its text parts."""
    c = m.get("content")
    if c is None or isinstance(c, str):
        return c
    if isinstance(c, list):
        out = []
        for part in c:
            if not isinstance(part, dict) or part.get("type") not in (
                    "text", "input_text", "output_text"):
                kind = part.get("type") if isinstance(part, dict) else part
                raise ApiError(400, f"messages[{i}].content: a part of "
                               f"type {json.dumps(kind)[:40]}: djinn serve "
                               "takes text only",
                               f"messages[{i}].content", "invalid_value")
            if not isinstance(part.get("text"), str):
                raise ApiError(400, f"messages[{i}].content: a text part "
                               "without its text",
                               f"messages[{i}].content", "invalid_value")
            out.append(part["text"])
        return "".join(out)
    raise ApiError(400, f"messages[{i}].content: a string or a list of "
                   "parts", f"messages[{i}].content", "invalid_type")


def _messages(body: Dict[str, Any]) -> List[Dict[str, Any]]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError(400, "messages: a non-empty list of messages is "
                       "required", "messages", "invalid_value")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise ApiError(400, f"messages[{i}]: an object", f"messages[{i}]",
                           "invalid_type")
        role = m.get("role")
        if role == "developer":  # the newer name of system
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise ApiError(400, f"messages[{i}].role: one of system, "
                           "developer, user, assistant and tool, not "
                           f"{json.dumps(role)[:40]}",
                           f"messages[{i}].role", "invalid_value")
        content = _content(m, i)
        n: Dict[str, Any] = {"role": role, "content": content}
        calls = m.get("tool_calls")
        if role == "assistant" and calls:
            if not isinstance(calls, list):
                raise ApiError(400, f"messages[{i}].tool_calls: a list",
                               f"messages[{i}].tool_calls", "invalid_type")
            n["tool_calls"] = []
            for j, c in enumerate(calls):
                f = c.get("function") if isinstance(c, dict) else None
                if not isinstance(f, dict) or not isinstance(
                        f.get("name"), str) or not isinstance(
                        f.get("arguments"), str):
                    raise ApiError(
                        400, f"messages[{i}].tool_calls[{j}]: a function "
                        "with its name and arguments (JSON text)",
                        f"messages[{i}].tool_calls", "invalid_value")
                try:
                    args = json.loads(f["arguments"])
                except ValueError:
                    raise ApiError(
                        400, f"messages[{i}].tool_calls[{j}].function."
                        "arguments is not JSON",
                        f"messages[{i}].tool_calls",
                        "invalid_value") from None
                n["tool_calls"].append({
                    "id": c.get("id"), "type": "function",
                    "function": {"name": f["name"], "arguments": args}})
        elif content is None:
            raise ApiError(400, f"messages[{i}].content is required",
                           f"messages[{i}].content", "invalid_value")
        if role == "tool":
            if not isinstance(m.get("tool_call_id"), str):
                raise ApiError(400, f"messages[{i}].tool_call_id is "
                               "required of a tool message",
                               f"messages[{i}].tool_call_id",
                               "invalid_value")
            n["tool_call_id"] = m["tool_call_id"]
        if isinstance(m.get("name"), str):
            n["name"] = m["name"]
        out.append(n)
    return out


def _tools(body: Dict[str, Any]
           ) -> Tuple[Optional[List[Dict[str, Any]]], Optional[Set[str]],
                      Any]:
    """The tools to render, the names whose calls are parsed (None: no
    parsing), and the tool_choice."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none"):
            raise ApiError(400, "tool_choice: only with tools",
                           "tool_choice", "invalid_value")
        return None, None, "none"
    if not isinstance(tools, list):
        raise ApiError(400, "tools: a list of tools", "tools",
                       "invalid_type")
    names: Set[str] = set()
    for i, t in enumerate(tools):
        f = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or \
                not isinstance(f, dict) or \
                not isinstance(f.get("name"), str) or not f["name"]:
            raise ApiError(400, f"tools[{i}]: {{\"type\": \"function\", "
                           "\"function\": {\"name\": ...}}", "tools",
                           "invalid_value")
        if "parameters" in f and not isinstance(f["parameters"], dict):
            raise ApiError(400, f"tools[{i}].function.parameters: a JSON "
                           "Schema object", "tools", "invalid_value")
        names.add(f["name"])
    if choice is None:
        choice = "auto" if tools else "none"
    if isinstance(choice, dict):
        f = choice.get("function")
        name = f.get("name") if isinstance(f, dict) else None
        if choice.get("type") != "function" or name not in names:
            raise ApiError(400, "tool_choice: a function of tools, as "
                           "{\"type\": \"function\", \"function\": "
                           "{\"name\": ...}}", "tool_choice",
                           "invalid_value")
    elif choice not in ("none", "auto", "required"):
        raise ApiError(400, "tool_choice: none, auto, required or a "
                       "function", "tool_choice", "invalid_value")
    if choice == "required" and not tools:
        raise ApiError(400, "tool_choice: required with no tools",
                       "tool_choice", "invalid_value")
    return tools, (None if choice == "none" else names), choice


def _no_arguments(tool: Dict[str, Any]) -> bool:
    """A function whose only arguments are {}: no properties."""
    ps = tool["function"].get("parameters")
    return ps is None or (ps.get("type", "object") == "object" and
                          not ps.get("properties"))


def _force(ck: Checkpoint, tools: List[Dict[str, Any]], choice: Any,
           p: Params) -> None:
    """tool_choice required or a named function: the reply begins with
    the call; a function that takes no arguments has its whole call
    written, else the model writes the arguments."""
    if choice == "required" and len(tools) == 1:
        choice = {"function": {"name": tools[0]["function"]["name"]}}
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        tool = next(t for t in tools if t["function"]["name"] == name)
        head = '<tool_call>\n{"name": ' + json.dumps(name) + \
            ', "arguments": '
        if _no_arguments(tool):
            p.forced = ck.encode(head + "{}}\n</tool_call>")
            p.forced_done = True
        else:
            p.forced = ck.encode(head)
    elif choice == "required":
        p.forced = ck.encode('<tool_call>\n{"name": "')


# ---------------------------------------------------------------------------
# Answers


def _lp_chat(ck: Checkpoint, pieces: List[Piece]) -> List[Dict[str, Any]]:
    def one(tid: int, lp: float) -> Dict[str, Any]:
        s = ck.token_text(tid)
        return {"token": s, "logprob": lp, "bytes": list(s.encode())}

    out = []
    for pc in pieces:
        if pc.logprob is None:
            continue
        d = one(pc.logprob.token, pc.logprob.logprob)
        d["top_logprobs"] = [one(t, v) for t, v in pc.logprob.top]
        out.append(d)
    return out


def _lp_text(ck: Checkpoint, pieces: List[Piece], offset: int
             ) -> Dict[str, Any]:
    tokens, lps, tops, offs = [], [], [], []
    for pc in pieces:
        if pc.logprob is None:
            continue
        s = ck.token_text(pc.logprob.token)
        tokens.append(s)
        lps.append(pc.logprob.logprob)
        top: Dict[str, float] = {}
        for t, v in pc.logprob.top:  # most likely first: it keeps a key
            top.setdefault(ck.token_text(t), v)
        tops.append(top)
        offs.append(offset)
        offset += len(s)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops,
            "text_offset": offs}


def _usage(prompt: int, completion: int, cached: int) -> Dict[str, Any]:
    """OpenAI's usage; @cached of the prompt's tokens were a live
    context's, not prefilled again (prompt_tokens_details, as OpenAI
    counts its prompt cache)."""
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _sse_response(gen: Iterator[Event], fmt: Callable[[Event], List[str]],
                  base: Dict[str, Any], usage: bool, prompt: int,
                  made: List[int], cached: List[int],
                  ticket: Ticket) -> StreamingResponse:
    """A Chat or Completions stream of @gen's events as @fmt writes
    them, then (@usage) the usage chunk: no choices, the tokens @fmt
    counted into @made and @cached."""

    def tail() -> List[str]:
        if not usage:
            return []
        return [_sse(dict(base, choices=[],
                          usage=_usage(prompt, made[0], cached[0])))]

    return StreamingResponse(_stream(gen, fmt, tail, ticket),
                             media_type="text/event-stream",
                             background=BackgroundTask(ticket.done))


def _cached(events: List[Event], n: int) -> int:
    """Prompt tokens not prefilled again, over the prompts (each has @n
    choices)."""
    return sum(e.cached for e in events
               if isinstance(e, Done) and e.index % n == 0)


def _sse(obj: Any) -> str:
    return "data: " + json.dumps(obj, ensure_ascii=False) + "\n\n"


class Server:
    """The app's state: the engine, the models' checkpoints, the keys."""

    def __init__(self, engine: Engine, keys: Any) -> None:
        self.engine = engine
        self.keys = keys  # None: open (loopback only, main() checks)
        self.created = int(time.time())

    def tenant(self, request: Request) -> str:
        if self.keys is None:
            return SERVER_TENANT
        auth = request.headers.get("authorization", "")
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        tenant = self.keys.get(key) if key else None
        if tenant is None:
            raise ApiError(
                401, "Incorrect API key provided." if key else
                "You didn't provide an API key: give it as "
                "Authorization: Bearer KEY.", None, "invalid_api_key")
        return tenant

    def checkpoint(self, body: Dict[str, Any]) -> Tuple[str, Checkpoint]:
        name = body.get("model")
        if not isinstance(name, str):
            raise ApiError(400, "model: the name of a model of /v1/models "
                           "is required", "model", "invalid_value")
        ck = self.engine.checkpoints.get(name)
        if ck is None:
            raise ApiError(404, f"The model `{name}` does not exist.",
                           "model", "model_not_found")
        return name, ck


def _expected_wait(request: Request) -> Optional[float]:
    """X-Djinn-Expected-Wait: SECONDS, how long the tools this reply may
    ask for will take, from a harness that knows better than the
    server's measure."""
    v = request.headers.get("x-djinn-expected-wait")
    if v is None:
        return None
    try:
        s = float(v)
    except ValueError:
        s = -1.0
    if not 0 < s <= 3600:
        raise ApiError(400, f"X-Djinn-Expected-Wait: {v[:32]!r} is not a "
                       "number of seconds in (0, 3600]", None,
                       "invalid_value")
    return s


async def _body(request: Request) -> Dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise ApiError(400, "We could not parse the JSON body of your "
                       "request.", None, "invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body is a JSON object", None,
                       "invalid_json")
    return body


# Whole generations (requests not streamed) hold a thread each for their
# length: a pool of their own, so that they never take the threads the
# streams' steps and closes need (anyio's default pool)
_WHOLE: Optional[anyio.CapacityLimiter] = None


async def _collect(gen: Iterator[Event], ticket: Ticket) -> List[Event]:
    global _WHOLE
    if _WHOLE is None:
        _WHOLE = anyio.CapacityLimiter(64)
    try:
        return await anyio.to_thread.run_sync(lambda: list(gen),
                                              limiter=_WHOLE)
    finally:
        ticket.done()


async def _stream(gen: Iterator[Event], fmt: Callable[[Event], List[str]],
                  tail: Callable[[], List[str]], ticket: Ticket,
                  done: bool = True,
                  error: Optional[Callable[[ApiError], str]] = None
                  ) -> AsyncIterator[str]:
    """The events as server-sent events, then (@done) "data: [DONE]"; an
    error after the first is the stream's last event, in the API's error
    format (@error's, else Chat Completions'). The contexts go however
    the stream ends (a client that leaves cancels it)."""
    try:
        async for ev in iterate_in_threadpool(gen):
            for s in fmt(ev):
                yield s
        for s in tail():
            yield s
    except ApiError as e:
        yield error(e) if error else _sse(e.body())
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(getattr(gen, "close"))
        ticket.done()
    if done:
        yield "data: [DONE]\n\n"


# (name, type, help, value of a model's Load) for /metrics: the names
# the Gateway API Inference Extension's model-server protocol takes from
# vLLM, so that its endpoint picker reads djinn serve as it reads vLLM
_METRICS = [
    ("vllm:num_requests_waiting", "gauge",
     "Requests taken and not yet started (TotalQueuedRequests).",
     lambda e, m, ld: ld.waiting),
    ("vllm:num_requests_running", "gauge",
     "Requests generating (TotalRunningRequests).",
     lambda e, m, ld: ld.running),
    ("vllm:kv_cache_usage_perc", "gauge",
     "KV cache the conversations hold over the device's memory, 0 to 1 "
     "(KVCacheUtilization).",
     lambda e, m, ld: e.kv_usage(m)),
    ("vllm:prefix_cache_queries_total", "counter",
     "Prompt tokens asked for.", lambda e, m, ld: ld.prompt_tokens),
    ("vllm:prefix_cache_hits_total", "counter",
     "Prompt tokens a live conversation's context held already (not "
     "prefilled again).", lambda e, m, ld: ld.cached_tokens),
    ("vllm:generation_tokens_total", "counter", "Tokens generated.",
     lambda e, m, ld: ld.generated),
]


def _metrics(engine: Engine) -> str:
    """Prometheus' text format, a sample per model."""
    out = []
    for name, kind, help_, value in _METRICS:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        for model, ld in engine.loads.items():
            v = value(engine, model, ld)  # ints read whole, no lock
            label = json.dumps(model)
            out.append(f"{name}{{model_name={label}}} {v}")
    return "\n".join(out) + "\n"


def prepare_chat(srv: Server, body: Dict[str, Any], request: Request
                 ) -> Tuple[str, Checkpoint, List[Dict[str, Any]],
                            List[int], Params]:
    """A Chat Completions request checked and rendered: the model's
    name and checkpoint, the messages as the template takes them, the
    prompt's ids and the sampling (the Responses API's requests come
    here as chat requests too)."""
    name, ck = srv.checkpoint(body)
    msgs = _messages(body)
    tools, names, choice = _tools(body)
    p = _params(body, ck, ck.vocab)
    p.tools = names
    p.logprobs = _field(body, "logprobs", (bool,), "true or false", False)
    p.top_logprobs = _int(body, "top_logprobs", 0, 20, 0) or 0
    if p.top_logprobs and not p.logprobs:
        raise ApiError(400, "top_logprobs: only with logprobs: true",
                       "top_logprobs", "invalid_value")
    p.expected_wait = _expected_wait(request)
    if tools and choice != "none":
        _force(srv.engine.checkpoints[name], tools, choice, p)
    prompt = ck.encode(ck.render(msgs, tools if choice != "none" else None))
    srv.engine.check_room(name, len(prompt) + len(p.forced), p, "messages")
    return name, ck, msgs, prompt, p


def create_app(engine: Engine, keys: Any) -> FastAPI:
    """The FastAPI application serving @engine's models; @keys maps API
    keys to tenants with get() (serve.Keys, a dict; None: no key asked)."""
    srv = Server(engine, keys)
    app = FastAPI(title="djinn serve", version=__version__, docs_url=None,
                  redoc_url=None, openapi_url=None)
    app.state.server = srv

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException
                         ) -> JSONResponse:
        msg = {404: f"no such endpoint: {request.url.path}",
               405: f"{request.method} is not allowed on "
               f"{request.url.path}"}.get(e.status_code, str(e.detail))
        return JSONResponse(ApiError(e.status_code, msg).body(),
                            status_code=e.status_code)

    @app.get("/health")
    async def health() -> Dict[str, Any]:
        return {}

    def model_obj(name: str) -> Dict[str, Any]:
        return {"id": name, "object": "model", "created": srv.created,
                "owned_by": "djinn",
                "max_model_len": engine.max_tokens[name]}

    @app.get("/v1/models")
    async def models(request: Request) -> Dict[str, Any]:
        srv.tenant(request)
        return {"object": "list",
                "data": [model_obj(n) for n in engine.checkpoints]}

    @app.get("/v1/models/{name:path}")
    async def model(name: str, request: Request) -> Dict[str, Any]:
        srv.tenant(request)
        if name not in engine.checkpoints:
            raise ApiError(404, f"The model `{name}` does not exist.",
                           "model", "model_not_found")
        return model_obj(name)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        tenant = srv.tenant(request)
        body = await _body(request)
        # the template and the tokenizer run in a thread, off the loop
        name, ck, msgs, prompt, p = await anyio.to_thread.run_sync(
            prepare_chat, srv, body, request)
        stream, usage = _stream_opts(body)
        ticket = engine.loads[name].ticket()
        gen = engine.generate(tenant, name, prompt, p, ticket=ticket)
        rid = "chatcmpl-" + secrets.token_hex(12)
        created = int(time.time())
        head = {"id": rid, "created": created, "model": name,
                "system_fingerprint": FINGERPRINT}
        if stream:
            return _chat_stream(ck, head, gen, p, len(prompt), usage,
                                ticket)
        events = await _collect(gen, ticket)
        choices, made = [], 0
        cached = _cached(events, p.n)
        for i in range(p.n):
            pieces = [e for e in events if isinstance(e, Piece) and
                      e.index == i]
            done = next(e for e in events if isinstance(e, Done) and
                        e.index == i)
            made += done.tokens
            text = "".join(pc.text for pc in pieces) + done.rest
            msg: Dict[str, Any] = {"role": "assistant", "content": text,
                                   "refusal": None}
            if done.calls:
                msg["content"] = text.strip() or None
                msg["tool_calls"] = [c.api() for c in done.calls]
            choices.append({
                "index": i, "message": msg,
                "logprobs": {"content": _lp_chat(ck, pieces)}
                if p.logprobs else None,
                "finish_reason": done.reason})
        return dict(head, object="chat.completion", choices=choices,
                    usage=_usage(len(prompt), made, cached))

    def _chat_stream(ck: Checkpoint, head: Dict[str, Any],
                     gen: Iterator[Event], p: Params, prompt: int,
                     usage: bool, ticket: Ticket) -> StreamingResponse:
        made, cached = [0], [0]
        started: Set[int] = set()
        base = dict(head, object="chat.completion.chunk")
        if usage:
            base["usage"] = None

        def chunk(i: int, delta: Dict[str, Any], lp: Any = None,
                  reason: Optional[str] = None) -> str:
            return _sse(dict(base, choices=[{
                "index": i, "delta": delta, "logprobs": lp,
                "finish_reason": reason}]))

        def fmt(ev: Event) -> List[str]:
            out = []
            if ev.index not in started:
                started.add(ev.index)
                out.append(chunk(ev.index, {"role": "assistant",
                                            "content": ""}))
            if isinstance(ev, Piece):
                lp = {"content": _lp_chat(ck, [ev])} \
                    if p.logprobs and ev.logprob is not None else None
                if ev.text or lp:
                    out.append(chunk(ev.index, {"content": ev.text}, lp))
                return out
            made[0] += ev.tokens
            if ev.index % p.n == 0:
                cached[0] += ev.cached
            if ev.rest:
                out.append(chunk(ev.index, {"content": ev.rest}))
            if ev.calls:
                out.append(chunk(ev.index, {"tool_calls": [
                    c.api(k) for k, c in enumerate(ev.calls)]}))
            out.append(chunk(ev.index, {}, None, ev.reason))
            return out

        return _sse_response(gen, fmt, base, usage, prompt, made, cached,
                             ticket)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        tenant = srv.tenant(request)
        body = await _body(request)
        name, ck = srv.checkpoint(body)
        prompts = _prompts(body, ck)
        p = _params(body, ck, ck.vocab)
        lp = _int(body, "logprobs", 0, 5, None)
        p.logprobs = lp is not None
        p.top_logprobs = lp or 0
        echo = _field(body, "echo", (bool,), "true or false", False)
        _unsupported(body, "suffix", lambda v: v == "",
                     "not supported by djinn serve")
        stream, usage = _stream_opts(body)
        for ids in prompts:
            engine.check_room(name, len(ids), p, "prompt")
        n = p.n
        total_prompt = sum(len(ids) for ids in prompts) * 1

        ticket = engine.loads[name].ticket()

        def run() -> Iterator[Event]:
            for k, ids in enumerate(prompts):
                yield from engine.generate(tenant, name, ids, p, k * n,
                                           ticket)

        rid = "cmpl-" + secrets.token_hex(12)
        head = {"id": rid, "created": int(time.time()), "model": name,
                "system_fingerprint": FINGERPRINT}
        echoes = [ck.decode(ids) if echo else "" for ids in prompts]
        if stream:
            return _text_stream(ck, head, run(), p, total_prompt, usage,
                                echoes, ticket)
        events = await _collect(run(), ticket)
        choices, made = [], 0
        cached = _cached(events, n)
        for i in range(n * len(prompts)):
            pieces = [e for e in events if isinstance(e, Piece) and
                      e.index == i]
            done = next(e for e in events if isinstance(e, Done) and
                        e.index == i)
            made += done.tokens
            pre = echoes[i // n]
            text = pre + "".join(pc.text for pc in pieces) + done.rest
            choices.append({
                "index": i, "text": text,
                "logprobs": _lp_text(ck, pieces, len(pre))
                if p.logprobs else None,
                "finish_reason": done.reason})
        return dict(head, object="text_completion", choices=choices,
                    usage=_usage(total_prompt, made, cached))

    def _text_stream(ck: Checkpoint, head: Dict[str, Any],
                     gen: Iterator[Event], p: Params, prompt: int,
                     usage: bool, echoes: List[str],
                     ticket: Ticket) -> StreamingResponse:
        made, cached = [0], [0]
        started: Set[int] = set()
        offset: Dict[int, int] = {}
        base = dict(head, object="text_completion")
        if usage:
            base["usage"] = None

        def chunk(i: int, text: str, lp: Any = None,
                  reason: Optional[str] = None) -> str:
            return _sse(dict(base, choices=[{
                "index": i, "text": text, "logprobs": lp,
                "finish_reason": reason}]))

        def fmt(ev: Event) -> List[str]:
            out = []
            if ev.index not in started:
                started.add(ev.index)
                pre = echoes[ev.index // p.n]
                offset[ev.index] = len(pre)
                if pre:
                    out.append(chunk(ev.index, pre))
            if isinstance(ev, Piece):
                lp = _lp_text(ck, [ev], offset[ev.index]) \
                    if p.logprobs and ev.logprob is not None else None
                offset[ev.index] += len(ev.text)
                if ev.text or lp:
                    out.append(chunk(ev.index, ev.text, lp))
                return out
            made[0] += ev.tokens
            if ev.index % p.n == 0:
                cached[0] += ev.cached
            out.append(chunk(ev.index, ev.rest, None, ev.reason))
            return out

        return _sse_response(gen, fmt, base, usage, prompt, made, cached,
                             ticket)

    from .responses import add_routes

    add_routes(app, srv)

    @app.get("/metrics")
    def metrics() -> PlainTextResponse:  # FastAPI runs it in a thread
        return PlainTextResponse(_metrics(engine),
                                 media_type="text/plain; version=0.0.4")

    return app


def _prompts(body: Dict[str, Any], ck: Checkpoint) -> List[List[int]]:
    """/v1/completions' prompt: a string, strings, token ids, or lists of
    them; as token ids."""
    pr = body.get("prompt")
    bad = ApiError(400, "prompt: a string, a list of strings, a list of "
                   "token ids or a list of such lists", "prompt",
                   "invalid_value")
    if isinstance(pr, str):
        pr = [pr]
    if not isinstance(pr, list) or not pr:
        raise bad
    if all(isinstance(t, int) and not isinstance(t, bool) for t in pr):
        pr = [pr]
    out = []
    for x in pr:
        if isinstance(x, str):
            ids = ck.encode(x)
        elif isinstance(x, list) and x and all(
                isinstance(t, int) and not isinstance(t, bool) for t in x):
            ids = x
        else:
            raise bad
        if not ids:
            raise ApiError(400, "prompt: an empty prompt", "prompt",
                           "invalid_value")
        for t in ids:
            if not 0 <= t < ck.vocab:
                raise ApiError(400, f"prompt: token id {t} is not from 0 "
                               f"to {ck.vocab - 1}", "prompt",
                               "invalid_value")
        out.append(list(ids))
    return out
