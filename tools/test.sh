#!/usr/bin/env bash
# Runs grove's whole test suite (`bazel test //...`) and prints the totals of
# GoogleTest cases across every test binary, ending with one line
# "tests: N passed, N failed, N skipped". Extra arguments go to bazel test.
set -uo pipefail
cd "$(dirname "$0")/.."

bazel test //... "$@"
status=$?

python3 - <<'PY'
import glob, xml.etree.ElementTree as ET
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
print(f"{binaries} test binaries")
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
