# SPDX-License-Identifier: MIT
"""A checkpoint's own text side: its tokenizer (tokenizer.json, through
Hugging Face's tokenizers), its chat template (tokenizer_config.json's
chat_template or chat_template.jinja, rendered with jinja2 the way
transformers' apply_chat_template renders it), its end-of-turn tokens,
and the tool calls its template's convention writes."""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from .errors import ApiError


class CheckpointError(Exception):
    """A checkpoint directory djinn serve cannot serve, and why."""


def _read_json(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            v = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: {e}") from None
    if not isinstance(v, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    return v


def _token_text(v: Any) -> Optional[str]:
    """A special token as tokenizer_config.json writes it: a string, or
    an AddedToken's dict."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def _ids(v: Any) -> List[int]:
    if isinstance(v, int):
        return [v]
    if isinstance(v, list):
        return [x for x in v if isinstance(x, int)]
    return []


def _template_env() -> Any:
    """jinja2 as transformers sets it up for chat templates: sandboxed,
    trim_blocks and lstrip_blocks, loop controls, tojson that keeps
    non-ASCII, raise_exception and strftime_now."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None,
               separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class Checkpoint:
    """The text side of the model in directory @path."""

    def __init__(self, path: str) -> None:
        from tokenizers import Tokenizer

        self.path = path
        tj = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(tj):
            raise CheckpointError(
                f"{path}: no tokenizer.json (djinn serve needs the "
                "checkpoint's fast tokenizer)")
        try:
            self.tokenizer = Tokenizer.from_file(tj)
        except Exception as e:  # tokenizers raises its own Exception
            raise CheckpointError(f"{tj}: {e}") from None
        self.config = _read_json(os.path.join(path, "config.json"))
        tc = _read_json(os.path.join(path, "tokenizer_config.json"))
        gen = _read_json(os.path.join(path, "generation_config.json"))
        self.special: Dict[str, str] = {}
        for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
            t = _token_text(tc.get(k))
            if t is not None:
                self.special[k] = t
        template = tc.get("chat_template")
        jinja_file = os.path.join(path, "chat_template.jinja")
        if os.path.isfile(jinja_file):
            with open(jinja_file, encoding="utf-8") as f:
                template = f.read()
        if isinstance(template, list):  # named templates: the default
            named = {t.get("name"): t.get("template") for t in template
                     if isinstance(t, dict)}
            template = named.get("default")
        self.template_text: Optional[str] = \
            template if isinstance(template, str) else None
        self._template: Any = None
        if self.template_text is not None:
            try:
                self._template = _template_env().from_string(
                    self.template_text)
            except Exception as e:
                raise CheckpointError(
                    f"{path}: its chat template does not compile: "
                    f"{e}") from None
        # the turn ends at any of these
        eos: Set[int] = set(_ids(gen.get("eos_token_id")))
        eos |= set(_ids(self.config.get("eos_token_id")))
        t = self.special.get("eos_token")
        tid = self.tokenizer.token_to_id(t) if t is not None else None
        if tid is not None:
            eos.add(tid)
        if not eos:
            raise CheckpointError(
                f"{path}: no end-of-sequence token (eos_token_id in "
                "generation_config.json or config.json, or eos_token in "
                "tokenizer_config.json)")
        self.eos = frozenset(eos)
        self.vocab = self.tokenizer.get_vocab_size(with_added_tokens=True)
        self.tool_open = "<tool_call>"
        self.tool_close = "</tool_call>"
        # special added tokens, which text leaves out, but the tool-call
        # markers where a checkpoint makes them special
        markers = {self.tokenizer.token_to_id(m)
                   for m in (self.tool_open, self.tool_close)}
        self.hidden = frozenset(
            i for i, t in self.tokenizer.get_added_tokens_decoder().items()
            if t.special and i not in markers)

    # -- tokens ----------------------------------------------------------

    def encode(self, text: str) -> List[int]:
        """@text's ids, added tokens split out, no BOS or EOS added (as
        apply_chat_template tokenizes what it rendered)."""
        return list(self.tokenizer.encode(
            text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int], tools: bool = False) -> str:
        """@ids' text, special tokens left out (with @tools, but the
        tool-call markers, which the parser reads)."""
        if not tools:
            return str(self.tokenizer.decode(list(ids),
                                             skip_special_tokens=True))
        return str(self.tokenizer.decode(
            [i for i in ids if i not in self.hidden],
            skip_special_tokens=False))

    def token_text(self, tid: int) -> str:
        """One token's text, as logprobs name it."""
        return str(self.tokenizer.decode([tid], skip_special_tokens=False))

    # -- chat ------------------------------------------------------------

    def render(self, messages: List[Dict[str, Any]],
               tools: Optional[List[Dict[str, Any]]] = None) -> str:
        """The conversation as the model reads it, ready for the
        assistant's turn (add_generation_prompt)."""
        if self._template is None:
            raise ApiError(
                400, "this model has no chat template (chat_template in "
                "its tokenizer_config.json): use /v1/completions",
                "messages")
        import jinja2

        try:
            return str(self._template.render(
                messages=messages, tools=tools or None,
                add_generation_prompt=True, **self.special))
        except jinja2.exceptions.TemplateError as e:
            raise ApiError(400, f"the model's chat template refused the "
                           f"messages: {e}", "messages") from None


class Detokenizer:
    """Text of the tokens so far, given out as it grows: a token that
    ends inside a UTF-8 sequence waits for the rest (vLLM's and
    transformers' streamers do the same)."""

    def __init__(self, ck: Checkpoint, tools: bool = False) -> None:
        self.ck = ck
        self.tools = tools
        self.ids: List[int] = []
        self._prefix = 0  # ids[_prefix:_read] are decoded already
        self._read = 0

    def add(self, tid: int) -> str:
        self.ids.append(tid)
        return self._take(False)

    def flush(self) -> str:
        """What waited, at the end."""
        return self._take(True)

    def _take(self, final: bool) -> str:
        """The text the ids since the last delta add, unless (not
        @final) it is none yet or ends inside a UTF-8 sequence."""
        before = self.ck.decode(self.ids[self._prefix:self._read],
                                self.tools)
        after = self.ck.decode(self.ids[self._prefix:], self.tools)
        if not final and (len(after) <= len(before) or
                          after.endswith("\ufffd")):
            return ""
        self._prefix = self._read if not final else len(self.ids)
        self._read = len(self.ids)
        return after[len(before):]


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the API gives it

    def api(self, index: Optional[int] = None) -> Dict[str, Any]:
        d: Dict[str, Any] = {"id": self.id, "type": "function",
                             "function": {"name": self.name,
                                          "arguments": self.arguments}}
        if index is not None:
            d["index"] = index
        return d


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def parse_tool_calls(text: str, names: Optional[Set[str]] = None
                     ) -> Tuple[Optional[str], List[ToolCall]]:
    """Split a reply written in Hermes' convention into its content (the
    text before the first <tool_call>, None if blank) and its calls, one
    per <tool_call>{"name": ..., "arguments": {...}}</tool_call> block.
    A block that is not such JSON, or names no tool of @names, makes the
    whole reply plain content (no calls), as it came."""
    start = text.find("<tool_call>")
    if start < 0:
        return text, []
    calls: List[ToolCall] = []
    end = start
    for m in _CALL.finditer(text, start):
        if text[end:m.start()].strip():
            return text, []  # text between calls: not a call list
        try:
            obj = json.loads(m.group(1))
        except ValueError:
            return text, []
        if not isinstance(obj, dict) or not isinstance(obj.get("name"),
                                                        str):
            return text, []
        args = obj.get("arguments", obj.get("parameters", {}))
        if names is not None and obj["name"] not in names:
            return text, []
        if isinstance(args, str):
            try:
                json.loads(args)
            except ValueError:
                return text, []
        else:
            args = json.dumps(args, ensure_ascii=False)
        calls.append(ToolCall(new_call_id(), obj["name"], args))
        end = m.end()
    if not calls or text[end:].strip():
        return text, []
    content = text[:start].strip()
    return (content or None), calls
