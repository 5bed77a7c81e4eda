# The CUDA backend (djinnd/backend/cuda/, Documentation/cuda.rst).
#
# djinnd loads the driver (libcuda.so.1) and cuBLAS with dlopen(), so it
# links neither: building needs only nvcc and the toolkit's headers.
# Without nvcc the backend is left out, with a message, and djinnd runs on
# the CPU ("cuda is not built into this djinnd").
#
#   kernels.cu --nvcc--> kernels.fatbin (sm_80, sm_90, PTX compute_90)
#              --.incbin--> fatbin.o, linked into djinnd only
#
#   make test-gpu    the GPU tests (tests/gpu/); each exits 77 and says
#                    why on a host without an NVIDIA GPU and driver, and
#                    when all did, make test-gpu says "skipped: no GPU"
#                    and fails (status 77 from tests/run.sh): no pass
#   make bench-gpu   the GPU benchmarks (bench/gpu-bench), JSON lines

NVCC      ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))
CUDA_INC  := $(CUDA_HOME)/include
# One SASS per data-centre generation the kernels are tuned for (A100,
# H100/H200), and PTX that newer GPUs compile at load.
NVCC_ARCH ?= -gencode arch=compute_80,code=sm_80 \
	     -gencode arch=compute_90,code=sm_90 \
	     -gencode arch=compute_90,code=compute_90
NVCC_FLAGS ?= -O3 -std=c++17 -Werror all-warnings

CUDA_DIR   := djinnd/backend/cuda

# djinnd's choice of backend, on every host (make test and make asan):
# --backend auto starts and says why, --backend cuda refuses clearly
# where there is no GPU.
BACKEND_SELECT_TEST := $(BUILD)/tests/gpu/test_backend_select
$(BACKEND_SELECT_TEST): tests/gpu/test_backend_select.sh $(DJINND)
	@mkdir -p $(@D)
	@echo "  INSTALL $@"
	$(Q)install -m 755 $< $@
all: $(BACKEND_SELECT_TEST)
TESTS += $(BACKEND_SELECT_TEST)
GPU_TESTS_SRCS := $(wildcard tests/gpu/test_*.c)

ifneq ($(and $(NVCC),$(wildcard $(CUDA_INC)/cuda.h)),)
HAVE_CUDA    := 1
CUDA_SRCS    := $(wildcard $(CUDA_DIR)/*.c)
CUDA_FATBIN  := $(BUILD)/$(CUDA_DIR)/kernels.fatbin
CUDA_OBJS    := $(CUDA_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/$(CUDA_DIR)/fatbin.o
LIBS_CUDA    := $(CUDA_OBJS) $(LIBS_BACKEND) -ldl
GPU_TESTS    := $(GPU_TESTS_SRCS:tests/gpu/%.c=$(BUILD)/tests/gpu/%)
GPU_BENCH    := $(BUILD)/bench/gpu-bench

SRCS += $(CUDA_SRCS) $(GPU_TESTS_SRCS) tests/gpu/gpu.c

# The toolkit's headers for the backend, the tests and the benchmark only.
$(CUDA_SRCS:%.c=$(BUILD)/%.o) $(GPU_TESTS_SRCS:%.c=$(BUILD)/%.o) \
$(BUILD)/tests/gpu/gpu.o $(BUILD)/bench/gpu-bench.o: ALL_CFLAGS += -I$(CUDA_INC)

# kernels.cu switches on enum djinn_opcode itself (include/djinn/proto.h).
$(CUDA_FATBIN): $(CUDA_DIR)/kernels.cu $(CUDA_DIR)/kernels.h include/djinn/proto.h
	@mkdir -p $(@D)
	@echo "  NVCC    $<"
	$(Q)$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH) -Iinclude -I$(CUDA_DIR) \
		--fatbin -o $@ $<

# The fatbin as read-only data: djinn_cuda_fatbin .. djinn_cuda_fatbin_end.
$(BUILD)/$(CUDA_DIR)/fatbin.S: $(CUDA_FATBIN)
	@echo "  GEN     $@"
	$(Q)printf '%s\n' '	.section .rodata' '	.balign 64' \
		'	.globl djinn_cuda_fatbin' \
		'	.type djinn_cuda_fatbin, @object' 'djinn_cuda_fatbin:' \
		'	.incbin "$(abspath $<)"' '	.globl djinn_cuda_fatbin_end' \
		'djinn_cuda_fatbin_end:' '	.byte 0' \
		'	.section .note.GNU-stack,"",@progbits' > $@
$(BUILD)/$(CUDA_DIR)/fatbin.o: $(BUILD)/$(CUDA_DIR)/fatbin.S
	@echo "  AS      $@"
	$(Q)$(CC) -c -o $@ $<

# djinnd alone links the backend: server.c finds it through weak symbols,
# so everything else that links the daemon's library is unchanged.
$(DJINND): $(CUDA_OBJS)
$(DJINND): LIBS_DJINND += $(LIBS_CUDA)

$(BUILD)/tests/gpu/test_%: $(BUILD)/tests/gpu/test_%.o $(BUILD)/tests/gpu/gpu.o $(CUDA_OBJS) $(filter %.a,$(LIBS_BACKEND))
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/tests/gpu/gpu.o $(LIBS_CUDA) -lcmocka -lm

# Client kernels over the wire: a djinnd --backend cuda (started by
# tests/integration/daemon.c) spoken to through libdjinn.
$(BUILD)/tests/gpu/test_cuda_wire: $(BUILD)/tests/gpu/test_cuda_wire.o \
		$(BUILD)/tests/gpu/gpu.o $(BUILD)/tests/integration/daemon.o $(BUILD)/lib/fdstore_standin.o \
		$(CUDA_OBJS) $(filter %.a,$(LIBS_BACKEND)) $(LIBDJINN_A) | $(DJINND)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter-out $(CUDA_OBJS),$(filter %.o,$^)) \
		$(LIBS_CUDA) $(LIBS_LIBDJINN) -lcmocka -lm

# The model runtime on both backends (mk/model.mk comes later: its
# variables are spelled out here).
$(BUILD)/tests/gpu/test_cuda_model: $(BUILD)/tests/gpu/test_cuda_model.o \
		$(BUILD)/tests/gpu/gpu.o $(BUILD)/libmodel.a \
		$(BUILD)/djinnd/graph/run.o $(CUDA_OBJS) \
		$(filter %.a,$(LIBS_BACKEND))
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/tests/gpu/gpu.o \
		$(CUDA_OBJS) $(LIBS_MODEL) -ldl -lcmocka -lm

# tests/unit/test_model_stream.c on the CUDA backend
$(BUILD)/tests/gpu/test_cuda_stream: $(BUILD)/tests/gpu/test_cuda_stream.o \
		$(BUILD)/libmodel.a $(BUILD)/djinnd/graph/run.o $(CUDA_OBJS) \
		$(filter %.a,$(LIBS_BACKEND))
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(CUDA_OBJS) $(LIBS_MODEL) -ldl \
		-lcmocka -lm -lpthread

# model-bench --backend cuda (mk/bench-model.mk)
$(MODEL_BENCH): $(CUDA_OBJS)
$(MODEL_BENCH): MODEL_BENCH_CUDA := $(CUDA_OBJS) -ldl

# stream-bench --backend cuda (mk/bench-stream.mk)
$(STREAM_BENCH): $(CUDA_OBJS)
$(STREAM_BENCH): STREAM_BENCH_CUDA := $(CUDA_OBJS) -ldl

$(GPU_BENCH): $(BUILD)/bench/gpu-bench.o $(BUILD)/tests/gpu/gpu.o $(CUDA_OBJS) $(filter %.a,$(LIBS_BACKEND)) $(LIBDJINN_A)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/tests/gpu/gpu.o $(LIBS_CUDA) $(LIBS_LIBDJINN) -lm

all: $(CUDA_OBJS) $(GPU_TESTS) $(GPU_BENCH)

# cuda_api.c on every host with nvcc, no GPU needed (make test, make
# asan): the driver-version check, sticky and fatal errors, and the
# choice of cuBLAS over stand-ins (tests/cuda/cublas_stub.c) built here
# as cublas-*.so beside the test, which copies them under cuBLAS's
# sonames. cublas-needs.so needs a library that is nowhere on the
# search path (as a libcublas whose libcublasLt is missing).
CUDA_API_TEST := $(BUILD)/tests/cuda/test_cuda_api
CUBLAS_STUBS  := $(patsubst %,$(BUILD)/tests/cuda/cublas-%.so,ok fail nogemm needs)
CUBLAS_MISSING := $(BUILD)/tests/cuda/missing/libdjinn-missing.so.1
SRCS += tests/cuda/test_cuda_api.c
$(BUILD)/tests/cuda/test_cuda_api.o: ALL_CFLAGS += -I$(CUDA_INC)

$(CUDA_API_TEST): $(BUILD)/tests/cuda/test_cuda_api.o $(BUILD)/$(CUDA_DIR)/cuda_api.o
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -ldl -lcmocka

$(BUILD)/tests/cuda/cublas-ok.so:     STUB_FLAGS := -DSTUB_CREATE=0 -DSTUB_GEMM
$(BUILD)/tests/cuda/cublas-fail.so:   STUB_FLAGS := -DSTUB_CREATE=3 -DSTUB_GEMM
$(BUILD)/tests/cuda/cublas-nogemm.so: STUB_FLAGS := -DSTUB_CREATE=0
$(BUILD)/tests/cuda/cublas-needs.so:  STUB_FLAGS := -DSTUB_CREATE=0 -DSTUB_GEMM \
	-L$(dir $(CUBLAS_MISSING)) -Wl,--no-as-needed -l:$(notdir $(CUBLAS_MISSING))
$(BUILD)/tests/cuda/cublas-needs.so: $(CUBLAS_MISSING)
$(BUILD)/tests/cuda/cublas-%.so: tests/cuda/cublas_stub.c
	@mkdir -p $(@D)
	@echo "  CC SO   $@"
	$(Q)$(CC) -shared -fPIC -O1 -Wall -Werror -o $@ $< $(STUB_FLAGS)
$(CUBLAS_MISSING):
	@mkdir -p $(@D)
	@echo "  CC SO   $@"
	$(Q)echo 'int djinn_missing(void) { return 0; }' | $(CC) -shared -fPIC \
		-Wl,-soname,$(@F) -o $@ -x c -

all: $(CUDA_API_TEST) $(CUBLAS_STUBS)
TESTS += $(CUDA_API_TEST)

# scripts/gpu-kit.sh packs this build tree and its `run` prints the
# versions and finds cuBLAS in wheel layouts (tests/cuda/test_gpu_kit.sh).
# make test only: it packs what make built, not the ASan build.
GPU_KIT_TEST := $(BUILD)/tests/cuda/test_gpu_kit
$(GPU_KIT_TEST): tests/cuda/test_gpu_kit.sh scripts/gpu-kit.sh $(DJINND) \
		$(DJINNCTL) $(GPU_BENCH) $(MODEL_BENCH) $(STREAM_BENCH) $(GPU_TESTS) \
		$(BACKEND_SELECT_TEST) $(BUILD)/tests/cuda/cublas-ok.so
	@mkdir -p $(@D)
	@echo "  INSTALL $@"
	$(Q)sed 's|@SRCDIR@|$(CURDIR)|' $< >$@.tmp && chmod 755 $@.tmp && mv $@.tmp $@
all: $(GPU_KIT_TEST)
TESTS_ONCE += $(GPU_KIT_TEST)

.PHONY: test-gpu bench-gpu
test-gpu: all
	$(Q)DJINND=$(DJINND) tests/run.sh $(GPU_TESTS); rc=$$?; \
		[ $$rc != 77 ] || echo "test-gpu: skipped: no GPU"; exit $$rc

# 77: no GPU here (gpu-bench says so); not a failure of the build
bench-gpu: all
	$(Q)$(GPU_BENCH) --djinnd $(DJINND); rc=$$?; [ $$rc = 77 ] || exit $$rc
else
$(info cuda: no nvcc (NVCC=$(NVCC)) or no $(CUDA_INC)/cuda.h: djinnd is built without the CUDA backend)
.PHONY: test-gpu bench-gpu
# nothing tested is no pass (as above): test-gpu fails, with 77
test-gpu:
	@echo "$@: skipped: djinnd was built without the CUDA backend (no nvcc)"; \
		exit 77
bench-gpu:
	@echo "$@: skipped: djinnd was built without the CUDA backend (no nvcc)"
endif
