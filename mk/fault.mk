# Device faults (Documentation/cuda.rst, "Faults"): djinnd --fault-injection
# and ADMIN_FAULT_INJECT, tested against a real djinnd on the CPU backend
# (a simulated fault) in make test and make asan, and on a GPU (a kernel
# that really faults) in make test-gpu, where it skips without one.
FAULT_TEST := $(BUILD)/tests/integration/test_fault

SRCS += tests/integration/test_fault.c
all: $(FAULT_TEST)
TESTS += $(FAULT_TEST)

$(FAULT_TEST): $(BUILD)/tests/integration/test_fault.o $(LIBDJINN_FX) \
		| $(DJINND)
	$(link_libdjinn_test)

# The same test against djinnd --backend cuda: a real fault (make test-gpu,
# which finds tests/gpu/test_*.c; linked here like the test above).
ifeq ($(HAVE_CUDA),1)
$(BUILD)/tests/gpu/test_cuda_fault: $(BUILD)/tests/gpu/test_cuda_fault.o \
		$(LIBDJINN_FX) | $(DJINND)
	$(link_libdjinn_test)
endif

# Recovery without a GPU (make test, make asan, where nvcc is): the CUDA
# backend over a stand-in driver table, each call checked
# (tests/cuda/test_cuda_recover.c).
ifeq ($(HAVE_CUDA),1)
CUDA_RECOVER_TEST := $(BUILD)/tests/cuda/test_cuda_recover
SRCS += tests/cuda/test_cuda_recover.c
$(BUILD)/tests/cuda/test_cuda_recover.o: ALL_CFLAGS += -I$(CUDA_INC)
$(CUDA_RECOVER_TEST): $(BUILD)/tests/cuda/test_cuda_recover.o $(CUDA_OBJS) \
		$(filter %.a,$(LIBS_BACKEND))
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(LIBS_CUDA) -lcmocka -lm
all: $(CUDA_RECOVER_TEST)
TESTS += $(CUDA_RECOVER_TEST)
endif

# The VMU's side (tests/unit/test_vmu_fault.c, found by the Makefile's
# wildcard): the text epoch and vmu_fault_simulate().
test_vmu_fault_LIBS := $(LIBS_VMU)
