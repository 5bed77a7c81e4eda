# Djinn: one non-recursive Makefile for the whole user-space tree.
#
#   make               build everything into build/
#   make test          install missing packages, build, run every test
#   make asan          the same tests under AddressSanitizer + UBSan (build-asan/)
#   make bench         run the benchmarks (JSON lines)
#   make run           the main job (see README.md); on a terminal djinnd
#                      keeps serving after it, until Ctrl-C
#   make serve         djinnd alone, as make run starts it, until Ctrl-C
#   make format-check  clang-format --dry-run over the tree
#   make CC=clang      build with clang instead of gcc

BUILD     ?= build
CC        ?= cc
SAN       ?=
Q         := $(if $(V),,@)

WARN      := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	     -Wmissing-prototypes -Wno-unused-parameter
CFLAGS    ?= -O2 -g
ALL_CFLAGS = -std=gnu11 $(WARN) $(CFLAGS) $(SAN) -pthread -D_GNU_SOURCE \
	     -fno-strict-aliasing -Iinclude -Ilib -Idjinnd -MMD -MP
LDFLAGS   ?=
ALL_LDFLAGS = $(LDFLAGS) $(SAN) -pthread

# Debian packages every target needs; scripts/deps.sh installs what is missing.
DEB_PKGS  := gcc clang make libc6-dev pkg-config libssl-dev libcmocka-dev \
	     clang-format libopenblas-dev liburing-dev

# groff checks djinnctl's man page; python3 parses its JSON in the tests.
DEB_PKGS  += groff python3

# make bench compares djinnd's round trips with redis-benchmark's PING.
DEB_PKGS  += redis-server redis-tools

BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
ALL_CFLAGS  += $(BLAS_CFLAGS)

# --- libraries ---------------------------------------------------------------
# lib/: shared by djinnd, libdjinn and the tools
COMMON_SRCS := $(wildcard lib/*.c)
COMMON_LIB  := $(BUILD)/libcommon.a
# the VMU
VMU_SRCS    := $(wildcard djinnd/vmu/*.c)
VMU_LIB     := $(BUILD)/libvmu.a
# device backends
BACKEND_SRCS := $(wildcard djinnd/backend/cpu/*.c)
BACKEND_LIB  := $(BUILD)/libbackend.a

# the daemon's own pieces, as a library its tests link
DJINND_SRCS  := $(wildcard djinnd/exec/*.c djinnd/graph/*.c djinnd/session/*.c djinnd/net/*.c \
			  djinnd/svc/*.c) \
		$(wildcard djinnd/sched/*.c) \
		$(wildcard djinnd/model/*.c) djinnd/log.c djinnd/loop.c djinnd/server.c
DJINND_LIB   := $(BUILD)/libdjinnd.a

# libdjinn, the client library: shared (soname, version script exporting
# djinn_* only) and static, both from -fPIC objects in $(BUILD)/pic/. It
# builds lib/graph.c, lib/errmsg.c, lib/msgnames.c and lib/rundir.c (the
# default address) in with hidden visibility.
LIBDJINN_SRCS    := $(wildcard libdjinn/*.c) lib/graph.c lib/errmsg.c lib/ktls.c \
		    lib/msgnames.c lib/rundir.c
LIBDJINN_OBJS    := $(LIBDJINN_SRCS:%.c=$(BUILD)/pic/%.o)
LIBDJINN_VERSION := 0.1.0
LIBDJINN_SONAME  := libdjinn.so.0
LIBDJINN_SO      := $(BUILD)/libdjinn.so.$(LIBDJINN_VERSION)
LIBDJINN_A       := $(BUILD)/libdjinn.a
LIBDJINN_PC      := $(BUILD)/libdjinn.pc
LIBDJINN         := $(LIBDJINN_SO) $(BUILD)/$(LIBDJINN_SONAME) \
		    $(BUILD)/libdjinn.so $(LIBDJINN_A) $(LIBDJINN_PC)
PREFIX           ?= /usr/local

LIBS_VMU     := $(VMU_LIB) $(COMMON_LIB) -lcrypto
LIBS_BACKEND := $(BACKEND_LIB) $(LIBS_VMU) $(BLAS_LIBS) -lm
LIBS_DJINND  := $(DJINND_LIB) $(LIBS_BACKEND) -luring -ljansson -lssl -lcrypto -lsystemd
LIBS_LIBDJINN := $(LIBDJINN_A) -lssl -lcrypto -ljansson
DJINND      := $(BUILD)/djinnd/djinnd

# --- tests -------------------------------------------------------------------
# One binary per tests/unit/test_NAME.c, linking test_NAME_LIBS.
UNIT_TESTS := $(patsubst tests/unit/test_%.c,%,$(wildcard tests/unit/test_*.c))
UNIT_BINS  := $(UNIT_TESTS:%=$(BUILD)/tests/unit/test_%)
test_host_provider_LIBS := $(LIBS_VMU)
test_graph_LIBS         := $(COMMON_LIB)
test_slots_LIBS         := $(COMMON_LIB)
test_addrkey_LIBS       := $(COMMON_LIB)
test_cpu_backend_LIBS   := $(LIBS_BACKEND)
test_exec_LIBS          := $(LIBS_DJINND)
test_sched_LIBS         := $(LIBS_DJINND)
test_ring_LIBS          := $(DJINND_LIB)
test_state_LIBS          = $(test_exec_LIBS)
test_libdjinn_LIBS       := $(LIBS_LIBDJINN)
test_libdjinn_graph_LIBS := $(LIBS_LIBDJINN)
test_libdjinn_rx_LIBS    := $(LIBS_LIBDJINN)
test_libdjinn_abi_LIBS   := -ldl
# the I/O loop and a connection, with a ring that refuses submissions
# (linked as test_exec is: mk/leases.mk adds to it)
test_loop_LIBS = $(test_exec_LIBS) \
		 -Wl,--wrap=io_uring_submit,--wrap=usleep

# Fuzz harnesses tests/fuzz/fuzz_NAME.c: libFuzzer binaries with
# `make fuzz` (clang), and in `make test` a replay of tests/fuzz/corpus/NAME/
# through the same entry point (tests/fuzz/replay.c).
FUZZERS     := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_REPLAY := $(FUZZERS:%=$(BUILD)/tests/fuzz/replay_%)
fuzz_graph_LIBS := $(COMMON_LIB)
fuzz_frames_LIBS := $(LIBS_DJINND)

# --- tools -------------------------------------------------------------------
# djinnctl speaks the admin protocol itself: it links nothing of the daemon
# (lib/names.c: the names djinnd takes, checked the same way; lib/rundir.c:
# where its sockets are by default).
DJINNCTL      := $(BUILD)/tools/djinnctl
DJINNCTL_SRCS := tools/djinnctl.c tools/djinnctl_call.c tools/djinnctl_session.c \
		 tools/djinnctl_device.c tools/djinnctl_sched.c \
		 tools/djinnctl_model.c tools/djinnctl_tenant.c tools/djinnctl_token.c tools/json_print.c \
		 tools/cli.c lib/names.c lib/rundir.c

# Integration tests in shell, installed beside the binaries they run
# (tests/integration/test_NAME.sh -> BUILD/tests/integration/test_NAME).
SCRIPT_TESTS := $(BUILD)/tests/integration/test_djinnctl \
		$(BUILD)/tests/integration/test_man

# The daemon's integration tests (cmocka), one program per area
# (tests/integration/test_AREA.c): a real djinnd per test on temporary
# sockets, spoken to in raw frames (tests/integration/fixture.h). They link
# nothing of the daemon; $DJINND names the one to start (the ASan build
# under make asan).
INTEG_AREAS := framing sessions tensors text graphs leases admin metrics models \
	       restart
INTEG_SRCS := $(INTEG_AREAS:%=tests/integration/test_%.c) \
	      tests/integration/daemon.c tests/integration/fixture.c
INTEG_BINS := $(INTEG_AREAS:%=$(BUILD)/tests/integration/test_%)

# --- benchmarks ----------------------------------------------------------------
BENCH_BINS := $(BUILD)/bench/vmu-bench
# (their JSON lines: lib/figure.c, in libcommon.a)
$(BENCH_BINS): $(COMMON_LIB)
# The network benchmarks: a libdjinn program, linked as the examples are;
# its main in tools/djinn-bench.c, a benchmark a file in tools/bench/.
DJINN_BENCH := $(BUILD)/tools/djinn-bench
DJINN_BENCH_SRCS := tools/djinn-bench.c $(wildcard tools/bench/*.c)
DJINN_BENCH_OBJS := $(DJINN_BENCH_SRCS:%.c=$(BUILD)/%.o)

# --- examples: libdjinn programs, linked as a user links them -------------------
EXAMPLE_BINS := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))

SRCS = $(COMMON_SRCS) $(VMU_SRCS) $(BACKEND_SRCS) $(DJINND_SRCS) \
       djinnd/main.c $(wildcard tests/unit/*.c tests/fuzz/*.c bench/*.c) \
       $(wildcard examples/*.c)
OBJS = $(SRCS:%.c=$(BUILD)/%.o) $(LIBDJINN_OBJS)

SRCS += $(DJINNCTL_SRCS) tests/integration/open_session.c
SRCS += $(INTEG_SRCS)
SRCS += $(DJINN_BENCH_SRCS)

.PHONY: all deps test check asan bench run serve fuzz format-check clean
.SECONDARY:
.DEFAULT_GOAL := all

all: $(COMMON_LIB) $(VMU_LIB) $(BACKEND_LIB) $(DJINND_LIB) $(DJINND) $(UNIT_BINS) \
     $(FUZZ_REPLAY) \
     $(BENCH_BINS) $(LIBDJINN) $(EXAMPLE_BINS)

all: $(DJINNCTL) $(SCRIPT_TESTS)
all: $(INTEG_BINS)
all: $(DJINN_BENCH)

deps:
	$(Q)scripts/deps.sh $(DEB_PKGS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/%.a:
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(COMMON_LIB): $(COMMON_SRCS:%.c=$(BUILD)/%.o)
$(VMU_LIB): $(VMU_SRCS:%.c=$(BUILD)/%.o)
$(BACKEND_LIB): $(BACKEND_SRCS:%.c=$(BUILD)/%.o)
$(DJINND_LIB): $(DJINND_SRCS:%.c=$(BUILD)/%.o)

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC PIC  $<"
	$(Q)$(CC) $(ALL_CFLAGS) -fPIC $(PIC_CFLAGS) -c -o $@ $<
$(BUILD)/pic/lib/%.o: PIC_CFLAGS := -fvisibility=hidden

$(LIBDJINN_A): $(LIBDJINN_OBJS)
$(LIBDJINN_SO): $(LIBDJINN_OBJS) libdjinn/libdjinn.map
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,$(LIBDJINN_SONAME) \
		-Wl,-z,defs -Wl,--version-script=libdjinn/libdjinn.map \
		-o $@ $(LIBDJINN_OBJS) -lssl -lcrypto -ljansson
$(BUILD)/$(LIBDJINN_SONAME): $(LIBDJINN_SO)
	$(Q)ln -sf $(notdir $<) $@
$(BUILD)/libdjinn.so: $(BUILD)/$(LIBDJINN_SONAME)
	$(Q)ln -sf $(notdir $<) $@
$(LIBDJINN_PC): libdjinn/libdjinn.pc.in Makefile
	@echo "  GEN     $@"
	$(Q)sed -e 's|@prefix@|$(PREFIX)|' -e 's|@libdir@|$(PREFIX)/lib|' \
		-e 's|@includedir@|$(PREFIX)/include|' \
		-e 's|@version@|$(LIBDJINN_VERSION)|' $< > $@

# Examples link the shared library, which they find beside them.
$(BUILD)/examples/%: $(BUILD)/examples/%.o $(BUILD)/libdjinn.so
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< -L$(BUILD) -ldjinn \
		-Wl,-rpath,'$$ORIGIN/..' -lm

# The ABI test dlopen()s the shared library.
$(BUILD)/tests/unit/test_libdjinn_abi: $(BUILD)/$(LIBDJINN_SONAME)

# In a pattern rule a literal % in filter would be the stem: spell it pct.
pct := %
.SECONDEXPANSION:
$(BUILD)/tests/unit/test_%: $(BUILD)/tests/unit/test_%.o $$(filter $$(pct).a $$(pct).o,$$(test_$$*_LIBS))
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(test_$*_LIBS) -lcmocka

$(BUILD)/tests/fuzz/replay_%: $(BUILD)/tests/fuzz/fuzz_%.o $(BUILD)/tests/fuzz/replay.o $$(filter $$(pct).a $$(pct).o,$$(fuzz_$$*_LIBS))
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/tests/fuzz/replay.o $(fuzz_$*_LIBS)

$(DJINND): $(BUILD)/djinnd/main.o $(filter %.a,$(LIBS_DJINND))
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(LIBS_DJINND)

$(DJINNCTL): $(DJINNCTL_SRCS:%.c=$(BUILD)/%.o)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^

# (tls: lib/pki.c's certificates, OpenSSL's reference pipe)
$(DJINN_BENCH): $(DJINN_BENCH_OBJS) $(BUILD)/libdjinn.so $(COMMON_LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(DJINN_BENCH_OBJS) -L$(BUILD) -ldjinn \
		-Wl,-rpath,'$$ORIGIN/..' $(COMMON_LIB) -lssl -lcrypto -lm

$(BUILD)/tests/integration/open_session: $(BUILD)/tests/integration/open_session.o
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^

$(BUILD)/tests/integration/test_djinnctl: tests/integration/test_djinnctl.sh \
		$(DJINND) $(DJINNCTL) $(BUILD)/tests/integration/open_session
	@mkdir -p $(@D)
	@echo "  INSTALL $@"
	$(Q)install -m 755 $< $@

# Every man page renders without a warning (groff -ww).
$(BUILD)/tests/integration/test_man: tests/integration/test_man.sh
	@mkdir -p $(@D)
	@echo "  INSTALL $@"
	$(Q)install -m 755 $< $@

$(INTEG_BINS): %: %.o $(BUILD)/tests/integration/daemon.o $(BUILD)/lib/fdstore_standin.o \
		$(BUILD)/tests/integration/fixture.o | $(DJINND)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcmocka -lcrypto -lm

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(VMU_LIB) $(COMMON_LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS_VMU) -lm

# Every test `make test` runs; TESTS also run under `make asan`, TESTS_ONCE
# (a booted kernel, an installed tree) only in `make test`. Subsystems with
# rules of their own add to both from mk/*.mk.
TESTS      = $(UNIT_BINS) $(FUZZ_REPLAY) $(SCRIPT_TESTS) $(INTEG_BINS)
TESTS_ONCE =
# what `make test` sets up beside the build (mk/*.mk add to it)
TEST_PREP  =
include $(sort $(wildcard mk/*.mk))

# `make test` is a complete set-up: packages first, then build, then run.
test: deps
	$(Q)$(MAKE) --no-print-directory all $(TEST_PREP)
	$(Q)DJINND=$(DJINND) tests/run.sh $(TESTS) $(TESTS_ONCE)

check: test

asan: deps
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan \
		SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
		CFLAGS="-O1 -g" all
	$(Q)ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		DJINND=build-asan/djinnd/djinnd \
		tests/run.sh $(patsubst $(BUILD)/%,build-asan/%,$(TESTS))

# The VMU, the network, and the model runtime beside PyTorch (which its
# first run installs into $(BUILD)/bench-cache). bench-kmod (a booted
# kernel) and bench-gpu (a GPU) run on their own.
bench: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(BUILD)/bench/vmu-bench
	$(Q)$(DJINN_BENCH) --djinnd $(DJINND)
	$(Q)$(MAKE) --no-print-directory bench-model

# The main job: djinnd on the CPU backend and its clients (scripts/run.sh);
# on a terminal djinnd keeps serving after them, until Ctrl-C.
run: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)BUILD=$(BUILD) scripts/run.sh

# djinnd as make run starts it, serving until Ctrl-C (or SIGTERM).
serve: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)BUILD=$(BUILD) scripts/run.sh --serve

# libFuzzer binaries (clang); run one with build-fuzz/fuzz_NAME tests/fuzz/corpus/NAME
fuzz: deps
	$(Q)$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang \
		SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all" \
		$(FUZZERS:%=build-fuzz/fuzz_%)

# One libFuzzer binary: the harness and only the libraries it links.
build-fuzz/fuzz_%: build-fuzz/tests/fuzz/fuzz_%.o $$(filter $$(pct).a $$(pct).o,$$(fuzz_$$*_LIBS))
	@echo "  FUZZ    $@"
	$(Q)clang -fsanitize=fuzzer,address,undefined -o $@ $< $(fuzz_$*_LIBS)

FORMAT_SRCS = $(shell git ls-files '*.c' '*.h' 2>/dev/null)
format-check:
	$(Q)scripts/deps.sh clang-format
	$(Q)clang-format --dry-run --Werror $(FORMAT_SRCS) && echo "format-check: clean"

clean:
	rm -rf build build-asan

-include $(OBJS:.o=.d)
