# The model runtime (djinnd/model/): safetensors, model configs, the
# model store and the GPT-2 / Llama forward passes. A library the daemon
# and the tests link.
DEB_PKGS    += libjansson-dev

MODEL_SRCS  := $(wildcard djinnd/model/*.c)
MODEL_LIB   := $(BUILD)/libmodel.a
# The forward pass runs graphs through the graph runner (djinnd/graph/,
# the floor below model/): its object alone, so the model tests do not
# wait on the rest of the daemon's library.
GRAPH_RUN_OBJ := $(BUILD)/djinnd/graph/run.o
LIBS_MODEL  := $(MODEL_LIB) $(GRAPH_RUN_OBJ) $(LIBS_BACKEND) -ljansson

$(MODEL_LIB): $(MODEL_SRCS:%.c=$(BUILD)/%.o)
all: $(MODEL_LIB)
SRCS += $(MODEL_SRCS)

test_safetensors_LIBS := $(MODEL_LIB) $(COMMON_LIB) -ljansson -lm
fuzz_safetensors_LIBS := $(MODEL_LIB) $(COMMON_LIB) -ljansson -lm
test_model_config_LIBS := $(MODEL_LIB) $(COMMON_LIB) -ljansson -lm
# the store keeps each model's plans (forward.c), which run graphs
test_model_store_LIBS := $(LIBS_MODEL) $(COMMON_LIB) -lm
$(BUILD)/tests/unit/test_model_store: $(GRAPH_RUN_OBJ)
test_model_forward_LIBS := $(LIBS_MODEL)
$(BUILD)/tests/unit/test_model_forward: $(GRAPH_RUN_OBJ)
test_model_arch_LIBS := $(LIBS_MODEL)
$(BUILD)/tests/unit/test_model_arch: $(GRAPH_RUN_OBJ)
test_model_stream_LIBS := $(LIBS_MODEL)
$(BUILD)/tests/unit/test_model_stream: $(GRAPH_RUN_OBJ)
