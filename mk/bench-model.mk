# The model runtime's benchmark (bench/model-bench.c, issue 6): prefill
# and decode tokens/s of a GPT-2 124M-shaped model on the CPU backend
# beside PyTorch eager (bench/model_torch.py) on the same weights, and
# the text segment with one and four sessions holding the model.
#
#   make bench-model [BENCH_CACHE=DIR] [BENCH_MODEL_ARGS='--rounds 5']
#   make bench-model BENCH_MODEL_ARGS='--backend cuda'   (on a GPU; 77
#                                                       without one)
#   make bench-model BENCH_MODEL_ARGS='--arch qwen2'  (a Qwen2-shaped
#                                  100M model: the llama family's path)
#
# The model (about 500 MB; qwen2's 400 MB; under a minute to write) and PyTorch (a virtual
# environment from PyPI, for the benchmark only; a few GB) are kept in
# $(BENCH_CACHE) between runs. Without PyTorch the baselines are null.
MODEL_BENCH := $(BUILD)/bench/model-bench
BENCH_CACHE ?= $(BUILD)/bench-cache
BENCH_VENV  := $(BENCH_CACHE)/venv
BENCH_MODEL_ARGS ?=

# The pattern rule in Makefile links the VMU only: this one the runtime.
# (mk/model.mk comes later: its variables are spelled out here.)
# --sessions (bench/model-sessions.c) speaks to a real djinnd through
# libdjinn (static) and reads its counters with djinnctl.
MODEL_BENCH_OBJS := $(BUILD)/bench/model-bench.o \
		    $(BUILD)/bench/model-sessions.o $(BUILD)/bench/djinnd.o
SRCS += bench/model-sessions.c
$(MODEL_BENCH): $(MODEL_BENCH_OBJS) $(BUILD)/libmodel.a \
		$(BUILD)/djinnd/graph/run.o $(BACKEND_LIB) $(VMU_LIB) \
		$(COMMON_LIB) $(LIBDJINN_A)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(MODEL_BENCH_OBJS) $(MODEL_BENCH_CUDA) \
		$(LIBS_MODEL) $(LIBDJINN_A) -lssl -lcrypto -lm
all: $(MODEL_BENCH)

# PyTorch's CPU build where its index answers, else PyPI's; a failed
# install leaves no venv behind, and the benchmark runs without it.
$(BENCH_VENV)/.torch:
	$(Q)mkdir -p $(BENCH_CACHE)
	$(Q)rm -rf $(BENCH_VENV) && python3 -m venv $(BENCH_VENV) && \
	( $(BENCH_VENV)/bin/pip install -q --timeout 20 torch \
		--index-url https://download.pytorch.org/whl/cpu || \
	  $(BENCH_VENV)/bin/pip install -q torch ) && \
	$(BENCH_VENV)/bin/python -c 'import torch' && touch $@ || \
	{ echo "bench-model: no PyTorch; baselines will be null" >&2; \
	  rm -rf $(BENCH_VENV); }

.PHONY: bench-model
bench-model: deps
	$(Q)$(MAKE) --no-print-directory $(MODEL_BENCH) $(BENCH_VENV)/.torch
	$(Q)py=python3; test -f $(BENCH_VENV)/.torch && \
		py=$(BENCH_VENV)/bin/python; \
	$(MODEL_BENCH) --cache $(BENCH_CACHE) --python $$py $(BENCH_MODEL_ARGS)

# Many sessions decoding on one model through a real djinnd
# (model-bench --sessions, bench/model-sessions.c): batching on, off, and
# PyTorch's batch, for the GPT-2 and the Qwen2-shaped model.
#
#   make bench-sessions [BENCH_SESSIONS_ARGS='--sessions 1,2,4,8,16']
BENCH_SESSIONS_ARGS ?= --sessions 1,2,4,8
.PHONY: bench-sessions
bench-sessions: deps
	$(Q)$(MAKE) --no-print-directory $(MODEL_BENCH) $(DJINND) $(DJINNCTL) \
		$(BENCH_VENV)/.torch
	$(Q)py=python3; test -f $(BENCH_VENV)/.torch && \
		py=$(BENCH_VENV)/bin/python; \
	for a in gpt2 qwen2; do \
		$(MODEL_BENCH) --cache $(BENCH_CACHE) --python $$py --arch $$a \
			--djinnd $(DJINND) --djinnctl $(DJINNCTL) \
			$(BENCH_SESSIONS_ARGS) || exit $$?; \
	done
