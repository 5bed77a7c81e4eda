# The floors of djinnd/ (Documentation/architecture.rst): no folder
# includes a header of a floor above it, or uses a symbol one above it
# defines. scripts/check-layers.py reads the tree's includes and, with
# --objects, this build's object files (nm); its --selftest breaks a copy
# of the tree three ways, and a table of symbols once, and fails unless
# the check catches each.
#
#   make BUILD/tests/layers/test_layers   the test make test runs
#   scripts/check-layers.py [-v] [--objects build/djinnd]   by hand

# Nothing in it is compiled, so make asan has nothing to add: make test only.
LAYERS_TEST := $(BUILD)/tests/layers/test_layers
$(LAYERS_TEST): scripts/check-layers.py mk/layers.mk
	@mkdir -p $(@D)
	@echo "  GEN     $@"
	$(Q)printf '#!/bin/sh\n# %s over %s (mk/layers.mk)\npython3 \047%s\047 --root \047%s\047 --selftest || exit 1\nexec python3 \047%s\047 --root \047%s\047 --objects \047%s\047\n' \
		'scripts/check-layers.py' '$(CURDIR)' \
		'$(CURDIR)/scripts/check-layers.py' '$(CURDIR)' \
		'$(CURDIR)/scripts/check-layers.py' '$(CURDIR)' \
		'$(CURDIR)/$(BUILD)/djinnd' >$@.tmp
	$(Q)chmod 755 $@.tmp && mv $@.tmp $@
all: $(LAYERS_TEST)
TESTS_ONCE += $(LAYERS_TEST)
