#!/usr/bin/env bash
# Prints which of the given Python test files start the grove binary: those
# that name GROVE_BINARY (the variable the tests read its path from), or the
# binary's path, written "cli/grove" or os.path.join(..., "cli", "grove"). tools/gpu_bundle.sh carries the binary in a part whose Python
# tests need it (Note [A part that runs the CLI carries it]).
#
#   tools/starts_grove_cli.sh FILE...
set -euo pipefail
for file in "$@"; do
  [ -f "$file" ] || { echo "starts_grove_cli: no file $file" >&2; exit 2; }
  if grep -qE 'GROVE_BINARY|cli/grove|"cli", *"grove"' "$file"; then
    echo "$file"
  fi
done
