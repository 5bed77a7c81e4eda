/* SPDX-License-Identifier: MIT */
/*
 * The names of the wire messages (enum djinn_msg, include/djinn/proto.h),
 * one table for djinnd and libdjinn. Not the graph ops' (enum
 * djinn_opcode): those are djinn_op_name()'s, in graph.h.
 */
#ifndef DJINN_MSGNAMES_H
#define DJINN_MSGNAMES_H

/* Message type @type as proto.h spells it, "SESSION_OPEN" (logs,
 * messages); a static string, NULL for a number no message has. */
const char *djinn_msg_name(unsigned int type);
/* The same in lower case, "session_open": djinnd's metric label
 * (op="..."), which dashboards and alerts know, so it never changes. */
const char *djinn_msg_label(unsigned int type);

#endif /* DJINN_MSGNAMES_H */
