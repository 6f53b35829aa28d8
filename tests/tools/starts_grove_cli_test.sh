#!/usr/bin/env bash
# tools/starts_grove_cli.sh names the Python tests that start the grove binary,
# and only those; a missing file is an error, not a silent "no".
set -euo pipefail
script=$(find . -path '*tools/starts_grove_cli.sh' -print -quit)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf 'binary = os.environ["GROVE_BINARY"]\n' >"$dir/a_test.py"
printf 'subprocess.run([root + "/cli/grove", "serve"])\n' >"$dir/b_test.py"
printf 'import torch\nprint("no binary here")\n' >"$dir/c_test.py"
printf 'GROVE = os.path.join(RUNFILES, "cli", "grove")\n' >"$dir/d_test.py"
got=$("$script" "$dir/a_test.py" "$dir/b_test.py" "$dir/c_test.py" "$dir/d_test.py")
want=$(printf '%s\n' "$dir/a_test.py" "$dir/b_test.py" "$dir/d_test.py")
if [ "$got" != "$want" ]; then
  echo "FAIL: named [$got], wanted [$want]"; exit 1
fi
if "$script" "$dir/missing_test.py" 2>/dev/null; then
  echo "FAIL: a missing file was not an error"; exit 1
fi
echo PASS
