#!/bin/sh
# make run: the main job. Starts djinnd in the foreground on the CPU
# backend with its sockets under ./run/, runs the example client (two
# GPT-2 blocks as graphs, the output read lazily) twice, the second time
# as a program that finds the weights already there, shows the device's
# memory with djinnctl, and stops the daemon with SIGTERM.
set -eu
B=${BUILD:-build}
SOCK=run/djinnd.sock
ADMIN=run/admin.sock

mkdir -p run
"$B/djinnd/djinnd" --foreground --listen "unix:$SOCK" --admin-socket "$ADMIN" \
	--cpu-mem 1G --log-level notice &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid' EXIT INT TERM

i=0
while [ ! -S "$SOCK" ]; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 $pid 2>/dev/null; then
		echo "run: djinnd did not start" >&2
		exit 1
	fi
	sleep 0.05
done

echo "== djinnd (pid $pid) listening on unix:$SOCK"
echo "== a client: upload one GPT-2 block's weights, run two blocks, read 1% lazily"
"$B/examples/gpt2-block" "unix:$SOCK"
echo "== a second client with the same weights: only fingerprints cross the wire"
"$B/examples/gpt2-block" "unix:$SOCK"
echo "== djinnctl vmu"
"$B/tools/djinnctl" -s "$ADMIN" vmu
echo "== djinnctl stats"
"$B/tools/djinnctl" -s "$ADMIN" stats
