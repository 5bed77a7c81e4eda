# Passes against a real djinnd (tests/integration/test_passes.c): the
# steps of many sessions on one model as one forward, their tokens those
# of each alone; a prefill joining decodes; a paused, a waiting and a
# freed context beside others; max_batch = 1; in make test and make asan.
PASSES_TEST := $(BUILD)/tests/integration/test_passes

SRCS += tests/integration/test_passes.c
all: $(PASSES_TEST)
TESTS += $(PASSES_TEST)

$(PASSES_TEST): $(BUILD)/tests/integration/test_passes.o $(LIBDJINN_FX) \
		| $(DJINND)
	$(link_libdjinn_test)
