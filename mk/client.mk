# The client side of the model runtime: tools/djinn, the scriptable
# client (a libdjinn program, linked as the examples are), and the
# libdjinn model test against a real djinnd. Installing is mk/install.mk's.
DJINN_TOOL := $(BUILD)/tools/djinn
LIBDJINN_MODELS_TEST := $(BUILD)/tests/integration/test_libdjinn_models

SRCS += tools/djinn.c tests/integration/test_libdjinn_models.c
all: $(DJINN_TOOL) $(LIBDJINN_MODELS_TEST)
TESTS += $(LIBDJINN_MODELS_TEST)

$(DJINN_TOOL): $(BUILD)/tools/djinn.o $(BUILD)/libdjinn.so
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< -L$(BUILD) -ldjinn \
		-Wl,-rpath,'$$ORIGIN/..' -lm

# A real djinnd per test (tests/integration/daemon.c starts it), spoken
# to through libdjinn (static) and in raw frames.
$(LIBDJINN_MODELS_TEST): $(BUILD)/tests/integration/test_libdjinn_models.o \
		$(BUILD)/tests/integration/daemon.o $(LIBDJINN_A) | $(DJINND)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIBS_LIBDJINN) \
		-lcmocka -lm

# test_djinnctl generates with tools/djinn to load a model.
$(BUILD)/tests/integration/test_djinnctl: $(DJINN_TOOL)

# libdjinn's model calls against a scripted peer (tests/unit/, found by
# the Makefile's wildcard): answers djinnd never gives.
test_libdjinn_model_LIBS := $(LIBS_LIBDJINN)
