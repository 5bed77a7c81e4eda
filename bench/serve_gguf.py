#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Convert a checkpoint of scripts/mkmodel.py --chat to GGUF (f32) with
llama.cpp's own converter, for serve-bench's llama.cpp baseline.

    LLAMA_CPP_DIR=.../vendor/llama.cpp PYTHON bench/serve_gguf.py SRC OUT

convert_hf_to_gguf.py names a BPE tokenizer's pre-tokenizer by the hash
of a test string's ids, and refuses hashes it does not know; the chat
tokenizer mkmodel writes is its own. This runs the converter unchanged,
but answers such a hash with "gpt-2": GPT-2's byte-level split, the one
that tokenizer's ByteLevel pre-tokenizer uses. PYTHON needs the
converter's packages (numpy, torch, transformers, safetensors); the
gguf package comes from LLAMA_CPP_DIR.
"""
import logging
import os
import sys

src = os.environ.get("LLAMA_CPP_DIR")
if not src or not os.path.isfile(os.path.join(src,
                                              "convert_hf_to_gguf.py")):
    sys.exit("serve_gguf: LLAMA_CPP_DIR names no llama.cpp source "
             "(convert_hf_to_gguf.py)")
if len(sys.argv) != 3:
    sys.exit("usage: serve_gguf.py MODEL_DIR OUT.gguf")
sys.path[:0] = [src, os.path.join(src, "gguf-py")]
model, out = sys.argv[1:]
sys.argv = [os.path.join(src, "convert_hf_to_gguf.py"), model,
            "--outfile", out, "--outtype", "f32"]

try:  # newer trees keep the model classes in a package of their own
    from conversion.base import TextModel  # noqa: E402
except ImportError:
    from convert_hf_to_gguf import TextModel  # noqa: E402

known = TextModel.get_vocab_base_pre


def pre_tokenizer(self, tokenizer):
    try:
        return known(self, tokenizer)
    except NotImplementedError:
        logging.getLogger("serve_gguf").warning(
            "a pre-tokenizer hash llama.cpp does not know: gpt-2's split")
        return "gpt-2"


TextModel.get_vocab_base_pre = pre_tokenizer
import convert_hf_to_gguf  # noqa: E402

convert_hf_to_gguf.main()
