# Models larger than the device (bench/stream-bench.c, issue 15): a
# 640 MB Llama-shaped model on the CPU backend wholly on the device and
# streamed under budgets of a half and a quarter of its weights; decode
# and prefill tokens/s, the ring's GB/s beside the memcpy peak, overlap
# beside synchronous offload, sessions decoding together.
#
#   make bench-stream [BENCH_CACHE=DIR] [BENCH_STREAM_ARGS='--rounds 5']
STREAM_BENCH := $(BUILD)/bench/stream-bench
BENCH_STREAM_ARGS ?=

$(STREAM_BENCH): $(BUILD)/bench/stream-bench.o $(BUILD)/libmodel.a \
		 $(BUILD)/djinnd/graph/run.o $(BACKEND_LIB) $(VMU_LIB) \
		 $(COMMON_LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(STREAM_BENCH_CUDA) $(LIBS_MODEL) \
		-lm -lpthread
all: $(STREAM_BENCH)

.PHONY: bench-stream
bench-stream: deps
	$(Q)$(MAKE) --no-print-directory $(STREAM_BENCH)
	$(Q)$(STREAM_BENCH) --cache $(BENCH_CACHE) $(BENCH_STREAM_ARGS)
