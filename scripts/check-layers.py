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

With --objects BUILD/djinnd it checks calls too: every global symbol an
object file of djinnd/ uses (nm's U) and another defines is a call or
a use of that file's floor, which must not be above the user's. A call
can go up without an include when the caller's own floor declares it
(server.h once declared server.c's functions to net/); this sees it.

Where the tree still breaks the rule, scripts/layers.allow lists each
such include ("FILE HEADER" a line); the check fails on any upward
include that is not listed, and on a listed one that is gone, so the
list only ever shrinks.

  scripts/check-layers.py [--root DIR] [--objects BUILD/djinnd] [-v]
  scripts/check-layers.py --selftest            it fails where it must
"""

import argparse
import os
import re
import shutil
import subprocess
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


def object_floor(objdir, path):
    """The floor of an object file, by the source it was built from."""
    rel = os.path.relpath(path, objdir)[:-2]
    for ext in (".c", ".cu", ".S"):
        f = floor_of(rel + ext)
        if f:
            return f, rel + ext
    return None, rel


def read_symbols(objdir, root):
    """{symbol: [(floor, source)]} defined, {(floor, source): {symbol}}
    used, over the object files below @objdir whose source is still in
    @root's djinnd/ (a build tree keeps the objects of moved files)."""
    defs, uses = {}, {}
    for dirpath, _, files in sorted(os.walk(objdir)):
        for name in sorted(files):
            if not name.endswith(".o"):
                continue
            path = os.path.join(dirpath, name)
            floor, src = object_floor(objdir, path)
            if floor is None or not os.path.exists(
                    os.path.join(root, "djinnd", src)):
                continue
            out = subprocess.run(["nm", "-P", path], capture_output=True,
                                 text=True, check=True).stdout
            for line in out.splitlines():
                f = line.split()
                if len(f) < 2:
                    continue
                if f[1] == "U":
                    uses.setdefault((floor, src), set()).add(f[0])
                elif f[1] in "TDBRCV":
                    defs.setdefault(f[0], []).append((floor, src))
    return defs, uses


def upward_calls(defs, uses):
    """Each use of a symbol defined on a floor above the user's."""
    bad = []
    for (floor, src), names in sorted(uses.items()):
        for n in sorted(names):
            for dfloor, dsrc in defs.get(n, []):
                if RANK[dfloor] > RANK[floor]:
                    bad.append(f"djinnd/{src}: floor {floor} uses {n} of "
                               f"djinnd/{dsrc}, floor {dfloor}, above it")
    return bad


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
    # a call up that no include shows: vmu/ using a symbol of net/
    defs = {"msg_handle": [("net", "net/msg.c")],
            "vmu_create": [("vmu", "vmu/vmu.c")]}
    uses = {("vmu", "vmu/stack.c"): {"msg_handle"},
            ("net", "net/msg.c"): {"vmu_create"}}
    if len(upward_calls(defs, uses)) != 1:
        print("selftest: vmu/ calling net/ was not caught (or net/ "
              "calling vmu/ was)")
        ok = False
    print("check-layers selftest:", "passed" if ok else "FAILED")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--objects", metavar="BUILD/djinnd",
                    help="also check the calls of these object files")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    if a.selftest:
        return selftest(root)
    ret = check(root, os.path.join(root, "scripts", "layers.allow"),
                a.verbose)
    if a.objects:
        defs, uses = read_symbols(a.objects, root)
        bad = upward_calls(defs, uses)
        for b in bad:
            print(b)
        print(f"check-layers: {len(uses)} object files, "
              f"{sum(len(v) for v in uses.values())} symbols used, "
              f"{len(bad)} upward calls")
        if bad or not uses:
            ret = 1
    return ret


if __name__ == "__main__":
    sys.exit(main())
