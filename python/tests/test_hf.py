# SPDX-License-Identifier: MIT
"""The Hugging Face and torch parts, against transformers itself
(`make test-python-hf`, a cached virtual environment with torch and
transformers; skipped where they are missing, as in `make test`):
checkpoints written by transformers' save_pretrained, the ghost model's
generate() equal to transformers' own on them (a padded batch, eos and
pad), intercept_huggingface(), torch tensors in and out, torch's DLPack,
and AutoTokenizer beside transformers' tokenizer on the same file."""

import json

import numpy as np
import pytest

import djinn

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _gpt2(path, eos=None, pad=None):
    torch.manual_seed(4)
    cfg = transformers.GPT2Config(
        vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4,
        bos_token_id=eos if isinstance(eos, int) else None,
        eos_token_id=eos, pad_token_id=pad)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    m.save_pretrained(path)
    return m


def _llama(path):
    torch.manual_seed(5)
    cfg = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, bos_token_id=None, eos_token_id=None,
        pad_token_id=None)
    m = transformers.LlamaForCausalLM(cfg).eval()
    m.save_pretrained(path)
    return m


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    return {"gpt2": (_gpt2(d / "gpt2"), d / "gpt2"),
            "llama": (_llama(d / "llama"), d / "llama")}


PROMPTS = torch.tensor([[0, 0, 3, 141, 59, 26], [7, 9, 11, 13, 15, 17]])
MASK = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_generate_equals_transformers(session, ckpts, arch):
    ref, path = ckpts[arch]
    ghost = djinn.AutoModelForCausalLM.from_pretrained(path, session=session)
    with torch.no_grad():
        want = ref.generate(PROMPTS, attention_mask=MASK, max_new_tokens=12,
                            do_sample=False, pad_token_id=0)
    got = ghost.generate(PROMPTS, attention_mask=MASK, max_new_tokens=12,
                         do_sample=False, pad_token_id=0)
    assert isinstance(got, torch.Tensor) and got.dtype == want.dtype
    assert torch.equal(got, want), (got, want)
    # numpy in, numpy out
    np_got = ghost.generate(PROMPTS.numpy(), attention_mask=MASK.numpy(),
                            max_new_tokens=12, pad_token_id=0)
    assert isinstance(np_got, np.ndarray)
    assert np.array_equal(np_got, want.numpy())


def test_eos_and_pad_as_transformers(session, ckpts, tmp_path):
    ref, path = ckpts["gpt2"]
    with torch.no_grad():
        free = ref.generate(PROMPTS[1:], max_new_tokens=10, do_sample=False,
                            pad_token_id=0)
    eos = int(free[0, 6 + 3])  # a token the second row makes 4th
    # several eos tokens, no pad: transformers pads with the first
    ref3 = _gpt2(tmp_path / "eos3", eos=[eos, 250 if eos != 250 else 251])
    ghost3 = djinn.AutoModelForCausalLM.from_pretrained(tmp_path / "eos3",
                                                        session=session)
    with torch.no_grad():
        want = ref3.generate(PROMPTS, attention_mask=MASK, max_new_tokens=10,
                             do_sample=False)
    assert torch.equal(ghost3.generate(PROMPTS, attention_mask=MASK,
                                       max_new_tokens=10, do_sample=False),
                       want), want
    ref2 = _gpt2(tmp_path / "eos", eos=eos, pad=1)
    ghost = djinn.AutoModelForCausalLM.from_pretrained(tmp_path / "eos",
                                                       session=session)
    with torch.no_grad():
        want = ref2.generate(PROMPTS, attention_mask=MASK, max_new_tokens=10,
                             do_sample=False)
    got = ghost.generate(PROMPTS, attention_mask=MASK, max_new_tokens=10,
                         do_sample=False)
    assert torch.equal(got, want), (got, want)


def test_sampling_is_the_daemons(session, ckpts):
    _, path = ckpts["llama"]
    ghost = djinn.AutoModelForCausalLM.from_pretrained(path, session=session)
    a = ghost.generate(PROMPTS, attention_mask=MASK, max_new_tokens=8,
                       do_sample=True, temperature=0.9, top_k=20, seed=3)
    b = ghost.generate(PROMPTS, attention_mask=MASK, max_new_tokens=8,
                       do_sample=True, temperature=0.9, top_k=20, seed=3)
    assert torch.equal(a, b) and a.shape == (2, 14)
    with pytest.raises(djinn.InvalidArgument):
        ghost.generate(PROMPTS, num_beams=4)
    with pytest.raises(NotImplementedError):
        ghost(PROMPTS)


def test_generation_settings(session, ckpts, tmp_path):
    """What transformers would do differently is refused, not ignored;
    what the checkpoint says is followed."""
    _, path = ckpts["gpt2"]
    ghost = djinn.AutoModelForCausalLM.from_pretrained(path, session=session)
    for bad in ({"repetition_penalty": 3.0}, {"min_new_tokens": 5},
                {"return_dict_in_generate": True}, {"frobnicate": 1}):
        with pytest.raises(djinn.InvalidArgument) as e:
            ghost.generate(PROMPTS, max_new_tokens=4, **bad)
        assert list(bad)[0] in str(e.value)
    ref = _gpt2(tmp_path / "cfg")
    gc = json.loads((tmp_path / "cfg/generation_config.json").read_text())
    gc["max_new_tokens"] = 4
    (tmp_path / "cfg/generation_config.json").write_text(json.dumps(gc))
    g2 = djinn.AutoModelForCausalLM.from_pretrained(tmp_path / "cfg",
                                                    session=session)
    ref.generation_config = transformers.GenerationConfig.from_pretrained(
        tmp_path / "cfg")
    with torch.no_grad():
        want = ref.generate(PROMPTS[1:])
    assert torch.equal(g2.generate(PROMPTS[1:]), want)
    assert want.shape[1] == 6 + 4
    gc["repetition_penalty"] = 2.0
    (tmp_path / "cfg/generation_config.json").write_text(json.dumps(gc))
    g3 = djinn.AutoModelForCausalLM.from_pretrained(tmp_path / "cfg",
                                                    session=session)
    with pytest.raises(djinn.InvalidArgument) as e:
        g3.generate(PROMPTS[1:])
    assert "generation_config.json" in str(e.value)
    # identical rows sample apart; pad is the first eos, as transformers
    same = PROMPTS[1:].repeat(3, 1)
    out = ghost.generate(same, max_new_tokens=8, do_sample=True,
                         temperature=1.5, seed=9)
    assert not (torch.equal(out[0], out[1]) and torch.equal(out[1], out[2]))


def test_intercept(session, ckpts):
    _, path = ckpts["gpt2"]
    djinn.intercept_huggingface(session)
    try:
        m = transformers.AutoModelForCausalLM.from_pretrained(path)
        assert isinstance(m, djinn.hf.GhostModelForCausalLM)
        assert m.djinn_model.name.startswith("upload-")
    finally:
        djinn.restore_huggingface()
    m = transformers.AutoModelForCausalLM.from_pretrained(path)
    assert isinstance(m, transformers.GPT2LMHeadModel)


def test_torch_tensors_and_dlpack(session):
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    w = torch.ones(4, 2)
    with session.graph() as g:
        r, = g.run(g.input(x, text=False) @ w)
        t = torch.from_dlpack(r)
        assert torch.equal(t, x @ w)
    bf = torch.arange(8, dtype=torch.bfloat16)
    tb = session.tensor(bf, text=False)
    assert tb.dtype == "bfloat16"
    assert np.array_equal(tb.numpy(), bf.float().numpy())
    with pytest.raises(djinn.InvalidArgument):
        session.tensor(torch.zeros(4, 4)[:, ::2])


def test_tokenizer_beside_transformers(session, ckpts, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=200,
                                  special_tokens=["<unk>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel
                                  .alphabet())
    corpus = ["once upon a time there was a tiny model",
              "the weights never leave the daemon", "djinn shares gpus"] * 20
    tok.train_from_iterator(corpus, trainer)
    tok.decoder = tokenizers.decoders.ByteLevel()
    d = tmp_path / "tok"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<eos>", "unk_token": "<unk>",
         "tokenizer_class": "PreTrainedTokenizerFast"}))
    ours = djinn.AutoTokenizer.from_pretrained(d)
    theirs = transformers.AutoTokenizer.from_pretrained(str(d))
    for text in ("once upon a time", "the daemon shares tiny gpus"):
        assert ours.encode(text) == theirs(text)["input_ids"]
        assert ours.decode(ours.encode(text)) == theirs.decode(
            theirs(text)["input_ids"])
    assert ours.eos_token_id == theirs.eos_token_id
    # text in, text out through a ghost model
    _, path = ckpts["gpt2"]
    ghost = djinn.AutoModelForCausalLM.from_pretrained(path, session=session)
    enc = ours("once upon a time", return_tensors="pt")
    out = ghost.generate(**enc, max_new_tokens=5)
    text = ours.batch_decode(out)[0]
    assert text.startswith("once upon a time")
