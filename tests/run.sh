#!/usr/bin/env bash
# Runs test programs, each with its own time limit, and prints one closing line: "N passed, N failed".
# Usage: tests/run.sh SUITE PROGRAM...
set -u
suite=$1; shift
pass=0; fail=0; failed=()
logs="${BUILD:-build}/logs"
mkdir -p "$logs"
for t in "$@"; do
    name=$(basename "$t")
    start=$(date +%s.%N)
    if W22_ROOT=$(pwd) timeout "${W22_TEST_TIMEOUT:-900}" "$t" > "$logs/$name.log" 2>&1; then
        pass=$((pass + 1)); status=ok
    else
        fail=$((fail + 1)); status=FAILED; failed+=("$name")
    fi
    printf '%-28s %-6s %6.1f s  %s\n' "$name" "$status" "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')" "$(tail -n 1 "$logs/$name.log")"
    if [ "$status" = FAILED ]; then sed 's/^/    /' "$logs/$name.log" | tail -n 40; fi
done
echo "$suite: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
