# djinn.ko (kmod/) and its tests in a booted kernel (tests/kmod/).
#
#   make                 also builds the module (debug variant), the in-guest
#                        test programs and the guest's initramfs, when the
#                        Debian kernel headers are installed
#   make test            boots Debian's kernel in QEMU and runs them there
#                        (tests/kmod/run-qemu.sh, as BUILD/tests/kmod/test_kmod)
#   make bench-kmod      the in-guest benchmark (JSON lines)
#   make kmod            just the module, against KMOD_KDIR

DEB_PKGS += linux-headers-amd64 linux-image-amd64 qemu-system-x86 \
	    busybox-static cpio libnl-3-dev libnl-genl-3-dev

# The newest Debian amd64 headers; the guest boots the kernel of the same
# release from /boot.
KMOD_KDIR    ?= $(lastword $(sort $(wildcard /usr/src/linux-headers-*-amd64)))
KMOD_RELEASE  = $(patsubst linux-headers-%,%,$(notdir $(KMOD_KDIR)))
KMOD_CC      ?= gcc
KMOD_DIR     := $(BUILD)/kmod
KMOD_KO      := $(KMOD_DIR)/djinn.ko
KMOD_SRCS    := $(wildcard kmod/*.c kmod/*.h) kmod/Kbuild kmod/Makefile \
		include/uapi/linux/djinn.h

KT_DIR     := $(BUILD)/tests/kmod
KT_PROGS   := test_ioctl test_lease test_ring test_netlink test_stress \
	      test_limits djinn_holder djinn_kbench
KT_BINS    := $(KT_PROGS:%=$(KT_DIR)/%)
KT_CFLAGS  := -Iinclude/uapi $(shell pkg-config --cflags libnl-genl-3.0 2>/dev/null)
KT_LIBS    := $(shell pkg-config --libs libnl-genl-3.0 2>/dev/null || echo -lnl-genl-3 -lnl-3)
KT_INITRD  := $(KT_DIR)/initramfs.cpio.gz
KT_RUNNER  := $(KT_DIR)/test_kmod

SRCS += $(wildcard tests/kmod/guest/*.c) tests/kmod/abi_check.c

# The uapi header beside proto.h and libdjinn's header, compiled by the
# project's compilers with its warnings: layouts asserted, no name clashes.
$(BUILD)/tests/kmod/%.o: ALL_CFLAGS += $(KT_CFLAGS)
all: $(BUILD)/tests/kmod/abi_check.o

# The rest only outside the sanitizer builds (the guest runs them only
# under make test), and only where the kernel headers are.
ifeq ($(SAN),)
all: $(KT_RUNNER)
ifneq ($(KMOD_KDIR),)
all: $(KT_INITRD)
endif
TESTS_ONCE += $(KT_RUNNER)
endif

# Kbuild builds in a copy of the sources (the DKMS tree's layout), so the
# source tree stays clean and each BUILD has its own module. The debug
# variant adds the module's own checks (kmod/djinn_priv.h); warnings fail.
$(KMOD_KO): $(KMOD_SRCS)
	@echo "  KBUILD  $@ ($(KMOD_RELEASE))"
	$(Q)rm -rf $(KMOD_DIR)
	$(Q)$(MAKE) --no-print-directory -s -C kmod dkms-tree \
		DESTDIR=$(abspath $(KMOD_DIR))
	$(Q)$(MAKE) --no-print-directory -C $(KMOD_KDIR) \
		M=$(abspath $(KMOD_DIR)) CC=$(KMOD_CC) KCFLAGS=-Werror \
		CONFIG_DJINN_DEBUG=y modules $(if $(V),,>/dev/null)

kmod: $(KMOD_KO)

$(KT_BINS): $(KT_DIR)/%: $(KT_DIR)/guest/%.o $(KT_DIR)/guest/kt.o
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcmocka $(KT_LIBS)

$(KT_DIR)/kernel-release: $(KMOD_KO)
	$(Q)echo $(KMOD_RELEASE) > $@

$(KT_INITRD): tests/kmod/mkinitramfs.sh tests/kmod/init.sh $(KMOD_KO) \
		$(KT_BINS) $(KT_DIR)/kernel-release
	@echo "  CPIO    $@"
	$(Q)tests/kmod/mkinitramfs.sh $@ tests/kmod/init.sh $(KMOD_KO) $(KT_BINS)

$(KT_RUNNER): tests/kmod/run-qemu.sh
	@mkdir -p $(@D)
	@echo "  INSTALL $@"
	$(Q)install -m 755 $< $@

# Only what the guest needs, not all of `all`.
bench-kmod: deps
	$(Q)$(MAKE) --no-print-directory $(KT_RUNNER) $(KT_INITRD)
	$(Q)$(KT_RUNNER) bench

.PHONY: kmod bench-kmod
