# The Python package (python/, Documentation/python.rst): the `djinn`
# package on libdjinn through ctypes.
#
#   make test          runs its pytest suite against this build's djinnd
#                      (BUILD/tests/python/test_python; Debian's
#                      python3-numpy and python3-pytest)
#   make python        a wheel in $(BUILD)/python/ (pip, setuptools)
#   make install       the package too, into $(PYTHON_SITE)
#   make bench-python  its cost beside the C client's (bench/python-bench.py)
#   make test-python-hf  the suite again with torch and transformers (the
#                      Hugging Face parts: python/tests/test_hf.py), in
#                      check-hf's cached environment (mk/check-hf.mk)
#
# Debian's interpreter, where apt installs numpy and pytest, unless PYTHON
# says another.
PYTHON ?= $(if $(wildcard /usr/bin/python3),/usr/bin/python3,python3)
DEB_PKGS += python3-numpy python3-pytest
# test_place.py's DNS server, answering for several djinnd on loopback;
# libseccomp's binding, which test_deploy.py runs djinnd under its
# container's seccomp profile with
DEB_PKGS += dnsmasq-base python3-seccomp

PY_SRCS := $(wildcard python/djinn/*.py python/djinn/serve/*.py \
			python/djinn/k8s/*.py python/djinn/k8s/proto/*.proto) \
	   python/djinn/py.typed
PY_TESTS := $(wildcard python/tests/*.py examples/python/*.py)

# djinn serve's packages (and the openai SDK its tests drive it with),
# the device plugin's (grpcio, grpcio-tools for its .proto files) and
# PyYAML for the manifests' test, from PyPI into a venv over Debian's
# interpreter, which keeps numpy and pytest; make test runs the suite in
# it. Where pip cannot install them, the tests that need them skip,
# naming the package.
SERVE_PKGS  := fastapi uvicorn jinja2 tokenizers openai grpcio \
	       grpcio-tools pyyaml
SERVE_VENV  := $(BUILD)/serve-venv
SERVE_STAMP := $(SERVE_VENV)/.serve
DEB_PKGS    += python3-venv
TEST_PREP   += $(SERVE_STAMP)
$(SERVE_STAMP): mk/python.mk
	$(Q)rm -rf $(SERVE_VENV) && \
		$(PYTHON) -m venv --system-site-packages $(SERVE_VENV) && \
		{ $(SERVE_VENV)/bin/python -m pip install -q --timeout 20 \
			$(SERVE_PKGS) && touch $@ || \
		  echo "  warning: pip did not install $(SERVE_PKGS): djinn" \
		       "serve's tests skip"; }

PYTHON_TEST := $(BUILD)/tests/python/test_python
$(PYTHON_TEST): tests/python/test_python.sh $(PY_SRCS) $(PY_TESTS) \
		$(DJINND) $(DJINNCTL) $(DJINN_TOOL) $(LIBDJINN_SO)
	@mkdir -p $(@D)
	@echo "  INSTALL $@"
	$(Q)sed -e 's|@SRCDIR@|$(CURDIR)|' -e 's|@PYTHON@|$(PYTHON)|' $< \
		>$@.tmp && chmod 755 $@.tmp && mv $@.tmp $@
all: $(PYTHON_TEST)
# libdjinn loaded into python: not the ASan build's
TESTS_ONCE += $(PYTHON_TEST)

# make python: the wheel, built from the checkout without the network
.PHONY: python
python: $(LIBDJINN_SO)
	$(Q)scripts/deps.sh python3-pip python3-setuptools python3-wheel
	$(Q)rm -rf $(BUILD)/python && mkdir -p $(BUILD)/python
	$(Q)$(PYTHON) -m pip wheel -q --no-deps --no-build-isolation \
		-w $(BUILD)/python ./python
	$(Q)rm -rf python/build python/djinn.egg-info
	@ls $(BUILD)/python/*.whl

# make install: the package's files, where the interpreter looks
PYTHON_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHON_SITE ?= $(PREFIX)/lib/python$(PYTHON_VERSION)/dist-packages
INSTALL_LIST += $(if $(PYTHON_VERSION),$(foreach f,$(PY_SRCS),f 644 $(f) $(PYTHON_SITE)/$(patsubst python/%,%,$(f))))

# make bench-python: bench/python-bench.py beside the C client's same
# calls (bench/py-baseline.c, loaded into the same process)
PY_BASELINE := $(BUILD)/bench/libpy-baseline.so
$(BUILD)/bench/py-baseline.pic.o: bench/py-baseline.c
	@mkdir -p $(@D)
	@echo "  CC      $@"
	$(Q)$(CC) $(ALL_CFLAGS) -fPIC -c -o $@ $<
$(PY_BASELINE): $(BUILD)/bench/py-baseline.pic.o $(BUILD)/libdjinn.so
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -shared -o $@ $< -L$(BUILD) -ldjinn \
		-Wl,-rpath,'$$ORIGIN/..'
all: $(PY_BASELINE)

.PHONY: bench-python
bench-python: deps
	$(Q)$(MAKE) --no-print-directory $(PY_BASELINE) $(DJINND)
	$(Q)$(PYTHON) bench/python-bench.py --build $(BUILD) \
		--cache $(BENCH_CACHE) $(BENCH_PYTHON_ARGS)

# make test-python-hf: mypy over the package, then the whole suite in
# check-hf's environment, with torch and transformers (from PyPI, built
# once outside the sources), where test_hf.py runs instead of skipping.
# Too heavy for make test.
PYTHON_HF_STAMP := $(CHECK_HF_VENV)/.python-hf
$(PYTHON_HF_STAMP): $(CHECK_HF_VENV)/.check-hf
	$(Q)$(CHECK_HF_PY) -c 'import pytest, mypy' 2>/dev/null || \
		$(CHECK_HF_PY) -m pip install -q pytest mypy
	$(Q)touch $@

.PHONY: test-python-hf
test-python-hf:
	$(Q)scripts/deps.sh $(DEB_PKGS) python3-venv
	$(Q)$(MAKE) --no-print-directory $(DJINND) $(DJINNCTL) $(DJINN_TOOL) \
		$(LIBDJINN_SO) $(CHECK_HF_CACHE)/tf5/.check-hf-$(CHECK_HF_TF5) \
		$(PYTHON_HF_STAMP)
	$(Q)cd python && $(abspath $(CHECK_HF_PY)) -m mypy \
		--ignore-missing-imports djinn
	$(Q)cd python && DJINN_BUILD=$(abspath $(BUILD)) \
		DJINN_LIBRARY=$(abspath $(BUILD))/libdjinn.so \
		PYTHONPATH=$(abspath $(CHECK_HF_CACHE))/tf5 \
		$(abspath $(CHECK_HF_PY)) -m pytest -q -p no:cacheprovider tests

