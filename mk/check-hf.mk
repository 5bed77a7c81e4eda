# djinnd's model runtime against Hugging Face transformers' own forward
# pass, end to end through a real djinnd (scripts/check_hf.py): small
# models written by transformers 5 and by transformers 4.57, every
# architecture, dtype, RoPE variant and config form djinnd reads; their
# greedy tokens and logits from `djinn generate --logits` beside
# transformers'. Too heavy for CI: `make test` does not run it.
#
#   make check-hf [CHECK_HF_CACHE=DIR] [CHECK_HF_ARGS='--only qwen3']
#
# The environment is kept in $(CHECK_HF_CACHE), outside the tree's
# sources, and built once (a few GB, minutes): venv/ with torch (CPU; from
# PyTorch's CPU index where it answers, else PyPI's), numpy and
# safetensors; tf5/ and tf4/ with transformers, each installed with
# `pip install --target` and put on PYTHONPATH for its half of the run.
# A directory that already holds a working install is only stamped,
# never reinstalled. The cases' models, logits and djinnd's log are left
# in $(BUILD)/check-hf.
CHECK_HF_CACHE ?= $(BUILD)/check-hf-cache
CHECK_HF_TF5   ?= 5.24.0
CHECK_HF_TF4   ?= 4.57.6
CHECK_HF_ARGS  ?=
CHECK_HF_VENV  := $(CHECK_HF_CACHE)/venv
CHECK_HF_PY    := $(CHECK_HF_VENV)/bin/python
CHECK_HF_STAMPS := $(CHECK_HF_VENV)/.check-hf \
		   $(CHECK_HF_CACHE)/tf5/.check-hf-$(CHECK_HF_TF5) \
		   $(CHECK_HF_CACHE)/tf4/.check-hf-$(CHECK_HF_TF4)

$(CHECK_HF_VENV)/.check-hf:
	$(Q)mkdir -p $(CHECK_HF_CACHE)
	$(Q)if ! $(CHECK_HF_PY) -c 'import torch, numpy, safetensors' \
		2>/dev/null; then \
		echo "check-hf: a venv with torch in $(CHECK_HF_VENV)"; \
		rm -rf $(CHECK_HF_VENV) && python3 -m venv $(CHECK_HF_VENV) && \
		{ $(CHECK_HF_PY) -m pip install -q --timeout 20 torch \
			--index-url https://download.pytorch.org/whl/cpu || \
		  $(CHECK_HF_PY) -m pip install -q torch; } && \
		$(CHECK_HF_PY) -m pip install -q numpy safetensors && \
		$(CHECK_HF_PY) -c 'import torch, numpy, safetensors' || \
		{ echo "check-hf: cannot install torch" >&2; \
		  rm -rf $(CHECK_HF_VENV); exit 1; }; \
	fi
	$(Q)touch $@

# $(call check_hf_tf,DIR,VERSION): transformers VERSION in DIR
check_hf_is = import sys, transformers as t; sys.exit(t.__version__ != "$(1)")
define check_hf_tf
	$(Q)if ! PYTHONPATH=$(1) $(CHECK_HF_PY) -c '$(call check_hf_is,$(2))' \
		2>/dev/null; then \
		echo "check-hf: transformers $(2) in $(1)"; \
		$(CHECK_HF_PY) -m pip install -q --upgrade --target $(1) \
			transformers==$(2) && \
		PYTHONPATH=$(1) $(CHECK_HF_PY) -c 'import transformers' || \
		{ echo "check-hf: cannot install transformers $(2)" >&2; \
		  exit 1; }; \
	fi
	$(Q)touch $@
endef

$(CHECK_HF_CACHE)/tf5/.check-hf-$(CHECK_HF_TF5): $(CHECK_HF_VENV)/.check-hf
	$(call check_hf_tf,$(CHECK_HF_CACHE)/tf5,$(CHECK_HF_TF5))

$(CHECK_HF_CACHE)/tf4/.check-hf-$(CHECK_HF_TF4): $(CHECK_HF_VENV)/.check-hf
	$(call check_hf_tf,$(CHECK_HF_CACHE)/tf4,$(CHECK_HF_TF4))

.PHONY: check-hf
check-hf:
	$(Q)scripts/deps.sh $(DEB_PKGS) python3-venv
	$(Q)$(MAKE) --no-print-directory $(DJINND) $(DJINN_TOOL) \
		$(CHECK_HF_STAMPS)
	$(Q)$(CHECK_HF_PY) scripts/check_hf.py --cache $(CHECK_HF_CACHE) \
		--djinnd $(DJINND) --djinn $(DJINN_TOOL) \
		--workdir $(BUILD)/check-hf $(CHECK_HF_ARGS)
