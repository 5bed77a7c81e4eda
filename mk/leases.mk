# djinnd's /dev/djinn lease provider (djinnd/session/lease_kmod.c) and
# djinnctl's netlink side (session list/kill, monitor): both follow the
# "djinn" generic netlink family through libnl-genl-3.

DEB_PKGS += libnl-3-dev libnl-genl-3-dev

NL_CFLAGS := $(shell pkg-config --cflags libnl-genl-3.0 2>/dev/null || echo -I/usr/include/libnl3)
NL_LIBS   := $(shell pkg-config --libs libnl-genl-3.0 2>/dev/null || echo -lnl-genl-3 -lnl-3)

%/djinnd/session/lease_kmod.o: ALL_CFLAGS += $(NL_CFLAGS)
%/tools/djinnctl_nl.o: ALL_CFLAGS += $(NL_CFLAGS)

# Everything that links libdjinnd.a may pull lease_kmod.o in.
LIBS_DJINND      += $(NL_LIBS)
test_exec_LIBS   += $(NL_LIBS)
test_sched_LIBS  += $(NL_LIBS)
fuzz_frames_LIBS += $(NL_LIBS)
# djinnctl's link line has no library variable: the libraries go before
# its objects, needed all the same (a shared library that came first
# still resolves what later objects use).
$(DJINNCTL): ALL_LDFLAGS += -Wl,--push-state,--no-as-needed $(NL_LIBS) -Wl,--pop-state

DJINNCTL_NL_OBJ := $(BUILD)/tools/djinnctl_nl.o
SRCS += tools/djinnctl_nl.c
$(DJINNCTL): $(DJINNCTL_NL_OBJ)

# In the djinn.ko test guest (mk/kmod.mk, tests/kmod/init.sh): djinnd,
# djinnctl, djinnd's tests on the module and the lease providers'
# benchmark, beside the module's own tests.
KT_DJ_BINS := $(KT_DIR)/test_djinnd $(KT_DIR)/djinn_lbench
$(KT_DJ_BINS): $(KT_DIR)/%: $(KT_DIR)/guest/%.o $(KT_DIR)/guest/kt.o \
		$(KT_DIR)/guest/djd.o
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcmocka $(KT_LIBS)
# test_djinnd plays systemd's fd store as the integration tests do
$(KT_DIR)/test_djinnd: $(BUILD)/lib/fdstore_standin.o
KT_BINS += $(KT_DJ_BINS) $(DJINND) $(DJINNCTL)
$(KT_INITRD): $(KT_DJ_BINS) $(DJINND) $(DJINNCTL)

# libdjinn on the module (libdjinn/kdev.c), in the guest too.
KT_KDEV := $(KT_DIR)/test_kdev
$(KT_KDEV): $(KT_DIR)/guest/test_kdev.o $(KT_DIR)/guest/kt.o \
		$(KT_DIR)/guest/djd.o $(LIBDJINN_A)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) -lcmocka $(KT_LIBS) \
		$(LIBS_LIBDJINN)
KT_BINS += $(KT_KDEV)
$(KT_INITRD): $(KT_KDEV)
