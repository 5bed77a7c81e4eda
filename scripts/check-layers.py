#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check-layers: each floor of djinnd/ includes only itself and floors below.

djinnd/ is built in floors (Documentation/architecture.rst, "Floors"),
top to bottom:

  top      main.c, config/, server.c, daemon.h   start-up, the devices
  net      net/, server.h                        the protocol, the server
  svc      svc/                                  the services
  session  session/                              sessions, tenants, leases
  sched    sched/                                fair queues, memory policy
  exec     exec/                                 the executor pool
  model    model/                                the transformer runtime
  graph    graph/                                the graph runner
  backend  backend/                              the device interface
  vmu      vmu/                                  memory
  base     loop, log, device.h, lib/, include/      everyone's

A file may include a header of its own floor or of any floor below it;
an include of a floor above is an error naming the file, the line and
both floors. A lower floor that must tell a higher one something calls
a hook it was given.

Where the tree still breaks the rule, scripts/layers.allow lists each
such include ("FILE HEADER" a line); the check fails on any upward
include that is not listed, and on a listed one that is gone, so the
list only ever shrinks.

  scripts/check-layers.py [--root DIR] [-v]     the check
  scripts/check-layers.py --selftest            it fails where it must
"""

import argparse
import os
import re
import shutil
import sys
import tempfile

# (floor, paths under djinnd/: a folder ends in /), top to bottom
FLOORS = [
    ("top", ["main.c", "config/", "config.c", "config.h", "server.c",
             "daemon.h"]),
    ("net", ["net/", "server.h"]),
    ("svc", ["svc/"]),
    ("session", ["session/"]),
    ("sched", ["sched/"]),
    ("exec", ["exec/"]),
    ("model", ["model/"]),
    ("graph", ["graph/"]),
    ("backend", ["backend/"]),
    ("vmu", ["vmu/"]),
    ("base", ["loop.c", "loop.h", "log.c", "log.h", "device.h"]),
]
RANK = {name: len(FLOORS) - i for i, (name, _) in enumerate(FLOORS)}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def floor_of(rel):
    """The floor of a path relative to djinnd/, or None (not djinnd's)."""
    for name, paths in FLOORS:
        for p in paths:
            if (p.endswith("/") and rel.startswith(p)) or rel == p:
                return name
    return None


def header_floor(root, src_dir, inc):
    """The floor of an included header, as the compiler finds it
    (-Iinclude -Ilib -Idjinnd, then the includer's folder)."""
    here = os.path.relpath(os.path.join(src_dir, inc),
                           os.path.join(root, "djinnd"))
    if not here.startswith("..") and os.path.exists(
            os.path.join(root, "djinnd", here)):
        f = floor_of(here)
        if f:
            return f
    for d in ("include", "lib"):
        if os.path.exists(os.path.join(root, d, inc)):
            return "base"
    if os.path.exists(os.path.join(root, "djinnd", inc)):
        return floor_of(inc) or "unknown"
    return "unknown"


def read_allow(path):
    allow = {}
    if not os.path.exists(path):
        return allow
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if line:
                file, hdr = line.split()
                allow[(file, hdr)] = n
    return allow


def check(root, allow_file, verbose=False):
    allow = read_allow(allow_file)
    used = set()
    errors = []
    nfiles = ninc = 0
    top = os.path.join(root, "djinnd")
    for dirpath, _, files in sorted(os.walk(top)):
        for name in sorted(files):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, top)
            mine = floor_of(rel)
            if mine is None:
                errors.append(f"djinnd/{rel}: in no floor: name it in "
                              "scripts/check-layers.py's FLOORS")
                continue
            nfiles += 1
            with open(path, errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    ninc += 1
                    inc = m.group(1)
                    theirs = header_floor(root, dirpath, inc)
                    if theirs == "unknown":
                        errors.append(f"djinnd/{rel}:{n}: \"{inc}\" is "
                                      "found nowhere")
                        continue
                    if RANK[theirs] <= RANK[mine]:
                        continue
                    key = (f"djinnd/{rel}", inc)
                    if key in allow:
                        used.add(key)
                        if verbose:
                            print(f"allowed: djinnd/{rel}:{n}: {mine} "
                                  f"includes {inc} ({theirs})")
                        continue
                    errors.append(f"djinnd/{rel}:{n}: floor {mine} "
                                  f"includes \"{inc}\" of floor {theirs}, "
                                  "above it")
    for key, n in sorted(allow.items(), key=lambda kv: kv[1]):
        if key not in used:
            errors.append(f"{os.path.relpath(allow_file, root)}:{n}: "
                          f"{key[0]} no longer includes {key[1]} upward: "
                          "take the line out")
    for e in errors:
        print(e)
    print(f"check-layers: {nfiles} files, {ninc} includes, "
          f"{len(used)} upward includes still listed in "
          f"{os.path.relpath(allow_file, root)}, {len(errors)} errors")
    return 1 if errors else 0


def selftest(root):
    """Copy the tree's djinnd/ and break it three ways: each must fail."""
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for d in ("djinnd", "lib", "include"):
            shutil.copytree(os.path.join(root, d), os.path.join(tmp, d))
        allow = os.path.join(tmp, "layers.allow")
        shutil.copy(os.path.join(root, "scripts", "layers.allow"), allow)
        quiet = open(os.devnull, "w")

        def run():
            old = sys.stdout
            sys.stdout = quiet
            try:
                return check(tmp, allow)
            finally:
                sys.stdout = old

        if run() != 0:
            print("selftest: the copied tree does not pass")
            return 1
        # an upward include: vmu/ naming the server
        victim = os.path.join(tmp, "djinnd", "vmu", "stack.c")
        with open(victim, "a") as f:
            f.write('#include "server.h"\n')
        if run() == 0:
            print("selftest: vmu/ including server.h passed")
            ok = False
        shutil.copy(os.path.join(root, "djinnd", "vmu", "stack.c"), victim)
        # a stale line in the allow list
        with open(allow, "a") as f:
            f.write("djinnd/vmu/stack.c server.h\n")
        if run() == 0:
            print("selftest: a stale allow line passed")
            ok = False
        shutil.copy(os.path.join(root, "scripts", "layers.allow"), allow)
        # a folder in no floor
        os.mkdir(os.path.join(tmp, "djinnd", "nowhere"))
        with open(os.path.join(tmp, "djinnd", "nowhere", "x.c"), "w") as f:
            f.write("int x;\n")
        if run() == 0:
            print("selftest: a file in no floor passed")
            ok = False
    print("check-layers selftest:", "passed" if ok else "FAILED")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    if a.selftest:
        return selftest(root)
    return check(root, os.path.join(root, "scripts", "layers.allow"),
                 a.verbose)


if __name__ == "__main__":
    sys.exit(main())
