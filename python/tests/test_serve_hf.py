# SPDX-License-Identifier: MIT
"""djinn serve's text side beside transformers' on the checkpoint
scripts/mkmodel.py --chat wrote: the chat template renders the same text
as apply_chat_template (tools and tool calls included), the tokenizer
gives the same ids, and greedy decoding of the rendered prompt gives the
tokens transformers' generate gives. Skipped, naming the package, where
transformers (and, for generate, torch) is not there: make
test-python-hf runs it."""

from __future__ import annotations

import pathlib
from typing import Any, List

import pytest

for _mod in ("jinja2", "tokenizers", "transformers"):
    try:
        __import__(_mod)
    except ImportError:
        pytest.skip(f"needs the {_mod} package (make test-python-hf)",
                    allow_module_level=True)

from conftest import Daemon, ints  # noqa: E402
from djinn.serve.checkpoint import Checkpoint  # noqa: E402

MODEL = "chat-qwen"

CONVERSATIONS: List[Any] = [
    ([{"role": "user", "content": "Hi there"}], None),
    ([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "What is the weather in Paris? ☀"}],
     None),
    ([{"role": "system", "content": "Use tools."},
      {"role": "user", "content": "Weather in Paris and the time?"},
      {"role": "assistant", "content": None, "tool_calls": [
          {"id": "call_1", "type": "function", "function": {
              "name": "get_weather", "arguments": {"city": "Paris"}}},
          {"id": "call_2", "type": "function", "function": {
              "name": "get_time", "arguments": {}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
      {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
      {"role": "assistant", "content": "Sunny, at noon."},
      {"role": "user", "content": "Thanks"}],
     [{"type": "function", "function": {
         "name": "get_weather", "description": "The weather in a city.",
         "parameters": {"type": "object", "properties": {
             "city": {"type": "string"}}}}},
      {"type": "function", "function": {
          "name": "get_time", "description": "The time.",
          "parameters": {"type": "object", "properties": {}}}}]),
]


@pytest.fixture(scope="module")
def path(daemon: Daemon) -> pathlib.Path:
    return daemon.models / MODEL


@pytest.mark.parametrize("k", range(len(CONVERSATIONS)))
def test_template_and_tokens_as_transformers(path: pathlib.Path,
                                             k: int) -> None:
    from transformers import AutoTokenizer

    msgs, tools = CONVERSATIONS[k]
    tok = AutoTokenizer.from_pretrained(str(path))
    ck = Checkpoint(str(path))
    want = tok.apply_chat_template(msgs, tools=tools, tokenize=False,
                                   add_generation_prompt=True)
    assert ck.render(msgs, tools) == want
    assert ck.encode(want) == tok(want, add_special_tokens=False)[
        "input_ids"]
    ids = ck.encode(want)
    assert ck.decode(ids) == tok.decode(ids, skip_special_tokens=True)


def test_greedy_as_transformers(path: pathlib.Path, daemon: Daemon) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    ck = Checkpoint(str(path))
    msgs, tools = CONVERSATIONS[1]
    ids = ck.encode(ck.render(msgs, tools))
    m = AutoModelForCausalLM.from_pretrained(str(path),
                                             dtype=torch.float32)
    out = m.generate(torch.tensor([ids]), max_new_tokens=16,
                     do_sample=False, eos_token_id=None,
                     pad_token_id=0)[0, len(ids):].tolist()
    got = ints(daemon.tool("generate", "-m", MODEL, "-t",
                           ",".join(map(str, ids)), "-n", "16"))
    assert got == out
