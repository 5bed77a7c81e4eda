#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""djinnd's model runtime against Hugging Face transformers' own forward pass.

    python scripts/check_hf.py --cache DIR --djinnd BIN --djinn BIN
                               [--workdir DIR] [--only WORD ...]
                               [--versions tf5,tf4] [--list]

`make check-hf` runs it (mk/check-hf.mk) with the Python of the cache's
virtual environment (DIR/venv: torch, numpy, safetensors); DIR/tf5 and
DIR/tf4 hold transformers 5.x and 4.57.x, installed with pip --target.

For each transformers version it starts one worker, this script again
with that version on PYTHONPATH, against one djinnd it started itself
(CPU backend, a unix socket and its model directory under --workdir).
For every case the worker

1. builds a small model with transformers' own classes, sets every
   parameter from a seeded uniform of variance 1/fan_in (norm gains
   near 1, biases near 0: transformers' own init, std 0.02, gives
   near-flat logits that rounding decides), casts it to the case's
   dtype and saves it with save_pretrained() into the model directory;
2. loads it back with from_pretrained() in that dtype and computes the
   reference: greedy decoding of 16 tokens after a 12-token prompt over
   transformers' KV cache (model.eval(), torch.no_grad()), with the
   logits after the prompt and after each token (17 rows), and checks
   that generate() picks the same tokens;
3. runs `djinn generate -m CASE -t PROMPT -n 16 --logits FILE` (and
   again with --upload DIR for the sharded cases) and compares: each
   row of djinnd's logits against transformers' logits for the same
   tokens (teacher-forced over the cache when the tokens parted), within
   the dtype's tolerance of that row's largest |logit|, and every token
   djinnd chose is transformers' choice, or within twice the tolerance
   of it (a near tie that rounding may decide either way: the line says
   where and by how much).

One line per case, PASS, FAIL or REFUSED (djinnd would not run it:
the reason is djinn's message), then a summary. Exit status 0 when every
case passed, 1 otherwise, 2 on a usage error.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib

# Tolerances on |djinnd - transformers| / max |logit| of the row. f32 is
# the task's 1e-4 (measured: about 1e-6). For f16 and bf16 both sides
# round every intermediate to the dtype, each its own way (transformers
# upcasts norms and softmax to f32 and rounds the logits to the dtype,
# djinnd keeps its own order of operations), so the difference is about
# the sum of two rounding paths: measured up to 2.4e-3 (f16) and 2.5e-2
# (bf16) on these models; the tolerances leave a factor of 2. (The unit
# tests', against a double-precision reference: 5e-3 and 4e-2.)
TOL = {"f32": 1e-4, "f16": 5e-3, "bf16": 5e-2}

PROMPT = [17, 250, 3, 101, 77, 198, 42, 9, 160, 233, 58, 121]
N_NEW = 16

# Sizes: small enough that a case takes well under a second, large
# enough for several heads, two layers and a real vocabulary.
GPT2 = dict(vocab_size=256, n_embd=64, n_head=4, n_layer=2, n_positions=64,
            n_inner=256)
LLAMA = dict(vocab_size=384, hidden_size=128, intermediate_size=256,
             num_attention_heads=4, num_key_value_heads=4,
             num_hidden_layers=2, max_position_embeddings=64,
             rms_norm_eps=1e-5)
QWEN2 = dict(vocab_size=320, hidden_size=64, intermediate_size=192,
             num_attention_heads=4, num_key_value_heads=2,
             num_hidden_layers=2, max_position_embeddings=64,
             rms_norm_eps=1e-6, use_sliding_window=False)
# head_dim 32 where hidden / heads is 16
QWEN3 = dict(vocab_size=448, hidden_size=64, intermediate_size=192,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32,
             num_hidden_layers=2, max_position_embeddings=64,
             rms_norm_eps=1e-6)
MISTRAL = dict(vocab_size=512, hidden_size=96, intermediate_size=192,
               num_attention_heads=6, num_key_value_heads=2,
               num_hidden_layers=2, max_position_embeddings=64,
               rms_norm_eps=1e-5, sliding_window=4096)


def case(name, arch, dtype, cfg, rope=None, theta=None, shard=False,
         expect="match"):
    """A case: the model's config (version-neutral), its RoPE (rope_type
    and parameters, or None for the default), what djinnd should do."""
    return dict(name=name, arch=arch, dtype=dtype, cfg=cfg, rope=rope,
                theta=theta, shard=shard, expect=expect)


def cases():
    c = []
    for dt in ("f32", "f16", "bf16"):
        c.append(case(f"gpt2-{dt}", "gpt2", dt, GPT2))
    c.append(case("gpt2-f32-sharded", "gpt2", "f32", GPT2, shard=True))
    for dt in ("f32", "f16", "bf16"):
        c.append(case(f"llama-{dt}", "llama", dt, LLAMA, theta=10000.0))
    c.append(case("llama-f32-gqa", "llama", "f32",
                  dict(LLAMA, num_key_value_heads=2), theta=10000.0))
    c.append(case("llama-bf16-gqa1", "llama", "bf16",
                  dict(LLAMA, num_key_value_heads=1), theta=10000.0))
    c.append(case("llama-f32-bias", "llama", "f32",
                  dict(LLAMA, attention_bias=True, mlp_bias=True),
                  theta=10000.0))
    c.append(case("llama-bf16-sharded", "llama", "bf16",
                  dict(LLAMA, num_key_value_heads=2), theta=10000.0,
                  shard=True))
    # RoPE variants. dynamic: 16 positions, so the 28 tokens of prompt
    # and generation run past them and transformers recomputes the
    # frequencies at every step from position 16 on. llama3: head_dim 32
    # and original_max_position_embeddings 32 give one frequency of each
    # kind (kept, smoothed, divided by the factor; with 16 none is
    # kept). yarn: max_position_embeddings = factor * original, which
    # transformers 4.57 and 5 read alike (4.57 takes the factor from
    # their ratio).
    ropes = [
        ("rope500k", None, dict(LLAMA), 500000.0),
        ("rope-linear", dict(rope_type="linear", factor=2.0), dict(LLAMA),
         10000.0),
        ("rope-dynamic", dict(rope_type="dynamic", factor=2.0),
         dict(LLAMA, max_position_embeddings=16), 10000.0),
        ("rope-llama3", dict(rope_type="llama3", factor=8.0,
                             low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=32),
         dict(LLAMA), 500000.0),
        ("rope-yarn", dict(rope_type="yarn", factor=4.0,
                           original_max_position_embeddings=16),
         dict(LLAMA, max_position_embeddings=64), 10000.0),
    ]
    for tag, rope, cfg, theta in ropes:
        c.append(case(f"llama-f32-{tag}", "llama", "f32", cfg, rope=rope,
                      theta=theta))
    for tag, rope, cfg, theta in ropes:
        if tag in ("rope-llama3", "rope-yarn"):
            c.append(case(f"llama-bf16-{tag}", "llama", "bf16", cfg,
                          rope=rope, theta=theta))
    for dt in ("f32", "bf16"):
        c.append(case(f"qwen2-{dt}", "qwen2", dt, QWEN2, theta=1000000.0))
    c.append(case("qwen2-f32-tied", "qwen2", "f32",
                  dict(QWEN2, tie_word_embeddings=True), theta=1000000.0))
    for dt in ("f32", "bf16"):
        c.append(case(f"qwen3-{dt}", "qwen3", dt, QWEN3, theta=1000000.0))
    c.append(case("qwen3-f32-tied", "qwen3", "f32",
                  dict(QWEN3, tie_word_embeddings=True), theta=1000000.0))
    c.append(case("qwen3-f32-sharded", "qwen3", "f32", QWEN3,
                  theta=1000000.0, shard=True))
    for dt in ("f32", "bf16"):
        c.append(case(f"mistral-{dt}", "mistral", dt, MISTRAL,
                      theta=1000000.0))
    # A window of 8 under a context of 28: djinnd must refuse rather
    # than attend past it; a context of 8 (4 + 4) must still match.
    c.append(case("mistral-f32-window8", "mistral", "f32",
                  dict(MISTRAL, sliding_window=8), theta=1000000.0,
                  expect="refuse-window"))
    return c


def case_results(name, cs):
    """The lines case @cs, run as @name, gives, in order."""
    return ([name + "+upload"] if cs["shard"] else []) + \
        ([name + "-short"] if cs["expect"] == "refuse-window" else []) + \
        [name]


def result_names(label, only):
    """The lines the cases give for a transformers version, in order."""
    names = []
    for cs in cases():
        name = f"{label}-{cs['name']}"
        if not only or any(w in name for w in only):
            names += case_results(name, cs)
    return names


# ---------------------------------------------------------------------------
# The worker: transformers on PYTHONPATH


def tf_major():
    import transformers
    return int(transformers.__version__.split(".")[0])


def make_config(cs, major):
    """transformers' config for case @cs, in the form version @major
    writes: nested rope_parameters (5) or top-level rope_theta and
    rope_scaling (4)."""
    import transformers as T
    kw = dict(cs["cfg"])
    kw.update(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if cs["arch"] != "gpt2":
        if major >= 5:
            rp = dict(rope_type="default", rope_theta=cs["theta"])
            if cs["rope"]:
                rp.update(cs["rope"])
            kw["rope_parameters"] = rp
        else:
            kw["rope_theta"] = cs["theta"]
            if cs["rope"]:
                kw["rope_scaling"] = dict(cs["rope"])
    cls = {"gpt2": T.GPT2Config, "llama": T.LlamaConfig,
           "qwen2": T.Qwen2Config, "qwen3": T.Qwen3Config,
           "mistral": T.MistralConfig}[cs["arch"]]
    return cls(**kw)


def init_weights(model, seed):
    """Every parameter from a seeded uniform: matrices of variance
    1/fan_in, norm gains 1 + U(-0.1, 0.1), biases U(-0.1, 0.1)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    conv1d = set()
    for mname, mod in model.named_modules():
        if type(mod).__name__ == "Conv1D":  # GPT-2's: weight (in, out)
            conv1d.add(mname + ".weight")
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            u = torch.rand(p.shape, generator=g, dtype=torch.float64) * 2 - 1
            if p.dim() == 1:
                v = u * 0.1 + (0.0 if name.endswith("bias") else 1.0)
            else:
                fan_in = p.shape[0] if name in conv1d else p.shape[1]
                v = u * (3.0 / fan_in) ** 0.5
            p.copy_(v.to(p.dtype))


def ref_loop(model, prompt, n, forced=None):
    """Greedy decoding over transformers' cache (or the @forced tokens):
    the tokens and the n + 1 rows of f32 logits."""
    import torch
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt]), use_cache=True)
        rows = [out.logits[0, -1].float().clone()]
        toks = []
        for i in range(n):
            t = int(rows[-1].argmax()) if forced is None else forced[i]
            toks.append(t)
            out = model(input_ids=torch.tensor([[t]]),
                        past_key_values=out.past_key_values, use_cache=True)
            rows.append(out.logits[0, -1].float().clone())
    return toks, torch.stack(rows).numpy()


def ref_generate(model, prompt, n):
    import torch
    with torch.no_grad():
        g = model.generate(torch.tensor([prompt]), max_new_tokens=n,
                           min_new_tokens=n, do_sample=False,
                           output_logits=True, return_dict_in_generate=True)
    return [int(t) for t in g.sequences[0, len(prompt):]]


def run_djinn(args, target, prompt, n, logits_path, upload):
    cmd = [args.djinn, "-a", args.addr, "generate", "-t",
           ",".join(map(str, prompt)), "-n", str(n), "--logits",
           logits_path]
    cmd += ["--upload", target] if upload else ["-m", target]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None, "djinn generate: no answer in 300 s"
    if p.returncode:
        msg = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
        return None, f"exit {p.returncode}: {msg}"
    return [int(t) for t in p.stdout.strip().split(",")], None


def compare(dj_toks, dj_rows, ref, model, prompt, n, tol):
    """Figures and a verdict for djinnd's tokens and logits against
    transformers' (@ref: its greedy tokens and rows): (ok, text)."""
    import numpy as np
    ref_toks, rows = ref
    first = next((i for i in range(n) if dj_toks[i] != ref_toks[i]), None)
    if first is not None:
        _, rows = ref_loop(model, prompt, n, forced=dj_toks)
    scale = np.abs(rows).max(axis=1)
    err = (np.abs(dj_rows - rows).max(axis=1) / scale)
    worst = int(err.argmax())
    ok = bool(err.max() <= tol)
    text = f"logits max rel err {err.max():.1e} (row {worst}, tol {tol:.0e})"
    own = [i for i in range(n) if dj_toks[i] != int(dj_rows[i].argmax())]
    if own:
        ok = False
        text += (f"; djinnd's token at step {own[0]} is not the largest of "
                 f"its own logits")
    if first is None:
        text = f"tokens {n}/{n} equal, " + text
        return ok, text
    # every choice of djinnd's must be transformers' or a near tie
    gaps = [(rows[i].max() - rows[i][dj_toks[i]]) / scale[i]
            for i in range(n)]
    bad = [i for i in range(n) if gaps[i] > 2 * tol]
    r = rows[first]
    top2 = np.sort(r)[-2:]
    rank = int((r > r[dj_toks[first]]).sum()) + 1
    text = (f"tokens part at step {first} (transformers {ref_toks[first]}, "
            f"djinnd {dj_toks[first]}"
            + (", tied with it in transformers' logits" if rank == 1 else
               f", transformers' #{rank}" if rank != 2 else "")
            + f"; transformers' top two {top2[1] - top2[0]:.2e} apart, "
            f"{(top2[1] - top2[0]) / scale[first]:.1e} of max |logit|), "
            + text)
    if bad:
        ok = False
        text += (f"; djinnd's token at step {bad[0]} is "
                 f"{gaps[bad[0]]:.1e} of max |logit| below transformers' "
                 f"best: not a near tie")
    elif ok:
        text += "; a near tie, the rows after it teacher-forced"
    return ok, text


def worker(args):
    import warnings
    warnings.simplefilter("ignore")  # deprecations, one line a step
    import numpy as np
    import torch
    import transformers
    transformers.utils.logging.disable_progress_bar()
    major = tf_major()
    label = args.label
    dtypes = {"f32": torch.float32, "f16": torch.float16,
              "bf16": torch.bfloat16}
    results = open(args.results, "a")

    pending = []

    def report(name, verdict, text):
        if name in pending:
            pending.remove(name)
        line = f"{verdict:<8}{name:<34} {text}"
        print(line, flush=True)
        results.write(json.dumps(dict(name=name, verdict=verdict,
                                      text=text)) + "\n")
        results.flush()

    for cs in cases():
        name = f"{label}-{cs['name']}"
        if args.only and not any(w in name for w in args.only):
            continue
        d = os.path.join(args.models, name)
        pending[:] = case_results(name, cs)
        try:
            dt = dtypes[cs["dtype"]]
            config = make_config(cs, major)
            model = transformers.AutoModelForCausalLM.from_config(config)
            init_weights(model, zlib.crc32(cs["name"].encode()))
            model = model.to(dt)
            shutil.rmtree(d, ignore_errors=True)
            save = dict(max_shard_size="300KB" if cs["shard"] else "10GB")
            if major < 5:
                save["safe_serialization"] = True
            model.save_pretrained(d, **save)
            del model
            if cs["shard"]:
                shards = [f for f in os.listdir(d)
                          if f.endswith(".safetensors")]
                if len(shards) < 2 or not os.path.exists(
                        os.path.join(d, "model.safetensors.index.json")):
                    raise RuntimeError(f"save_pretrained wrote {shards}, "
                                       "not an index and shards")
            load = {"dtype" if major >= 5 else "torch_dtype": dt}
            model = transformers.AutoModelForCausalLM.from_pretrained(
                d, local_files_only=True, **load)
            model.eval()
            if model.dtype != dt:
                raise RuntimeError(f"loaded as {model.dtype}, not {dt}")
            tol = TOL[cs["dtype"]]
            runs = [(name, name, False)]
            if cs["shard"]:
                runs.insert(0, (name + "+upload", d, True))

            if cs["expect"] == "refuse-window":
                # 4 + 4 tokens: within the window, must match
                short = PROMPT[:4]
                ref = ref_loop(model, short, 4)
                lf = os.path.join(args.workdir, name + ".short.logits")
                toks, err = run_djinn(args, name, short, 4, lf, False)
                if err:
                    report(name + "-short", "REFUSED", err)
                else:
                    rows = np.fromfile(lf, dtype=np.float32).reshape(5, -1)
                    ok, text = compare(toks, rows, ref, model, short,
                                       4, tol)
                    report(name + "-short", "PASS" if ok else "FAIL",
                           "context of 8 = the window: " + text)
                ref = ref_loop(model, PROMPT, N_NEW)
                lf = os.path.join(args.workdir, name + ".logits")
                toks, err = run_djinn(args, name, PROMPT, N_NEW, lf, False)
                if err and "sliding_window" in err:
                    report(name, "PASS", "refused as it should be: " + err)
                elif err:
                    report(name, "FAIL", "refused, but the message does "
                           "not name sliding_window: " + err)
                else:
                    rows = np.fromfile(lf, dtype=np.float32).reshape(
                        N_NEW + 1, -1)
                    ok, text = compare(toks, rows, ref, model, PROMPT,
                                       N_NEW, tol)
                    report(name, "FAIL",
                           f"ran a context of {len(PROMPT) + N_NEW} past "
                           f"its sliding_window of 8 instead of refusing "
                           f"it ({'matches' if ok else 'differs from'} "
                           f"transformers: {text})")
                continue

            ref = ref_loop(model, PROMPT, N_NEW)
            gen_toks = ref_generate(model, PROMPT, N_NEW)
            if gen_toks != ref[0]:
                raise RuntimeError(f"transformers' generate() gives "
                                   f"{gen_toks}, its cache loop {ref[0]}")
            for rname, target, upload in runs:
                lf = os.path.join(args.workdir, rname + ".logits")
                toks, err = run_djinn(args, target, PROMPT, N_NEW, lf,
                                      upload)
                if err:
                    report(rname, "REFUSED", err)
                    continue
                rows = np.fromfile(lf, dtype=np.float32)
                if rows.size != (N_NEW + 1) * config.vocab_size or \
                        len(toks) != N_NEW:
                    report(rname, "FAIL", f"{len(toks)} tokens and "
                           f"{rows.size} logits, expected {N_NEW} and "
                           f"{(N_NEW + 1) * config.vocab_size}")
                    continue
                rows = rows.reshape(N_NEW + 1, -1)
                ok, text = compare(toks, rows, ref, model, PROMPT,
                                   N_NEW, tol)
                report(rname, "PASS" if ok else "FAIL", text)
        except Exception as e:  # one case never stops the others
            msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            for n in list(pending):
                report(n, "FAIL", "harness: " + msg)
    return 0


# ---------------------------------------------------------------------------
# The driver: starts djinnd and a worker per transformers version


def start_djinnd(args, sock, admin, models, log):
    cmd = [args.djinnd, "--config", "/dev/null", "-f", "-l", f"unix:{sock}",
           "-a", admin, "--backend", "cpu", "--leases", "user", "-m", "1G",
           "--model-dir", models]
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        if os.path.exists(sock):
            return p
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    p.wait()
    return None


def driver(args):
    for b in (args.djinnd, args.djinn):
        if not os.access(b, os.X_OK):
            print(f"check_hf: {b} is not there: build it first (make)",
                  file=sys.stderr)
            return 2
    versions = args.versions.split(",")
    for v in versions:
        if not os.path.isdir(os.path.join(args.cache, v)):
            print(f"check_hf: no {v} in {args.cache}", file=sys.stderr)
            return 2
    if args.workdir:
        shutil.rmtree(args.workdir, ignore_errors=True)
        os.makedirs(args.workdir)
        work = args.workdir
    else:
        work = tempfile.mkdtemp(prefix="check-hf.")
    work = os.path.abspath(work)
    # a unix socket's path must be short: the socket goes in /tmp
    sockdir = tempfile.mkdtemp(prefix="check-hf.")
    models = os.path.join(work, "models")
    os.makedirs(models)
    results = os.path.join(work, "results.jsonl")
    open(results, "w").close()
    t0 = time.monotonic()
    log = open(os.path.join(work, "djinnd.log"), "w")
    dj = start_djinnd(args, os.path.join(sockdir, "d.sock"),
                      os.path.join(sockdir, "admin.sock"), models, log)
    if not dj:
        print(f"check_hf: djinnd did not start: see {work}/djinnd.log",
              file=sys.stderr)
        shutil.rmtree(sockdir, ignore_errors=True)
        return 1
    rc_workers = {}
    try:
        for v in versions:
            env = dict(os.environ)
            env.update(PYTHONPATH=os.path.abspath(os.path.join(args.cache, v)),
                       HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                       TRANSFORMERS_VERBOSITY="error",
                       HF_HUB_DISABLE_PROGRESS_BARS="1",
                       TOKENIZERS_PARALLELISM="false",
                       PYTHONDONTWRITEBYTECODE="1")
            cmd = [sys.executable, os.path.abspath(__file__), "--worker",
                   "--djinn", args.djinn, "--addr",
                   "unix:" + os.path.join(sockdir, "d.sock"),
                   "--label", v, "--models", models, "--workdir", work,
                   "--results", results]
            for w in args.only or []:
                cmd += ["--only", w]
            tv = subprocess.run([sys.executable, "-c",
                                 "import transformers as t; "
                                 "print(t.__version__)"],
                                env=env, capture_output=True, text=True)
            print(f"== {v}: transformers {tv.stdout.strip() or '?'}",
                  flush=True)
            rc_workers[v] = subprocess.run(cmd, env=env).returncode
    finally:
        dj.send_signal(signal.SIGTERM)
        try:
            dj.wait(timeout=20)
        except subprocess.TimeoutExpired:
            dj.kill()
            dj.wait()
        log.close()
        shutil.rmtree(sockdir, ignore_errors=True)
    res = [json.loads(line) for line in open(results)]
    seen = {r["name"] for r in res}
    for v in versions:
        for n in result_names(v, args.only):
            if n not in seen:
                text = f"no result: the {v} worker exited {rc_workers.get(v)}"
                print(f"{'FAIL':<8}{n:<34} {text}")
                res.append(dict(name=n, verdict="FAIL", text=text))
    count = {}
    for r in res:
        count[r["verdict"]] = count.get(r["verdict"], 0) + 1
    bad = [v for v, rc in rc_workers.items() if rc]
    print(f"== check-hf: {len(res)} cases: {count.get('PASS', 0)} passed, "
          f"{count.get('FAIL', 0)} failed, {count.get('REFUSED', 0)} "
          f"refused, in {time.monotonic() - t0:.0f} s"
          + (f"; worker {', '.join(bad)} exited non-zero" if bad else ""))
    if dj.returncode not in (0, -signal.SIGTERM):
        print(f"== djinnd exited {dj.returncode}: see {work}/djinnd.log")
        bad.append("djinnd")
    failed = bad or count.get("PASS", 0) != len(res) or not res
    if failed:
        print(f"== models, logits and djinnd.log kept in {work}")
    elif not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def list_cases(args):
    for cs in cases():
        rope = "" if cs["arch"] == "gpt2" else (
            f" rope {cs['rope']['rope_type'] if cs['rope'] else 'default'}"
            f" theta {cs['theta']:g}")
        line = (f"{cs['name']:<24} {cs['arch']:<8} {cs['dtype']:<5}"
                f"{rope}{' sharded' if cs['shard'] else ''}"
                f"{' expect refusal' if cs['expect'] != 'match' else ''}")
        print(line.rstrip())
    return 0


def main():
    ap = argparse.ArgumentParser(
        description="djinnd against transformers' own forward pass")
    ap.add_argument("--cache", help="venv/, tf5/ and tf4/ (make check-hf)")
    ap.add_argument("--djinnd", default="build/djinnd/djinnd")
    ap.add_argument("--djinn", default="build/tools/djinn")
    ap.add_argument("--workdir", help="kept: models, logits, djinnd.log "
                    "(default: a temporary directory, removed on success)")
    ap.add_argument("--versions", default="tf5,tf4",
                    help="the cache's transformers to run, in order")
    ap.add_argument("--only", action="append",
                    help="only cases whose name contains this (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the cases")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--addr", help=argparse.SUPPRESS)
    ap.add_argument("--label", help=argparse.SUPPRESS)
    ap.add_argument("--models", help=argparse.SUPPRESS)
    ap.add_argument("--results", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.list:
        return list_cases(args)
    if args.worker:
        return worker(args)
    if not args.cache:
        ap.error("--cache is required")
    args.djinnd = os.path.abspath(args.djinnd)
    args.djinn = os.path.abspath(args.djinn)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
