#!/usr/bin/env bash
# fuzz_main's command line: --help, a bad flag (exit 2, one line), and
# --program replaying a saved reduced program with its scenario seed.
set -euo pipefail
fuzz_main=$1
fixture=$2

help=$("$fuzz_main" --help)
grep -q "^usage: fuzz_main \[options\]" <<<"$help" || { echo "no usage line: $help" >&2; exit 1; }
grep -q "^  --program FILE " <<<"$help" || { echo "--program undocumented: $help" >&2; exit 1; }

set +e
err=$("$fuzz_main" --calls 0 2>&1 >/dev/null)
code=$?
set -e
[ "$code" -eq 2 ] || { echo "--calls 0: exit $code, expected 2" >&2; exit 1; }
grep -q "^fuzz_main: --calls expects an integer from 1 to" <<<"$err" || { echo "unexpected: $err" >&2; exit 1; }

out=$("$fuzz_main" --device sim --program "$fixture" --seed 23188)
grep -q "with scenario seed 23188: passed$" <<<"$out" || { echo "replay: $out" >&2; exit 1; }
echo "fuzz_main: help, bad flag and --program replay behave"
