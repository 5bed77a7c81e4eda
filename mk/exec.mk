# The executor's staging buffers for reads of device-only memory
# (djinnd/exec/stage.c; tests/unit/test_stage.c, found by the Makefile's
# wildcard), over the host provider.
test_stage_LIBS = $(DJINND_LIB) $(LIBS_VMU)
