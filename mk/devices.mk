# Several devices in one djinnd (Documentation/djinnd.rst, "Devices"):
# placement, per-device routing of tensors, graphs, text, models and
# faults, and djinnctl's per-device output, against a real djinnd with
# two CPU devices (--backend cpu --device 0 --device 1), in make test and
# make asan.
DEVICES_TEST := $(BUILD)/tests/integration/test_devices

SRCS += tests/integration/test_devices.c
all: $(DEVICES_TEST)
TESTS += $(DEVICES_TEST)

$(DEVICES_TEST): $(BUILD)/tests/integration/test_devices.o \
		$(BUILD)/tests/integration/daemon.o $(LIBDJINN_A) \
		| $(DJINND) $(DJINNCTL)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIBS_LIBDJINN) \
		-lcmocka -lm
