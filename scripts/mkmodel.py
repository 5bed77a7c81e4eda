#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write a small GPT-2 or Llama-family model with seeded random weights.

    scripts/mkmodel.py [options] DIR

DIR gets a Hugging Face layout: config.json and model.safetensors, or
with --shards N, model-0000K-of-0000N.safetensors and
model.safetensors.index.json; with --chat, a tokenizer and chat template
(scripts/mktokenizer.py). Tensor names and shapes are those
transformers writes; config.json has the keys transformers 5.24's
save_pretrained writes (--config-form 5: nested rope_parameters, dtype)
or transformers 4's (--config-form 4: top-level rope_theta and
rope_scaling, and torch_dtype as 4.x wrote it before 4.57, which writes
dtype). The same options and seed give the same
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mktokenizer  # noqa: E402


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


LLAMA_FAMILY = ('llama', 'qwen2', 'qwen3', 'mistral')
CLASSES = {'llama': 'LlamaForCausalLM', 'qwen2': 'Qwen2ForCausalLM',
           'qwen3': 'Qwen3ForCausalLM', 'mistral': 'MistralForCausalLM'}


def rope_settings(a):
    """The RoPE type's own keys, as transformers writes them."""
    r = {}
    if a.rope != 'default':
        r['factor'] = a.rope_factor
    if a.rope == 'llama3':
        r['low_freq_factor'] = a.low_freq_factor
        r['high_freq_factor'] = a.high_freq_factor
    if a.rope in ('llama3', 'yarn'):
        # transformers 5 writes max_position_embeddings when none was
        # given (standardize_rope_params); 0 leaves the key out
        omp = a.ctx if a.original_max_pos is None else a.original_max_pos
        if omp:
            r['original_max_position_embeddings'] = omp
    if a.rope == 'yarn':
        for k in ('beta_fast', 'beta_slow', 'attention_factor'):
            if getattr(a, k) is not None:
                r[k] = getattr(a, k)
    return r


def rope_config(a, cfg):
    """Form 5: nested rope_parameters. Form 4: top-level rope_theta and
    rope_scaling (null, or the dict with rope_type or the legacy type)."""
    r = rope_settings(a)
    if a.config_form == 5:
        r['rope_theta'] = a.rope_theta
        r['rope_type'] = a.rope
        cfg['rope_parameters'] = r
        return
    cfg['rope_theta'] = a.rope_theta
    if a.rope != 'default':
        r['type' if a.rope_legacy_type else 'rope_type'] = a.rope
        cfg['rope_scaling'] = r
    elif a.arch != 'mistral':  # 4.57's MistralConfig has no rope_scaling
        cfg['rope_scaling'] = None


def llama_tensors(a):
    """Llama, Qwen2, Qwen3 and Mistral: transformers' names, Linear
    weights (out, in), biases and q/k norms as the architecture has them."""
    C, V, L = a.embd, a.vocab, a.layers
    F = a.inner or 3 * C
    H = a.heads
    KV = a.kv_heads or H
    D = a.head_dim or C // H
    arch = a.arch
    qkv_bias = arch == 'qwen2' or (a.attention_bias and arch != 'mistral')
    o_bias = a.attention_bias and arch in ('llama', 'qwen3')
    mlp_bias = a.mlp_bias and arch == 'llama'
    t = [('model.embed_tokens.weight', (V, C), 'emb')]
    for l in range(L):
        h = 'model.layers.%d.' % l
        s = h + 'self_attn.'
        t.append((h + 'input_layernorm.weight', (C,), 'gain'))
        for p, rows in (('q', H * D), ('k', KV * D), ('v', KV * D)):
            t.append((s + p + '_proj.weight', (rows, C), 'in1'))
            if qkv_bias:
                t.append((s + p + '_proj.bias', (rows,), 'bias'))
        if arch == 'qwen3':
            t += [(s + 'q_norm.weight', (D,), 'gain'),
                  (s + 'k_norm.weight', (D,), 'gain')]
        t.append((s + 'o_proj.weight', (C, H * D), 'in1'))
        if o_bias:
            t.append((s + 'o_proj.bias', (C,), 'bias'))
        t.append((h + 'post_attention_layernorm.weight', (C,), 'gain'))
        for p, shape in (('gate', (F, C)), ('up', (F, C)), ('down', (C, F))):
            t.append((h + 'mlp.' + p + '_proj.weight', shape, 'in1'))
            if mlp_bias:
                t.append((h + 'mlp.' + p + '_proj.bias', (shape[0],),
                          'bias'))
    t.append(('model.norm.weight', (C,), 'gain'))
    if not a.tied:
        t.append(('lm_head.weight', (V, C), 'in1'))

    # the keys transformers' save_pretrained writes for each (5.24; 4.57
    # in form 4, but with the torch_dtype older 4.x wrote)
    cfg = {'model_type': arch, 'architectures': [CLASSES[arch]],
           'hidden_size': C, 'intermediate_size': F,
           'num_attention_heads': H, 'num_key_value_heads': KV,
           'num_hidden_layers': L, 'max_position_embeddings': a.ctx,
           'vocab_size': V, 'rms_norm_eps': 1e-5, 'hidden_act': 'silu',
           'tie_word_embeddings': a.tied, 'attention_dropout': 0.0,
           'initializer_range': 0.02, 'use_cache': True}
    if a.config_form == 5:
        cfg['pad_token_id'] = None
    if arch in ('llama', 'mistral'):
        cfg['bos_token_id'] = 1
        cfg['eos_token_id'] = 2
    elif a.config_form == 5:
        cfg['bos_token_id'] = None
        cfg['eos_token_id'] = None
    if arch == 'llama':
        cfg.update(attention_bias=a.attention_bias, mlp_bias=a.mlp_bias,
                   pretraining_tp=1, head_dim=D)
    if arch == 'qwen3':
        cfg.update(attention_bias=a.attention_bias, head_dim=D)
    if arch == 'mistral':
        # 4.57 wrote the head_dim it was given: null by default
        cfg['head_dim'] = D if a.config_form == 5 or a.head_dim else None
        cfg['sliding_window'] = a.sliding_window or None
    if arch in ('qwen2', 'qwen3'):
        if arch == 'qwen2' and a.head_dim:
            cfg['head_dim'] = D
        sw = a.sliding_window
        cfg.update(use_sliding_window=bool(sw), sliding_window=sw or None,
                   max_window_layers=a.max_window_layers,
                   layer_types=['sliding_attention'
                                if sw and l >= a.max_window_layers else
                                'full_attention' for l in range(L)])
    rope_config(a, cfg)
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
    p.add_argument('--arch', choices=['gpt2'] + list(LLAMA_FAMILY),
                   default='gpt2')
    p.add_argument('--dtype', choices=['f32', 'f16', 'bf16'], default='f32')
    p.add_argument('--config-form', type=int, choices=[4, 5], default=5,
                   help="config.json as transformers 5 writes it (nested "
                   "rope_parameters, dtype) or 4 (rope_theta and "
                   "rope_scaling, torch_dtype)")
    p.add_argument('--seed', type=int, default=1)
    p.add_argument('--layers', type=int, default=2)
    p.add_argument('--embd', type=int, default=64)
    p.add_argument('--heads', type=int, default=4)
    p.add_argument('--kv-heads', type=int, default=0,
                   help='llama family: key/value heads (default: --heads)')
    p.add_argument('--head-dim', type=int, default=0,
                   help='llama family: an explicit head_dim (default: '
                   'embd / heads)')
    p.add_argument('--inner', type=int, default=0,
                   help='MLP width (default: 4 embd, llama family 3 embd)')
    p.add_argument('--vocab', type=int, default=256)
    p.add_argument('--ctx', type=int, default=128,
                   help='n_positions / max_position_embeddings')
    p.add_argument('--shards', type=int, default=1)
    p.add_argument('--untied', action='store_true',
                   help='gpt2: an lm_head.weight of its own')
    p.add_argument('--tied', action='store_true',
                   help='llama family: tie the LM head to the embedding')
    p.add_argument('--prefix', default='',
                   help='gpt2: name prefix of the body, e.g. transformer.')
    p.add_argument('--attention-bias', action='store_true',
                   help='llama: q, k, v and o biases; qwen3 likewise '
                   '(qwen2 always has q, k and v biases)')
    p.add_argument('--mlp-bias', action='store_true',
                   help='llama: gate, up and down biases')
    p.add_argument('--sliding-window', type=int, default=None,
                   help='mistral: sliding_window (default 4096, 0: null); '
                   'qwen2/3: use_sliding_window with this window')
    p.add_argument('--max-window-layers', type=int, default=28,
                   help='qwen2/3: layers from this one on slide (28)')
    p.add_argument('--rope', default='default',
                   choices=['default', 'linear', 'dynamic', 'llama3', 'yarn'])
    p.add_argument('--rope-theta', type=float, default=10000.0)
    p.add_argument('--rope-legacy-type', action='store_true',
                   help="form 4: rope_scaling's 'type' for 'rope_type'")
    p.add_argument('--rope-factor', type=float, default=2.0)
    p.add_argument('--low-freq-factor', type=float, default=1.0)
    p.add_argument('--high-freq-factor', type=float, default=4.0)
    p.add_argument('--original-max-pos', type=int, default=None,
                   help='llama3, yarn: original_max_position_embeddings '
                   '(default: --ctx; 0: leave the key out)')
    p.add_argument('--beta-fast', type=float, default=None)
    p.add_argument('--beta-slow', type=float, default=None)
    p.add_argument('--attention-factor', type=float, default=None)
    p.add_argument('--chat', action='store_true',
                   help='a chat tokenizer and template too '
                   '(scripts/mktokenizer.py, over the whole vocabulary)')
    a = p.parse_args()
    if a.embd % a.heads:
        p.error('--embd must be a multiple of --heads')
    if a.kv_heads and a.heads % a.kv_heads:
        p.error('--heads must be a multiple of --kv-heads')
    if a.arch == 'gpt2' and (a.rope != 'default' or a.head_dim or
                             a.attention_bias or a.mlp_bias or
                             a.sliding_window is not None):
        p.error('gpt2 has no RoPE, head_dim, extra biases or window')
    if a.mlp_bias and a.arch != 'llama':
        p.error('--mlp-bias is llama\'s')
    if a.attention_bias and a.arch not in ('llama', 'qwen3'):
        p.error('--attention-bias is llama\'s and qwen3\'s (qwen2 has '
                'q, k and v biases always)')
    if a.sliding_window is not None and a.arch == 'llama':
        p.error('llama has no sliding window')
    if a.rope_legacy_type and a.config_form != 4:
        p.error('--rope-legacy-type is a form 4 spelling')
    if a.arch == 'mistral' and a.sliding_window is None:
        a.sliding_window = 4096  # MistralConfig's default

    tensors, cfg = (gpt2_tensors if a.arch == 'gpt2' else llama_tensors)(a)
    dtype = a.dtype.upper()
    cfg['dtype' if a.config_form == 5 else 'torch_dtype'] = {
        'F32': 'float32', 'F16': 'float16', 'BF16': 'bfloat16'}[dtype]
    rng = random.Random(a.seed)
    items = [(n, s, to_bytes(values(rng, s, k), dtype)) for n, s, k in tensors]

    os.makedirs(a.dir, exist_ok=True)
    if a.chat:
        ids = mktokenizer.write(a.dir, a.vocab, a.ctx)
        cfg['bos_token_id'] = ids['<|endoftext|>']
        cfg['eos_token_id'] = ids['<|im_end|>']
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
