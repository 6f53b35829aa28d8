#!/usr/bin/env bash
# Runs grove's whole test suite: the layer, visibility and format checks of
# tools/check_layers.sh, then `bazel test //...` except the Python tests of
# tests/python, which tools/test_wheel.sh runs against the wheel installed into
# a fresh virtual environment (as a user gets grove), and prints the totals of
# GoogleTest and unittest cases across every test binary and Python test plus
# one case per check, ending with one line "tests: N passed, N failed, N
# skipped". Extra arguments go to bazel test.
set -uo pipefail
cd "$(dirname "$0")/.."

checks_log=$(mktemp)
tools/check_layers.sh | tee "$checks_log"
checks_status=${PIPESTATUS[0]}

events=$(mktemp)
bazel test --build_event_json_file="$events" "$@" -- //... -//tests/python/...
status=$?

wheel_xml=$(mktemp -d)
tools/test_wheel.sh "$wheel_xml"
wheel_status=$?

# Only this run's test results count (cached ones included); stale test.xml
# files of targets that no longer build or exist do not. A build that fails
# counts as one failure, so the totals never look green when it did not run.
CHECKS_LOG=$checks_log EVENTS=$events STATUS=$status WHEEL_XML=$wheel_xml python3 - <<'PY'
import glob, json, os, xml.etree.ElementTree as ET
from urllib.parse import unquote, urlparse
passed = failed = skipped = 0
binaries = 0
xml_files = []
for line in open(os.environ["EVENTS"]):
    event = json.loads(line)
    for output in event.get("testResult", {}).get("testActionOutput", []):
        if output.get("name") == "test.xml":
            xml_files.append(unquote(urlparse(output["uri"]).path))
python_files = sorted(glob.glob(os.path.join(os.environ["WHEEL_XML"], "*.xml")))
xml_files += python_files
for path in xml_files:
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        failed += 1
        print(f"unreadable test result: {path}")
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
if os.environ["STATUS"] not in ("0", "3"):  # 3: tests ran and some failed
    failed += 1
    print(f"bazel test did not complete (exit {os.environ['STATUS']}): counted as one failure")
print(f"{binaries} test binaries and Python tests ({len(python_files)} files from the installed "
      f"wheel), {len(checks)} checks (tools/check_layers.sh)")
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
PY
rm -rf "$checks_log" "$events" "$wheel_xml"
[ "$checks_status" -ne 0 ] && [ "$status" -eq 0 ] && status=1
[ "$wheel_status" -ne 0 ] && [ "$status" -eq 0 ] && status=1
exit $status
