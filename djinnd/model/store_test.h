/* SPDX-License-Identifier: MIT */
/*
 * The model store's hook for tests (store.h is the store): included by
 * store.c, which defines it, and by the tests; djinnd never sets it.
 */
#ifndef DJINN_MODEL_STORE_TEST_H
#define DJINN_MODEL_STORE_TEST_H

#include "model/store.h"

/*
 * @fn(@arg, event, name) is called when a load starts
 * (MODEL_HOOK_LOADING, on the loading thread without the store's lock)
 * and when an open starts waiting for another's load of the same name
 * (MODEL_HOOK_WAITING, with the store's lock held: @fn must not call
 * the store). NULL removes it.
 */
enum model_hook {
	MODEL_HOOK_LOADING = 1,
	MODEL_HOOK_WAITING = 2,
};
void model_store_set_hook(struct model_store *ms,
			  void (*fn)(void *arg, enum model_hook ev,
				     const char *name),
			  void *arg);

#endif /* DJINN_MODEL_STORE_TEST_H */
