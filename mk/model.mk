# The model runtime (djinnd/model/): safetensors, model configs, the
# model store and the GPT-2 / Llama forward passes. A library the daemon
# and the tests link.
DEB_PKGS    += libjansson-dev

MODEL_SRCS  := $(wildcard djinnd/model/*.c)
MODEL_LIB   := $(BUILD)/libmodel.a
# exec.c from the daemon library; none of its network or config parts
LIBS_MODEL  := $(MODEL_LIB) $(DJINND_LIB) $(LIBS_BACKEND) -ljansson

$(MODEL_LIB): $(MODEL_SRCS:%.c=$(BUILD)/%.o)
all: $(MODEL_LIB)
SRCS += $(MODEL_SRCS)

test_safetensors_LIBS := $(MODEL_LIB) -ljansson
fuzz_safetensors_LIBS := $(MODEL_LIB) -ljansson
test_model_config_LIBS := $(MODEL_LIB) -ljansson
test_model_store_LIBS := $(MODEL_LIB) $(LIBS_VMU) $(COMMON_LIB) -ljansson
test_model_forward_LIBS := $(LIBS_MODEL)
