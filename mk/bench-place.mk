# Placement over several hosts (bench/place-bench.py,
# Documentation/kubernetes.rst, "Choosing a node"): N sessions of M
# models arrive in a random order at H djinnd behind one DNS name
# (dnsmasq on loopback); libdjinn's placement (dns:NAME:PORT with each
# session's model) against round-robin, each on fresh hosts, in one run.
#
#   make bench-place [PLACE_BENCH_ARGS='--sessions 64 --models 4']
#
# JSON lines on stdout and in $(PLACE_BENCH_OUT). Needs root (a mount
# namespace for the resolver, DNS on port 53 of a loopback address).
# Never part of make test.
PLACE_BENCH_ARGS ?=
PLACE_BENCH_OUT  ?= $(BUILD)/place-bench.jsonl

.PHONY: bench-place
bench-place: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(PYTHON) bench/place-bench.py --build $(BUILD) \
		--out $(PLACE_BENCH_OUT) $(PLACE_BENCH_ARGS)
