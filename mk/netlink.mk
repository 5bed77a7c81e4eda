# The "djinn" generic netlink family is described once, in
# Documentation/netlink/specs/djinn.yaml; its C (the uapi header, kmod/,
# djinnctl and djinnd's listener) is written by hand, as the kernel's
# ynl-gen-c is not part of this build. scripts/check-netlink-spec.py reads
# the spec and fails, naming file and line, where the C disagrees: names,
# values and types of attributes and commands, the policy, the ops table,
# the multicast groups, what each message puts and its size estimate.
#
#   make BUILD/tests/netlink/test_netlink_spec   the test make test runs
#   scripts/check-netlink-spec.py [-v] [--spec FILE]   by hand

DEB_PKGS += python3-yaml

# Nothing in it is compiled, so make asan has nothing to add: make test only.
NETLINK_SPEC_TEST := $(BUILD)/tests/netlink/test_netlink_spec
$(NETLINK_SPEC_TEST): scripts/check-netlink-spec.py mk/netlink.mk
	@mkdir -p $(@D)
	@echo "  GEN     $@"
	$(Q)printf '#!/bin/sh\n# %s over %s (mk/netlink.mk)\nexec python3 \047%s\047 --root \047%s\047 "$$@"\n' \
		'scripts/check-netlink-spec.py' '$(CURDIR)' \
		'$(CURDIR)/scripts/check-netlink-spec.py' '$(CURDIR)' >$@.tmp
	$(Q)chmod 755 $@.tmp && mv $@.tmp $@
all: $(NETLINK_SPEC_TEST)
TESTS_ONCE += $(NETLINK_SPEC_TEST)
