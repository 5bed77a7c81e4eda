# SPDX-License-Identifier: MIT
"""Hugging Face-style ghost models: the weights stay on the daemon.

    tok = djinn.AutoTokenizer.from_pretrained("/models/llama")
    model = djinn.AutoModelForCausalLM.from_pretrained("/models/llama")
    ids = tok("Once upon a time", return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=20)
    print(tok.batch_decode(out))

``from_pretrained(name_or_path)`` opens a *ghost* model: a local
directory is sent to djinnd by fingerprint (only the files it lacks
cross, djinn_model_upload()); anything else names a model of djinnd's
model directory ("org/name" is looked up as "org--name"). Its
``generate()`` takes and returns what transformers' does for
input_ids, attention_mask, max_new_tokens, max_length, do_sample,
temperature, top_k, top_p, eos_token_id and pad_token_id: torch tensors
for torch tensors, numpy arrays otherwise, each row of a batch its own
context on the daemon. A ghost model has no forward pass here: its
layers run on the daemon, a step at a time.

``intercept_huggingface()`` makes transformers' own
``AutoModelForCausalLM.from_pretrained`` return ghost models, as the
original system's interception did, until ``restore_huggingface()``.

The models open in a session of a connection made on first use
(``$DJINN_ADDR``, else libdjinn's default: ``djinn.connect()``), unless
``session=`` names one.
"""

from __future__ import annotations

import json
import os
import random
import threading
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from ._core import Connection, Session, connect
from .errors import InvalidArgument
from .model import Model

_lock = threading.Lock()
_default: Optional[Session] = None
_conn: Optional[Connection] = None


def default_session() -> Session:
    """The session ghost models open in when none is given: on a
    connection made on first use: to $DJINN_ADDR, else to where djinnd
    listens by default (libdjinn's default, djinn.connect())."""
    global _default, _conn
    with _lock:
        if _default is None or _default.closed:
            _conn = connect()
            _default = _conn.session("huggingface")
        return _default


def _read_json(path: str) -> Dict[str, Any]:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


# ---------------------------------------------------------------------------
# Tokenizers


class Tokenizer:
    """A model directory's tokenizer.json through the `tokenizers`
    package, with the special tokens its tokenizer_config.json and
    config.json name."""

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer as _T
        except ImportError as e:
            raise ImportError(
                "djinn.AutoTokenizer needs the tokenizers package "
                "(pip install tokenizers)") from e
        file = path if os.path.isfile(path) else \
            os.path.join(path, "tokenizer.json")
        if not os.path.isfile(file):
            raise InvalidArgument(
                22, f"{path}: no tokenizer.json (djinn reads the fast "
                "tokenizer's file only)")
        self._t = _T.from_file(file)
        d = os.path.dirname(file)
        tc = _read_json(os.path.join(d, "tokenizer_config.json"))
        cfg = _read_json(os.path.join(d, "config.json"))

        def tid(name: str) -> Optional[int]:
            tok = tc.get(name)
            if isinstance(tok, dict):
                tok = tok.get("content")
            if isinstance(tok, str):
                return self._t.token_to_id(tok)
            v = cfg.get(name + "_id")
            return v if isinstance(v, int) else None

        self.eos_token_id = tid("eos_token")
        self.bos_token_id = tid("bos_token")
        self.pad_token_id = tid("pad_token")
        self.vocab_size = self._t.get_vocab_size()

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        return list(self._t.encode(
            text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        return self._t.decode([int(i) for i in np.asarray(ids).reshape(-1)],
                              skip_special_tokens=skip_special_tokens)

    def batch_decode(self, seqs: Any,
                     skip_special_tokens: bool = False) -> List[str]:
        return [self.decode(s, skip_special_tokens) for s in np.asarray(
            _numpy(seqs))]

    def __call__(self, text: Union[str, Sequence[str]],
                 return_tensors: Optional[str] = None,
                 padding: Union[bool, str] = False,
                 add_special_tokens: bool = True) -> Dict[str, Any]:
        """input_ids and attention_mask, as transformers' tokenizers give
        them: lists, or with return_tensors "np" or "pt" arrays (a batch
        padded on the left, as decoder-only generation wants)."""
        texts: List[str] = [text] if isinstance(text, str) else list(text)
        single = isinstance(text, str)
        rows = [self.encode(t, add_special_tokens) for t in texts]
        if return_tensors is None and not padding:
            masks = [[1] * len(r) for r in rows]
            return {"input_ids": rows[0] if single else rows,
                    "attention_mask": masks[0] if single else masks}
        n = max(len(r) for r in rows)
        pad = self.pad_token_id if self.pad_token_id is not None else \
            (self.eos_token_id or 0)
        ids = np.full((len(rows), n), pad, np.int64)
        mask = np.zeros((len(rows), n), np.int64)
        for i, r in enumerate(rows):
            if r:
                ids[i, n - len(r):] = r
                mask[i, n - len(r):] = 1
        if return_tensors == "pt":
            import torch

            return {"input_ids": torch.from_numpy(ids),
                    "attention_mask": torch.from_numpy(mask)}
        if return_tensors not in (None, "np"):
            raise InvalidArgument(
                22, f"return_tensors={return_tensors!r}: 'np' or 'pt'")
        return {"input_ids": ids, "attention_mask": mask}


class AutoTokenizer:
    """``AutoTokenizer.from_pretrained(path)``: a model directory's
    tokenizer.json (no torch needed)."""

    @staticmethod
    def from_pretrained(path: Union[str, os.PathLike], *args: Any,
                        **kwargs: Any) -> Tokenizer:
        return Tokenizer(os.fspath(path))


# ---------------------------------------------------------------------------
# Ghost models


def _numpy(x: Any) -> np.ndarray:
    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


class GhostModelForCausalLM:
    """A causal LM whose weights are on djinnd: ``generate()`` as
    transformers' for the arguments it takes, one context per row."""

    def __init__(self, model: Model, name_or_path: str,
                 config: Dict[str, Any], generation: Dict[str, Any]) -> None:
        self.djinn_model = model
        self.name_or_path = name_or_path
        i = model.info
        cfg = dict(config)
        cfg.setdefault("vocab_size", i.vocab)
        cfg.setdefault("num_hidden_layers", i.n_layer)
        cfg.setdefault("hidden_size", i.hidden)
        cfg.setdefault("max_position_embeddings", i.max_tokens)
        self.config = SimpleNamespace(**cfg)
        self.generation_config = SimpleNamespace(**generation)
        self.device = "djinn"

    def eval(self) -> "GhostModelForCausalLM":
        return self

    def to(self, *args: Any, **kwargs: Any) -> "GhostModelForCausalLM":
        """Nothing moves: the weights are on djinnd."""
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "a ghost model's layers run on djinnd a step at a time: use "
            "generate(), or djinn contexts (model.djinn_model.context()) "
            "for logits and breakpoints")

    def _gen(self, name: str, given: Any, default: Any) -> Any:
        if given is not None:
            return given
        return getattr(self.generation_config, name, default)

    def generate(self, input_ids: Any = None, *,
                 attention_mask: Any = None,
                 max_new_tokens: Optional[int] = None,
                 max_length: Optional[int] = None,
                 do_sample: Optional[bool] = None,
                 temperature: Optional[float] = None,
                 top_k: Optional[int] = None,
                 top_p: Optional[float] = None,
                 eos_token_id: Any = None,
                 pad_token_id: Optional[int] = None,
                 seed: Optional[int] = None,
                 **kwargs: Any) -> Any:
        """The input rows followed by their new tokens, (batch, length):
        a torch tensor for a torch input, else a numpy array. Greedy
        unless do_sample (transformers' default and the checkpoint's
        generation_config.json apply); a row stops at an eos token and
        is padded with pad_token_id while the others go on, and the
        batch stops when every row has. Sampling draws from djinnd's own
        stream (seed=, random when not given), not torch's."""
        if input_ids is None:
            raise InvalidArgument(22, "generate() needs input_ids")
        _unsupported(kwargs, vars(self.generation_config))
        torch_in = type(input_ids).__module__.startswith("torch")
        ids = _numpy(input_ids)
        if ids.ndim == 1:
            ids = ids[None, :]
        if ids.ndim != 2:
            raise InvalidArgument(22, f"input_ids of {ids.ndim} dims")
        mask = None if attention_mask is None else _numpy(attention_mask)
        if mask is not None and mask.shape != ids.shape:
            raise InvalidArgument(22, "attention_mask's shape is not "
                                  "input_ids'")
        T = ids.shape[1]
        if max_new_tokens is None and max_length is None:
            max_new_tokens = getattr(self.generation_config,
                                     "max_new_tokens", None)
        if max_new_tokens is None:
            ml = self._gen("max_length", max_length, 20)
            max_new_tokens = ml - T
        if max_new_tokens < 1:
            raise InvalidArgument(
                22, f"{max_new_tokens} new tokens to generate "
                f"(max_length {max_length}, prompt {T})")
        sample = bool(self._gen("do_sample", do_sample, False))
        eos = self._gen("eos_token_id", eos_token_id, None)
        eos_list = list(eos) if isinstance(eos, (list, tuple)) else \
            ([] if eos is None else [eos])
        eos_set = set(eos_list)
        pad = self._gen("pad_token_id", pad_token_id, None)
        if pad is None:  # as transformers: the (first) eos token
            pad = eos_list[0] if eos_list else 0
        kw: Dict[str, Any]
        if sample:
            kw = dict(temperature=float(self._gen("temperature", temperature,
                                                  1.0)),
                      top_k=int(self._gen("top_k", top_k, 50) or 0),
                      top_p=float(self._gen("top_p", top_p, 1.0)),
                      seed=int(seed if seed is not None else
                               random.getrandbits(63)))
        else:
            kw = {}
        rows = []
        seed0 = kw.get("seed", 0)
        for r in range(ids.shape[0]):
            if sample:  # a stream of its own for each row
                kw["seed"] = (seed0 + r) % (1 << 63)
            prompt = ids[r] if mask is None else ids[r][mask[r] != 0]
            with self.djinn_model.context(
                    min(self.djinn_model.info.max_tokens,
                        len(prompt) + max_new_tokens)) as ctx:
                ctx.prefill(prompt)
                new = ctx.generate(max_new_tokens, **kw).tolist()
            for k, t in enumerate(new):
                if t in eos_set:
                    new = new[:k + 1]
                    break
            rows.append(new)
        width = max(len(r) for r in rows)
        out = np.full((ids.shape[0], T + width), pad, ids.dtype
                      if ids.dtype.kind in "iu" else np.int64)
        out[:, :T] = ids
        for r, new in enumerate(rows):
            out[r, T:T + len(new)] = new
        if torch_in:
            import torch

            return torch.from_numpy(out).to(input_ids.device)
        return out


# generate() settings ghost models do not apply, with the value that
# means "off" (transformers' default): any other value is refused rather
# than ignored, from the call or the checkpoint's generation_config.json
_OFF = {
    "repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0, "min_new_tokens": 0,
    "min_length": 0, "num_beams": 1, "num_return_sequences": 1,
    "num_beam_groups": 1, "penalty_alpha": None, "typical_p": 1.0,
    "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "min_p": None,
    "diversity_penalty": 0.0, "bad_words_ids": None,
    "force_words_ids": None, "forced_bos_token_id": None,
    "forced_eos_token_id": None, "suppress_tokens": None,
    "begin_suppress_tokens": None, "sequence_bias": None,
    "renormalize_logits": False, "return_dict_in_generate": False,
    "output_scores": False, "output_logits": False,
    "output_attentions": False, "output_hidden_states": False,
    "stop_strings": None, "exponential_decay_length_penalty": None,
    "guidance_scale": None, "assistant_model": None,
    "prompt_lookup_num_tokens": None, "streamer": None,
    "logits_processor": None, "stopping_criteria": None,
    "prefix_allowed_tokens_fn": None,
}
# arguments transformers takes that change nothing here
_HARMLESS = {"use_cache", "bos_token_id", "decoder_start_token_id",
             "synced_gpus", "cache_implementation", "low_memory"}


def _unsupported(kwargs: Dict[str, Any], gen: Dict[str, Any]) -> None:
    def on(k: str, v: Any) -> bool:  # None is off, as transformers takes it
        return v is not None and v != _OFF[k]

    bad = []
    for k, v in kwargs.items():
        if k in _OFF:
            if on(k, v):
                bad.append(f"{k}={v!r}")
        elif k not in _HARMLESS:
            bad.append(f"{k} (not an argument ghost models take)")
    for k, v in gen.items():
        if k in _OFF and k not in kwargs and on(k, v):
            bad.append(f"{k}={v!r} (generation_config.json)")
    if bad:
        raise InvalidArgument(
            22, "ghost models generate greedily or by temperature, top_k "
            "and top_p only; not applied: " + ", ".join(bad))


def _model_name(name: str) -> str:
    return name.replace("/", "--")


class AutoModelForCausalLM:
    """``AutoModelForCausalLM.from_pretrained(name_or_path)``: a ghost
    model (see the module's doc)."""

    @staticmethod
    def from_pretrained(name_or_path: Union[str, os.PathLike], *args: Any,
                        session: Optional[Session] = None,
                        **kwargs: Any) -> GhostModelForCausalLM:
        s = session or default_session()
        p = os.fspath(name_or_path)
        if os.path.isdir(p):
            m = s.upload_model(p)
            cfg = _read_json(os.path.join(p, "config.json"))
            gen = _read_json(os.path.join(p, "generation_config.json"))
        else:
            m = s.model(_model_name(p))
            cfg, gen = {}, {}
        for k in ("eos_token_id", "pad_token_id", "bos_token_id"):
            if k not in gen and cfg.get(k) is not None:
                gen[k] = cfg[k]
        return GhostModelForCausalLM(m, p, cfg, gen)


_saved: Optional[Any] = None


def intercept_huggingface(session: Optional[Session] = None) -> None:
    """Make transformers.AutoModelForCausalLM.from_pretrained return
    ghost models (in @session, else the default one) until
    restore_huggingface()."""
    global _saved
    import transformers

    cls = transformers.AutoModelForCausalLM
    if _saved is None:
        _saved = cls.__dict__["from_pretrained"]

    def from_pretrained(klass: Any, name_or_path: Any, *args: Any,
                        **kwargs: Any) -> GhostModelForCausalLM:
        return AutoModelForCausalLM.from_pretrained(
            name_or_path, session=session, **kwargs)

    cls.from_pretrained = classmethod(from_pretrained)


def restore_huggingface() -> None:
    """Undo intercept_huggingface()."""
    global _saved
    if _saved is not None:
        import transformers

        transformers.AutoModelForCausalLM.from_pretrained = _saved
        _saved = None
