#!/bin/sh
# SPDX-License-Identifier: MIT
#
# djinnctl against a real djinnd: start the daemon on sockets in a
# temporary directory, hold three sessions open with open_session, check
# every command in text and JSON, the exit codes and the one-line errors,
# the checks on the answers (with a fake daemon that answers wrong or not
# at all), then stop the daemon with SIGTERM, which must exit 0.
#
# The binaries are $DJINND, $DJINNCTL and $OPEN_SESSION, else those of the
# build tree this script was installed in (make installs it as
# BUILD/tests/integration/test_djinnctl). The man page ($MANPAGE, else
# found in the source tree) is checked with groff when groff is installed.
#
# Exit status: 0 pass, 1 fail, 77 cannot run here (it says why).

set -u

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/integration/testlib.sh
. "$here/testlib.sh"
DJINND=${DJINND:-$build/djinnd/djinnd}
DJINNCTL=${DJINNCTL:-$build/tools/djinnctl}
DJINN=${DJINN:-$build/tools/djinn}
OPEN_SESSION=${OPEN_SESSION:-$build/tests/integration/open_session}
# scripts/mkmodel.py writes the model; found like the man page.
for m in "${MKMODEL:-}" "$build/../scripts/mkmodel.py" scripts/mkmodel.py; do
	[ -n "$m" ] && [ -f "$m" ] && break
done
MKMODEL=$m
# The man page: in the source tree above the build tree, or in the current
# directory (make runs the tests from the top of the source tree).
for m in "${MANPAGE:-}" "$build/../man/man8/djinnctl.8" man/man8/djinnctl.8; do
	[ -n "$m" ] && [ -f "$m" ] && break
done
MANPAGE=$m

for b in "$DJINND" "$DJINNCTL" "$OPEN_SESSION" "$DJINN"; do
	[ -x "$b" ] || skip "$b is not built"
done
command -v python3 >/dev/null 2>&1 ||
	skip "python3 is not installed (it parses the JSON)"
[ -f "$MKMODEL" ] || skip "scripts/mkmodel.py not found (set MKMODEL)"

make_dir
dpid='' hpid='' fpid='' mpid='' spid=''
# shellcheck disable=SC2317 # called by the trap
cleanup() {
	[ -n "$hpid" ] && kill "$hpid" 2>/dev/null
	[ -n "$mpid" ] && kill "$mpid" 2>/dev/null
	[ -n "$spid" ] && kill "$spid" 2>/dev/null
	[ -n "$fpid" ] && kill "$fpid" 2>/dev/null
	[ -n "$dpid" ] && kill -9 "$dpid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Show what the last command printed, indented.
show_out() {
	sed 's/^/    | /' "$dir/out" "$dir/err"
}

# run WANT_RC WHAT ARGS...: djinnctl on our admin socket; stdout in
# $dir/out, stderr in $dir/err. 0 when the exit status is WANT_RC.
run() {
	want=$1 what=$2
	shift 2
	"$DJINNCTL" -s "$dir/admin.sock" "$@" >"$dir/out" 2>"$dir/err"
	rc=$?
	if [ "$rc" -ne "$want" ]; then
		fail "$what: exit status $rc, expected $want"
		show_out
		return 1
	fi
	return 0
}

# py WHAT SCRIPT [ARGS]: a python3 check of $dir/out parsed as JSON (in
# `j`); the script raises (assert) on a mismatch.
py() {
	what=$1 script=$2
	shift 2
	if python3 -c "import json, os, sys
j = json.load(open(sys.argv[1]))
args = sys.argv[2:]
$script" "$dir/out" "$@" 2>"$dir/pyerr"; then
		ok "$what"
	else
		fail "$what"
		sed 's/^/    | /' "$dir/out" "$dir/pyerr"
	fi
}

# expect WHAT PATTERN FILE: an extended regex that must match a line.
expect() {
	if grep -Eq -- "$2" "$3"; then
		ok "$1"
	else
		fail "$1: no line matches /$2/"
		show_out
	fi
}

# hold_model NAME SECONDS: a session (tools/djinn over libdjinn) holds
# model NAME for SECONDS, in the background ($mpid); returns once it has
# opened it, its `djinn model info` in $dir/info.
hold_model() {
	# the last call's info must not pass for this one's: the redirect
	# below empties the file only once the child runs
	: >"$dir/info"
	"$DJINN" -a "unix:$dir/d.sock" model info "$1" --hold "$2" \
		>"$dir/info" 2>"$dir/info.err" &
	mpid=$!
	i=0
	until grep -qs '^fingerprint:' "$dir/info"; do
		if ! kill -0 "$mpid" 2>/dev/null || [ "$i" -gt 100 ]; then
			echo "FAIL: djinn model info did not open $1:"
			sed 's/^/    | /' "$dir/info" "$dir/info.err"
			exit 1
		fi
		i=$((i + 1))
		sleep 0.1
	done
}

# one_line WHAT: stderr holds exactly one line.
one_line() {
	n=$(wc -l <"$dir/err")
	[ "$n" -eq 1 ] || fail "$1: $n lines on stderr, expected one"
}

# --- the daemon and its sessions ----------------------------------------

python3 "$MKMODEL" --arch gpt2 --layers 2 --embd 64 --heads 4 --vocab 256 \
	--ctx 64 --seed 3 "$dir/models/tiny-gpt2" >"$dir/mkmodel.log" 2>&1 &&
	# layers of 3 MB, past the 2 MiB granule: it can be streamed
	python3 "$MKMODEL" --arch gpt2 --layers 4 --embd 256 --heads 4 \
		--vocab 512 --ctx 64 --seed 4 "$dir/models/small-gpt2" \
		>>"$dir/mkmodel.log" 2>&1 || {
	echo "FAIL: mkmodel.py:"
	sed 's/^/    | /' "$dir/mkmodel.log"
	exit 1
}
"$DJINND" -f -l "unix:$dir/d.sock" -a "$dir/admin.sock" -m 64M \
	--model-dir "$dir/models" >"$dir/djinnd.log" 2>&1 &
dpid=$!
djinnd_wait
ok "djinnd is up"

# alice: priority 5, a DECODE signal, a 4 MiB data tensor.
"$OPEN_SESSION" -t 120 "$dir/d.sock" alice:5:2:4194304 bob:1 carol \
	>"$dir/ids" 2>"$dir/helper.err" &
hpid=$!
i=0
until [ "$(wc -l <"$dir/ids")" -eq 3 ]; do
	if ! kill -0 "$hpid" 2>/dev/null || [ "$i" -gt 100 ]; then
		echo "FAIL: open_session did not open its sessions:"
		sed 's/^/    | /' "$dir/helper.err"
		exit 1
	fi
	i=$((i + 1))
	sleep 0.1
done
alice=$(awk '$2 == "alice" { print $1 }' "$dir/ids")
bob=$(awk '$2 == "bob" { print $1 }' "$dir/ids")
carol=$(awk '$2 == "carol" { print $1 }' "$dir/ids")
uid=$(id -u)
ok "sessions $alice, $bob and $carol open"

# --- session list ---------------------------------------------------------

if run 0 "session list" session list; then
	expect "list: header" \
		'^ID +TENANT +LABEL +PRIO +PHASE +LEASE +DATA +RESIDENT +SWAPPED +TEXT +TENSORS +REQS +CWAIT +UID +PID +DEV$' \
		"$dir/out"
	n=$(wc -l <"$dir/out")
	[ "$n" -eq 4 ] || fail "list: $n lines, expected a header and 3 sessions"
	# ID TENANT LABEL PRIO PHASE LEASE DATA RESIDENT SWAPPED TEXT TENSORS REQS UID PID DEV
	# (the tenant is who connected: uid:N; the label what it sent)
	if awk -v id="$alice" -v uid="$uid" -v pid="$hpid" '
		$1 == id {
			found = 1
			lease = $6; sub(/ms$/, "", lease)
			if ($2 != "uid:" uid || $3 != "alice" || $4 != 5 ||
			    $5 != "decode" ||
			    $6 !~ /^[0-9]+ms$/ || lease + 0 <= 0 ||
			    lease + 0 > 10000 || $7 != "4Mi" || $8 != "4Mi" ||
			    $9 != "0B" || $11 != 1 || $13 != uid || $14 != pid ||
			    $15 != 0)
				exit 1
		}
		END { exit !found }' "$dir/out"; then
		ok "list: alice's row"
	else
		fail "list: alice's row is wrong"
		show_out
	fi
	expect "list: bob" "^$bob +uid:$uid +bob +1 +unknown " "$dir/out"
	expect "list: carol" "^$carol +uid:$uid +carol +4 +unknown " "$dir/out"
fi

if run 0 "session list -j" -j session list; then
	py "list -j: JSON with the three sessions" '
by = {s["label"]: s for s in j}
assert all(s["tenant"] == "uid:" + args[1] for s in j)
assert isinstance(j, list) and len(j) == 3, len(j)
a = by["alice"]
assert a["id"] == int(args[0]) and a["priority"] == 5
assert a["phase"] == "decode"
assert a["data_bytes"] == 4194304 and a["resident"] == 4194304
assert a["swapped"] == 0 and a["tensors"] == 1 and a["text_refs"] == 0
assert a["lease_ns"] == 10 * 10**9
assert 0 < a["lease_left_ms"] <= 10000
assert a["deadline_ns"] > 0 and a["requests"] >= 3
assert a["uid"] == int(args[1]) and a["pid"] == int(args[2])
assert a["device"] == 0
assert by["bob"]["priority"] == 1 and by["carol"]["phase"] == "unknown"
' "$alice" "$uid" "$hpid"
	[ "$(wc -l <"$dir/out")" -eq 1 ] || fail "list -j: not one line"
fi

if run 0 "session list -p" -p session list; then
	py "list -p: indented JSON" 'assert len(j) == 3'
	[ "$(wc -l <"$dir/out")" -gt 10 ] || fail "list -p: not indented"
fi

# --- session show ---------------------------------------------------------

if run 0 "session show" session show "$alice"; then
	expect "show: id" "^id: +$alice\$" "$dir/out"
	expect "show: tenant" "^tenant: +uid:$uid\$" "$dir/out"
	expect "show: label" '^label: +alice$' "$dir/out"
	expect "show: phase" '^phase: +decode$' "$dir/out"
	expect "show: data" '^data: +4Mi$' "$dir/out"
	expect "show: lease" '^lease: +10\.000s$' "$dir/out"
	expect "show: lease left" '^lease left: +[0-9]+ms$' "$dir/out"
	expect "show: pid" "^pid: +$hpid\$" "$dir/out"
fi
if run 0 "session show -j" -j session show "$carol"; then
	py "show -j: one object" '
assert isinstance(j, dict) and j["id"] == int(args[0])
assert j["label"] == "carol" and j["priority"] == 4
' "$carol"
fi
# Prefixes.
if run 0 "se sh (prefixes)" se sh "$bob"; then
	expect "se sh: bob" '^label: +bob$' "$dir/out"
fi
if run 0 "session (default: list)" session; then
	[ "$(wc -l <"$dir/out")" -eq 4 ] || fail "session: not the list"
fi

# --- session kill ---------------------------------------------------------

if run 0 "session kill" session kill "$bob"; then
	[ -s "$dir/out" ] && fail "kill printed something"
	run 0 "list after kill" session list &&
		if grep -Eq "^$bob +uid:$uid +bob " "$dir/out" ||
			[ "$(wc -l <"$dir/out")" -ne 3 ]; then
			fail "list after kill still shows bob"
			show_out
		else
			ok "kill: bob is gone from the list"
		fi
	run 0 "list -j after kill" -j session list &&
		py "kill: bob is gone from the JSON" '
assert sorted(s["label"] for s in j) == ["alice", "carol"]'
fi
if run 1 "show of a killed session" session show "$bob"; then
	expect "show killed: message" \
		"^djinnctl: session show: no session $bob \\(ENOENT\\)\$" \
		"$dir/err"
	one_line "show killed"
fi
if run 1 "kill of an unknown id" session kill 987654321; then
	expect "kill unknown: the daemon's message" \
		'^djinnctl: session kill: no session 987654321 \(ENOENT\)$' \
		"$dir/err"
	one_line "kill unknown"
	[ -s "$dir/out" ] && fail "kill unknown: printed on stdout"
fi

# --- vmu and stats ----------------------------------------------------------

if run 0 "vmu" vmu; then
	expect "vmu: device" '^device: +cpu$' "$dir/out"
	expect "vmu: capacity" '^capacity: +64Mi \(granule [0-9.]+[KM]i\)$' \
		"$dir/out"
	expect "vmu: pressure" '^pressure: +(normal|warning|critical)$' \
		"$dir/out"
	expect "vmu: data segment" '^data +4Mi +[0-9.]+[KMG]i +1$' "$dir/out"
	expect "vmu: swap" '^swap: +[0-9]+ out \(' "$dir/out"
	expect "vmu: admission" '^admission: +[0-9]+ admitted, [0-9]+ refused, [0-9]+ over quota$' \
		"$dir/out"
fi
if run 0 "vmu -j" -j vmu show; then
	py "vmu -j: the device in bytes" '
assert j["device"] == "cpu" and j["capacity"] == 64 << 20
assert j["free"] + j["committed"] + j["reserved"] == j["capacity"]
assert j["pressure"] in ("normal", "warning", "critical")
assert set(j["segments"]) == {"text", "data", "stack"}
assert j["segments"]["data"]["used"] == 4 << 20
assert j["segments"]["data"]["entries"] == 1
for k in ("text_cached", "text_evictions", "swap_outs", "swap_ins",
          "swapped_out_bytes", "swapped_in_bytes", "swapped_now", "admits",
          "admit_refusals", "quota_refusals", "granularity"):
    assert isinstance(j[k], int), k
'
fi

if run 0 "stats" stats; then
	expect "stats: uptime" '^uptime: +[0-9]+\.[0-9]{3}s$' "$dir/out"
	expect "stats: sessions" \
		'^sessions: +2 live, 3 opened, 0 closed, 0 expired, 1 killed$' \
		"$dir/out"
	expect "stats: requests" '^requests: +[0-9]+, [0-9]+ errors$' "$dir/out"
	expect "stats: graphs" '^graphs: +0 run, 0 failed$' "$dir/out"
	expect "stats: queue" '^queue depth: +0$' "$dir/out"
	expect "stats: the device" \
		'^device 0: +cpu, 64Mi, [0-9.]+[KM]i free; text [0-9.]+[KMG]?i?B?, data 4Mi, stack [0-9.]+[KMG]?i?B?$' \
		"$dir/out"
fi
if run 0 "stats -j" --json st; then
	py "stats -j: the counters" '
assert j["sessions"] == 2 and j["sessions_opened"] == 3
assert j["sessions_killed"] == 1 and j["sessions_expired"] == 0
assert j["uptime_ns"] > 0 and j["conns"] >= 1
assert j["requests"] > 0 and j["errors"] >= 1 and j["bytes_in"] > 0
assert j["graphs_run"] == 0 and j["queue_depth"] == 0
d = j["devices"]
assert len(d) == 1 and d[0]["index"] == 0 and d[0]["device"] == "cpu", d
assert d[0]["capacity"] == 64 << 20 and 0 < d[0]["free"] < d[0]["capacity"]
assert d[0]["segments"]["data"]["used"] == 4 << 20
'
fi

# --- sched ------------------------------------------------------------------------

# dave waits on a tool: priority 3, an IO_WAIT signal with an estimate of
# 1 s (open_session's), no data. With alice (decode, 4 MiB) and carol
# (no signal), the daemon holds these three sessions and nothing runs.
: >"$dir/ids2"
"$OPEN_SESSION" -t 60 "$dir/d.sock" dave:3:5 >"$dir/ids2" \
	2>"$dir/helper2.err" &
spid=$!
i=0
until [ "$(wc -l <"$dir/ids2")" -eq 1 ]; do
	if ! kill -0 "$spid" 2>/dev/null || [ "$i" -gt 100 ]; then
		echo "FAIL: open_session did not open dave's session:"
		sed 's/^/    | /' "$dir/helper2.err"
		exit 1
	fi
	i=$((i + 1))
	sleep 0.1
done
dave=$(awk '$2 == "dave" { print $1 }' "$dir/ids2")
# Without a configuration file the policy is sched.policy's default.
policy=semantic
[ -f /etc/djinn/djinnd.conf ] && policy='semantic|lru|static'
dur='(-|[0-9]+(\.[0-9]+)?(ns|us|ms|s))'
if run 0 "sched" sched; then
	expect "sched: the device" '^device 0: +cpu$' "$dir/out"
	expect "sched: the policy" "^policy: +($policy)\$" "$dir/out"
	expect "sched: idle" '^busy: +0 sessions$' "$dir/out"
	expect "sched: queued" '^queued: +0 compute, 0 mem$' "$dir/out"
	expect "sched: running" '^running: +0 compute, 0 mem$' "$dir/out"
	expect "sched: admit waiting" '^admit waiting: +0$' "$dir/out"
	expect "sched: swap rate" \
		'^swap rate: +(-|[0-9]+\.[0-9] MB/s) out, (-|[0-9]+\.[0-9] MB/s) in$' \
		"$dir/out"
	expect "sched: swaps" '^swaps: +[0-9]+ by signal, [0-9]+ by pressure$' \
		"$dir/out"
	expect "sched: swapped bytes" \
		'^swapped: +[0-9.]+[KMGTPE]?i?B? out, [0-9.]+[KMGTPE]?i?B? in$' \
		"$dir/out"
	expect "sched: prefetches" \
		'^prefetches: +[0-9]+ started, [0-9]+ hit, [0-9]+ missed, (hit rate -|[0-9.]+% hit rate)$' \
		"$dir/out"
	expect "sched: admission" '^admission: +[0-9]+ waited, [0-9]+ timed out$' \
		"$dir/out"
	expect "sched: header" \
		'^ID +TENANT +DEV +PRIO +PHASE +LEFT +RESIDENT +SWAPPED +QUEUED +INFLIGHT +WEIGHT +AHEAD +P99 WAIT +FLAGS$' \
		"$dir/out"
	# ID TENANT DEV PRIO PHASE LEFT RESIDENT SWAPPED QUEUED INFLIGHT WEIGHT AHEAD P99 WAIT FLAGS
	expect "sched: dave waits on a tool" \
		"^$dave +uid:$uid +0 +3 +io_wait +$dur +0B +0B +0 +0 +[1-9][0-9]* +0 +$dur +[a-z_,0-9x-]+\$" \
		"$dir/out"
	expect "sched: alice decodes, 4 MiB resident" \
		"^$alice +uid:$uid +0 +5 +decode +- +4Mi +0B +0 +0 +[1-9][0-9]* +[0-9]+ +$dur +[a-z_,0-9x-]+\$" \
		"$dir/out"
	expect "sched: carol" "^$carol +uid:$uid +0 +4 +unknown +- " "$dir/out"
	grep -Eq "^$bob " "$dir/out" && fail "sched: bob was killed"
fi
if run 0 "sched -j" -j sched show; then
	py "sched -j: the device, the sessions" '
policy, alice, carol, dave = args[0], int(args[1]), int(args[2]), int(args[3])
assert set(j) == {"devices", "sessions"}, j.keys()
assert len(j["devices"]) == 1, j["devices"]
d = j["devices"][0]
assert list(d) == ["device", "policy", "busy", "queued", "running",
                   "admit_waiting", "swap_out_bps", "swap_in_bps",
                   "swaps_signal", "swaps_pressure", "swap_bytes_out",
                   "swap_bytes_in", "prefetches", "prefetch_hits",
                   "prefetch_misses", "admit_waits", "admit_timeouts",
                   "passes", "pass_jobs", "pass_rows", "pass_hist", "joins",
                   "join_ns", "join_p99_ns"], d
assert d["device"] == "cpu" and d["policy"] in policy.split("|"), d
assert d["busy"] == 0 and d["admit_waiting"] == 0, d
assert d["queued"] == {"compute": 0, "mem": 0}, d
assert d["running"] == {"compute": 0, "mem": 0}, d
for k in list(d)[5:]:
    if k == "pass_hist":
        assert len(d[k]) == 8 and all(isinstance(x, int) and x >= 0
                                      for x in d[k]), d[k]
        assert sum(d[k]) == d["passes"], d
        continue
    assert isinstance(d[k], int) and d[k] >= 0, k
assert d["pass_jobs"] >= d["passes"] and d["joins"] <= d["pass_jobs"], d
by = {s["id"]: s for s in j["sessions"]}
assert set(by) == {alice, carol, dave}, sorted(by)
for s in j["sessions"]:
    assert list(s) == ["id", "tenant", "device", "priority", "phase",
                       "flags", "phase_left_ns", "resident", "swapped",
                       "queued", "inflight", "weight", "ahead_max",
                       "deficit_ns", "cost_ns", "jobs", "wait_p99_ns"], s
    assert s["device"] == 0 and s["queued"] == 0 and s["inflight"] == 0, s
    assert set(s["flags"]) <= {"swapped_by_signal", "overran",
                               "prefetching"}, s
    assert s["weight"] > 0 and s["ahead_max"] == 0, s
s = by[dave]
assert s["tenant"] == "uid:" + str(os.getuid()) and s["priority"] == 3, s
assert s["phase"] == "io_wait" and 0 <= s["phase_left_ns"] <= 10**9, s
assert s["resident"] == 0 and s["swapped"] == 0 and s["jobs"] == 0, s
a = by[alice]
assert a["tenant"] == "uid:" + str(os.getuid()) and a["priority"] == 5, a
assert a["phase"] == "decode" and a["phase_left_ns"] == 0, a
assert a["resident"] == 4 << 20 and a["swapped"] == 0, a
assert "swapped_by_signal" not in a["flags"], a
# weight: the tenant share (the same default for both) x (priority + 1)
assert a["weight"] * 4 == s["weight"] * 6, (a["weight"], s["weight"])
c = by[carol]
assert c["tenant"] == "uid:" + str(os.getuid()) and c["phase"] == "unknown", c
assert c["priority"] == 4 and c["resident"] == 0, c
' "$policy" "$alice" "$carol" "$dave"
	[ "$(wc -l <"$dir/out")" -eq 1 ] || fail "sched -j: not one line"
fi
if run 0 "sc (prefix, default: show)" sc; then
	expect "sc: the sched block" '^policy: ' "$dir/out"
fi
# dave's session ends; its open_session then exits.
run 0 "session kill dave" -A session kill "$dave"
wait "$spid"
rc=$?
spid=
[ "$rc" -eq 0 ] || fail "open_session for dave exited $rc"

# --- model list and evict -------------------------------------------------------

if run 0 "model list, none loaded" model list; then
	expect "model list: the header" \
		'^NAME +ARCH +DTYPE +SIZE +LAYERS +RING +HOLDERS +DEV +FINGERPRINT$' \
		"$dir/out"
	n=$(wc -l <"$dir/out")
	[ "$n" -eq 1 ] || fail "model list: $n lines with no model loaded"
fi
# One session holds tiny-gpt2 for a few seconds (tools/djinn over libdjinn).
hold_model tiny-gpt2 3
fp=$(awk '$1 == "fingerprint:" { print $2 }' "$dir/info")
bytes=$(awk '$1 == "bytes:" { print $2 }' "$dir/info")
# The client's view of the placement: wholly on the device.
expect "djinn model info: every layer resident" '^resident: +2$' "$dir/info"
expect "djinn model info: no ring" '^ring: +0$' "$dir/info"
expect "djinn model info: weights" "^weights: +$bytes\$" "$dir/info"
if run 0 "model list" model list; then
	expect "model list: tiny-gpt2, held once, 2 of 2 layers, no ring" \
		"^tiny-gpt2 +gpt2 +f32 +[0-9.]+[KM]i +2/2 +- +1 +0  $(echo "$fp" | cut -c1-12)\$" \
		"$dir/out"
fi
if run 0 "model list -j" -j model; then
	py "model list -j: bytes, placement, holders, fingerprint" '
assert len(j) == 1, j
m = j[0]
assert m["name"] == "tiny-gpt2" and m["arch"] == "gpt2", m
assert m["dtype"] == "f32" and m["holders"] == 1 and m["device"] == 0, m
assert m["bytes"] == int(args[0]) and m["fingerprint"] == args[1], m
assert m["weights"] == m["bytes"], m
assert m["layers"] == 2 and m["resident"] == 2 and m["ring"] == 0, m
assert m["budget"] is None and m["passes"] == 0 and m["jobs"] == 0, m
' "$bytes" "$fp"
fi
if run 1 "model evict, held" model evict tiny-gpt2; then
	expect "evict held: the daemon's refusal" \
		'^djinnctl: model evict: .* \(EBUSY\)$' "$dir/err"
	one_line "evict held"
fi
wait "$mpid"
rc=$?
mpid=
[ "$rc" -eq 0 ] || fail "djinn model info --hold exited $rc"
# Its session closed: loaded still, held by none.
if run 0 "model list -j, unheld" --json model list; then
	py "model list -j: no holders" '
assert len(j) == 1 and j[0]["holders"] == 0, j
'
fi
if run 0 "model evict" model ev tiny-gpt2; then
	[ -s "$dir/out" ] && fail "model evict printed something"
	run 0 "model list after evict" -j model list &&
		py "model list: empty after evict" 'assert j == [], j'
fi
if run 1 "model evict, not loaded" model evict tiny-gpt2; then
	expect "evict unknown: ENOENT" \
		'^djinnctl: model evict: .* \(ENOENT\)$' "$dir/err"
	one_line "evict unknown"
fi

# --- model load --------------------------------------------------------------------

if run 0 "model load" -j model load small-gpt2; then
	py "model load: loaded whole, held by none" '
assert len(j) == 1, j
m = j[0]
assert m["name"] == "small-gpt2" and m["holders"] == 0, m
assert m["layers"] == 4 and m["resident"] == 4 and m["ring"] == 0, m
assert m["budget"] is None and m["bytes"] == m["weights"], m
'
	whole=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[0]["weights"])' "$dir/out")
fi
# Below its least: refused with the numbers; the budget stays none.
if run 1 "model load --budget 1" model load small-gpt2 --budget 1; then
	expect "load under 1 byte: need and budget" \
		'^djinnctl: model load: model small-gpt2: no room for [0-9]+ bytes of weights: streamed, it needs [0-9]+ at least .*its budget is 1 \(ENOMEM\)$' \
		"$dir/err"
	one_line "load under 1 byte"
fi
least=$(sed -n 's/.* it needs \([0-9]*\) at least.*/\1/p' "$dir/err")
[ -n "$least" ] || least=6291456
if run 0 "model load, after a refused budget" -j model load small-gpt2; then
	py "refused budget: none again" '
m = j[0]
assert m["resident"] == 4 and m["budget"] is None, m
'
fi
# Exactly the least: nothing resident, a ring of one layer.
if run 0 "model load --budget least" -j model load small-gpt2 \
	--budget "$least"; then
	py "least budget: streamed, held by none" '
m = j[0]
assert m["holders"] == 0 and m["budget"] == int(args[0]), m
assert m["resident"] == 0 and m["ring"] > 0, m
G = 2 << 20  # the CPU device granule text is mapped in
assert -(-m["bytes"] // G) * G + m["ring"] == int(args[0]), m
assert m["weights"] == int(args[1]), m
' "$least" "$whole"
fi
# A session holds it: another budget is refused, the same one is fine.
hold_model small-gpt2 2
expect "djinn model info: streamed, nothing resident" '^resident: +0$' \
	"$dir/info"
if run 1 "model load --budget 0, held" model load small-gpt2 --budget 0; then
	expect "held: refused with its placement" \
		"^djinnctl: model load: model small-gpt2 is held by 1 session, placed under a budget of $least bytes and a ring of 2 slots \\(0 of 4 layers on the device\\): .* \\(EBUSY\\)\$" \
		"$dir/err"
fi
if run 0 "model load, held, its own budget" -j model load small-gpt2 \
	--budget "$least"; then
	py "held, same budget: unchanged" '
m = j[0]
assert m["holders"] == 1 and m["resident"] == 0, m
assert m["budget"] == int(args[0]), m
' "$least"
fi
wait "$mpid"
rc=$?
mpid=
[ "$rc" -eq 0 ] || fail "djinn model info --hold small-gpt2 exited $rc"
if run 0 "model load --budget 0, unheld" -j model load small-gpt2 --budget 0; then
	py "no budget: whole again" '
m = j[0]
assert m["holders"] == 0 and m["resident"] == 4 and m["ring"] == 0, m
assert m["budget"] is None, m
'
fi
run 1 "model load, no such model" model load nosuch &&
	expect "load unknown: ENOENT" '^djinnctl: model load: .*\(ENOENT\)$' \
		"$dir/err"
run 0 "model evict small-gpt2" model evict small-gpt2

# --- tools/djinn generate --------------------------------------------------------

# gen WANT_RC WHAT ARGS...: djinn generate on our daemon, like run().
gen() {
	want=$1 what=$2
	shift 2
	"$DJINN" -a "unix:$dir/d.sock" generate -m tiny-gpt2 "$@" \
		>"$dir/out" 2>"$dir/err"
	rc=$?
	if [ "$rc" -ne "$want" ]; then
		fail "$what: exit status $rc, expected $want"
		show_out
		return 1
	fi
	return 0
}

if gen 0 "djinn generate" -t 1,2,3,4 -n 6; then
	expect "generate: 6 ids" '^[0-9]+(,[0-9]+){5}$' "$dir/out"
	greedy=$(cat "$dir/out")
	gen 0 "djinn generate again" -t 1,2,3,4 -n 6 &&
		[ "$(cat "$dir/out")" = "$greedy" ] ||
		fail "greedy generation does not repeat"
fi
if gen 0 "djinn generate, sampled" -t 1,2,3,4 -n 8 --temperature 0.9 \
	--top-k 50 --top-p 0.95 --seed 11; then
	sampled=$(cat "$dir/out")
	gen 0 "djinn generate, sampled again" -t 1,2,3,4 -n 8 \
		--temperature 0.9 --top-k 50 --top-p 0.95 --seed 11 &&
		[ "$(cat "$dir/out")" = "$sampled" ] ||
		fail "sampling with a seed does not repeat"
fi
"$DJINN" -a "unix:$dir/d.sock" generate -m tiny-gpt2 -t 1,2,3,4 -n 6 \
	--break-at 1 >"$dir/out" 2>"$dir/err"
rc=$?
if [ "$rc" -eq 0 ]; then
	n=$(grep -c '^paused after layer 1: hidden ([0-9]*, 64) f32$' "$dir/out")
	# the prefill, then one pause a token
	[ "$n" -eq 7 ] || fail "generate --break-at 1: $n pauses, expected 7"
	[ "$(tail -n 1 "$dir/out")" = "$greedy" ] &&
		ok "generate --break-at: the tokens of a run without it" ||
		fail "generate --break-at changed the tokens"
else
	fail "generate --break-at 1: exit status $rc"
	show_out
fi
if gen 1 "djinn generate, a token outside the vocabulary" -t 1,256; then
	expect "generate: bad token named" \
		'^djinn: generate: token 256 at 1 is outside the vocabulary of 256 \(EINVAL\)$' \
		"$dir/err"
	one_line "generate bad token"
fi
if "$DJINN" -a "unix:$dir/d.sock" generate -m no-such -t 1 >"$dir/out" \
	2>"$dir/err"; then
	fail "generate from no model: exit status 0"
else
	expect "generate: no model" '^djinn: generate: .*\(ENOENT\)$' "$dir/err"
fi
for args in "" "generate" "generate -m tiny-gpt2" "generate -m x -t 1,,2" \
	"generate -m x -t 1 -n 0" "model" "model info" "frob"; do
	# shellcheck disable=SC2086
	"$DJINN" -a "unix:$dir/d.sock" $args >"$dir/out" 2>"$dir/err"
	rc=$?
	[ "$rc" -eq 2 ] && ok "djinn usage: '$args'" ||
		fail "djinn $args: exit status $rc, expected 2"
done

# --- the socket ---------------------------------------------------------------

if DJINN_ADMIN_SOCKET="$dir/admin.sock" "$DJINNCTL" stats >"$dir/out" \
	2>"$dir/err"; then
	ok "\$DJINN_ADMIN_SOCKET names the socket"
else
	fail "\$DJINN_ADMIN_SOCKET: exit status $?"
	show_out
fi
if run 1 "a missing socket" -s "$dir/none.sock" session list; then
	expect "missing socket: named, with its errno" \
		"^djinnctl: session list: cannot connect to $dir/none.sock: .*\\(ENOENT\\)\$" \
		"$dir/err"
	one_line "missing socket"
fi
# The client socket serves no admin opcode: the daemon says so.
if run 1 "the client socket" -s "$dir/d.sock" stats; then
	expect "client socket: the daemon's refusal" \
		'^djinnctl: stats show: .*not served.* \(EPERM\)$' "$dir/err"
fi

# --- usage ------------------------------------------------------------------------

for args in "" "bogus" "s" "session frob" "session show" "session show x1" \
	"session show -- -1" "session kill 1 2" "session list extra" "vmu 1" \
	"--bogus stats" "model evict" "model evict ../etc" "model list x" \
	"model frob" "sched show extra" "sched frob" "model load" \
	"model load x --ring-slots 9" "model load x --ring-slots 2" \
	"model load x --budget 12Q" "model list --budget 1M"; do
	# shellcheck disable=SC2086
	if run 2 "usage: djinnctl $args" $args; then
		if grep -q '^usage: djinnctl' "$dir/err"; then
			ok "usage: djinnctl $args"
		else
			fail "usage: djinnctl $args: no usage on stderr"
		fi
	fi
done
run 0 "--help" --help && expect "--help: usage on stdout" '^usage: djinnctl' \
	"$dir/out"
run 0 "-V" -V && expect "-V: version" '^djinnctl [0-9.]+ \(protocol [0-9]+\)$' \
	"$dir/out"

# --- answers that break the protocol -------------------------------------------

# A fake daemon: for each connection, read a request and answer per the
# next mode: "mute" (never), "magic", "version", "flags", "short" (a
# stats answer of 8 bytes), "error" (an error frame whose length lies),
# "sched_short" and "sched_long" (a sched answer shorter or longer than
# its counts say).
cat >"$dir/fake.py" <<'EOF'
import os, socket, struct, sys, time
path, modes = sys.argv[1], sys.argv[2:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path + ".tmp")
os.rename(path + ".tmp", path)
s.listen(8)
held = []
for mode in modes:
    c, _ = s.accept()
    held.append(c)
    req = b""
    while len(req) < 40:
        req += c.recv(40 - len(req))
    magic, ver, op, flags, res, rid, sid, plen = struct.unpack("<IHHIIQQQ", req)
    hdr = lambda m=magic, v=ver, f=1, n=0: struct.pack(
        "<IHHIIQQQ", m, v, op, f, 0, rid, sid, n)
    if mode == "magic":
        c.sendall(hdr(m=0xdeadbeef, n=120) + bytes(120))
    elif mode == "version":
        c.sendall(hdr(v=ver + 1, n=120) + bytes(120))
    elif mode == "flags":
        c.sendall(hdr(f=1 | 8, n=120) + bytes(120))
    elif mode == "short":
        c.sendall(hdr(n=8) + bytes(8))
    elif mode == "error":
        c.sendall(hdr(f=3, n=12) + struct.pack("<iI", -2, 200) + b"oops")
    elif mode == "sched_short":
        c.sendall(hdr(n=12) + struct.pack("<III", 1, 0, 0))
    elif mode == "sched_long":
        c.sendall(hdr(n=8 + 4096) + struct.pack("<II", 1, 0) + bytes(4096))
time.sleep(30)
EOF
python3 "$dir/fake.py" "$dir/fake.sock" mute magic version flags short error \
	sched_short sched_long 2>"$dir/fake.err" &
fpid=$!
i=0
until [ -S "$dir/fake.sock" ] || [ "$i" -gt 100 ]; do
	i=$((i + 1))
	sleep 0.1
done
fake() {
	what=$1 want=$2
	shift 2
	"$DJINNCTL" -s "$dir/fake.sock" "$@" >"$dir/out" 2>"$dir/err"
	rc=$?
	if [ "$rc" -eq 1 ] && grep -Eq -- "$want" "$dir/err" &&
		[ "$(wc -l <"$dir/err")" -eq 1 ] && [ ! -s "$dir/out" ]; then
		ok "fake daemon: $what"
	else
		fail "fake daemon: $what: exit status $rc"
		show_out
	fi
}
start=$(date +%s)
fake "no answer times out" 'no progress within 5 s \(ETIMEDOUT\)$' stats
took=$(($(date +%s) - start))
[ "$took" -le 8 ] || fail "the timeout took $took s"
fake "bad magic" 'bad magic 0xdeadbeef.*\(EPROTO\)$' stats
fake "another version" 'protocol version 2, djinnctl 1 \(EPROTONOSUPPORT\)$' stats
fake "unknown flags" 'flags 0x9 \(EPROTO\)$' stats
fake "a short answer" 'answer of 8 bytes, expected 136 \(EPROTO\)$' stats
fake "a bad error frame" 'malformed error answer.*\(EPROTO\)$' stats
fake "a sched answer short of its counts" \
	'sched answer of 12 bytes for 1 devices and 0 sessions, expected [0-9]+ \(EPROTO\)$' \
	sched
fake "a sched answer past its counts" \
	'sched answer of 4104 bytes for 1 devices and 0 sessions, expected [0-9]+ \(EPROTO\)$' \
	sched
kill "$fpid" 2>/dev/null
wait "$fpid" 2>/dev/null
fpid=

# --- the man page ------------------------------------------------------------------

if ! command -v groff >/dev/null 2>&1; then
	echo "note: groff is not installed: man page not checked"
elif [ ! -f "$MANPAGE" ]; then
	echo "note: no man page found (set MANPAGE): not checked"
elif groff -ww -man -Tutf8 "$MANPAGE" 2>"$dir/err" >/dev/null &&
	[ ! -s "$dir/err" ]; then
	ok "the man page renders without warnings"
else
	fail "groff warns about $MANPAGE"
	sed 's/^/    | /' "$dir/err"
fi

# --- stop ---------------------------------------------------------------------------

kill "$hpid" 2>/dev/null
wait "$hpid" 2>/dev/null
hpid=
kill -TERM "$dpid"
i=0
while kill -0 "$dpid" 2>/dev/null; do
	i=$((i + 1))
	if [ "$i" -gt 200 ]; then
		fail "djinnd still runs 20 s after SIGTERM"
		kill -9 "$dpid"
		break
	fi
	sleep 0.1
done
wait "$dpid"
rc=$?
dpid=
if [ "$rc" -eq 0 ]; then
	ok "djinnd exits 0 on SIGTERM"
else
	fail "djinnd exited $rc on SIGTERM"
fi
if grep -Eq 'ERROR: (Address|Leak|Thread)Sanitizer|runtime error:' \
	"$dir/djinnd.log"; then
	fail "djinnd's log holds a sanitizer report"
	sed 's/^/    | /' "$dir/djinnd.log"
fi

finish
