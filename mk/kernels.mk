# Client kernels over the wire (Documentation/cuda.rst, "Client kernels").
#
# test_kernels runs on every host (make test and make asan): a djinnd on
# the CPU backend refuses module uploads with -EOPNOTSUPP and changes
# nothing, and KERNEL nodes without a module are refused. The GPU side is
# tests/gpu/test_cuda_wire (mk/cuda.mk builds every tests/gpu/test_*.c).
KERNELS_TEST := $(BUILD)/tests/integration/test_kernels

SRCS += tests/integration/test_kernels.c
all: $(KERNELS_TEST)
TESTS += $(KERNELS_TEST)

$(KERNELS_TEST): $(BUILD)/tests/integration/test_kernels.o \
		$(BUILD)/tests/integration/daemon.o $(BUILD)/lib/fdstore_standin.o \
		$(BUILD)/tests/integration/fixture.o $(LIBDJINN_A) | $(DJINND)
	$(link_libdjinn_test)

# The executor's KERNEL dispatch on the CPU backend (tests/unit/, found by
# the Makefile's wildcard), linked as test_exec is.
test_exec_kernel_LIBS = $(test_exec_LIBS)
