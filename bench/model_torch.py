#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch eager GPT-2 and Llama-family models over a Hugging Face model
directory: the reference bench/model-bench measures djinnd's CPU backend
against.

    model_torch.py --model DIR --tokens 1,2,3 [--decode N] [--rounds R]
                   [--threads N] [--device cpu|cuda] [--logits-out FILE]
                   [--arch gpt2|llama|qwen2|qwen3|mistral]
    model_torch.py --model DIR --tokens-file FILE ...

--tokens-file runs a batch: one sequence per line of FILE (token ids,
comma-separated, every line as long), prefilled as one (B, T) batch and
decoded together, a (B, 1) step per token over a batched KV cache; its
decode tokens/s count every sequence's tokens, and "tokens" is a list
per sequence (model-bench --sessions' baseline).

Reads config.json and model.safetensors (f32, plain torch; no
transformers) and builds the model its "model_type" names (--arch, if
given, must be it) from torch.nn modules:

- gpt2: Conv1D weights used as stored, (in, out), as Hugging Face's
  Conv1D does with addmm; LayerNorm; tanh GELU.
- llama, qwen2, qwen3, mistral: RMSNorm (nn.RMSNorm); q, k and v
  projections in one Linear and gate and up in another (their weights
  concatenated once at load), with the biases the checkpoint has (qwen2's
  q, k and v); qwen3's q and k RMSNorm per head; RoPE by rotate-half,
  inverse frequencies 1 / theta^(2i / D) computed in float32 as
  transformers computes them, cos and sin tabled once for every position;
  grouped-query attention through SDPA's enable_gqa; SwiGLU MLP; the head
  tied to the embedding or lm_head.weight. Default RoPE only, and no
  sliding window shorter than the positions.

Both attend by F.scaled_dot_product_attention (what Hugging Face uses by
default) over a KV cache of past keys and values, and compute the head on
the last row only. Each round: prefill the tokens from an empty cache,
then decode N tokens greedily, one at a time over the cache. The first
round warms up and is not counted.

Prints one JSON object: the torch version, threads, load seconds, the
median prefill and decode tokens/s, the greedy tokens, and per greedy
token the gap between the largest and the second largest logit (so a
caller can tell a near-tie from a real difference). --logits-out writes
the prefill's last-row logits as little-endian f32. --device cuda runs
it on the GPU (the weights moved there after loading; each timing waits
for the device).
"""
import argparse
import json
import mmap
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def load_safetensors(path):
    """name -> f32 tensor, from the file's bytes (copied out of the map)."""
    out = {}
    with open(path, 'rb') as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        n = struct.unpack('<Q', m[:8])[0]
        hdr = json.loads(m[8:8 + n])
        base = 8 + n
        for name, t in hdr.items():
            if name == '__metadata__':
                continue
            if t['dtype'] != 'F32':
                sys.exit('model_torch.py: %s is %s, only F32 is run'
                         % (name, t['dtype']))
            b, e = t['data_offsets']
            buf = bytearray(m[base + b:base + e])
            out[name] = torch.frombuffer(buf, dtype=torch.float32).reshape(
                t['shape'])
        m.close()
    return out


class Conv1D(nn.Module):
    """y = x W + b with W stored (in, out), as GPT-2's checkpoints keep it."""

    def __init__(self, w, b):
        super().__init__()
        self.weight = nn.Parameter(w, requires_grad=False)
        self.bias = nn.Parameter(b, requires_grad=False)

    def forward(self, x):
        shape = x.shape[:-1] + (self.weight.shape[1],)
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]),
                           self.weight).reshape(shape)


def layernorm(w, b, eps):
    ln = nn.LayerNorm(w.shape[0], eps=eps)
    ln.weight = nn.Parameter(w, requires_grad=False)
    ln.bias = nn.Parameter(b, requires_grad=False)
    return ln


class Block(nn.Module):
    def __init__(self, sd, pfx, cfg):
        super().__init__()
        eps = cfg.get('layer_norm_epsilon', 1e-5)
        self.H = cfg['n_head']
        self.ln_1 = layernorm(sd[pfx + 'ln_1.weight'], sd[pfx + 'ln_1.bias'],
                              eps)
        self.c_attn = Conv1D(sd[pfx + 'attn.c_attn.weight'],
                             sd[pfx + 'attn.c_attn.bias'])
        self.c_proj = Conv1D(sd[pfx + 'attn.c_proj.weight'],
                             sd[pfx + 'attn.c_proj.bias'])
        self.ln_2 = layernorm(sd[pfx + 'ln_2.weight'], sd[pfx + 'ln_2.bias'],
                              eps)
        self.c_fc = Conv1D(sd[pfx + 'mlp.c_fc.weight'],
                           sd[pfx + 'mlp.c_fc.bias'])
        self.m_proj = Conv1D(sd[pfx + 'mlp.c_proj.weight'],
                             sd[pfx + 'mlp.c_proj.bias'])

    def forward(self, x, past):
        B, T, C = x.shape
        H, D = self.H, C // self.H
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, H, D).transpose(1, 2)
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        if past is not None:
            k = torch.cat((past[0], k), dim=2)
            v = torch.cat((past[1], v), dim=2)
        S = k.shape[2]
        if T == 1:
            y = F.scaled_dot_product_attention(q, k, v)
        elif S == T:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # queries at S - T .. S - 1
            mask = torch.ones(T, S, dtype=torch.bool,
                              device=q.device).tril(S - T)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        x = x + self.m_proj(F.gelu(self.c_fc(self.ln_2(x)),
                                   approximate='tanh'))
        return x, (k, v)


class GPT2(nn.Module):
    def __init__(self, sd, cfg):
        super().__init__()
        p = 'transformer.' if 'transformer.wte.weight' in sd else ''
        self.wte = nn.Embedding.from_pretrained(sd[p + 'wte.weight'])
        self.wpe = nn.Embedding.from_pretrained(sd[p + 'wpe.weight'])
        self.h = nn.ModuleList(Block(sd, '%sh.%d.' % (p, l), cfg)
                               for l in range(cfg['n_layer']))
        self.ln_f = layernorm(sd[p + 'ln_f.weight'], sd[p + 'ln_f.bias'],
                              cfg.get('layer_norm_epsilon', 1e-5))
        head = sd.get('lm_head.weight')
        self.head = self.wte.weight if head is None else head

    def forward(self, ids, past):
        P = 0 if past is None else past[0][0].shape[2]
        pos = torch.arange(P, P + ids.shape[1], device=ids.device).unsqueeze(0)
        x = self.wte(ids) + self.wpe(pos)
        new = []
        for l, blk in enumerate(self.h):
            x, kv = blk(x, None if past is None else past[l])
            new.append(kv)
        x = self.ln_f(x[:, -1:, :])  # the last row is all that is sampled
        return F.linear(x, self.head)[:, -1], new


# ---------------------------------------------------------------------------
# The Llama family: llama, qwen2, qwen3, mistral


def attend(q, k, v, gqa):
    """Causal SDPA of T queries, the last T of k's S positions. q is
    (B, H, T, D), k and v (B, KV, S, D)."""
    T, S = q.shape[2], k.shape[2]
    if T == 1:
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
    if S == T:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                              enable_gqa=gqa)
    mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                          enable_gqa=gqa)


def linear(sd, names):
    """One nn.Linear of the weights @names, (out, in) each, stacked by
    rows; with a bias if the checkpoint has them."""
    w = torch.cat([sd[n + '.weight'] for n in names])
    has = [n + '.bias' in sd for n in names]
    if any(has) and not all(has):
        sys.exit('model_torch.py: %s: biases on some only' % ', '.join(names))
    lin = nn.Linear(w.shape[1], w.shape[0], bias=has[0])
    lin.weight = nn.Parameter(w, requires_grad=False)
    if has[0]:
        lin.bias = nn.Parameter(torch.cat([sd[n + '.bias'] for n in names]),
                                requires_grad=False)
    return lin


def rmsnorm(w, eps):
    n = nn.RMSNorm(w.shape[0], eps=eps)
    n.weight = nn.Parameter(w, requires_grad=False)
    return n


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, sd, pfx, cfg, H, KV, D, eps):
        super().__init__()
        self.H, self.KV, self.D = H, KV, D
        a, m = pfx + 'self_attn.', pfx + 'mlp.'
        self.input_norm = rmsnorm(sd[pfx + 'input_layernorm.weight'], eps)
        self.qkv = linear(sd, [a + 'q_proj', a + 'k_proj', a + 'v_proj'])
        self.o_proj = linear(sd, [a + 'o_proj'])
        self.q_norm = self.k_norm = None
        if a + 'q_norm.weight' in sd:  # qwen3
            self.q_norm = rmsnorm(sd[a + 'q_norm.weight'], eps)
            self.k_norm = rmsnorm(sd[a + 'k_norm.weight'], eps)
        self.post_norm = rmsnorm(sd[pfx + 'post_attention_layernorm.weight'],
                                 eps)
        self.gate_up = linear(sd, [m + 'gate_proj', m + 'up_proj'])
        self.down = linear(sd, [m + 'down_proj'])
        self.F = self.down.weight.shape[1]

    def forward(self, x, cos, sin, past):
        B, T, _ = x.shape
        H, KV, D = self.H, self.KV, self.D
        q, k, v = self.qkv(self.input_norm(x)).split(
            (H * D, KV * D, KV * D), dim=-1)
        q = q.view(B, T, H, D)
        k = k.view(B, T, KV, D)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.transpose(1, 2)  # (B, H, T, D)
        k = k.transpose(1, 2)  # (B, KV, T, D)
        v = v.view(B, T, KV, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin  # cos, sin: (T, D)
        k = k * cos + rotate_half(k) * sin
        if past is not None:
            k = torch.cat((past[0], k), dim=2)
            v = torch.cat((past[1], v), dim=2)
        y = attend(q, k, v, H != KV).transpose(1, 2).reshape(B, T, H * D)
        x = x + self.o_proj(y)
        g, u = self.gate_up(self.post_norm(x)).split(self.F, dim=-1)
        x = x + self.down(F.silu(g) * u)
        return x, (k, v)


class Llama(nn.Module):
    def __init__(self, sd, cfg):
        super().__init__()
        C = cfg['hidden_size']
        H = cfg['num_attention_heads']
        KV = cfg.get('num_key_value_heads') or H
        D = cfg.get('head_dim') or C // H
        eps = cfg.get('rms_norm_eps', 1e-6)
        P = cfg['max_position_embeddings']
        rope = cfg.get('rope_parameters') or cfg.get('rope_scaling') or {}
        kind = rope.get('rope_type', rope.get('type', 'default'))
        if kind != 'default':
            sys.exit('model_torch.py: RoPE %s: only the default' % kind)
        theta = rope.get('rope_theta', cfg.get('rope_theta', 10000.0))
        win = cfg.get('sliding_window')
        if win and win < P and (cfg['model_type'] == 'mistral' or
                                cfg.get('use_sliding_window')):
            sys.exit('model_torch.py: no sliding window shorter than the '
                     'positions')
        self.embed = nn.Embedding.from_pretrained(
            sd['model.embed_tokens.weight'])
        self.layers = nn.ModuleList(
            LlamaBlock(sd, 'model.layers.%d.' % l, cfg, H, KV, D, eps)
            for l in range(cfg['num_hidden_layers']))
        self.norm = rmsnorm(sd['model.norm.weight'], eps)
        head = sd.get('lm_head.weight')
        if head is None and not cfg.get('tie_word_embeddings', False):
            sys.exit('model_torch.py: no lm_head.weight and not tied')
        self.head = self.embed.weight if head is None else head
        # as transformers computes them (float32), once for every position
        inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float)
                                    / D))
        freqs = torch.arange(P, dtype=torch.float)[:, None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)  # (P, D)
        self.register_buffer('cos', emb.cos(), persistent=False)
        self.register_buffer('sin', emb.sin(), persistent=False)

    def forward(self, ids, past):
        P = 0 if past is None else past[0][0].shape[2]
        T = ids.shape[1]
        cos, sin = self.cos[P:P + T], self.sin[P:P + T]
        x = self.embed(ids)
        new = []
        for l, blk in enumerate(self.layers):
            x, kv = blk(x, cos, sin, None if past is None else past[l])
            new.append(kv)
        x = self.norm(x[:, -1:, :])  # the last row is all that is sampled
        return F.linear(x, self.head)[:, -1], new


ARCHS = {'gpt2': GPT2, 'llama': Llama, 'qwen2': Llama, 'qwen3': Llama,
         'mistral': Llama}


def sync(dev):
    if dev.type == 'cuda':
        torch.cuda.synchronize(dev)


def run(model, tokens, n, dev):
    """Prefill @tokens (B sequences of T), then @n greedy steps of all B:
    (prefill s, decode s, tokens per sequence, gaps of the first,
    its last prefill logits)."""
    ids = torch.tensor(tokens, dtype=torch.long, device=dev)
    sync(dev)
    t0 = time.perf_counter()
    logits, past = model(ids, None)  # (B, V)
    sync(dev)
    t1 = time.perf_counter()
    first = logits[0]
    out, gaps = [[] for _ in tokens], []
    for _ in range(n):
        top = torch.topk(logits, 2, dim=-1)
        toks = top.indices[:, 0].tolist()  # waits for the step, as sampling does
        for b, t in enumerate(toks):
            out[b].append(t)
        gaps.append(float(top.values[0, 0] - top.values[0, 1]))
        logits, past = model(torch.tensor([[t] for t in toks],
                                          dtype=torch.long, device=dev), past)
    sync(dev)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, out, gaps, first.cpu()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--model', required=True)
    ap.add_argument('--tokens')
    ap.add_argument('--tokens-file')
    ap.add_argument('--decode', type=int, default=64)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--threads', type=int, default=os.cpu_count())
    ap.add_argument('--device', default='cpu', choices=('cpu', 'cuda'))
    ap.add_argument('--logits-out')
    ap.add_argument('--arch', choices=sorted(ARCHS),
                    help="the config's model_type must be this")
    a = ap.parse_args()
    dev = torch.device(a.device)

    torch.set_num_threads(a.threads)
    torch.set_grad_enabled(False)
    if bool(a.tokens) == bool(a.tokens_file):
        sys.exit('model_torch.py: --tokens or --tokens-file, one of them')
    if a.tokens:
        tokens = [[int(t) for t in a.tokens.split(',')]]
    else:
        with open(a.tokens_file) as f:
            tokens = [[int(t) for t in line.split(',')]
                      for line in f if line.strip()]
        if not tokens or len(set(len(t) for t in tokens)) != 1:
            sys.exit('model_torch.py: %s: lines of one length' %
                     a.tokens_file)
    B = len(tokens)
    t0 = time.perf_counter()
    with open(os.path.join(a.model, 'config.json')) as f:
        cfg = json.load(f)
    arch = cfg.get('model_type')
    if arch not in ARCHS:
        sys.exit('model_torch.py: model_type %r: only %s' %
                 (arch, ', '.join(sorted(ARCHS))))
    if a.arch and a.arch != arch:
        sys.exit('model_torch.py: --arch %s, but %s is %s' %
                 (a.arch, a.model, arch))
    model = ARCHS[arch](load_safetensors(
        os.path.join(a.model, 'model.safetensors')), cfg).eval().to(dev)
    model.head = model.head.to(dev)
    sync(dev)
    load = time.perf_counter() - t0

    pre, dec, toks, gaps = [], [], None, None
    with torch.inference_mode():
        for r in range(a.rounds + 1):
            p, d, out, g, first = run(model, tokens, a.decode, dev)
            if r == 0:  # warm-up
                toks, gaps = out, g
                if a.logits_out:
                    with open(a.logits_out, 'wb') as f:
                        f.write(struct.pack('<%df' % first.numel(),
                                            *first.tolist()))
                continue
            if out != toks:
                sys.exit('model_torch.py: greedy tokens changed between '
                         'rounds')
            pre.append(B * len(tokens[0]) / p)
            if a.decode:
                dec.append(B * a.decode / d)
    json.dump({'torch': torch.__version__, 'threads': torch.get_num_threads(),
               'device': str(dev), 'arch': arch,
               'load_s': load, 'prefill_tok_s': statistics.median(pre),
               'decode_tok_s': statistics.median(dec) if dec else None,
               'rounds': a.rounds, 'batch': B,
               'tokens': toks if a.tokens_file else toks[0], 'gaps': gaps},
              sys.stdout)
    sys.stdout.write('\n')


if __name__ == '__main__':
    main()
