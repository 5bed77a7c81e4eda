# Request sizes against a real djinnd (tests/integration/test_wire_sizes.c):
# a fixed-size request grown by zero bytes is taken, one with a byte set
# past the struct is -E2BIG, a short one is zero-filled down to its first
# version and -EINVAL below; and the one table of opcode names
# (lib/msgnames.c) against what djinnd serves and its metric labels. In
# make test and make asan.
WIRE_TEST := $(BUILD)/tests/integration/test_wire_sizes

SRCS += tests/integration/test_wire_sizes.c
all: $(WIRE_TEST)
TESTS += $(WIRE_TEST)

$(WIRE_TEST): $(BUILD)/tests/integration/test_wire_sizes.o \
		$(BUILD)/tests/integration/daemon.o $(BUILD)/lib/fdstore_standin.o $(COMMON_LIB) | $(DJINND)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(COMMON_LIB) \
		-lcmocka -lcrypto -lm
