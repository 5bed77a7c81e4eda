/* SPDX-License-Identifier: MIT */
/*
 * VMU calls only the tests make (vmu.h is the contract): included by
 * vmu.c, which defines them, and by the tests. Move one back to vmu.h
 * when djinnd comes to call it.
 */
#ifndef DJINN_VMU_TEST_H
#define DJINN_VMU_TEST_H

#include <stdint.h>

#include "vmu/vmu.h"

/* A session's quota on data bytes, as vmu_tenant_set_quota() a
 * tenant's; 0 lifts it. */
int vmu_session_set_quota(struct vmu_session *s, uint64_t bytes);

/* Reclaim, by the same means as admission, until @bytes are free (nothing
 * if they already are); returns the bytes free now. */
uint64_t vmu_reclaim(struct vmu *v, uint64_t bytes);

#endif /* DJINN_VMU_TEST_H */
