# README.md's snippets as a test (tests/integration/test_readme.sh): the
# blocks it marks readme-test, run against the djinnd it starts by hand,
# in a scratch copy of the checkout. In make test only: it builds a
# program against the shared libdjinn and loads libdjinn into python
# (not the ASan build's).
README_TEST := $(BUILD)/tests/integration/test_readme
$(README_TEST): tests/integration/test_readme.sh README.md $(DJINND) \
		$(DJINNCTL) $(LIBDJINN_SO) $(TESTLIB_SH)
	@mkdir -p $(@D)
	@echo "  INSTALL $@"
	$(Q)sed -e 's|@SRCDIR@|$(CURDIR)|' -e 's|@PYTHON@|$(PYTHON)|' $< \
		>$@.tmp && chmod 755 $@.tmp && mv $@.tmp $@
all: $(README_TEST)
TESTS_ONCE += $(README_TEST)
