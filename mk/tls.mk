# TLS listeners against a real djinnd (tests/integration/test_tls.c):
# certificates made in the test with libcrypto (a CA, another CA, djinnd's,
# clients good, expired, foreign and misnamed) and bearer tokens; who a
# client is, each refusal's errno and words, and victim sessions alongside
# that notice nothing. libdjinn (static) is the client, with raw frames
# over an OpenSSL bridge where libdjinn cannot say it. Needs no root. In
# make test and make asan.
TLS_TEST := $(BUILD)/tests/integration/test_tls

SRCS += tests/integration/test_tls.c
all: $(TLS_TEST)
TESTS += $(TLS_TEST)

$(TLS_TEST): $(BUILD)/tests/integration/test_tls.o \
		$(BUILD)/tests/integration/daemon.o $(BUILD)/tests/integration/store.o \
		$(BUILD)/tests/integration/fixture.o $(LIBDJINN_A) \
		$(COMMON_LIB) | $(DJINND)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIBS_LIBDJINN) \
		$(COMMON_LIB) -lssl -lcrypto -lcmocka -lm
