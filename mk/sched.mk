# The scheduler against a real djinnd (tests/integration/test_sched.c):
# the semantic policy's swap on IO_WAIT and its prefetch, fair queueing
# and the in-flight cap, static partitioning, sched.policy and tenant
# shares from flags, the configuration file and SIGHUP, and the checks
# on signals; in make test and make asan.
SCHED_TEST := $(BUILD)/tests/integration/test_sched

SRCS += tests/integration/test_sched.c
all: $(SCHED_TEST)
TESTS += $(SCHED_TEST)

$(SCHED_TEST): $(BUILD)/tests/integration/test_sched.o $(LIBDJINN_FX) \
		| $(DJINND)
	$(link_libdjinn_test)
