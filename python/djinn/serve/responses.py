# SPDX-License-Identifier: MIT
"""OpenAI's Responses API (POST /v1/responses), which the OpenAI Agents
SDK speaks by default: its input items become a Chat Completions request
(the same checks, template, conversations and tool calls), and the
reply becomes output items: a message, and function calls. A response
is kept per tenant (store, the default) so that the next request may
name it as previous_response_id and send only what is new."""

from __future__ import annotations

import collections
import json

import anyio
import secrets
import threading
import time
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Tuple

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from .api import Server, _body, _collect, _stream, prepare_chat
from .engine import Done, Event, Piece, Ticket
from .errors import ApiError

#: responses kept per tenant for previous_response_id, the oldest going
KEPT_PER_TENANT = 256


def _text(content: Any, where: str) -> str:
    """An input message's content: a string, or its text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in (
                    "input_text", "output_text", "text") or \
                    not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else part
                raise ApiError(400, f"{where}: a part of type "
                               f"{json.dumps(kind)[:40]}: djinn serve "
                               "takes text only", "input", "invalid_value")
            out.append(part["text"])
        return "".join(out)
    raise ApiError(400, f"{where}: a string or a list of parts", "input",
                   "invalid_type")


def items_to_messages(items: Any) -> List[Dict[str, Any]]:
    """Responses input items as Chat Completions messages: messages as
    they are, function calls as an assistant's tool_calls (one message
    for calls in a row), their outputs as tool messages."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise ApiError(400, "input: a string or a non-empty list of items",
                       "input", "invalid_value")
    out: List[Dict[str, Any]] = []
    for i, it in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(it, dict):
            raise ApiError(400, f"{where}: an object", "input",
                           "invalid_type")
        kind = it.get("type", "message")
        if kind == "message":
            role = it.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise ApiError(400, f"{where}.role: user, system, "
                               "developer or assistant, not "
                               f"{json.dumps(role)[:40]}", "input",
                               "invalid_value")
            out.append({"role": role,
                        "content": _text(it.get("content"), where)})
        elif kind == "function_call":
            name, args = it.get("name"), it.get("arguments")
            call_id = it.get("call_id")
            if not isinstance(name, str) or not isinstance(args, str) or \
                    not isinstance(call_id, str):
                raise ApiError(400, f"{where}: a function_call has its "
                               "call_id, name and arguments (JSON text)",
                               "input", "invalid_value")
            call = {"id": call_id, "type": "function",
                    "function": {"name": name, "arguments": args}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                # the calls of the turn whose text came before them
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None,
                            "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id, output = it.get("call_id"), it.get("output")
            if not isinstance(call_id, str):
                raise ApiError(400, f"{where}: a function_call_output "
                               "names its call_id", "input",
                               "invalid_value")
            out.append({"role": "tool", "tool_call_id": call_id,
                        "content": _text(output, where)})
        elif kind == "reasoning":
            continue  # nothing of it reaches this model's template
        else:
            raise ApiError(400, f"{where}: an item of type "
                           f"{json.dumps(kind)[:40]}: djinn serve takes "
                           "messages, function calls and their outputs",
                           "input", "invalid_value")
    return out


def _tools(body: Dict[str, Any]) -> Tuple[Any, Any]:
    """Responses' flat function tools and tool_choice, in Chat
    Completions' form."""
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise ApiError(400, "tools: a list of tools", "tools",
                           "invalid_type")
        chat = []
        for i, t in enumerate(tools):
            if not isinstance(t, dict) or t.get("type") != "function":
                kind = t.get("type") if isinstance(t, dict) else t
                raise ApiError(400, f"tools[{i}]: a tool of type "
                               f"{json.dumps(kind)[:40]}: djinn serve "
                               "runs function tools only", "tools",
                               "invalid_value")
            f = {k: t[k] for k in ("name", "description", "parameters",
                                   "strict") if k in t}
            chat.append({"type": "function", "function": f})
        tools = chat or None
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        if choice.get("type") != "function":
            raise ApiError(400, "tool_choice: none, auto, required or "
                           "{\"type\": \"function\", \"name\": ...}",
                           "tool_choice", "invalid_value")
        choice = {"type": "function",
                  "function": {"name": choice.get("name")}}
    return tools, choice


class Kept:
    """The conversations of stored responses, per tenant: a response's id
    to its messages (its input and its output, without instructions),
    the oldest going past KEPT_PER_TENANT."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_tenant: Dict[str, "collections.OrderedDict[str, Any]"] = {}

    def get(self, tenant: str, rid: str) -> Optional[List[Dict[str, Any]]]:
        with self.lock:
            d = self.by_tenant.get(tenant)
            msgs = d.get(rid) if d is not None else None
            if msgs is not None and d is not None:
                d.move_to_end(rid)
            return None if msgs is None else json.loads(json.dumps(msgs))

    def put(self, tenant: str, rid: str, msgs: List[Dict[str, Any]]
            ) -> None:
        with self.lock:
            d = self.by_tenant.setdefault(tenant,
                                          collections.OrderedDict())
            d[rid] = msgs
            while len(d) > KEPT_PER_TENANT:
                d.popitem(last=False)


def _output(text: str, done: Done) -> List[Dict[str, Any]]:
    items: List[Dict[str, Any]] = []
    content = text.strip() if done.calls else text
    if content or not done.calls:
        items.append({"type": "message", "id": "msg_" + secrets.token_hex(12),
                      "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": content,
                                   "annotations": [], "logprobs": []}]})
    for c in done.calls:
        items.append({"type": "function_call",
                      "id": "fc_" + secrets.token_hex(12),
                      "call_id": c.id, "name": c.name,
                      "arguments": c.arguments, "status": "completed"})
    return items


def _as_messages(output: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """A response's output items as the messages that follow its input."""
    text = "".join(p["text"] for it in output if it["type"] == "message"
                   for p in it["content"])
    calls = [{"id": it["call_id"], "type": "function",
              "function": {"name": it["name"],
                           "arguments": it["arguments"]}}
             for it in output if it["type"] == "function_call"]
    m: Dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        m["tool_calls"] = calls
    return [m]


def add_routes(app: FastAPI, srv: Server) -> None:
    kept = Kept()
    engine = srv.engine

    @app.post("/v1/responses")
    async def responses(request: Request) -> Any:
        tenant = srv.tenant(request)
        body = await _body(request)
        prev = body.get("previous_response_id")
        msgs: List[Dict[str, Any]] = []
        if prev is not None:
            got = kept.get(tenant, prev) if isinstance(prev, str) else None
            if got is None:
                raise ApiError(404, f"Previous response with id "
                               f"'{str(prev)[:64]}' not found.",
                               "previous_response_id", "not_found")
            msgs = got
        msgs += items_to_messages(body.get("input"))
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise ApiError(400, "instructions: a string", "instructions",
                           "invalid_type")
        tools, choice = _tools(body)
        store = body.get("store", True)
        if not isinstance(store, bool):
            raise ApiError(400, "store: true or false", "store",
                           "invalid_type")
        for name in ("top_logprobs", "max_tool_calls"):
            if body.get(name):
                raise ApiError(400, f"{name}: not supported by djinn "
                               "serve", name, "unsupported_parameter")
        chat: Dict[str, Any] = {
            "model": body.get("model"),
            "messages": ([{"role": "system", "content": instructions}]
                         if instructions else []) + msgs,
            "tools": tools, "tool_choice": choice,
            "temperature": body.get("temperature"),
            "top_p": body.get("top_p"),
            "max_completion_tokens": body.get("max_output_tokens"),
        }
        fmt = body.get("text", {}).get("format") \
            if isinstance(body.get("text"), dict) else None
        if fmt is not None:
            chat["response_format"] = fmt
        if not chat["messages"]:
            raise ApiError(400, "input: nothing to answer", "input",
                           "invalid_value")
        name, ck, _, prompt, p = await anyio.to_thread.run_sync(
            prepare_chat, srv, chat, request)
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise ApiError(400, "stream: true or false", "stream",
                           "invalid_type")
        ticket = engine.loads[name].ticket()
        gen = engine.generate(tenant, name, prompt, p, ticket=ticket)
        rid = "resp_" + secrets.token_hex(16)
        base = {
            "id": rid, "object": "response",
            "created_at": int(time.time()), "model": name,
            "instructions": instructions, "error": None,
            "metadata": body.get("metadata") or {},
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "temperature": p.temperature, "top_p": p.top_p,
            "tools": body.get("tools") or [],
            "tool_choice": body.get("tool_choice") or
            ("auto" if tools else "none"),
            "max_output_tokens": body.get("max_output_tokens"),
            "previous_response_id": prev, "store": store,
            "text": {"format": fmt or {"type": "text"}},
            "truncation": "disabled", "reasoning": None,
        }

        def finish(text: str, done: Done) -> Dict[str, Any]:
            output = _output(text, done)
            if store:
                kept.put(tenant, rid, msgs + _as_messages(output))
            r = dict(base, status="incomplete" if done.reason == "length"
                     else "completed", output=output,
                     completed_at=int(time.time()),
                     incomplete_details={"reason": "max_output_tokens"}
                     if done.reason == "length" else None,
                     usage={"input_tokens": len(prompt),
                            "output_tokens": done.tokens,
                            "total_tokens": len(prompt) + done.tokens,
                            "input_tokens_details": {
                                "cached_tokens": done.cached},
                            "output_tokens_details": {
                                "reasoning_tokens": 0}})
            return r

        if stream:
            return StreamingResponse(
                _events(gen, base, finish, ticket),
                media_type="text/event-stream",
                background=BackgroundTask(ticket.done))
        events = await _collect(gen, ticket)
        text = "".join(e.text for e in events if isinstance(e, Piece))
        done = next(e for e in events if isinstance(e, Done))
        return finish(text + done.rest, done)


def _events(gen: Iterator[Event], base: Dict[str, Any],
            finish: Any, ticket: Ticket) -> AsyncIterator[str]:
    """The Responses API's server-sent events: created, the message's
    text as it grows, the function calls once the reply is whole, then
    completed (or incomplete) with the whole response."""
    seq = [0]
    msg_id = "msg_" + secrets.token_hex(12)
    state: Dict[str, Any] = {"open": False, "text": ""}

    def ev(kind: str, **kw: Any) -> str:
        d = dict({"type": kind, "sequence_number": seq[0]}, **kw)
        seq[0] += 1
        return f"event: {kind}\ndata: {json.dumps(d, ensure_ascii=False)}" \
            "\n\n"

    def open_msg() -> List[str]:
        if state["open"]:
            return []
        state["open"] = True
        return [ev("response.output_item.added", output_index=0,
                   item={"type": "message", "id": msg_id,
                         "status": "in_progress", "role": "assistant",
                         "content": []}),
                ev("response.content_part.added", item_id=msg_id,
                   output_index=0, content_index=0,
                   part={"type": "output_text", "text": "",
                         "annotations": [], "logprobs": []})]

    def fmt(e: Event) -> List[str]:
        out: List[str] = []
        if isinstance(e, Piece):
            if e.text:
                out += open_msg()
                state["text"] += e.text
                out.append(ev("response.output_text.delta",
                              item_id=msg_id, output_index=0,
                              content_index=0, delta=e.text,
                              logprobs=[]))
            return out
        if e.rest:
            out += open_msg()
            state["text"] += e.rest
            out.append(ev("response.output_text.delta", item_id=msg_id,
                          output_index=0, content_index=0, delta=e.rest,
                          logprobs=[]))
        r = finish(state["text"], e)
        items = r["output"]
        k = 0
        if state["open"]:
            # the message is the text streamed, as its deltas said
            item = {"type": "message", "id": msg_id, "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text",
                                 "text": state["text"], "annotations": [],
                                 "logprobs": []}]}
            calls = [it for it in items if it["type"] == "function_call"]
            items = r["output"] = [item] + calls
            text = state["text"]
            out += [ev("response.output_text.done", item_id=msg_id,
                       output_index=0, content_index=0, text=text,
                       logprobs=[]),
                    ev("response.content_part.done", item_id=msg_id,
                       output_index=0, content_index=0,
                       part=item["content"][0]),
                    ev("response.output_item.done", output_index=0,
                       item=item)]
            k = 1
        elif items and items[0]["type"] == "message":
            out += [ev("response.output_item.added", output_index=0,
                       item=items[0]),
                    ev("response.output_item.done", output_index=0,
                       item=items[0])]
            k = 1
        for j, it in enumerate(items[k:], k):
            out += [ev("response.output_item.added", output_index=j,
                       item=dict(it, arguments="",
                                 status="in_progress")),
                    ev("response.function_call_arguments.delta",
                       item_id=it["id"], output_index=j,
                       delta=it["arguments"]),
                    ev("response.function_call_arguments.done",
                       item_id=it["id"], output_index=j,
                       arguments=it["arguments"]),
                    ev("response.output_item.done", output_index=j,
                       item=it)]
        out.append(ev("response.incomplete" if r["status"] == "incomplete"
                      else "response.completed", response=r))
        return out

    async def run() -> AsyncIterator[str]:
        started = dict(base, status="in_progress", output=[], usage=None)
        yield ev("response.created", response=started)
        yield ev("response.in_progress", response=started)
        def error(e: ApiError) -> str:
            return ev("error", code=e.code, message=e.message,
                      param=e.param)

        async for s in _stream(gen, fmt, lambda: [], ticket, done=False,
                               error=error):
            yield s

    return run()
