# djinnd as a system service (issue 7): its configuration file, the
# service manager's notifications, the systemd unit, man pages and
# `make install` / `make uninstall`. Documentation/admin-guide.rst.

# --- configuration and sd_notify -------------------------------------------
# inih parses djinnd.conf; libsystemd's sd_notify() talks to systemd;
# systemd-analyze verifies the unit in the tests.
DEB_PKGS += libinih-dev libsystemd-dev systemd

# djinnd reads $(SYSCONFDIR)/djinn/djinnd.conf when --config is not given.
# /etc even for PREFIX=/usr/local: that is where Debian's administrators
# look, and where the unit's --config points.
SYSCONFDIR ?= /etc

# djinnd/config/: the configuration (djinnd/config.h), linked as objects
# by djinnd and by the tests that link the daemon.
DJINND_CONFIG_SRCS := $(wildcard djinnd/config/*.c)
DJINND_CONFIG_OBJS := $(DJINND_CONFIG_SRCS:%.c=$(BUILD)/%.o)
SRCS += $(DJINND_CONFIG_SRCS)
LIBS_DJINND := $(DJINND_CONFIG_OBJS) $(LIBS_DJINND) -linih
$(DJINND): $(DJINND_CONFIG_OBJS)
$(BUILD)/djinnd/main.o $(DJINND_CONFIG_OBJS): \
	ALL_CFLAGS += -DDJINND_SYSCONFDIR='"$(SYSCONFDIR)"'

# tests/unit/test_config.c: the parser, over files it writes
test_config_LIBS := $(DJINND_CONFIG_OBJS) $(DJINND_LIB) $(COMMON_LIB) -linih
$(BUILD)/tests/unit/test_config: $(DJINND_CONFIG_OBJS)
# tests/unit/test_config_paths.c: the command line's relative paths
test_config_paths_LIBS := $(test_config_LIBS)
$(BUILD)/tests/unit/test_config_paths: $(DJINND_CONFIG_OBJS)

# tests/integration/test_notify.c plays systemd on a NOTIFY_SOCKET of its
# own: READY, WATCHDOG, RELOADING, STOPPING, journal prefixes.
NOTIFY_TEST := $(BUILD)/tests/integration/test_notify
SRCS += tests/integration/test_notify.c
$(NOTIFY_TEST): $(BUILD)/tests/integration/test_notify.o | $(DJINND)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcmocka
all: $(NOTIFY_TEST)
TESTS += $(NOTIFY_TEST)

# What the shell tests share (tests/integration/testlib.sh), installed
# beside them, where they source it from.
TESTLIB_SH := $(BUILD)/tests/integration/testlib.sh
$(TESTLIB_SH): tests/integration/testlib.sh
	@mkdir -p $(@D)
	@echo "  INSTALL $@"
	$(Q)install -m 644 $< $@

# tests/integration/test_service.sh: the unit (systemd-analyze verify), the
# shipped configuration and the man pages, from the source tree.
SERVICE_TEST := $(BUILD)/tests/integration/test_service
$(SERVICE_TEST): tests/integration/test_service.sh $(DJINND) $(TESTLIB_SH)
	@mkdir -p $(@D)
	@echo "  INSTALL $@"
	$(Q)install -m 755 $< $@
all: $(SERVICE_TEST)
TESTS += $(SERVICE_TEST)

# --- make install / make uninstall --------------------------------------------
# make install [DESTDIR=/stage] [PREFIX=/usr/local]: programs, libdjinn
# (shared with its soname and links, static, headers, pkg-config), man
# pages, the systemd unit, the default configuration and, when kmod/
# exists, the module's sources for DKMS. Every file, link and directory
# it makes is listed in $(INSTALL_MANIFEST), and make uninstall removes
# exactly those. The configuration is the administrator's: install never
# overwrites one, and uninstall keeps it once it was edited.
DESTDIR     ?=
BINDIR      ?= $(PREFIX)/bin
SBINDIR     ?= $(PREFIX)/sbin
LIBDIR      ?= $(PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
DATADIR     ?= $(PREFIX)/share
MANDIR      ?= $(DATADIR)/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
# systemd reads /usr/local/lib/systemd/system as well as /usr/lib/...
UNITDIR     ?= $(PREFIX)/lib/systemd/system
# DKMS looks in /usr/src whatever the prefix.
DJINN_VERSION := $(or $(shell sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' \
			kmod/dkms.conf 2>/dev/null),$(LIBDJINN_VERSION))
DKMSDIR     ?= /usr/src/djinn-$(DJINN_VERSION)
INSTALL_MANIFEST := $(DATADIR)/djinn/install-manifest

INST := $(BUILD)/install
# tools/djinn (mk/client.mk) when the tree has it.
INST_DJINN := $(if $(wildcard tools/djinn.c),$(INST)/djinn)
# The libdjinn programs linked again for installing: no run path into the
# build tree. djinn-bench is more than its tools/djinn-bench.o.
$(INST)/djinn-bench $(INST_DJINN): $(INST)/%: $(BUILD)/tools/%.o \
		$(BUILD)/libdjinn.so
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) -L$(BUILD) -ldjinn \
		$(COMMON_LIB) -lssl -lcrypto -lm
$(INST)/djinn-bench $(INST_DJINN): $(COMMON_LIB)
$(INST)/djinn-bench: $(DJINN_BENCH_OBJS)
$(INST_DJINN): $(BUILD)/tools/cli.o
# pkg-config and the unit name the installed paths, whatever was built:
# remade when a path changes.
INST_PATHS := $(PREFIX) $(LIBDIR) $(INCLUDEDIR) $(SBINDIR) $(BINDIR) $(SYSCONFDIR)
$(INST)/paths: FORCE
	@mkdir -p $(@D)
	$(Q)echo '$(INST_PATHS)' | cmp -s - $@ || echo '$(INST_PATHS)' > $@
$(INST)/libdjinn.pc: libdjinn/libdjinn.pc.in $(INST)/paths
	@mkdir -p $(@D)
	$(Q)sed -e 's|@prefix@|$(PREFIX)|' -e 's|@libdir@|$(LIBDIR)|' \
		-e 's|@includedir@|$(INCLUDEDIR)|' \
		-e 's|@version@|$(LIBDJINN_VERSION)|' $< > $@
$(INST)/djinnd.service: systemd/djinnd.service.in $(INST)/paths
	@mkdir -p $(@D)
	$(Q)sed -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
		$< > $@
$(INST)/djinn-serve.service: systemd/djinn-serve.service.in $(INST)/paths
	@mkdir -p $(@D)
	$(Q)sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
		$< > $@
$(INST)/djinn-serve: python/djinn-serve.in $(INST)/paths
	@mkdir -p $(@D)
	$(Q)sed -e 's|@PYTHON@|$(PYTHON)|g' $< > $@ && chmod 755 $@
$(INST)/djinn-device-plugin: python/djinn-device-plugin.in $(INST)/paths
	@mkdir -p $(@D)
	$(Q)sed -e 's|@PYTHON@|$(PYTHON)|g' $< > $@ && chmod 755 $@
.PHONY: FORCE install uninstall

# What is installed: "f MODE SRC DST", "l TARGET DST" (a symlink) or
# "c MODE SRC DST" (a configuration file).
INST_KMOD_SRCS := $(filter-out %.mod.c,$(wildcard kmod/*.c kmod/*.h)) \
	     $(wildcard kmod/Kbuild kmod/Makefile kmod/dkms.conf)
INST_UAPI_HDR  := $(wildcard include/uapi/linux/djinn.h)
INST_MAN_PAGES := $(wildcard man/man[1-8]/*.[1-8])
INSTALL_LIST = \
	f 755 $(DJINND) $(SBINDIR)/djinnd \
	f 755 $(DJINNCTL) $(BINDIR)/djinnctl \
	f 755 $(INST)/djinn-bench $(BINDIR)/djinn-bench \
	$(if $(INST_DJINN),f 755 $(INST_DJINN) $(BINDIR)/djinn) \
	f 755 $(LIBDJINN_SO) $(LIBDIR)/$(notdir $(LIBDJINN_SO)) \
	l $(notdir $(LIBDJINN_SO)) $(LIBDIR)/$(LIBDJINN_SONAME) \
	l $(LIBDJINN_SONAME) $(LIBDIR)/libdjinn.so \
	f 644 $(LIBDJINN_A) $(LIBDIR)/libdjinn.a \
	f 644 $(INST)/libdjinn.pc $(PKGCONFIGDIR)/libdjinn.pc \
	$(foreach h,$(wildcard include/djinn/*.h),f 644 $(h) $(INCLUDEDIR)/djinn/$(notdir $(h))) \
	$(foreach h,$(INST_UAPI_HDR),f 644 $(h) $(INCLUDEDIR)/linux/djinn.h) \
	$(foreach m,$(INST_MAN_PAGES),f 644 $(m) $(MANDIR)/$(patsubst man/%,%,$(m))) \
	f 644 $(INST)/djinnd.service $(UNITDIR)/djinnd.service \
	f 644 $(INST)/djinn-serve.service $(UNITDIR)/djinn-serve.service \
	f 755 $(INST)/djinn-serve $(BINDIR)/djinn-serve \
	f 755 $(INST)/djinn-device-plugin $(BINDIR)/djinn-device-plugin \
	f 644 systemd/djinn-serve.sysusers $(PREFIX)/lib/sysusers.d/djinn-serve.conf \
	c 644 etc/djinnd.conf $(SYSCONFDIR)/djinn/djinnd.conf \
	$(if $(wildcard kmod/dkms.conf), \
	  $(foreach k,$(INST_KMOD_SRCS),f 644 $(k) $(DKMSDIR)/$(notdir $(k))) \
	  $(foreach h,$(INST_UAPI_HDR),f 644 $(h) $(DKMSDIR)/uapi/linux/djinn.h))

INSTALL_FILES = $(DJINND) $(DJINNCTL) $(INST)/djinn-bench $(INST_DJINN) \
		$(LIBDJINN_SO) \
		$(LIBDJINN_A) $(INST)/libdjinn.pc $(INST)/djinnd.service \
		$(INST)/djinn-serve.service $(INST)/djinn-serve \
		$(INST)/djinn-device-plugin

# The installer, in sh: $1 install|uninstall, $2 DESTDIR, $3 the manifest;
# for install, the list on stdin. Manifest lines: "d DIR" for each
# directory made (parents first), "f PATH", "l PATH", "c SHA256 PATH".
define INSTALL_SH
set -eu
dest=$$2 manifest=$$3
case $$1 in
install)
	[ -z "$$dest" ] || mkdir -p "$$dest"
	new=$$(mktemp)
	trap 'rm -f "$$new" "$$new.u"' EXIT
	# Reinstalling: what an earlier install made stays recorded.
	if [ -f "$$dest$$manifest" ]; then
		grep '^[dc] ' "$$dest$$manifest" >"$$new" || true
	fi
	mkdirs() {
		d=$$1
		set --
		while [ "$$d" != / ] && [ ! -d "$$dest$$d" ]; do
			set -- "$$d" "$$@"
			d=$$(dirname "$$d")
		done
		for d; do
			mkdir -m 755 "$$dest$$d"
			echo "d $$d" >>"$$new"
		done
	}
	set -- $$(cat)
	while [ $$# -gt 0 ]; do
		kind=$$1
		case $$kind in
		f | c) mode=$$2 src=$$3 dst=$$4; shift 4 ;;
		l) src=$$2 dst=$$3; shift 3 ;;
		*) echo "install: bad list entry '$$kind'" >&2; exit 1 ;;
		esac
		mkdirs "$$(dirname "$$dst")"
		case $$kind in
		f)
			install -m "$$mode" "$$src" "$$dest$$dst"
			echo "f $$dst" >>"$$new" ;;
		l)
			ln -sfn "$$src" "$$dest$$dst"
			echo "l $$dst" >>"$$new" ;;
		c)
			if [ -e "$$dest$$dst" ]; then
				echo "install: keeping $$dest$$dst"
			else
				install -m "$$mode" "$$src" "$$dest$$dst"
				sum=$$(sha256sum <"$$dest$$dst")
				echo "c $${sum%% *} $$dst" >>"$$new"
			fi ;;
		esac
	done
	mkdirs "$$(dirname "$$manifest")"
	echo "f $$manifest" >>"$$new"
	awk '!seen[$$0]++' "$$new" >"$$new.u"
	install -m 644 "$$new.u" "$$dest$$manifest"
	rm -f "$$new.u"
	echo "install: $$(grep -c '^[flc] ' "$$dest$$manifest") files in $${dest:-/}, listed in $$manifest"
	;;
uninstall)
	if [ ! -f "$$dest$$manifest" ]; then
		echo "uninstall: no $$dest$$manifest: nothing to remove"
		exit 0
	fi
	list=$$(cat "$$dest$$manifest")
	echo "$$list" | while read -r kind a b; do
		case $$kind in
		f | l) rm -f "$$dest$$a" ;;
		c)
			[ -e "$$dest$$b" ] || continue
			sum=$$(sha256sum <"$$dest$$b")
			if [ "$${sum%% *}" = "$$a" ]; then
				rm -f "$$dest$$b"
			else
				echo "uninstall: keeping $$dest$$b (edited since install)"
			fi ;;
		esac
	done
	# Directories last, deepest first, and only when empty.
	echo "$$list" | sed -n 's/^d //p' | sort -r | while read -r d; do
		rmdir "$$dest$$d" 2>/dev/null ||
			echo "uninstall: keeping $$dest$$d (not empty)"
	done
	echo "uninstall: done"
	;;
esac
endef
export INSTALL_SH

# make builds what install takes; INSTALL_PREBUILT=1 takes it as built
# (test_install does, so that it checks the binaries the tests ran, even
# while the tree changes under it).
all: $(INSTALL_FILES)
install: $(if $(INSTALL_PREBUILT),$(INST)/libdjinn.pc $(INST)/djinnd.service $(INST)/djinn-serve.service $(INST)/djinn-serve $(INST)/djinn-device-plugin,$(INSTALL_FILES))
	$(Q)echo '$(strip $(INSTALL_LIST))' | \
		sh -c "$$INSTALL_SH" sh install '$(DESTDIR)' '$(INSTALL_MANIFEST)'
	$(Q)if [ -z '$(DESTDIR)' ] && [ "$$(id -u)" -eq 0 ] && \
		command -v ldconfig >/dev/null; then ldconfig; fi

uninstall:
	$(Q)sh -c "$$INSTALL_SH" sh uninstall '$(DESTDIR)' '$(INSTALL_MANIFEST)'
	$(Q)if [ -z '$(DESTDIR)' ] && [ "$$(id -u)" -eq 0 ] && \
		command -v ldconfig >/dev/null; then ldconfig; fi

# tests/integration/test_install.sh: a staged install, what it holds, an
# example built from it, ldd, and uninstall. Only in make test.
INSTALL_TEST := $(BUILD)/tests/integration/test_install
$(INSTALL_TEST): tests/integration/test_install.sh $(DJINND) $(DJINNCTL) \
		$(LIBDJINN) $(TESTLIB_SH)
	@mkdir -p $(@D)
	@echo "  INSTALL $@"
	$(Q)install -m 755 $< $@
all: $(INSTALL_TEST)
TESTS_ONCE += $(INSTALL_TEST)

# tests/integration/test_reload.sh: SIGHUP seen through djinnctl (pressure
# thresholds, leases, what needs a restart, a broken file refused).
RELOAD_TEST := $(BUILD)/tests/integration/test_reload
$(RELOAD_TEST): tests/integration/test_reload.sh $(DJINND) $(DJINNCTL) \
		$(BUILD)/tests/integration/open_session $(TESTLIB_SH)
	@mkdir -p $(@D)
	@echo "  INSTALL $@"
	$(Q)install -m 755 $< $@
all: $(RELOAD_TEST)
TESTS += $(RELOAD_TEST)
