# The agent-density benchmark (bench/agent-bench.c): N agents live at
# once (a closed loop: an agent that ends is replaced), each a
# connection, a session and a context on one shared model, alternating
# decode turns with tool calls announced to the scheduler
# (djinn_tool_call_begin/end), under each of djinnd's memory policies
# (semantic, lru, static) on a budget below their KV caches together;
# the largest N within the SLO per policy, and their ratios.
#
#   make bench-agent [BENCH_CACHE=DIR] [AGENT_BENCH_ARGS='--agents 4,16']
#   make bench-agent AGENT_BENCH_ARGS='--bisect 4:64 --estimate-error 0.5'
#   make bench-agent AGENT_BENCH_ARGS='--backend cuda'   (on a GPU; skipped
#                                                        without one)
#
# It writes $(AGENT_BENCH_OUT) (JSON lines, also on stdout) and then
# $(AGENT_PLOT) (p99 turn latency against N per policy, the SLO as a
# line) with bench/agent_plot.py, whose matplotlib comes from PyPI into a
# virtual environment in $(BENCH_CACHE) (kept between runs; without it
# the plot is skipped with a message). The model (9 MB, written in a
# second by scripts/mkmodel.py, standard library only) is kept in
# $(BENCH_CACHE)/models.
#
# The defaults make KV memory the bottleneck and a whole run take about
# ten minutes on two cores: a model of 8 layers 128 wide (8 KiB of f32
# KV cache a token for little compute); agents whose contexts reach 928
# tokens (7.3 MiB) in contexts of 1024 (8 MiB, what the static policy
# reserves), prefilled in chunks of 64 tokens (djinnd's stack keeps the
# peak of a step's activations); tools of median 1 s (sigma 1) between
# turns of 16 tokens; a 64 MiB budget (weights 10, stack 10, about 40
# for KV caches) with 1 GiB of host swap (memory.swap), and djinnd's
# kernels on one core (--threads 1), the other left to its memory
# executor as a GPU's copy engines are. bench/agent-bench.c's head says
# why each.
#
# Never part of `make test`: it builds with `make` (so that it keeps
# compiling) and runs only here.
AGENT_BENCH      := $(BUILD)/bench/agent-bench
AGENT_BENCH_ARGS ?=
AGENT_BENCH_OUT  ?= $(BUILD)/agent-bench.jsonl
AGENT_PLOT       ?= Documentation/sched-density.png
# (mk/bench-model.mk sets the same default; this file is read first)
BENCH_CACHE      ?= $(BUILD)/bench-cache
AGENT_PLOT_VENV   = $(BENCH_CACHE)/venv-plot

# A libdjinn program, linked as the examples are; it parses djinnctl's
# JSON with jansson itself, and writes its own with lib/figure.c
# (libcommon.a). Its main in bench/agent-bench.c, the rest in
# bench/agent/ (bench/agent/agent.h).
AGENT_BENCH_SRCS := bench/agent-bench.c $(wildcard bench/agent/*.c) \
		    bench/djinnd.c
AGENT_BENCH_OBJS := $(AGENT_BENCH_SRCS:%.c=$(BUILD)/%.o)
SRCS += $(wildcard bench/agent/*.c) bench/djinnd.c
$(AGENT_BENCH): $(AGENT_BENCH_OBJS) $(BUILD)/libdjinn.so $(COMMON_LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(AGENT_BENCH_OBJS) -L$(BUILD) -ldjinn \
		-ljansson -Wl,-rpath,'$$ORIGIN/..' $(COMMON_LIB) -lm
all: $(AGENT_BENCH)

# matplotlib from PyPI; a failed install leaves no venv behind.
$(AGENT_PLOT_VENV)/.matplotlib:
	$(Q)mkdir -p $(BENCH_CACHE)
	$(Q)rm -rf $(AGENT_PLOT_VENV) && python3 -m venv $(AGENT_PLOT_VENV) && \
	$(AGENT_PLOT_VENV)/bin/pip install -q --timeout 30 matplotlib && \
	$(AGENT_PLOT_VENV)/bin/python -c 'import matplotlib' && touch $@ || \
	{ echo "bench-agent: no matplotlib; the plot will be skipped" >&2; \
	  rm -rf $(AGENT_PLOT_VENV); }

# 77 (--backend cuda without a GPU) is a skip, not a failure.
.PHONY: bench-agent
bench-agent: deps
	$(Q)$(MAKE) --no-print-directory $(AGENT_BENCH) $(DJINND) $(DJINNCTL) \
		$(AGENT_PLOT_VENV)/.matplotlib
	$(Q)$(AGENT_BENCH) --cache $(BENCH_CACHE) --out $(AGENT_BENCH_OUT) \
		--djinnd $(DJINND) --djinnctl $(DJINNCTL) $(AGENT_BENCH_ARGS); \
	st=$$?; if [ $$st = 77 ]; then exit 0; elif [ $$st != 0 ]; then \
		exit $$st; fi; \
	if [ -f $(AGENT_PLOT_VENV)/.matplotlib ]; then \
		$(AGENT_PLOT_VENV)/bin/python bench/agent_plot.py \
			$(AGENT_BENCH_OUT) -o $(AGENT_PLOT); \
	else echo "bench-agent: no matplotlib: no plot" >&2; fi
