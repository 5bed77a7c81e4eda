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
 * struct msg_stats - one message type's counters
 * @requests: headers received
 * @errors:   error answers
 * @lat:      answers by latency bucket (not cumulative); the last is +Inf
 * @lat_sum_ns, @lat_count: the histogram's sum and count
 */
struct msg_stats {
	uint64_t requests, errors;
	uint64_t lat[METRICS_LAT_BUCKETS + 1];
	uint64_t lat_sum_ns, lat_count;
};

/* Message types with counters of their own; the rest count as
 * "unknown". */
#define METRICS_MSGS 128

/* A request of type @type was answered @ns after its header arrived. */
void metrics_observe(struct server_stats *st, uint16_t type, uint64_t ns);
struct msg_stats *metrics_msg(struct server_stats *st, uint16_t type);

/* An accepted connection of the metrics listener. */
void metrics_accept(struct server *srv, int fd);
/* Close every metrics connection (shutdown). */
void metrics_close_all(struct server *srv);

/* The exposition text, malloc()ed, in *@out (its length returned), or
 * -ENOMEM. */
long metrics_render(struct server *srv, char **out);

#endif /* DJINN_METRICS_H */
