# The client side of the model runtime: tools/djinn, the scriptable
# client (a libdjinn program, linked as the examples are, with what it
# shares with djinnctl: tools/cli.c), and the
# libdjinn model test against a real djinnd. Installing is mk/install.mk's.
DJINN_TOOL := $(BUILD)/tools/djinn
LIBDJINN_MODELS_TEST := $(BUILD)/tests/integration/test_libdjinn_models

SRCS += tools/djinn.c tests/integration/test_libdjinn_models.c \
	tests/integration/libdjinn_fx.c
all: $(DJINN_TOOL) $(LIBDJINN_MODELS_TEST)
TESTS += $(LIBDJINN_MODELS_TEST)

$(DJINN_TOOL): $(BUILD)/tools/djinn.o $(BUILD)/tools/cli.o $(BUILD)/libdjinn.so
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) -L$(BUILD) -ldjinn \
		-Wl,-rpath,'$$ORIGIN/..' -lm

# The integration tests that speak to a real djinnd through libdjinn
# (static), set up by tests/integration/libdjinn_fx.c: what they link
# besides their own object (mk/devices.mk, fault.mk and sched.mk), and
# how (test_kernels too, which links fixture.o instead of libdjinn_fx.o).
LIBDJINN_FX := $(BUILD)/tests/integration/daemon.o $(BUILD)/lib/fdstore_standin.o \
	       $(BUILD)/tests/integration/libdjinn_fx.o $(LIBDJINN_A)
define link_libdjinn_test
@echo "  LD      $@"
$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIBS_LIBDJINN) -lcmocka -lm
endef

# A real djinnd per test, spoken to through libdjinn and in raw frames.
$(LIBDJINN_MODELS_TEST): $(BUILD)/tests/integration/test_libdjinn_models.o \
		$(LIBDJINN_FX) | $(DJINND)
	$(link_libdjinn_test)

# test_djinnctl generates with tools/djinn to load a model, and sources
# tests/integration/testlib.sh (mk/install.mk installs it).
$(BUILD)/tests/integration/test_djinnctl: $(DJINN_TOOL) \
		$(BUILD)/tests/integration/testlib.sh

# libdjinn's model calls against a scripted peer (tests/unit/, found by
# the Makefile's wildcard): answers djinnd never gives.
test_libdjinn_model_LIBS := $(LIBS_LIBDJINN)
