#!/usr/bin/env bash
# tools/kernel_profile.py: parses Nsight Compute's CSV (fixtures/kernel_profile/ncu.csv,
# rows of a real H100 run of train_step, with ncu's own messages and a
# thousands separator) into per-kernel totals and categories; runs a command
# under a stand-in ncu (GROVE_NCU) and passes on its exit status; refuses a
# CSV without a kernel time or with an unknown unit, naming what was wrong.
set -euo pipefail
fixture=tests/tools/fixtures/kernel_profile/ncu.csv
tmp=${TEST_TMPDIR:-$(mktemp -d)}
profile() { python3 tools/kernel_profile.py "$@"; }

# 1. The fixture: 10 launches of 5 kernels.
profile --csv "$fixture" --name train --out "$tmp/parse" >"$tmp/parse.txt"
grep -q "^train: 10 kernel launches" "$tmp/parse.txt"
python3 - "$tmp/parse/train.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["launches"] == 10, report["launches"]
first = report["kernels"][0]
# "101,024", "101,760", "102,304" ns as ncu printed them.
assert first["kernel"] == "multi_sgd_momentum_update_18c1a7ac2387", first
assert first["launches"] == 3
assert abs(first["total_us"] - (101.024 + 101.760 + 102.304)) < 1e-9, first["total_us"]
assert abs(first["mean_us"] * 3 - first["total_us"]) < 1e-9
assert first["category"] == "other (grove generated, copies)"
shares = sum(k["share"] for k in report["kernels"])
assert abs(shares - 1.0) < 1e-9, shares
assert report["categories"]["library GEMM"]["launches"] == 5, report["categories"]
assert abs(sum(c["total_us"] for c in report["categories"].values()) - report["total_us"]) < 1e-6
PY

# 2. A command under a stand-in ncu: it writes the fixture where --log-file
# says, runs the command, and its exit status comes back.
cat >"$tmp/fake_ncu" <<SH
#!/usr/bin/env bash
while [ "\$1" != "--log-file" ]; do shift; done
cp "$fixture" "\$2"; shift 2
"\$@"
SH
chmod +x "$tmp/fake_ncu"
GROVE_NCU="$tmp/fake_ncu" profile --name run --out "$tmp/run" -- true >"$tmp/run.txt"
test -f "$tmp/run/run.csv" && test -f "$tmp/run/run.json"
set +e
GROVE_NCU="$tmp/fake_ncu" profile --name failing --out "$tmp/run" -- sh -c 'exit 3' \
  >/dev/null 2>"$tmp/failing.err"
status=$?
set -e
[ "$status" -eq 3 ] || { echo "expected the command's status 3, got $status"; exit 1; }
grep -q "exited 3" "$tmp/failing.err"

# 3. Bad input: no kernel rows; an unknown unit; neither --csv nor a command.
printf '==PROF== nothing profiled\n' >"$tmp/empty.csv"
if profile --csv "$tmp/empty.csv" --name empty --out "$tmp/bad" 2>"$tmp/empty.err"; then
  echo "an empty CSV was accepted"; exit 1
fi
grep -q "no kernel times in" "$tmp/empty.err"
sed 's/"ns"/"furlong"/' "$fixture" >"$tmp/unit.csv"
if profile --csv "$tmp/unit.csv" --name unit --out "$tmp/bad" 2>"$tmp/unit.err"; then
  echo "an unknown unit was accepted"; exit 1
fi
grep -q "unknown time unit 'furlong'" "$tmp/unit.err"
if profile --name none --out "$tmp/bad" 2>"$tmp/none.err"; then
  echo "no --csv and no command was accepted"; exit 1
fi
grep -q "give either --csv FILE or -- COMMAND" "$tmp/none.err"
echo "kernel_profile_test: all checks passed"
