# Djinn: one non-recursive Makefile for the whole user-space tree.
#
#   make               build everything into build/
#   make test          install missing packages, build, run every test
#   make asan          the same tests under AddressSanitizer + UBSan (build-asan/)
#   make bench         run the benchmarks (JSON lines)
#   make run           the main job (see README.md)
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
	     clang-format

# --- the VMU library -----------------------------------------------------
VMU_SRCS  := djinnd/vmu/vmu.c djinnd/vmu/host.c
VMU_LIB   := $(BUILD)/libvmu.a
VMU_LIBS  := -lcrypto

# --- tests -----------------------------------------------------------------
UNIT_TESTS := vmu host_provider
UNIT_BINS  := $(UNIT_TESTS:%=$(BUILD)/tests/unit/test_%)

# --- benchmarks ------------------------------------------------------------
BENCH_BINS := $(BUILD)/bench/vmu-bench

OBJS = $(VMU_SRCS:%.c=$(BUILD)/%.o) $(UNIT_TESTS:%=$(BUILD)/tests/unit/test_%.o) \
       $(BENCH_BINS:%=%.o)

.PHONY: all deps test check asan bench run format-check clean
.SECONDARY:
.DEFAULT_GOAL := all

all: $(VMU_LIB) $(UNIT_BINS) $(BENCH_BINS)

deps:
	$(Q)scripts/deps.sh $(DEB_PKGS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(VMU_LIB): $(VMU_SRCS:%.c=$(BUILD)/%.o)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/tests/unit/test_%: $(BUILD)/tests/unit/test_%.o $(VMU_LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(VMU_LIBS) -lcmocka

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(VMU_LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(VMU_LIBS) -lm

# `make test` is a complete set-up: packages first, then build, then run.
test: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)tests/run.sh $(UNIT_BINS)

check: test

asan: deps
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan \
		SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
		CFLAGS="-O1 -g" all
	$(Q)ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		tests/run.sh $(UNIT_BINS:$(BUILD)/%=build-asan/%)

bench: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(BUILD)/bench/vmu-bench

# The main job. Until djinnd lands (issue 3) it replays the LLM-serving
# trace through the VMU on the host provider and reports what it did.
run: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(BUILD)/bench/vmu-bench --report

FORMAT_SRCS = $(shell git ls-files '*.c' '*.h' 2>/dev/null)
format-check:
	$(Q)scripts/deps.sh clang-format
	$(Q)clang-format --dry-run --Werror $(FORMAT_SRCS) && echo "format-check: clean"

clean:
	rm -rf build build-asan

-include $(OBJS:.o=.d)
