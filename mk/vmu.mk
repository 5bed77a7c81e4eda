# The VMU's unit tests, one program per part of djinnd/vmu/ (found by the
# Makefile's wildcard), with their fixture and helpers in
# tests/unit/test_vmu.h: test_vmu (the core: regions, admission, quotas,
# sessions, pressure), test_vmu_swap, test_vmu_text, test_vmu_stack and
# test_vmu_threads (all of them at once from many threads).
# test_vmu_fault's line is in mk/fault.mk.
test_vmu_LIBS         := $(LIBS_VMU)
test_vmu_swap_LIBS    := $(LIBS_VMU)
test_vmu_text_LIBS    := $(LIBS_VMU)
test_vmu_stack_LIBS   := $(LIBS_VMU)
test_vmu_threads_LIBS := $(LIBS_VMU)
