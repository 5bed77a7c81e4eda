# libdjinn rides a restart (tests/integration/test_reconnect.c): a TLS
# connection dropped by a planned restart comes back attached to its
# sessions, a session djinnd lost answers -ENOENT, and a djinnd that does
# not come back fails every call after the time allowed. A real djinnd
# with a tls: listener and --handover; certificates made in the test.
# Needs no root. In make test and make asan.
RECONNECT_TEST := $(BUILD)/tests/integration/test_reconnect

SRCS += tests/integration/test_reconnect.c
all: $(RECONNECT_TEST)
TESTS += $(RECONNECT_TEST)

$(RECONNECT_TEST): $(BUILD)/tests/integration/test_reconnect.o \
		$(BUILD)/tests/integration/daemon.o $(BUILD)/tests/integration/store.o \
		$(BUILD)/tests/integration/fixture.o $(LIBDJINN_A) \
		$(COMMON_LIB) | $(DJINND)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIBS_LIBDJINN) \
		$(COMMON_LIB) -lssl -lcrypto -lcmocka -lm
