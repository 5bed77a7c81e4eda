# Who a client is (djinnd/session/tenant.c): a loopback TCP peer's uid
# comes from sock_diag, through libnl-3 (mk/leases.mk links it).
%/djinnd/session/tenant.o: ALL_CFLAGS += $(NL_CFLAGS)

# Who a client is, against a real djinnd (tests/integration/test_tenants.c):
# tenants from SO_PEERCRED and SO_PEERGROUPS through [tenant.NAME] uids and
# gids, labels that change nothing, reloads, refusals. Needs root (it
# connects as other uids); skips without. In make test and make asan.
TENANTS_TEST := $(BUILD)/tests/integration/test_tenants

SRCS += tests/integration/test_tenants.c
all: $(TENANTS_TEST)
TESTS += $(TENANTS_TEST)

$(TENANTS_TEST): $(BUILD)/tests/integration/test_tenants.o \
		$(BUILD)/tests/integration/daemon.o $(BUILD)/lib/fdstore_standin.o \
		$(BUILD)/tests/integration/fixture.o | $(DJINND)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) -lcmocka -lcrypto -lm
