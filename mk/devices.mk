# Several devices in one djinnd (Documentation/djinnd.rst, "Devices"):
# placement, per-device routing of tensors, graphs, text, models and
# faults, and djinnctl's per-device output, against a real djinnd with
# two CPU devices (--backend cpu --device 0 --device 1), in make test and
# make asan.
DEVICES_TEST := $(BUILD)/tests/integration/test_devices

SRCS += tests/integration/test_devices.c
all: $(DEVICES_TEST)
TESTS += $(DEVICES_TEST)

$(DEVICES_TEST): $(BUILD)/tests/integration/test_devices.o $(LIBDJINN_FX) \
		| $(DJINND) $(DJINNCTL)
	$(link_libdjinn_test)

# djinnd's data paths for a GPU (staged reads through the memory
# executor), on the CPU: the raw-protocol tests ($(INTEG_BINS)) and
# test_libdjinn_models again with --cpu-device-only
# (tests/integration/test_device_only.sh).
DEVICE_ONLY_TEST := $(BUILD)/tests/integration/test_device_only
$(DEVICE_ONLY_TEST): tests/integration/test_device_only.sh $(DJINND) \
		$(INTEG_BINS) $(LIBDJINN_MODELS_TEST)
	@mkdir -p $(@D)
	@echo "  INSTALL $@"
	$(Q)install -m 755 $< $@
all: $(DEVICE_ONLY_TEST)
TESTS += $(DEVICE_ONLY_TEST)
