#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The seccomp profile of djinnd's container (deploy/kubernetes/seccomp/
djinnd.json), made from the unit's own filter: systemd/djinnd.service.in's
SystemCallFilter=, its groups expanded by this machine's systemd-analyze,
denied calls failing with its SystemCallErrorNumber= (EPERM), native
architectures only (SystemCallArchitectures=native). The container runs
djinnd under the same system calls as the unit; RuntimeDefault would not
do on containerd 2.0 and CRI-O, whose default profiles forbid io_uring.

    scripts/mkseccomp.py [--unit systemd/djinnd.service.in] > FILE

python/tests/test_deploy.py checks the shipped file against this.
"""

from __future__ import annotations

import argparse
import errno
import json
import subprocess
import sys
from typing import Dict, List, Set

# each native architecture of the nodes djinnd runs on
ARCHES = ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"]


def expand(words: List[str], cache: Dict[str, Set[str]]) -> Set[str]:
    """The system calls @words name: calls, and systemd's filter groups
    (@name), nested groups expanded."""
    calls: Set[str] = set()
    for w in words:
        calls |= group(w, cache) if w.startswith("@") else {w}
    return calls


def group(name: str, cache: Dict[str, Set[str]]) -> Set[str]:
    """The system calls of systemd's filter group @name."""
    if name not in cache:
        out = subprocess.run(["systemd-analyze", "syscall-filter",
                              "--no-pager", name], check=True,
                             capture_output=True, text=True).stdout
        cache[name] = set()  # a group that names itself ends here
        # the first line names the group; "#" lines describe it
        cache[name] = expand([w.strip() for w in out.splitlines()[1:]
                              if w.strip() and not w.strip().startswith("#")],
                             cache)
    return cache[name]


def unit_filter(path: str) -> List[str]:
    """The words of the unit's SystemCallFilter= lines (allow lists)."""
    words: List[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            if key != "SystemCallFilter":
                continue
            if value.startswith("~"):
                sys.exit(f"{path}: a deny list: not made into a profile")
            words += value.split()
    if not words:
        sys.exit(f"{path}: no SystemCallFilter=")
    return words


def profile(unit: str) -> Dict[str, object]:
    calls = expand(unit_filter(unit), {})
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": errno.EPERM,
        "architectures": ARCHES,
        "syscalls": [{"names": sorted(calls), "action": "SCMP_ACT_ALLOW"}],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--unit", default="systemd/djinnd.service.in")
    args = ap.parse_args()
    json.dump(profile(args.unit), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
