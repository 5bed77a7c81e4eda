#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write a chat tokenizer for a small model: a byte-level BPE in
tokenizer.json, tokenizer_config.json with a ChatML chat template that
renders tools and tool calls in Hermes' convention
(<tool_call>{json}</tool_call>), and generation_config.json.

    scripts/mktokenizer.py --vocab N DIR

N is the model's vocabulary: 256 byte tokens, N - 261 merges learnt from
a fixed English text, then five added tokens: <|endoftext|>,
<|im_start|>, <|im_end|> (the end of a turn: the model's EOS),
<tool_call> and </tool_call> (added, not special, so decoding keeps
them). The same N gives the same bytes. Hugging Face's tokenizers and
transformers (PreTrainedTokenizerFast) load it. scripts/mkmodel.py
--chat calls it. Python's standard library only.
"""
import argparse
import collections
import json
import os
import re

SPECIALS = [('<|endoftext|>', True), ('<|im_start|>', True),
            ('<|im_end|>', True), ('<tool_call>', False),
            ('</tool_call>', False)]

# the text the merges are learnt from: words a chat with tools uses
TEXT = """
The weather in Paris is sunny today, and the weather in London is rain.
You are a helpful assistant. The user asks a question and the assistant
answers it. What is the weather like in the city where the user is?
Call the function get_weather with the name of the city as its argument.
The function returns the temperature and the conditions of the day.
{"name": "get_weather", "arguments": {"city": "Paris"}}
{"name": "search", "arguments": {"query": "the best restaurants"}}
system user assistant tool function arguments name content role
There is a tool for the time, a tool for the weather and a tool for the
news. The assistant calls them one at a time, then answers the user with
what they returned. It is the third time this week that the user has
asked the assistant about the weather in the north of the country.
"""


def bytes_to_unicode():
    """Byte-level BPE's alphabet: each byte as a printable character
    (printable Latin-1 bytes as themselves, the rest from U+0100 on)."""
    keep = (list(range(ord('!'), ord('~') + 1)) +
            list(range(ord('\xa1'), ord('\xac') + 1)) +
            list(range(ord('\xae'), ord('\xff') + 1)))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


# GPT-2's pre-tokenizer, in the standard library's regex dialect
SPLIT = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+|"
                   r" ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def learn_merges(n):
    """@n merges, the most frequent pair each time (ties: the smaller)."""
    alpha = bytes_to_unicode()
    words = collections.Counter(
        tuple(alpha[b] for b in w.encode()) for w in SPLIT.findall(TEXT))
    merges = []
    while len(merges) < n:
        pairs = collections.Counter()
        for w, c in words.items():
            for i in range(len(w) - 1):
                pairs[w[i], w[i + 1]] += c
        if not pairs:
            raise SystemExit('mktokenizer: the text gives only %d merges, '
                             'not %d' % (len(merges), n))
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        out = collections.Counter()
        for w, c in words.items():
            i, nw = 0, []
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    nw.append(w[i] + w[i + 1])
                    i += 2
                else:
                    nw.append(w[i])
                    i += 1
            out[tuple(nw)] += c
        words = out
    return merges


# ChatML, with tools rendered into the system turn and tool results in a
# user turn, as Hermes-style templates do
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0].role == 'system' %}"
    "{{- messages[0].content + '\\n\\n' }}"
    "{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with "
    "the user query.\\n\\nYou are provided with function signatures within "
    "<tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}"
    "{{- '\\n' }}{{- tool | tojson }}"
    "{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object "
    "with function name and arguments within <tool_call></tool_call> XML "
    "tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages and messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}"
    "{%- if not loop.first %}"
    "{{- raise_exception('the system message comes first') }}"
    "{%- endif %}"
    "{%- elif message.role == 'user' or (message.role == 'assistant' and "
    "not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + "
    "'<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for call in message.tool_calls %}"
    "{%- if call.function is defined %}{%- set call = call.function %}"
    "{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + call.name + '\", "
    "\"arguments\": ' }}"
    "{%- if call.arguments is string %}{{- call.arguments }}"
    "{%- else %}{{- call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}"
    "{{- '<|im_start|>user' }}"
    "{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + "
    "'\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- else %}"
    "{{- raise_exception('no role ' + message.role) }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}")


def write(d, vocab, ctx):
    """Write the three files into @d for a model of @vocab tokens and
    @ctx positions; returns the ids of the added tokens by content."""
    n = vocab - 256 - len(SPECIALS)
    if n < 0:
        raise SystemExit('mktokenizer: a vocabulary of %d is too small: '
                         '256 bytes and %d added tokens'
                         % (vocab, len(SPECIALS)))
    alpha = bytes_to_unicode()
    ids = {alpha[b]: b for b in range(256)}
    merges = learn_merges(n)
    for a, b in merges:
        ids[a + b] = len(ids)
    added, ids_of = [], {}
    for i, (content, special) in enumerate(SPECIALS):
        tid = 256 + n + i
        ids_of[content] = tid
        added.append({'id': tid, 'content': content, 'single_word': False,
                      'lstrip': False, 'rstrip': False,
                      'normalized': False, 'special': special})
    byte_level = {'type': 'ByteLevel', 'add_prefix_space': False,
                  'trim_offsets': True, 'use_regex': True}
    tok = {
        'version': '1.0', 'truncation': None, 'padding': None,
        'added_tokens': added, 'normalizer': None,
        'pre_tokenizer': byte_level,
        'post_processor': dict(byte_level, trim_offsets=False),
        'decoder': byte_level,
        'model': {'type': 'BPE', 'dropout': None, 'unk_token': None,
                  'continuing_subword_prefix': '', 'end_of_word_suffix': '',
                  'fuse_unk': False, 'byte_fallback': False,
                  'ignore_merges': False, 'vocab': ids,
                  'merges': ['%s %s' % m for m in merges]},
    }
    cfg = {
        'tokenizer_class': 'PreTrainedTokenizerFast',
        'bos_token': None, 'eos_token': '<|im_end|>',
        'pad_token': '<|endoftext|>', 'unk_token': None,
        'model_max_length': ctx, 'clean_up_tokenization_spaces': False,
        'added_tokens_decoder': {str(a['id']): {
            k: v for k, v in a.items() if k != 'id'} for a in added},
        'chat_template': CHAT_TEMPLATE,
    }
    gen = {'eos_token_id': [ids_of['<|im_end|>'], ids_of['<|endoftext|>']],
           'pad_token_id': ids_of['<|endoftext|>']}
    os.makedirs(d, exist_ok=True)
    for name, obj in (('tokenizer.json', tok),
                      ('tokenizer_config.json', cfg),
                      ('generation_config.json', gen)):
        with open(os.path.join(d, name), 'w') as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.write('\n')
    return ids_of


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('dir')
    p.add_argument('--vocab', type=int, required=True)
    p.add_argument('--ctx', type=int, default=1024)
    a = p.parse_args()
    write(a.dir, a.vocab, a.ctx)


if __name__ == '__main__':
    main()
