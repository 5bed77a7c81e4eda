/* SPDX-License-Identifier: MIT */
/*
 * The names of the wire opcodes (enum djinn_op, include/djinn/proto.h),
 * one table for djinnd and libdjinn. Not the graph ops' (enum
 * djinn_opcode): those are djinn_op_name()'s, in graph.h.
 */
#ifndef DJINN_OPNAMES_H
#define DJINN_OPNAMES_H

/* Opcode @op as proto.h spells it, "SESSION_OPEN" (logs, messages); a
 * static string, NULL for a number no opcode has. */
const char *djinn_wire_op_name(unsigned int op);
/* The same in lower case, "session_open": djinnd's metric label
 * (op="..."), which dashboards and alerts know, so it never changes. */
const char *djinn_wire_op_label(unsigned int op);

#endif /* DJINN_OPNAMES_H */
