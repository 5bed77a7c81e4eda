#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The Python package (python/djinn) against a real djinnd of this build:
# pytest over python/tests (Documentation/python.rst, "Tests").
#
# Installed by mk/python.mk as BUILD/tests/python/test_python, with the
# source tree's path in place of @SRCDIR@ ($DJINN_SRC overrides it) and
# the interpreter in place of @PYTHON@ ($PYTHON overrides it).
# Exit status: 0 pass, 1 fail, 77 skipped (no numpy or pytest).
set -u

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)
src=${DJINN_SRC:-@SRCDIR@}
py=${PYTHON:-@PYTHON@}
# make test's venv over that interpreter, with djinn serve's packages
# (mk/python.mk); without it test_serve.py skips, naming what is missing
if [ -z "${PYTHON:-}" ] && [ -x "$build/serve-venv/bin/python" ]; then
	py=$build/serve-venv/bin/python
fi

"$py" -c 'import numpy, pytest' 2>/dev/null || {
	echo "SKIP: $py has no numpy or pytest (Debian: python3-numpy python3-pytest)"
	exit 77
}
cd "$src/python" || exit 1
# this build's programs, by absolute path ($DJINND from make test is
# relative to the checkout, and pytest runs in python/)
DJINN_BUILD=$build DJINN_LIBRARY=$build/libdjinn.so \
	DJINND=$build/djinnd/djinnd DJINNCTL=$build/tools/djinnctl \
	DJINN_TOOL=$build/tools/djinn \
	exec "$py" -m pytest -q -p no:cacheprovider tests
