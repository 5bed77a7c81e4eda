#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write a small GPT-2- or Llama-shaped model with seeded random weights.

    scripts/mkmodel.py [options] DIR

DIR gets a Hugging Face layout: config.json and model.safetensors, or
with --shards N, model-0000K-of-0000N.safetensors and
model.safetensors.index.json. The same options and seed give the same
bytes. Python's standard library only.

Weights are uniform with the variance of 1/fan_in (embeddings: 0.03), norm
gains near 1 and biases near 0, so the logits spread over a few units and
greedy decoding is not decided by rounding.
"""
import argparse
import array
import json
import math
import os
import random
import struct
import sys


def to_bytes(values, dtype):
    a = array.array('f', values)
    if sys.byteorder != 'little':
        a.byteswap()
    if dtype == 'F32':
        return a.tobytes()
    if dtype == 'F16':
        return struct.pack('<%de' % len(values), *values)
    # BF16: round to nearest even from the f32 bits
    u = array.array('I')
    u.frombytes(a.tobytes())
    out = array.array('H', bytes(2 * len(u)))
    for i, x in enumerate(u):
        if (x & 0x7f800000) == 0x7f800000 and x & 0x7fffff:
            out[i] = (x >> 16) | 0x40  # NaN stays NaN
        else:
            out[i] = ((x + 0x7fff + ((x >> 16) & 1)) >> 16) & 0xffff
    return out.tobytes()


def gpt2_tensors(a):
    C, V, P, L = a.embd, a.vocab, a.ctx, a.layers
    F = a.inner or 4 * C
    pfx = a.prefix
    t = [(pfx + 'wte.weight', (V, C), 'emb'),
         (pfx + 'wpe.weight', (P, C), 'emb')]
    for l in range(L):
        h = '%sh.%d.' % (pfx, l)
        t += [(h + 'ln_1.weight', (C,), 'gain'), (h + 'ln_1.bias', (C,), 'bias'),
              (h + 'attn.c_attn.weight', (C, 3 * C), 'in0'),
              (h + 'attn.c_attn.bias', (3 * C,), 'bias'),
              (h + 'attn.c_proj.weight', (C, C), 'in0'),
              (h + 'attn.c_proj.bias', (C,), 'bias'),
              (h + 'ln_2.weight', (C,), 'gain'), (h + 'ln_2.bias', (C,), 'bias'),
              (h + 'mlp.c_fc.weight', (C, F), 'in0'),
              (h + 'mlp.c_fc.bias', (F,), 'bias'),
              (h + 'mlp.c_proj.weight', (F, C), 'in0'),
              (h + 'mlp.c_proj.bias', (C,), 'bias')]
    t += [(pfx + 'ln_f.weight', (C,), 'gain'), (pfx + 'ln_f.bias', (C,), 'bias')]
    if a.untied:
        t.append(('lm_head.weight', (V, C), 'in1'))
    cfg = {'model_type': 'gpt2', 'architectures': ['GPT2LMHeadModel'],
           'n_embd': C, 'n_head': a.heads, 'n_layer': L, 'n_positions': P,
           'n_ctx': P, 'vocab_size': V, 'layer_norm_epsilon': 1e-5,
           'activation_function': 'gelu_new', 'n_inner': a.inner or None,
           'tie_word_embeddings': not a.untied}
    return t, cfg


def llama_tensors(a):
    C, V, L = a.embd, a.vocab, a.layers
    F = a.inner or 3 * C
    H = a.heads
    KV = a.kv_heads or H
    D = C // H
    t = [('model.embed_tokens.weight', (V, C), 'emb')]
    for l in range(L):
        h = 'model.layers.%d.' % l
        t += [(h + 'input_layernorm.weight', (C,), 'gain'),
              (h + 'self_attn.q_proj.weight', (H * D, C), 'in1'),
              (h + 'self_attn.k_proj.weight', (KV * D, C), 'in1'),
              (h + 'self_attn.v_proj.weight', (KV * D, C), 'in1'),
              (h + 'self_attn.o_proj.weight', (C, H * D), 'in1'),
              (h + 'post_attention_layernorm.weight', (C,), 'gain'),
              (h + 'mlp.gate_proj.weight', (F, C), 'in1'),
              (h + 'mlp.up_proj.weight', (F, C), 'in1'),
              (h + 'mlp.down_proj.weight', (C, F), 'in1')]
    t.append(('model.norm.weight', (C,), 'gain'))
    if not a.tied:
        t.append(('lm_head.weight', (V, C), 'in1'))
    cfg = {'model_type': 'llama', 'architectures': ['LlamaForCausalLM'],
           'hidden_size': C, 'intermediate_size': F,
           'num_attention_heads': H, 'num_key_value_heads': KV,
           'num_hidden_layers': L, 'max_position_embeddings': a.ctx,
           'vocab_size': V, 'rms_norm_eps': 1e-5, 'rope_theta': 10000.0,
           'hidden_act': 'silu', 'tie_word_embeddings': a.tied,
           'rope_scaling': None, 'attention_bias': False}
    return t, cfg


def values(rng, shape, kind):
    n = 1
    for d in shape:
        n *= d
    if kind == 'gain':
        return [1.0 + rng.uniform(-0.2, 0.2) for _ in range(n)]
    if kind == 'bias':
        return [rng.uniform(-0.1, 0.1) for _ in range(n)]
    # embeddings small beside what the layers add, so the next token is
    # not simply the last one again (a tied head favours it)
    s = {'emb': 0.3, 'in0': math.sqrt(3.0 / shape[0]),
         'in1': math.sqrt(3.0 / shape[-1])}[kind]
    u = rng.random
    return [(2.0 * u() - 1.0) * s for _ in range(n)]


def write_safetensors(path, items, dtype):
    header, blobs, at = {'__metadata__': {'format': 'pt'}}, [], 0
    for name, shape, data in items:
        header[name] = {'dtype': dtype, 'shape': list(shape),
                        'data_offsets': [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    h = json.dumps(header, separators=(',', ':')).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    return at


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('dir')
    p.add_argument('--arch', choices=['gpt2', 'llama'], default='gpt2')
    p.add_argument('--dtype', choices=['f32', 'f16', 'bf16'], default='f32')
    p.add_argument('--seed', type=int, default=1)
    p.add_argument('--layers', type=int, default=2)
    p.add_argument('--embd', type=int, default=64)
    p.add_argument('--heads', type=int, default=4)
    p.add_argument('--kv-heads', type=int, default=0,
                   help='llama: key/value heads (default: --heads)')
    p.add_argument('--inner', type=int, default=0,
                   help='MLP width (default: 4 embd, llama 3 embd)')
    p.add_argument('--vocab', type=int, default=256)
    p.add_argument('--ctx', type=int, default=128)
    p.add_argument('--shards', type=int, default=1)
    p.add_argument('--untied', action='store_true',
                   help='gpt2: an lm_head.weight of its own')
    p.add_argument('--tied', action='store_true',
                   help='llama: tie the LM head to the embedding')
    p.add_argument('--prefix', default='',
                   help='gpt2: name prefix of the body, e.g. transformer.')
    a = p.parse_args()
    if a.embd % a.heads:
        p.error('--embd must be a multiple of --heads')

    tensors, cfg = (gpt2_tensors if a.arch == 'gpt2' else llama_tensors)(a)
    dtype = a.dtype.upper()
    cfg['torch_dtype'] = {'F32': 'float32', 'F16': 'float16',
                          'BF16': 'bfloat16'}[dtype]
    rng = random.Random(a.seed)
    items = [(n, s, to_bytes(values(rng, s, k), dtype)) for n, s, k in tensors]

    os.makedirs(a.dir, exist_ok=True)
    with open(os.path.join(a.dir, 'config.json'), 'w') as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write('\n')
    if a.shards <= 1:
        write_safetensors(os.path.join(a.dir, 'model.safetensors'), items,
                          dtype)
        return
    per = -(-len(items) // a.shards)
    wmap, total = {}, 0
    for k in range(a.shards):
        part = items[k * per:(k + 1) * per]
        name = 'model-%05d-of-%05d.safetensors' % (k + 1, a.shards)
        total += write_safetensors(os.path.join(a.dir, name), part, dtype)
        for n, _, _ in part:
            wmap[n] = name
    with open(os.path.join(a.dir, 'model.safetensors.index.json'), 'w') as f:
        json.dump({'metadata': {'total_size': total}, 'weight_map': wmap}, f,
                  indent=2, sort_keys=True)
        f.write('\n')


if __name__ == '__main__':
    main()
