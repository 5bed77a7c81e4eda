# SPDX-License-Identifier: MIT
"""pyproject.toml says the package; this only records, in the built
package, the build tree of the checkout it was built from (when that has
a libdjinn.so), so that `pip install ./python` from a built checkout finds
the library without $DJINN_LIBRARY (djinn/_lib.py, "the build tree")."""

import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        lib = pathlib.Path(__file__).resolve().parent.parent / "build"
        where = pathlib.Path(self.build_lib) / "djinn" / "_buildtree.py"
        where.write_text(
            "# written by setup.py: the checkout this was built from\n"
            f"BUILD = {str(lib) if (lib / 'libdjinn.so').exists() else ''!r}\n")


setup(cmdclass={"build_py": BuildPy})
