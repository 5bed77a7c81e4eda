#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check-netlink-spec: the "djinn" generic netlink family, spec against code.

Documentation/netlink/specs/djinn.yaml describes the family once, in the
kernel's YNL format; the C that implements it is written by hand (the
kernel's ynl-gen-c is not available to this build). This script reads the
spec and checks, naming the file and line of every disagreement, that the
C says the same, under the names and values ynl-gen-c would give:

  uapi (include/uapi/linux/djinn.h)
    - the family name and version, and each multicast group's define;
    - each definition's entries (enum values, flags as 1 << value), in an
      enum of the spec's name or as defines, and nothing more in that enum;
    - each attribute set's enum: every attribute's name and value (the
      spec's order), nothing else but a leading *_UNSPEC = 0, and the
      __*_MAX / *_MAX pair after the last;
    - the command enum the same way, notifications included.
  kernel (kmod/*.c, kmod/*.h)
    - the family (struct genl_family): name, version, maxattr and policy,
      ops table, multicast groups;
    - every nla_policy array: each entry is an attribute of the spec with
      the NLA type ynl-gen-c would give it, the array holds maxattr + 1,
      and every attribute an operation's request lists has its entry;
    - the ops table: one entry per operation with do or dump, a doit for
      do and a dumpit for dump (and not otherwise), the spec's flags
      (admin-perm is GENL_ADMIN_PERM, uns-admin-perm GENL_UNS_ADMIN_PERM);
      no entry for a notification and none the spec lacks;
    - the multicast groups: names and order, flags (admin-perm is
      GENL_MCAST_CAP_NET_ADMIN, also through a compat.h macro) and any
      DJINN_MCGRP_<NAME>_IDX index;
    - every message the module builds (functions calling genlmsg_put):
      the attributes it puts are exactly those of the spec's reply or
      notification it builds, each put as its type (u64 with the set's
      pad attribute); every command the module sends is in the spec and
      every notification of the spec is sent;
    - every genlmsg_new() size estimate beside such a message counts the
      attributes it puts: nla_total_size_64bit(sizeof(u64)) * N for the
      N u64 ones, nla_total_size(sizeof(u32)) * M for the u32 ones, one
      nla_total_size(LEN) per string, and as many in all as the spec
      lists for that message.
  user space (every other C file naming DJINN_A_*)
    - each nla_get_TYPE() / nla_put_TYPE() of an attribute, also through
      a local macro such as U64(attr, field), uses the spec's type.

Usage: check-netlink-spec.py [--spec FILE] [--root DIR] [-v]
Exit status: 0 spec and code agree, 1 they do not (one line each), 2 a
file is missing or cannot be parsed, 77 PyYAML is not installed.
"""

import argparse
import ast
import os
import re
import sys

try:
    import yaml
except ImportError:
    print("check-netlink-spec: skipped: PyYAML is not installed "
          "(Debian: python3-yaml)")
    sys.exit(77)

PROG = "check-netlink-spec"


class Fatal(Exception):
    """A file cannot be read or understood: exit 2."""


# --------------------------------------------------------------------------
# Reporting


class Report:
    def __init__(self, root, verbose):
        self.root = root
        self.verbose = verbose
        self.errors = []
        self.checked = 0

    def where(self, path, line):
        rel = os.path.relpath(path, self.root) if path else "?"
        if rel.startswith(".."):
            rel = path
        return f"{rel}:{line}" if line else rel

    def ok(self, what):
        self.checked += 1
        if self.verbose:
            print(f"  ok: {what}")

    def error(self, path, line, msg):
        self.checked += 1
        self.errors.append(f"{self.where(path, line)}: {msg}")

    def check(self, cond, path, line, msg, what=None):
        if cond:
            self.ok(what or msg)
        else:
            self.error(path, line, msg)
        return cond


# --------------------------------------------------------------------------
# The spec, with ynl-gen-c's names and values


def c_upper(name):
    return name.upper().replace("-", "_")


def c_lower(name):
    return name.lower().replace("-", "_")


class Spec:
    """The parts of a YNL genetlink spec this check needs, named as
    ynl-gen-c (Linux 6.12, tools/net/ynl) names them."""

    def __init__(self, path):
        self.path = path
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            y = yaml.safe_load(text)
        except OSError as e:
            raise Fatal(f"{path}: {e.strerror}")
        except yaml.YAMLError as e:
            raise Fatal(f"{path}: not YAML: {e}")
        if not isinstance(y, dict) or "name" not in y:
            raise Fatal(f"{path}: not a netlink spec (no name)")
        self.lines = text.split("\n")
        self.y = y
        self.name = y["name"]
        self.ident = self.name
        proto = y.get("protocol", "genetlink")
        if proto not in ("genetlink", "genetlink-c", "genetlink-legacy"):
            raise Fatal(f"{path}: protocol {proto}: only genetlink is checked")
        model = y.get("operations", {}).get("enum-model", "unified")
        if model != "unified":
            raise Fatal(f"{path}: enum-model {model}: only unified is checked")
        self.version = y.get("version", 1)
        self.fam_key = c_upper(y.get("c-family-name", self.name + "_FAMILY_NAME"))
        self.ver_key = c_upper(y.get("c-version-name",
                                     self.name + "_FAMILY_VERSION"))
        self._definitions()
        self._attr_sets()
        self._operations()
        self._mcgrps()

    def line_of(self, *keys):
        """The spec's line where "name: KEY" (or "- KEY") first appears
        after the previous key's line, for messages."""
        line = 0
        for key in keys:
            pat = re.compile(r"^\s*(-\s*)?(name:\s*)?%s\s*$" % re.escape(key))
            for i in range(line, len(self.lines)):
                if pat.match(self.lines[i]):
                    line = i + 1
                    break
        return line or None

    def _definitions(self):
        self.defs = {}
        for d in self.y.get("definitions", []):
            kind = d["type"]
            ent = {"name": d["name"], "type": kind, "entries": []}
            if kind in ("enum", "flags"):
                pfx = d.get("name-prefix", f"{self.ident}-{d['name']}-")
                if "enum-name" in d:
                    ent["enum_name"] = (c_lower(d["enum-name"])
                                        if d["enum-name"] else None)
                else:
                    ent["enum_name"] = c_lower(f"{self.ident}-{d['name']}")
                start = d.get("value-start", 0)
                prev = None
                for e in d["entries"]:
                    e = {"name": e} if isinstance(e, str) else e
                    if "value" in e:
                        v = e["value"]
                    elif prev is not None:
                        v = prev + 1
                    else:
                        v = start
                    prev = v
                    user = 1 << v if kind == "flags" else v
                    ent["entries"].append((e["name"], c_upper(pfx + e["name"]),
                                           user))
            elif kind == "const":
                pfx = d.get("name-prefix", f"{self.ident}-")
                ent["entries"].append((d["name"], c_upper(pfx + d["name"]),
                                       d["value"]))
            self.defs[d["name"]] = ent

    def _attr_sets(self):
        self.sets = {}
        for s in self.y.get("attribute-sets", []):
            if "subset-of" in s:
                continue
            if "name-prefix" in s:
                pfx = s["name-prefix"]
            elif s["name"] == self.name:
                pfx = self.ident + "-a-"
            else:
                pfx = f"{self.ident}-a-{s['name']}-"
            prefix = c_upper(pfx)
            attrs = {}
            order = []
            val = 1
            for a in s["attributes"]:
                if "value" in a:
                    val = a["value"]
                attrs[a["name"]] = {
                    "name": a["name"],
                    "c": prefix + c_upper(a["name"]),
                    "value": val,
                    "type": a["type"],
                    "checks": a.get("checks", {}),
                    "enum": a.get("enum"),
                }
                order.append(a["name"])
                val += 1
            self.sets[s["name"]] = {
                "name": s["name"],
                "prefix": prefix,
                "attrs": attrs,
                "order": order,
                "max": c_upper(s.get("attr-max-name", pfx + "max")),
                "cnt": c_upper(s.get("attr-cnt-name", "__" + pfx + "max")),
            }
        self.attr_by_c = {}
        for s in self.sets.values():
            for a in s["attrs"].values():
                self.attr_by_c[a["c"]] = (s, a)

    def _operations(self):
        ops = self.y.get("operations", {})
        self.op_prefix = c_upper(ops.get("name-prefix", self.name + "-cmd-"))
        self.cmd_max = c_upper(self.y.get("cmd-max-name",
                                          self.op_prefix + "MAX"))
        self.cmd_cnt = c_upper(self.y.get("cmd-cnt-name",
                                          "__" + self.op_prefix + "MAX"))
        self.ops = {}
        self.op_order = []
        val = 1
        for o in ops.get("list", []):
            if "value" in o:
                val = o["value"]
            self.ops[o["name"]] = {
                "name": o["name"],
                "c": self.op_prefix + c_upper(o["name"]),
                "value": val,
                "y": o,
            }
            self.op_order.append(o["name"])
            val += 1

    def _mcgrps(self):
        self.mcgrps = []
        for g in self.y.get("mcast-groups", {}).get("list", []):
            self.mcgrps.append({
                "name": g["name"],
                "c": c_upper(g.get("c-define-name",
                                   f"{self.ident}-mcgrp-{g['name']}")),
                "flags": g.get("flags", []),
            })

    def op_set(self, op):
        """The attribute set of @op (a notification: of what it notifies
        as)."""
        y = op["y"]
        if "attribute-set" in y:
            return self.sets.get(y["attribute-set"])
        if "notify" in y and y["notify"] in self.ops:
            return self.op_set(self.ops[y["notify"]])
        return None

    def messages(self):
        """What the kernel sends: (command c name, what, set, attribute
        names) for each do reply, dump reply and notification."""
        out = []
        for name in self.op_order:
            op = self.ops[name]
            y = op["y"]
            aset = self.op_set(op)
            for mode in ("do", "dump"):
                reply = (y.get(mode) or {}).get("reply")
                if reply is not None:
                    out.append((op["c"], f"{name} {mode} reply", aset,
                                list(reply.get("attributes", []))))
            if "notify" in y:
                src = self.ops.get(y["notify"])
                attrs = None
                if src:
                    for mode in ("do", "dump"):
                        r = (src["y"].get(mode) or {}).get("reply")
                        if r is not None:
                            attrs = list(r.get("attributes", []))
                            break
                out.append((op["c"], f"{name} (notify: {y['notify']})", aset,
                            attrs))
            elif "event" in y:
                out.append((op["c"], f"{name} event", aset,
                            list(y["event"].get("attributes", []))))
        return out


# --------------------------------------------------------------------------
# C, read just well enough


def strip_comments(text):
    """@text without comments and string contents' comment look-alikes;
    newlines kept, so line numbers hold."""

    def blank(m):
        s = m.group(0)
        if s.startswith("/"):
            return re.sub(r"[^\n]", " ", s)
        return s

    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'
                  r"'(?:\\.|[^'\\\n])*'", blank, text, flags=re.S)


class CFile:
    def __init__(self, path):
        self.path = path
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                self.raw = f.read()
        except OSError as e:
            raise Fatal(f"{path}: {e.strerror}")
        self.text = strip_comments(self.raw)

    def line(self, pos):
        return self.text.count("\n", 0, pos) + 1

    def block(self, start):
        """The text from the "{" at or after @start to its "}"
        (inclusive), and the end position."""
        i = self.text.index("{", start)
        depth = 0
        for j in range(i, len(self.text)):
            c = self.text[j]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    return self.text[i:j + 1], j + 1
        raise Fatal(f"{self.path}:{self.line(i)}: unbalanced braces")

    def functions(self):
        """name -> (params, body, body position) of each function
        definition at file scope."""
        out = {}
        pat = re.compile(r"^(?:[A-Za-z_][\w \t\*]*?[\s\*])?([A-Za-z_]\w*)\s*"
                         r"\(([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*)\)\s*\{",
                         re.M)
        pos = 0
        while True:
            m = pat.search(self.text, pos)
            if not m:
                break
            name = m.group(1)
            if name in ("if", "for", "while", "switch", "return", "sizeof"):
                pos = m.end()
                continue
            body, end = self.block(m.end() - 1)
            params = [p.strip() for p in m.group(2).split(",")]
            params = [re.findall(r"\w+", p)[-1] if re.findall(r"\w+", p)
                      else "" for p in params]
            out[name] = (params, body, m.end() - 1)
            pos = end
        return out

    def arrays(self, struct):
        """name -> (size expression, body, position of the body) of each
        array of struct @struct with an initializer."""
        out = {}
        pat = re.compile(r"\bstruct\s+%s\s+(?:__ro_after_init\s+)?(\w+)\s*"
                         r"\[([^\]]*)\]\s*(?:__ro_after_init\s*)?=\s*\{"
                         % re.escape(struct))
        for m in pat.finditer(self.text):
            body, _ = self.block(m.end() - 1)
            out[m.group(1)] = (m.group(2).strip(), body, m.end() - 1)
        return out

    def struct_vars(self, struct):
        """name -> (body, position) of each initialized variable of
        struct @struct (not an array)."""
        out = {}
        pat = re.compile(r"\bstruct\s+%s\s+(\w+)\s*(?:__ro_after_init\s*)?=\s*\{"
                         % re.escape(struct))
        for m in pat.finditer(self.text):
            body, _ = self.block(m.end() - 1)
            out[m.group(1)] = (body, m.start())
        return out

    def defines(self):
        """name -> list of (replacement, line): every #define, each
        branch of an #if its own entry."""
        out = {}
        text = re.sub(r"\\\n", " ", self.text)
        for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\([^)]*\))?"
                             r"[ \t]*([^\n]*)$", text, re.M):
            name = m.group(1)
            params = m.group(2)
            out.setdefault(name, []).append(
                ((params or "") + "\0" + m.group(3).strip(),
                 self.line(m.start())))
        return out


def entries(body):
    """The top-level { ... } entries of an initializer's body."""
    inner = body[1:-1]
    out = []
    depth = 0
    start = None
    for i, c in enumerate(inner):
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                out.append(inner[start:i + 1])
    return out


def split_top(s, sep=","):
    """@s split at @sep outside parentheses and braces."""
    out, depth, cur = [], 0, ""
    for c in s:
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        if c == sep and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += c
    out.append(cur)
    return [x.strip() for x in out]


def fields(s):
    """Designated fields of an initializer: name -> expression."""
    out = {}
    for part in split_top(s.strip().strip("{}")):
        m = re.search(r"\.(\w+)\s*=\s*(.*)$", part, re.S)
        if m:
            out[m.group(1)] = " ".join(m.group(2).split())
    return out


def bare_tokens(s):
    """The parts of an initializer that are not designated fields."""
    out = []
    for part in split_top(s.strip().strip("{}")):
        if part and not re.match(r"\.\w+\s*=", part) and \
                not re.search(r"\)\s*\.\w+\s*=", part):
            out.append(part)
    return out


class Values:
    """Integer and string constants of the uapi header: enums and
    #defines, with where each is."""

    def __init__(self):
        self.ints = {}
        self.strs = {}
        self.where = {}
        self.enums = []  # (name or None, [(entry, value, line)], file)

    def eval(self, expr):
        expr = expr.strip()
        m = re.fullmatch(r'"((?:\\.|[^"\\])*)"', expr)
        if m:
            return m.group(1)
        if expr in self.strs:
            return self.strs[expr]
        e = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", expr)
        e = re.sub(r"\bBIT\(([^)]*)\)", r"(1 << (\1))", e)

        def name(m):
            n = m.group(0)
            if n in self.ints:
                return str(self.ints[n])
            raise KeyError(n)

        try:
            e = re.sub(r"\b[A-Za-z_]\w*\b", name, e)
        except KeyError:
            return None
        try:
            tree = ast.parse(e, mode="eval")
        except SyntaxError:
            return None
        ok = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant,
              ast.Add, ast.Sub, ast.Mult, ast.LShift, ast.RShift,
              ast.BitOr, ast.BitAnd, ast.USub, ast.Invert)
        if not all(isinstance(n, ok) for n in ast.walk(tree)):
            return None
        return eval(compile(tree, "<c>", "eval"))  # only arithmetic

    def read(self, cf):
        for name, defs in cf.defines().items():
            repl, line = defs[0]
            params, _, body = repl.partition("\0")
            if params:
                continue
            v = self.eval(body)
            if isinstance(v, str):
                self.strs[name] = v
            elif v is not None:
                self.ints[name] = v
            self.where[name] = (cf.path, line)
        for m in re.finditer(r"\benum\s+(\w+\s*)?\{", cf.text):
            body, _ = cf.block(m.end() - 1)
            base = m.end() - 1
            ename = m.group(1).strip() if m.group(1) else None
            ents = []
            nxt = 0
            off = 1
            for part in body[1:-1].split(","):
                lead = len(part) - len(part.lstrip())
                ln = cf.line(base + off + lead)
                off += len(part) + 1
                part = part.strip()
                if not part:
                    continue
                mm = re.fullmatch(r"(\w+)\s*(?:=\s*(.*))?", part, re.S)
                if not mm:
                    continue
                if mm.group(2) is not None:
                    v = self.eval(mm.group(2))
                    if v is None:
                        raise Fatal(f"{cf.path}:{ln}: cannot evaluate "
                                    f"{part}")
                else:
                    v = nxt
                nxt = v + 1
                self.ints[mm.group(1)] = v
                self.where[mm.group(1)] = (cf.path, ln)
                ents.append((mm.group(1), v, ln))
            self.enums.append((ename, ents, cf.path))

    def enum_of(self, name):
        for e in self.enums:
            if any(x[0] == name for x in e[1]):
                return e
        return None


# --------------------------------------------------------------------------
# The checks

NLA_TYPES = {
    "u8": "NLA_U8", "u16": "NLA_U16", "u32": "NLA_U32", "u64": "NLA_U64",
    "s8": "NLA_S8", "s16": "NLA_S16", "s32": "NLA_S32", "s64": "NLA_S64",
    "uint": "NLA_UINT", "sint": "NLA_SINT", "flag": "NLA_FLAG",
    "binary": "NLA_BINARY", "nest": "NLA_NESTED",
    "bitfield32": "NLA_BITFIELD32",
}

# nla_put_X / nla_get_X (kernel and libnl) -> the spec type it writes.
ACCESS_TYPES = {
    "u8": "u8", "u16": "u16", "u32": "u32", "u64": "u64",
    "u64_64bit": "u64", "s8": "s8", "s16": "s16", "s32": "s32",
    "s64": "s64", "s64_64bit": "s64", "uint": "uint", "sint": "sint",
    "string": "string", "strdup": "string", "flag": "flag",
    "be16": "u16", "be32": "u32", "be64": "u64", "in_addr": "u32",
}

SIZES = {"u8": 1, "s8": 1, "u16": 2, "s16": 2, "u32": 4, "s32": 4,
         "u64": 8, "s64": 8, "__u8": 1, "__u16": 2, "__u32": 4, "__u64": 8,
         "__s32": 4, "__s64": 8, "int": 4}

OP_FLAGS = {"admin-perm": "GENL_ADMIN_PERM",
            "uns-admin-perm": "GENL_UNS_ADMIN_PERM"}
MCGRP_FLAGS = {"admin-perm": "GENL_MCAST_CAP_NET_ADMIN",
               "uns-admin-perm": "GENL_MCAST_CAP_NET_ADMIN"}


def policy_type(a):
    if a["type"] == "string":
        return ("NLA_STRING" if a["checks"].get("unterminated-ok")
                else "NLA_NUL_STRING")
    return NLA_TYPES.get(a["type"])


def check_uapi(spec, vals, rep, uapi):
    sp = spec.path
    # the family and its groups
    rep.check(vals.strs.get(spec.fam_key) == spec.name, uapi,
              vals.where.get(spec.fam_key, (0, None))[1],
              f"{spec.fam_key} is {vals.strs.get(spec.fam_key)!r}, the "
              f"spec's family name is {spec.name!r}",
              f"{spec.fam_key} = {spec.name!r}")
    rep.check(vals.ints.get(spec.ver_key) == spec.version, uapi,
              vals.where.get(spec.ver_key, (0, None))[1],
              f"{spec.ver_key} is {vals.ints.get(spec.ver_key)}, the spec's "
              f"version is {spec.version}",
              f"{spec.ver_key} = {spec.version}")
    for g in spec.mcgrps:
        got = vals.strs.get(g["c"])
        rep.check(got == g["name"], uapi,
                  vals.where.get(g["c"], (0, None))[1],
                  f"multicast group {g['name']!r}: " +
                  (f"{g['c']} is {got!r}" if g["c"] in vals.strs else
                   f"no {g['c']}") + f", want {g['c']} {g['name']!r}",
                  f"{g['c']} = {g['name']!r}")

    # definitions
    for d in spec.defs.values():
        line = spec.line_of("definitions:", d["name"])
        seen_enum = None
        for ename, cname, value in d["entries"]:
            if cname not in vals.ints:
                shown = f"{value:#x}" if d["type"] == "flags" else value
                rep.error(sp, line, f"{d['type']} {d['name']}: entry {ename} "
                          f"is {cname} = {shown} under ynl-gen-c's names; "
                          f"{os.path.relpath(uapi, rep.root)} has no "
                          f"{cname}" + hint(vals, cname, value, shown))
                continue
            f, ln = vals.where[cname]
            rep.check(vals.ints[cname] == value, f, ln,
                      f"{cname} is {vals.ints[cname]}, the spec's "
                      f"{d['name']} {ename} is {value}",
                      f"{cname} = {value}")
            e = vals.enum_of(cname)
            if e and d["type"] != "const":
                seen_enum = e
        if seen_enum and d.get("enum_name"):
            rep.check(seen_enum[0] == d["enum_name"], seen_enum[2],
                      seen_enum[1][0][2],
                      f"the entries of {d['type']} {d['name']} are in enum "
                      f"{seen_enum[0] or '(anonymous)'}, the spec's C name "
                      f"is enum {d['enum_name']}",
                      f"enum {d['enum_name']}")
            want = {c for _, c, _ in d["entries"]}
            for n, v, ln in seen_enum[1]:
                if n not in want:
                    rep.error(seen_enum[2], ln,
                              f"{n} = {v} is in enum {seen_enum[0]} but not "
                              f"among the spec's {d['name']} entries")

    # attribute sets
    for s in spec.sets.values():
        line = spec.line_of("attribute-sets:", s["name"])
        first = s["attrs"][s["order"][0]]["c"] if s["order"] else None
        e = vals.enum_of(first) if first else None
        if not e:
            rep.error(sp, line, f"attribute set {s['name']}: no enum in "
                      f"{os.path.relpath(uapi, rep.root)} holds {first}")
            continue
        have = {n: (v, ln) for n, v, ln in e[1]}
        last = 0
        for name in s["order"]:
            a = s["attrs"][name]
            last = max(last, a["value"])
            if a["c"] not in have:
                rep.error(sp, spec.line_of("attribute-sets:", s["name"],
                                           name),
                          f"attribute {s['name']}.{name}: no {a['c']} in the "
                          f"enum of {first}")
                continue
            v, ln = have[a["c"]]
            rep.check(v == a["value"], e[2], ln,
                      f"{a['c']} is {v}, the spec gives {s['name']}.{name} "
                      f"the value {a['value']} (its place in the list)",
                      f"{a['c']} = {a['value']}")
        extra_ok = {s["cnt"], s["max"], s["prefix"] + "UNSPEC"}
        for n, v, ln in e[1]:
            if n in spec.attr_by_c:
                continue
            if n == s["prefix"] + "UNSPEC":
                rep.check(v == 0 and all(a["value"] != 0 for a in
                                         s["attrs"].values()),
                          e[2], ln, f"{n} is {v}: an UNSPEC entry must be 0 "
                          f"and no attribute of the spec 0",
                          f"{n} = 0 (not in the spec: the C convention)")
            elif n not in extra_ok:
                rep.error(e[2], ln, f"{n} = {v} is in the attribute enum but "
                          f"not in the spec's attribute set {s['name']}")
        rep.check(have.get(s["cnt"], (None,))[0] == last + 1, e[2],
                  have.get(s["cnt"], (0, None))[1],
                  f"{s['cnt']} is {have.get(s['cnt'], (None,))[0]}, want "
                  f"{last + 1} (one past the spec's last attribute)",
                  f"{s['cnt']} = {last + 1}")
        rep.check(vals.ints.get(s["max"]) == last, e[2],
                  have.get(s["max"], (0, None))[1],
                  f"{s['max']} is {vals.ints.get(s['max'])}, want {last}",
                  f"{s['max']} = {last}")

    # commands
    if spec.op_order:
        first = spec.ops[spec.op_order[0]]["c"]
        e = vals.enum_of(first)
        if not e:
            rep.error(sp, spec.line_of("operations:"),
                      f"no enum in {os.path.relpath(uapi, rep.root)} holds "
                      f"{first}")
            return
        have = {n: (v, ln) for n, v, ln in e[1]}
        want = {spec.ops[o]["c"] for o in spec.op_order}
        last = 0
        for name in spec.op_order:
            op = spec.ops[name]
            last = max(last, op["value"])
            if op["c"] not in have:
                rep.error(sp, spec.line_of("operations:", name),
                          f"operation {name}: no {op['c']} in the enum of "
                          f"{first}")
                continue
            v, ln = have[op["c"]]
            rep.check(v == op["value"], e[2], ln,
                      f"{op['c']} is {v}, the spec gives operation {name} "
                      f"the value {op['value']} (its place in the list)",
                      f"{op['c']} = {op['value']}")
        for n, v, ln in e[1]:
            if n in want or n in (spec.cmd_cnt, spec.cmd_max):
                continue
            if n == spec.op_prefix + "UNSPEC":
                rep.check(v == 0, e[2], ln, f"{n} is {v}, want 0",
                          f"{n} = 0 (not in the spec: the C convention)")
            else:
                rep.error(e[2], ln, f"{n} = {v} is in the command enum but "
                          f"not among the spec's operations")
        rep.check(have.get(spec.cmd_cnt, (None,))[0] == last + 1, e[2],
                  have.get(spec.cmd_cnt, (0, None))[1],
                  f"{spec.cmd_cnt} is {have.get(spec.cmd_cnt, (None,))[0]}, "
                  f"want {last + 1}", f"{spec.cmd_cnt} = {last + 1}")
        rep.check(vals.ints.get(spec.cmd_max) == last, e[2],
                  have.get(spec.cmd_max, (0, None))[1],
                  f"{spec.cmd_max} is {vals.ints.get(spec.cmd_max)}, want "
                  f"{last}", f"{spec.cmd_max} = {last}")


def hint(vals, cname, value, shown):
    """" (it has X = value)" when a constant of that value shares the
    name's last word: the likely rename."""
    stem = cname.rsplit("_", 1)[-1]
    cands = [n for n, v in vals.ints.items()
             if v == value and n.endswith("_" + stem)]
    if not cands:
        return ""
    return (f", but has {', '.join(sorted(cands))} = {shown} (a name-prefix "
            f"on the definition sets the prefix; genetlink-c allows one)")


def expand(defs, expr, depth=0):
    """Every expansion of @expr through object-like macros of @defs (one
    per #if branch)."""
    if depth > 8:
        return [expr]
    for name in re.findall(r"\b[A-Z_][A-Z0-9_]*\b", expr):
        if name in defs:
            outs = []
            for repl, _ in defs[name]:
                params, _, body = repl.partition("\0")
                if params:
                    m = re.search(r"\b%s\s*\(([^()]*(?:\([^()]*\))*[^()]*)\)"
                                  % name, expr)
                    if not m:
                        continue
                    args = split_top(m.group(1))
                    pnames = [p.strip() for p in params[1:-1].split(",")]
                    b = body
                    for p, a in zip(pnames, args):
                        b = re.sub(r"\b%s\b" % re.escape(p), a, b)
                    outs += expand(defs, expr[:m.start()] + b + expr[m.end():],
                                   depth + 1)
                else:
                    outs += expand(defs, re.sub(r"\b%s\b" % name,
                                                lambda _m: body, expr),
                                   depth + 1)
            if outs:
                return outs
    return [expr]


def check_kernel(spec, vals, rep, kfiles):
    defs = {}
    for cf in kfiles:
        for k, v in cf.defines().items():
            defs.setdefault(k, []).extend(v)

    # the family
    fams = [(cf, n, b, p) for cf in kfiles
            for n, (b, p) in cf.struct_vars("genl_family").items()]
    fam = None
    for cf, n, b, p in fams:
        f = fields(b)
        if vals.strs.get(f.get("name", "")) == spec.name or \
                f.get("name") == f'"{spec.name}"':
            fam = (cf, n, f, p)
    if not fam:
        rep.error(spec.path, None, f"no struct genl_family named "
                  f"{spec.name!r} ({spec.fam_key}) in kmod/")
        return
    cf, fname, ff, fpos = fam
    fline = cf.line(fpos)
    rep.ok(f"{fname}: .name = {ff['name']}")
    ver = ff.get("version")
    rep.check(ver is not None and vals.eval(ver) == spec.version, cf.path,
              fline, f"{fname}: .version is {ver}, the spec's version is "
              f"{spec.version}", f"{fname}: .version = {spec.version}")

    policies = {}
    for f in kfiles:
        for n, (size, body, pos) in f.arrays("nla_policy").items():
            policies[n] = (f, size, body, pos)

    # every policy array: entries of the spec with its types
    for pname, (f, size, body, pos) in policies.items():
        n = vals.eval(size)
        hi = 0
        for part in split_top(body[1:-1]):
            if not part:
                continue
            m = re.match(r"\[\s*(\w+)\s*\]\s*=\s*(.*)$", part, re.S)
            if not m:
                continue
            attr, init = m.group(1), " ".join(m.group(2).split())
            ln = f.line(pos + body.find("[" + m.group(1)))
            if attr not in spec.attr_by_c:
                rep.error(f.path, ln, f"{pname}: {attr} is not an attribute "
                          f"of the spec")
                continue
            s, a = spec.attr_by_c[attr]
            hi = max(hi, a["value"])
            t = re.search(r"\.type\s*=\s*(NLA_\w+)", init) or \
                re.search(r"NLA_POLICY_\w+\(\s*(NLA_\w+)", init)
            got = t.group(1) if t else init
            if re.search(r"NLA_POLICY_EXACT_LEN", init):
                got = "NLA_POLICY_EXACT_LEN"
            want = policy_type(a)
            rep.check(got == want, f.path, ln,
                      f"{pname}[{attr}] is {got}, the spec's "
                      f"{s['name']}.{a['name']} is {a['type']}: {want}",
                      f"{pname}[{attr}] = {want}")
            ml = a["checks"].get("max-len")
            if ml is not None and a["type"] == "string":
                lm = re.search(r"\.len\s*=\s*([^,}]+)", init)
                rep.check(lm and vals.eval(lm.group(1)) == vals.eval(str(ml)),
                          f.path, ln, f"{pname}[{attr}]: .len is "
                          f"{lm.group(1) if lm else 'missing'}, the spec's "
                          f"max-len is {ml}", f"{pname}[{attr}] .len = {ml}")
        rep.check(n is not None and n >= hi + 1, f.path, f.line(pos),
                  f"{pname}[{size}] holds {n} entries, its last attribute "
                  f"needs {hi + 1}", f"{pname}[{size}] holds {hi + 1}")

    # the family's maxattr against its policy
    fam_policy = ff.get("policy")
    if fam_policy:
        if fam_policy not in policies:
            rep.error(cf.path, fline, f"{fname}: .policy = {fam_policy}: no "
                      f"such nla_policy array")
        else:
            size = policies[fam_policy][1]
            ma = ff.get("maxattr")
            rep.check(ma is not None and vals.eval(size) is not None and
                      vals.eval(ma) == vals.eval(size) - 1, cf.path, fline,
                      f"{fname}: .maxattr = {ma} but .policy = {fam_policy} "
                      f"has [{size}] entries", f"{fname}: .maxattr = {ma}")

    # the ops table
    table = None
    for key, struct in (("small_ops", "genl_small_ops"), ("ops", "genl_ops"),
                        ("split_ops", "genl_split_ops")):
        if key in ff:
            for f in kfiles:
                arr = f.arrays(struct)
                if ff[key] in arr:
                    table = (f, ff[key], arr[ff[key]], key)
    if not table:
        rep.error(cf.path, fline, f"{fname}: no ops table found (.small_ops, "
                  f".ops or .split_ops)")
    else:
        check_ops(spec, vals, rep, table, ff, policies)

    # multicast groups
    check_mcgrps(spec, vals, rep, kfiles, cf, fname, ff, fline, defs)

    # messages and their sizes
    check_messages(spec, vals, rep, kfiles)


def check_ops(spec, vals, rep, table, ff, policies):
    f, tname, (size, body, pos), key = table
    split = key == "split_ops"
    seen = {}
    for ent in entries(body):
        fl = fields(ent)
        at = body.find(ent)
        ln = f.line(pos + at + max(ent.find(".cmd"), 0))
        cmd = fl.get("cmd")
        op = next((o for o in spec.ops.values() if o["c"] == cmd), None)
        if not op:
            rep.error(f.path, ln, f"{tname}: .cmd = {cmd} is not an "
                      f"operation of the spec")
            continue
        y = op["y"]
        if "notify" in y or "event" in y:
            rep.error(f.path, ln, f"{tname}: {cmd} is a notification in the "
                      f"spec, not a request")
            continue
        have = seen.setdefault(op["name"], set())
        for mode, cb in (("do", "doit"), ("dump", "dumpit")):
            if cb in fl:
                have.add(mode)
                rep.check(mode in y, f.path, ln,
                          f"{tname}: {cmd} has .{cb} but the spec's "
                          f"{op['name']} has no {mode}",
                          f"{tname}: {cmd} .{cb}")
        flags = {x.strip() for x in fl.get("flags", "").split("|")
                 if x.strip()}
        flags = {x for x in flags if not x.startswith("GENL_CMD_CAP_")}
        want = set()
        for x in y.get("flags", []):
            if x not in OP_FLAGS:
                rep.error(spec.path, spec.line_of("operations:", op["name"]),
                          f"operation {op['name']}: flag {x} is not checked "
                          f"by this script (add it to OP_FLAGS)")
                continue
            want.add(OP_FLAGS[x])
        rep.check(flags == want, f.path, ln,
                  f"{tname}: {cmd} .flags = "
                  f"{' | '.join(sorted(flags)) or '0'}, the spec's "
                  f"{op['name']} says {' | '.join(sorted(want)) or 'none'}",
                  f"{tname}: {cmd} .flags = "
                  f"{' | '.join(sorted(want)) or '0'}")
        # the policy each request of this entry is checked against
        pol = fl.get("policy") or (None if split else ff.get("policy"))
        for mode in ("do", "dump"):
            if mode not in y or (split and mode not in have):
                continue
            if not any(cb in fl for cb in (("doit",) if mode == "do"
                                            else ("dumpit",))):
                continue
            req = ((y.get(mode) or {}).get("request") or {}).get(
                "attributes", [])
            aset = spec.op_set(op)
            for an in req:
                a = aset["attrs"].get(an) if aset else None
                if not a:
                    rep.error(spec.path, spec.line_of("operations:",
                                                      op["name"]),
                              f"operation {op['name']} {mode}: request "
                              f"attribute {an} is not in its attribute set")
                    continue
                if not pol or pol not in policies:
                    rep.error(f.path, ln, f"{tname}: {cmd} ({mode}) has no "
                              f"policy, but the spec's request carries {an}")
                    continue
                pf, psize, pbody, _ = policies[pol]
                rep.check(re.search(r"\[\s*%s\s*\]" % a["c"], pbody), pf.path,
                          pf.line(policies[pol][3]),
                          f"{pol} has no entry for {a['c']}, which the "
                          f"spec's {op['name']} {mode} request carries",
                          f"{pol}[{a['c']}] for {op['name']} {mode}")
                ma = fl.get("maxattr") if fl.get("policy") else \
                    ff.get("maxattr")
                mv = vals.eval(ma) if ma else None
                rep.check(mv is not None and mv >= a["value"], f.path, ln,
                          f"{tname}: {cmd} ({mode}): maxattr {ma} is below "
                          f"{a['c']} = {a['value']}",
                          f"{cmd} ({mode}) maxattr covers {a['c']}")
    for name in spec.op_order:
        y = spec.ops[name]["y"]
        if "notify" in y or "event" in y:
            continue
        for mode, cb in (("do", "doit"), ("dump", "dumpit")):
            if mode in y and mode not in seen.get(name, set()):
                rep.error(f.path, f.line(pos), f"{tname}: no .{cb} for "
                          f"{spec.ops[name]['c']}: the spec's {name} has "
                          f"{mode}")


def check_mcgrps(spec, vals, rep, kfiles, cf, fname, ff, fline, defs):
    name = ff.get("mcgrps")
    arr = None
    for f in kfiles:
        a = f.arrays("genl_multicast_group")
        if name in a:
            arr = (f, a[name])
    if not spec.mcgrps:
        rep.check(not name, cf.path, fline, f"{fname}: .mcgrps = {name} but "
                  f"the spec has no multicast groups", "no multicast groups")
        return
    if not arr:
        rep.error(cf.path, fline, f"{fname}: no multicast group array "
                  f"(.mcgrps = {name}); the spec has "
                  f"{', '.join(g['name'] for g in spec.mcgrps)}")
        return
    f, (size, body, pos) = arr
    ents = entries(body)
    ln0 = f.line(pos)
    rep.check(len(ents) == len(spec.mcgrps), f.path, ln0,
              f"{name} has {len(ents)} groups, the spec "
              f"{len(spec.mcgrps)}", f"{name}: {len(ents)} groups")
    for i, (ent, g) in enumerate(zip(ents, spec.mcgrps)):
        ln = f.line(pos + body.find(ent))
        flds = fields(ent)
        toks = bare_tokens(ent)
        gname = flds.get("name") or (toks[0] if toks else None)
        v = vals.eval(gname) if gname else None
        rep.check(v == g["name"], f.path, ln,
                  f"{name}[{i}] is {gname} = {v!r}, the spec's group {i} is "
                  f"{g['name']!r}", f"{name}[{i}] = {g['name']!r}")
        # flags, directly or through compat macros (every branch)
        variants = expand(defs, ent)
        want = {MCGRP_FLAGS[x] for x in g["flags"] if x in MCGRP_FLAGS}
        for x in g["flags"]:
            if x not in MCGRP_FLAGS:
                rep.error(spec.path, spec.line_of("mcast-groups:", g["name"]),
                          f"group {g['name']}: flag {x} is not checked by "
                          f"this script")
        found = []
        for var in variants:
            fl = fields(var).get("flags", "")
            found.append({x.strip() for x in fl.split("|") if x.strip()})
        if want:
            rep.check(any(s == want for s in found) and
                      all(not s or s == want for s in found), f.path, ln,
                      f"{name}[{i}] ({g['name']}): .flags is "
                      f"{' or '.join(' | '.join(sorted(s)) or '0' for s in found)}"
                      f", the spec's flags {g['flags']} want "
                      f"{' | '.join(sorted(want))} (where the kernel has it)",
                      f"{name}[{i}] .flags = {' | '.join(sorted(want))}")
        else:
            rep.check(all(not s for s in found), f.path, ln,
                      f"{name}[{i}] ({g['name']}) has .flags but the spec "
                      f"gives the group none", f"{name}[{i}] no flags")
        idx = g["c"] + "_IDX"
        for fk in kfiles:
            d = fk.defines().get(idx)
            if d:
                v = vals.eval(d[0][0].partition("\0")[2])
                rep.check(v == i, fk.path, d[0][1],
                          f"{idx} is {v}, {g['name']} is group {i} of {name}",
                          f"{idx} = {i}")


PUT_RE = re.compile(r"\bnla_put_(\w+)\s*\(\s*([^,]+),\s*(\w+)\s*"
                    r"(?:,([^;]*?))?\)\s*(?=\|\||\)|;|&&)", re.S)


def puts_of(body, spec):
    """(attribute c name, spec type written, pad, offset) of each put."""
    out = []
    for m in PUT_RE.finditer(body):
        kind, attr = m.group(1), m.group(3)
        if attr not in spec.attr_by_c:
            continue
        pad = None
        if kind.endswith("_64bit"):
            args = split_top(m.group(4) or "")
            pad = args[-1] if args else None
        out.append((attr, ACCESS_TYPES.get(kind, kind), kind, pad, m.start()))
    return out


def check_messages(spec, vals, rep, kfiles):
    funcs = {}
    for f in kfiles:
        for n, (params, body, pos) in f.functions().items():
            funcs[n] = (f, params, body, pos)
    # fill functions: the ones that put a genetlink header
    fills = {}
    for n, (f, params, body, pos) in funcs.items():
        m = re.search(r"\bgenlmsg_put\s*\(([^;]*)\)\s*;", body)
        if not m:
            continue
        args = split_top(m.group(1))
        cmdp = args[-1] if args else None
        fills[n] = (cmdp, params.index(cmdp) if cmdp in params else None)
    if not fills:
        rep.error(None, None, "no function in kmod/ calls genlmsg_put(): "
                  "nothing to check the messages against")
        return

    # which commands each fill builds: literal arguments, or through a
    # parameter of the caller one level up
    builds = {n: {} for n in fills}  # fill -> {cmd: (file, line)}
    cmd_names = {o["c"] for o in spec.ops.values()}
    all_cmds = set()
    for n, (f, params, body, pos) in funcs.items():
        for fill, (cmdp, idx) in fills.items():
            for m in re.finditer(r"\b%s\s*\(" % fill, body):
                if idx is None or n == fill:
                    continue
                args = split_top(args_at(body, m.end() - 1))
                if idx >= len(args):
                    continue
                a = args[idx]
                ln = f.line(pos + m.start())
                if re.fullmatch(r"[A-Z_][A-Z0-9_]*", a):
                    builds[fill][a] = (f, ln)
                elif a in params:
                    j = params.index(a)
                    for n2, (f2, p2, b2, pos2) in funcs.items():
                        for m2 in re.finditer(r"\b%s\s*\(" % n, b2):
                            a2 = split_top(args_at(b2, m2.end() - 1))
                            if j < len(a2) and re.fullmatch(
                                    r"[A-Z_][A-Z0-9_]*", a2[j]):
                                builds[fill][a2[j]] = (f2, f2.line(pos2 +
                                                                   m2.start()))
    # every command of the uapi's command enum the module uses outside
    # its ops table
    op_cmd = re.compile(r"\.cmd\s*=\s*(\w+)")
    enum = vals.enum_of(spec.ops[spec.op_order[0]]["c"]) if spec.op_order \
        else None
    enum_cmds = {n for n, _, _ in enum[1]} if enum else set()
    enum_cmds -= {spec.cmd_cnt, spec.cmd_max, spec.op_prefix + "UNSPEC"}
    for f in kfiles:
        table_cmds = set(op_cmd.findall(f.text))
        for m in re.finditer(r"\b[A-Z_][A-Z0-9_]*\b", f.text):
            c = m.group(0)
            if c not in enum_cmds and not (c.startswith(spec.op_prefix) and
                                           c.endswith("_NTF")):
                continue
            line = f.text[f.text.rfind("\n", 0, m.start()) + 1:
                          f.text.find("\n", m.end())]
            if c in table_cmds and op_cmd.search(line):
                continue
            all_cmds.add(c)
            if c not in cmd_names:
                rep.error(f.path, f.line(m.start()),
                          f"the module uses {c}, which is not an operation "
                          f"of the spec")
    # a command no fill is known to build: the one fill, if there is one
    known = set().union(*[set(b) for b in builds.values()])
    if len(fills) == 1:
        only = next(iter(fills))
        for c in all_cmds - known:
            builds[only][c] = (None, None)

    done = set()
    for cmd, what, aset, attrs in spec.messages():
        op = next(o for o in spec.ops.values() if o["c"] == cmd)
        if "notify" in op["y"] or "event" in op["y"]:
            rep.check(cmd in all_cmds, spec.path,
                      spec.line_of("operations:", op["name"]),
                      f"notification {op['name']} ({cmd}) is never sent by "
                      f"the module", f"{cmd} is sent")
        if attrs is None:
            rep.error(spec.path, spec.line_of("operations:", op["name"]),
                      f"{what}: the operation it notifies as has no reply "
                      f"to take its attributes from")
            continue
        fill = [n for n, b in builds.items() if cmd in b]
        if not fill:
            if cmd in all_cmds or "notify" not in op["y"]:
                rep.error(spec.path, spec.line_of("operations:", op["name"]),
                          f"{what}: cannot tell which function of the module "
                          f"builds {cmd}")
            continue
        for fn in fill:
            # one check for all the messages a fill builds alike
            key = (fn, aset["name"] if aset else None, tuple(attrs))
            if key in done:
                rep.ok(f"{fn}() builds {what} as it builds the others")
                continue
            done.add(key)
            check_fill(spec, rep, funcs, fn, cmd, what, aset, attrs)

    # size estimates next to the fills, each size function once
    sized = set()
    for n, (f, params, body, pos) in funcs.items():
        for m in re.finditer(r"\bgenlmsg_new\s*\(", body):
            args = split_top(args_at(body, m.end() - 1))
            size = args[0] if args else ""
            used = [fl for fl in fills if re.search(r"\b%s\s*\(" % fl, body)]
            if not used:
                continue
            for fl in used:
                if (size, fl) in sized:
                    continue
                sized.add((size, fl))
                msgs = [(c, w, s, a) for c, w, s, a in spec.messages()
                        if c in builds[fl] and a is not None]
                check_size(spec, vals, rep, funcs, f, f.line(pos + m.start()),
                           n, size, fl, msgs)


def args_at(text, i):
    """The text between the "(" at @i and its ")"."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
    return text[i + 1:]


def check_fill(spec, rep, funcs, fn, cmd, what, aset, attrs):
    f, params, body, pos = funcs[fn]
    puts = puts_of(body, spec)
    names = [p[0] for p in puts]
    want = [aset["attrs"][a]["c"] for a in attrs if a in aset["attrs"]]
    for a in attrs:
        if a not in aset["attrs"]:
            rep.error(spec.path, None, f"{what}: attribute {a} is not in "
                      f"set {aset['name']}")
    line = f.line(pos)
    missing = [a for a in want if a not in names]
    extra = [a for a in names if a not in want]
    rep.check(not missing, f.path, line,
              f"{fn}() builds {cmd} ({what}) without "
              f"{', '.join(missing)}, which the spec lists",
              f"{fn}() puts every attribute of {what}")
    rep.check(not extra, f.path, line,
              f"{fn}() puts {', '.join(extra)} in {cmd} ({what}), which the "
              f"spec does not list", f"{fn}() puts nothing more for {what}")
    dup = sorted({a for a in names if names.count(a) > 1})
    rep.check(not dup, f.path, line, f"{fn}() puts {', '.join(dup)} more "
              f"than once", f"{fn}() puts each attribute once")
    pad = next((a["c"] for a in aset["attrs"].values() if a["type"] == "pad"),
               None)
    for attr, typ, kind, p, off in puts:
        s, a = spec.attr_by_c[attr]
        ln = f.line(pos + off)
        rep.check(typ == a["type"], f.path, ln,
                  f"{fn}(): nla_put_{kind}({attr}) writes {typ}, the spec's "
                  f"{s['name']}.{a['name']} is {a['type']}",
                  f"{fn}(): {attr} put as {a['type']}")
        if kind.endswith("_64bit"):
            rep.check(p == pad, f.path, ln,
                      f"{fn}(): nla_put_{kind}({attr}) pads with {p}, the "
                      f"spec's pad attribute of {s['name']} is {pad}",
                      f"{fn}(): {attr} padded with {pad}")


TERM_RE = re.compile(r"^(nla_total_size(?:_64bit)?)\s*\((.*)\)\s*"
                     r"(?:\*\s*(\w+))?$", re.S)


def check_size(spec, vals, rep, funcs, f, line, caller, size, fill, msgs):
    expr = size.strip()
    where = f"{caller}(): genlmsg_new({expr})"
    m = re.fullmatch(r"(\w+)\s*\(\s*\)", expr)
    if m and m.group(1) in funcs:
        sf, _, sbody, spos = funcs[m.group(1)]
        r = re.search(r"\breturn\s+(.*?);", sbody, re.S)
        if not r:
            rep.error(sf.path, sf.line(spos), f"{m.group(1)}() returns "
                      f"nothing this script can read")
            return
        expr = r.group(1)
        f, line = sf, sf.line(spos + r.start())
        where = f"{m.group(1)}()"
    counts = {"u64_64bit": 0, "string": 0}
    terms = split_top(expr, "+")
    for t in terms:
        t = " ".join(t.split())
        mt = TERM_RE.match(t)
        if not mt:
            if re.fullmatch(r"(NLMSG|GENL)\w*|0", t):
                continue
            rep.error(f.path, line, f"{where}: cannot read the term '{t}'")
            return
        fn, arg, mul = mt.groups()
        n = vals.eval(mul) if mul else 1
        if n is None:
            rep.error(f.path, line, f"{where}: cannot evaluate '* {mul}'")
            return
        sz = re.fullmatch(r"sizeof\s*\(\s*(\w+)\s*\)", arg.strip())
        if fn == "nla_total_size_64bit":
            key = "u64_64bit"
        elif sz and sz.group(1) in SIZES:
            key = f"size{SIZES[sz.group(1)]}"
        elif vals.eval(arg) is not None:
            key = "string"
        else:
            rep.error(f.path, line, f"{where}: cannot read the size '{arg}'")
            return
        counts[key] = counts.get(key, 0) + n
    _, _, body, _ = funcs[fill]
    puts = puts_of(body, spec)
    have = {}
    for attr, typ, kind, p, off in puts:
        if kind.endswith("_64bit"):
            key = "u64_64bit"
        elif typ == "string":
            key = "string"
        elif typ in SIZES:
            key = f"size{SIZES[typ]}"
        elif typ == "flag":
            key = "size0"
        else:
            key = typ
        have.setdefault(key, []).append(attr)
    label = {"u64_64bit": "nla_total_size_64bit(sizeof(u64))",
             "string": "nla_total_size(LEN) (strings)",
             "size0": "nla_total_size(0) (flags)"}
    for key in sorted(set(counts) | set(have)):
        got = counts.get(key, 0)
        put = have.get(key, [])
        words = {"size1": "u8", "size2": "u16", "size4": "u32", "size8": "u64"}
        lab = label.get(key, f"nla_total_size(sizeof({words.get(key, key)}))")
        rep.check(got == len(put), f.path, line,
                  f"{where} counts {got} x {lab} but {fill}() puts "
                  f"{len(put)} such attributes"
                  + (f": {', '.join(put)}" if put else ""),
                  f"{where}: {got} x {lab}")
    total = sum(counts.values())
    for cmd, what, aset, attrs in msgs:
        rep.check(total == len(attrs), f.path, line,
                  f"{where} counts {total} attributes, the spec's {what} "
                  f"lists {len(attrs)}",
                  f"{where}: {total} attributes = the spec's {what}")


def check_users(spec, rep, files):
    """nla_get_X / nla_put_X of an attribute, also through a local macro
    wrapping one, in user space (and the kernel's own gets)."""
    for f in files:
        macros = {}
        for name, defs in f.defines().items():
            for repl, _ in defs:
                params, _, body = repl.partition("\0")
                m = re.search(r"\bnla_get_(\w+)\s*\(", body)
                if params and m:
                    macros[name] = m.group(1)
        for m in re.finditer(r"\bnla_get_(\w+)\s*\(([^()]*(?:\([^()]*\))?"
                             r"[^()]*)\)", f.text):
            attrs = re.findall(r"\b(DJINN_A_\w+)\b", m.group(2))
            for a in attrs:
                check_access(spec, rep, f, m.start(), "get", m.group(1), a)
        # the module's puts are checked with the messages they build
        kernel = os.sep + "kmod" + os.sep in f.path
        for m in re.finditer(r"\bnla_put_(\w+)\s*\(\s*[^,]+,\s*(DJINN_A_\w+)",
                             f.text):
            if not kernel:
                check_access(spec, rep, f, m.start(), "put", m.group(1),
                             m.group(2))
        for name, kind in macros.items():
            for m in re.finditer(r"\b%s\s*\(\s*(DJINN_A_\w+)" % name, f.text):
                check_access(spec, rep, f, m.start(), "get", kind,
                             m.group(1), name)


def check_access(spec, rep, f, pos, how, kind, attr, macro=None):
    if attr not in spec.attr_by_c:
        if attr.endswith("_MAX") or attr.endswith("_UNSPEC"):
            return
        rep.error(f.path, f.line(pos), f"{attr} is not an attribute of the "
                  f"spec")
        return
    s, a = spec.attr_by_c[attr]
    typ = ACCESS_TYPES.get(kind)
    if typ is None:
        return
    call = f"nla_{how}_{kind}()"
    via = f"{macro}({attr}, ...) through {call}" if macro else \
        f"{call} of {attr}"
    verb = "reads" if how == "get" else "writes"
    rep.check(typ == a["type"], f.path, f.line(pos),
              f"{via} {verb} a {typ}, the spec's {s['name']}.{a['name']} is "
              f"{a['type']}", f"{os.path.basename(f.path)}: {via}")


# --------------------------------------------------------------------------


def c_files(root, top):
    out = []
    base = os.path.join(root, top)
    for d, dirs, files in os.walk(base):
        dirs[:] = sorted(x for x in dirs if not x.startswith((".", "build")))
        for n in sorted(files):
            if n.endswith((".c", ".h")) and not n.endswith(".mod.c"):
                out.append(os.path.join(d, n))
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(
        prog=PROG, description="Check the djinn generic netlink spec "
        "against the uapi header, the module and its users.")
    ap.add_argument("--root", default=os.path.dirname(here),
                    help="the source tree (default: the one this script "
                    "is in)")
    ap.add_argument("--spec", help="the spec (default: ROOT/Documentation/"
                    "netlink/specs/djinn.yaml)")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="list every check that passed")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    spec_path = args.spec or os.path.join(root, "Documentation", "netlink",
                                          "specs", "djinn.yaml")
    uapi = os.path.join(root, "include", "uapi", "linux", "djinn.h")
    rep = Report(root, args.verbose)
    try:
        spec = Spec(spec_path)
        ucf = CFile(uapi)
        vals = Values()
        vals.read(ucf)
        kfiles = [CFile(p) for p in c_files(root, "kmod")]
        if not kfiles:
            raise Fatal(f"{os.path.join(root, 'kmod')}: no C files")
        for kf in kfiles:
            if kf.path.endswith(".h"):
                for k, v in kf.defines().items():
                    if k not in vals.ints and k not in vals.strs:
                        repl = v[0][0]
                        if not repl.startswith("("):
                            x = vals.eval(repl.partition("\0")[2])
                            if isinstance(x, int):
                                vals.ints[k] = x
        if args.verbose:
            print(f"{PROG}: {os.path.relpath(spec_path, root)} against "
                  f"{os.path.relpath(uapi, root)}, kmod/ and its users")
        check_uapi(spec, vals, rep, uapi)
        check_kernel(spec, vals, rep, kfiles)
        users = []
        for top in ("kmod", "tools", "djinnd", "libdjinn", "tests", "lib"):
            for p in c_files(root, top):
                with open(p, encoding="utf-8", errors="replace") as fh:
                    if "DJINN_A_" in fh.read():
                        users.append(CFile(p))
        check_users(spec, rep, users)
    except Fatal as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, ValueError) as e:
        print(f"{PROG}: {spec_path}: malformed spec or unexpected C "
              f"({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    for e in rep.errors:
        print(f"{PROG}: {e}")
    if rep.errors:
        print(f"{PROG}: {len(rep.errors)} of {rep.checked} checks failed: "
              f"{rep.where(spec_path, None)} and the code disagree")
        return 1
    print(f"{PROG}: {rep.checked} checks passed: "
          f"{rep.where(spec_path, None)} matches "
          f"{rep.where(uapi, None)}, kmod/ and its users")
    return 0


if __name__ == "__main__":
    sys.exit(main())
