# SPDX-License-Identifier: MIT
"""Finding libdjinn: a library that is missing or too old is refused at
import of the first call with what was looked for and what was found,
never a crash."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

PROBE = textwrap.dedent("""
    import djinn
    try:
        djinn.connect("unix:/nonexistent")
    except djinn.LibraryError as e:
        print("LibraryError:", e)
""")


def _run(env_lib):
    env = dict(os.environ, DJINN_LIBRARY=env_lib,
               PYTHONPATH=str(ROOT / "python"))
    return subprocess.run([sys.executable, "-c", PROBE], env=env,
                          capture_output=True, text=True, timeout=60)


def test_missing_library(tmp_path):
    r = _run(str(tmp_path / "libdjinn.so"))
    assert r.returncode == 0, r.stderr
    assert "LibraryError: libdjinn not found" in r.stdout
    assert str(tmp_path / "libdjinn.so") in r.stdout
    assert "$DJINN_LIBRARY" in r.stdout


def test_too_old_library(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build an old libdjinn stand-in")
    (tmp_path / "old.c").write_text("int djinn_model_info(void) "
                                    "{ return 0; }\n")
    (tmp_path / "old.map").write_text("DJINN_0.1 { global: "
                                      "djinn_model_info; local: *; };\n")
    lib = tmp_path / "libdjinn.so.0"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib),
                    f"-Wl,--version-script={tmp_path / 'old.map'}",
                    str(tmp_path / "old.c")], check=True)
    r = _run(str(lib))
    assert r.returncode == 0, r.stderr
    assert "is too old: it has DJINN_0.1" in r.stdout
    assert "needs DJINN_0.4" in r.stdout


def test_found_library():
    import djinn._lib as L

    assert os.path.basename(L.path()).startswith("libdjinn.so")
