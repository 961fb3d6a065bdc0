#!/bin/bash
# tests/fuzz/fuzz.sh replay|run TARGET BINARY CORPUS [DICT]
#
#   replay  run every input of CORPUS (the seeds and every crash ever found,
#           kept there as crash-*) through the libFuzzer target once: any
#           crash, sanitizer report or leak fails.
#   run     fuzz for FUZZ_SECONDS (default 30) from a copy of CORPUS (libFuzzer
#           adds what it finds to its first corpus folder; the tree's stays as
#           it is). A crash fails, printing the input (base64) and how to keep
#           it: copy it into CORPUS as crash-<what>, so that every later replay
#           runs it.
# Registered per target in tests/fuzz/meson.build (suite fuzz, -Dfuzz=true).
set -eu
mode=$1 target=$2 bin=$3 corpus=$4 dict=${5:-}
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
n=$(find "$corpus" -maxdepth 1 -type f | wc -l)
[ "$n" -gt 0 ] || { echo "FAIL: the corpus $corpus is empty"; exit 1; }
work=$(mktemp -d /tmp/rgaps-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
dictarg=()
[ -z "$dict" ] || dictarg=("-dict=$dict")
case $mode in
replay)
	# With files as arguments libFuzzer runs each once and stops at the first failure.
	rc=0
	"$bin" -error_exitcode=1 $(find "$corpus" -maxdepth 1 -type f | sort) >"$work/log" 2>&1 || rc=$?
	if [ $rc != 0 ]; then
		tail -n 40 "$work/log"
		echo "FAIL: $target: an input of $corpus fails (exit $rc)"
		exit 1
	fi
	echo "ok: $target: the $n inputs of $corpus run clean"
	;;
run)
	secs=${FUZZ_SECONDS:-30}
	mkdir "$work/corpus" "$work/artifacts"
	cp "$corpus"/* "$work/corpus/"
	rc=0
	"$bin" "${dictarg[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
		-artifact_prefix="$work/artifacts/" -print_final_stats=1 \
		"$work/corpus" >"$work/log" 2>&1 || rc=$?
	if [ $rc != 0 ] || [ -n "$(ls -A "$work/artifacts")" ]; then
		tail -n 60 "$work/log"
		for a in "$work"/artifacts/*; do
			[ -f "$a" ] || continue
			echo "---- $(basename "$a") (base64): keep it as $corpus/crash-<what>"
			base64 -w 76 "$a"
		done
		echo "FAIL: $target: libFuzzer found a failing input in $secs s (exit $rc)"
		exit 1
	fi
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
	cov=$(grep -o 'cov: [0-9]*' "$work/log" | tail -n 1)
	echo "ok: $target: ${runs:-?} runs in $secs s, $cov, corpus $n -> $(ls "$work/corpus" | wc -l) inputs, no failure"
	;;
*)
	echo "usage: $0 replay|run TARGET BINARY CORPUS [DICT]" >&2
	exit 2
	;;
esac
