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

DJINND_CONFIG_OBJ := $(BUILD)/djinnd/config.o
SRCS += djinnd/config.c
LIBS_DJINND := $(DJINND_CONFIG_OBJ) $(LIBS_DJINND) -linih -lsystemd
$(DJINND): $(DJINND_CONFIG_OBJ)
$(BUILD)/djinnd/main.o $(DJINND_CONFIG_OBJ): \
	ALL_CFLAGS += -DDJINND_SYSCONFDIR='"$(SYSCONFDIR)"'

# tests/unit/test_config.c: the parser, over files it writes
test_config_LIBS := $(DJINND_CONFIG_OBJ) $(DJINND_LIB) -linih
$(BUILD)/tests/unit/test_config: $(DJINND_CONFIG_OBJ)

# tests/integration/test_notify.c plays systemd on a NOTIFY_SOCKET of its
# own: READY, WATCHDOG, RELOADING, STOPPING, journal prefixes.
NOTIFY_TEST := $(BUILD)/tests/integration/test_notify
SRCS += tests/integration/test_notify.c
$(NOTIFY_TEST): $(BUILD)/tests/integration/test_notify.o | $(DJINND)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcmocka
all: $(NOTIFY_TEST)
TESTS += $(NOTIFY_TEST)

# tests/integration/test_service.sh: the unit (systemd-analyze verify), the
# shipped configuration and the man pages, from the source tree.
SERVICE_TEST := $(BUILD)/tests/integration/test_service
$(SERVICE_TEST): tests/integration/test_service.sh $(DJINND)
	@mkdir -p $(@D)
	@echo "  INSTALL $@"
	$(Q)install -m 755 $< $@
all: $(SERVICE_TEST)
TESTS += $(SERVICE_TEST)
