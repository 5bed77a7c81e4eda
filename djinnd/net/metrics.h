/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoint: Prometheus text exposition over HTTP/1.1, served
 * from the I/O thread's ring (net/metrics.c), and the counters behind it
 * that are not the VMU's own.
 */
#ifndef DJINN_METRICS_H
#define DJINN_METRICS_H

#include <stdint.h>

struct server;
struct server_stats;

/* Request latency buckets, seconds (Prometheus "le"), and +Inf. */
#define METRICS_LAT_BUCKETS 14

/*
 * struct op_stats - one opcode's counters
 * @requests: headers received
 * @errors:   error answers
 * @lat:      answers by latency bucket (not cumulative); the last is +Inf
 * @lat_sum_ns, @lat_count: the histogram's sum and count
 */
struct op_stats {
	uint64_t requests, errors;
	uint64_t lat[METRICS_LAT_BUCKETS + 1];
	uint64_t lat_sum_ns, lat_count;
};

/* Opcodes with counters of their own; the rest count as "unknown". */
#define METRICS_OPS 128

/* A request of opcode @op was answered @ns after its header arrived. */
void metrics_observe(struct server_stats *st, uint16_t op, uint64_t ns);
struct op_stats *metrics_op(struct server_stats *st, uint16_t op);

/* An accepted connection of the metrics listener. */
void metrics_accept(struct server *srv, int fd);
/* Close every metrics connection (shutdown). */
void metrics_close_all(struct server *srv);

/* The exposition text, malloc()ed, in *@out (its length returned), or
 * -ENOMEM. */
long metrics_render(struct server *srv, char **out);

#endif /* DJINN_METRICS_H */
