#!/bin/bash
# The transport conformance checker (conformance.c) fed corrupted records: one
# byte of the 5th record of each flow flipped in the receiver's ring after it
# landed (--corrupt), in the header, at the payload's first byte, a third into
# it (where sampling would look away) and at its last byte. Every run must fail,
# naming that record and the byte. Case a: records of 1 B..256 KiB; case d:
# 4 MiB records, checked to the last byte like small ones.
# Usage: oracle.sh CONFORMANCE PLUGIN_DIR
set -eu
conf=$1 pdir=$2
out=$(mktemp /tmp/rgaps-conf-oracle.XXXXXX)
trap 'rm -f "$out"' EXIT
fails=0
# CASES WHERE WHAT-THE-CHECKER-MUST-SAY (an extended regular expression)
while read -r cases where what; do
	rc=0
	timeout -k 5 120 "$conf" --transport tcp --plugin-dir "$pdir" --addr 127.0.0.1 \
		--cases "$cases" --records 200 --seconds 1 --corrupt "$where" >"$out" 2>&1 || rc=$?
	if [ $rc != 1 ]; then
		tail -n 20 "$out"
		echo "FAIL: --cases $cases --corrupt $where: exit $rc, expected 1 (the checker must fail)"
		fails=$((fails + 1))
	elif ! grep -qE "record 4 \($what" "$out"; then
		grep -E '^#|FAIL' "$out" | tail -n 10
		echo "FAIL: --cases $cases --corrupt $where: the checker does not say 'record 4 ($what'"
		fails=$((fails + 1))
	else
		echo "ok: --cases $cases --corrupt $where: $(grep -oE "record 4 \($what" "$out" | head -n 1)"
	fi
done <<'CASES'
a hdr [0-9]+ bytes at [0-9]+\): header differs
a first [0-9]+ bytes at ring offset [0-9]+\): payload byte 0 differs
a last [0-9]+ bytes at ring offset [0-9]+\): payload byte [0-9]+ differs
d hdr 4194304 bytes at [0-9]+\): header differs
d first 4194304 bytes at ring offset [0-9]+\): payload byte 0 differs
d third 4194304 bytes at ring offset [0-9]+\): payload byte 1398080 differs
d last 4194304 bytes at ring offset [0-9]+\): payload byte 4194239 differs
CASES
[ $fails = 0 ] || { echo "$fails runs of the checker let a corrupted record through"; exit 1; }
echo "the checker caught every corrupted record"
