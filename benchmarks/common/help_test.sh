#!/usr/bin/env bash
# Every benchmark answers --help with its usage and exit 0, and an unknown
# flag with one line naming it and exit 2 (benchmarks/common/flags.h).
set -euo pipefail
status=0
for binary in "$@"; do
  name=$(basename "$binary")
  if ! out=$("$binary" --help 2>&1); then
    echo "$name --help failed: $out" >&2; status=1; continue
  fi
  grep -q "^usage: $name \[options\]" <<<"$out" || { echo "$name --help: no usage line: $out" >&2; status=1; }
  grep -q "^  -h, --help " <<<"$out" || { echo "$name --help: no -h, --help line" >&2; status=1; }
  set +e
  err=$("$binary" --no-such-flag 1 2>&1 >/dev/null)
  code=$?
  set -e
  [ "$code" -eq 2 ] || { echo "$name --no-such-flag: exit $code, expected 2" >&2; status=1; }
  grep -q "unknown option '--no-such-flag'" <<<"$err" || { echo "$name: unexpected error '$err'" >&2; status=1; }
  [ "$(wc -l <<<"$err")" -eq 1 ] || { echo "$name: error is not one line: $err" >&2; status=1; }
done
[ "$status" -eq 0 ] && echo "checked $# benchmarks"
exit "$status"
