/* SPDX-License-Identifier: MIT */
/*
 * A streamed model's gate, for tests (stream.h is the stream): included
 * by stream.c, which defines it, and by the tests.
 */
#ifndef DJINN_MODEL_STREAM_TEST_H
#define DJINN_MODEL_STREAM_TEST_H

#include <stdbool.h>

#include "model/stream.h"

/* While the gate is closed no pass starts and jobs wait in the queue;
 * model_stream_waiting() counts them. */
void model_stream_gate(struct model_stream *st, bool closed);
unsigned int model_stream_waiting(struct model_stream *st);

#endif /* DJINN_MODEL_STREAM_TEST_H */
