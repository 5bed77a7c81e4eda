# TLS listeners against a real djinnd (tests/integration/test_tls.c):
# certificates made in the test with libcrypto (a CA, another CA, djinnd's,
# clients good, expired, foreign and misnamed) and bearer tokens; who a
# client is, each refusal's errno and words, and victim sessions alongside
# that notice nothing. libdjinn (static) is the client, with raw frames
# over an OpenSSL bridge where libdjinn cannot say it.
#
# libdjinn rides a restart (tests/integration/test_reconnect.c): a TLS
# connection dropped by a planned restart comes back attached to its
# sessions, a session djinnd lost answers -ENOENT, and a djinnd that does
# not come back fails every call after the time allowed; certificates
# made in the test as well.
#
# Both need no root, and run in make test and make asan.
TLS_TEST := $(BUILD)/tests/integration/test_tls
RECONNECT_TEST := $(BUILD)/tests/integration/test_reconnect

SRCS += tests/integration/test_tls.c tests/integration/test_reconnect.c
all: $(TLS_TEST) $(RECONNECT_TEST)
TESTS += $(TLS_TEST) $(RECONNECT_TEST)

$(TLS_TEST) $(RECONNECT_TEST): %: %.o \
		$(BUILD)/tests/integration/daemon.o $(BUILD)/lib/fdstore_standin.o \
		$(BUILD)/tests/integration/fixture.o $(LIBDJINN_A) \
		$(COMMON_LIB) | $(DJINND)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIBS_LIBDJINN) \
		$(COMMON_LIB) -lssl -lcrypto -lcmocka -lm
