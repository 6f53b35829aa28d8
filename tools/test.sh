#!/usr/bin/env bash
# Runs grove's whole test suite: the layer, visibility and format checks of
# tools/check_layers.sh, then `bazel test //...`, and prints the totals of
# GoogleTest cases across every test binary plus one case per check, ending
# with one line "tests: N passed, N failed, N skipped". Extra arguments go to
# bazel test.
set -uo pipefail
cd "$(dirname "$0")/.."

checks_log=$(mktemp)
tools/check_layers.sh | tee "$checks_log"
checks_status=${PIPESTATUS[0]}

bazel test //... "$@"
status=$?

CHECKS_LOG=$checks_log python3 - <<'PY'
import glob, os, xml.etree.ElementTree as ET
passed = failed = skipped = 0
binaries = 0
for path in glob.glob("bazel-testlogs/**/test.xml", recursive=True):
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        continue
    binaries += 1
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None or case.get("result") == "skipped" \
                or case.get("status") == "notrun":
            skipped += 1
        else:
            passed += 1
checks = [line.split(": ")[-1].strip() for line in open(os.environ["CHECKS_LOG"])
          if line.startswith("check ")]
passed += checks.count("passed")
failed += checks.count("failed")
print(f"{binaries} test binaries, {len(checks)} checks (tools/check_layers.sh)")
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
PY
rm -f "$checks_log"
[ "$checks_status" -ne 0 ] && [ "$status" -eq 0 ] && status=1
exit $status
