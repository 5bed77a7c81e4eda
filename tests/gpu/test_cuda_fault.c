// SPDX-License-Identifier: MIT
/*
 * Device faults on a GPU: tests/integration/test_fault.c against djinnd
 * --backend cuda, where ADMIN_FAULT_INJECT launches a kernel that stores
 * to address 0 and the backend recovers the context as after any fault.
 * Exits 77, saying why, where djinnd cannot start on a GPU.
 */
#define FAULT_BACKEND "cuda"
#include "../integration/test_fault.c"
