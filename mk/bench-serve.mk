# djinn serve's benchmark (bench/serve-bench.py, Documentation/serve.rst,
# "Benchmark"): N agents of five chat turns with a tool call each,
# through the openai SDK, against djinn serve with its conversations and
# without them (--contexts 0, the stateless baseline), and, with
# SERVE_BENCH_LLAMACPP=PYTHON and SERVE_BENCH_LLAMACPP_SRC=DIR, against
# llama.cpp's OpenAI server on the same weights in GGUF: PYTHON has
# llama-cpp-python[server] (built from its PyPI source distribution with
# Debian's cmake, about 5 minutes here) and llama.cpp's converter's
# packages (torch, transformers), DIR is that distribution's
# vendor/llama.cpp (bench/serve_gguf.py converts with its
# convert_hf_to_gguf.py). Documentation/serve.rst, "Benchmark".
#
#   make bench-serve [SERVE_BENCH_ARGS='--agents 4,16']
#
# JSON lines on stdout and in $(SERVE_BENCH_OUT). Runs in make test's
# venv of djinn serve's packages (mk/python.mk). Never part of make test.
SERVE_BENCH_ARGS     ?=
SERVE_BENCH_OUT      ?= $(BUILD)/serve-bench.jsonl
SERVE_BENCH_LLAMACPP ?=
SERVE_BENCH_LLAMACPP_SRC ?=

.PHONY: bench-serve
bench-serve: deps
	$(Q)$(MAKE) --no-print-directory all $(SERVE_STAMP)
	$(Q)test -f $(SERVE_STAMP) || { echo "bench-serve: djinn serve's" \
		"packages did not install (see above)"; exit 1; }
	$(Q)$(SERVE_VENV)/bin/python bench/serve-bench.py --build $(BUILD) \
		--out $(SERVE_BENCH_OUT) \
		$(if $(SERVE_BENCH_LLAMACPP),--llamacpp $(SERVE_BENCH_LLAMACPP) \
		--llamacpp-src $(SERVE_BENCH_LLAMACPP_SRC)) \
		$(SERVE_BENCH_ARGS)
