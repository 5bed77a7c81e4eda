# Exhaustion attacks against a real djinnd (tests/integration/test_exhaust.c):
# frames held half-sent, idle connections, one uid or address opening more
# than its share, TEXT_LOOKUP misses in the statistics; each with a victim
# that must still be served. In make test and make asan.
EXHAUST_TEST := $(BUILD)/tests/integration/test_exhaust

SRCS += tests/integration/test_exhaust.c
all: $(EXHAUST_TEST)
TESTS += $(EXHAUST_TEST)

$(EXHAUST_TEST): $(BUILD)/tests/integration/test_exhaust.o \
		$(BUILD)/tests/integration/daemon.o $(BUILD)/lib/fdstore_standin.o \
		$(BUILD)/tests/integration/fixture.o | $(DJINND)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) -lcmocka -lcrypto -lm
