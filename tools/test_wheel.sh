#!/usr/bin/env bash
# Runs the Python tests (tests/python/*_test.py) against grove as `pip install`
# puts it: builds the wheel (tools/build_wheel.sh), installs it into a fresh
# virtual environment of Debian's python3 (--system-site-packages, for its
# PyTorch 1.13 and NumPy), checks that grove and its bundled libgrove.so load
# from there, then runs each test with that environment's python: nothing of
# python/ is on the path and GROVE_LIBRARY is unset. Every test writes JUnit XML
# into XML_DIR, one file per test (tools/test.sh counts the cases); a test that
# exits non-zero without a failing case in its XML (it died, or never wrote
# one), or writes none, gets one failing case, and so does a wheel that does not build, install
# or load. Exits non-zero when anything failed.
#
#   tools/test_wheel.sh XML_DIR [bazel build flags]
#
# GROVE_TEST_PYTHON replaces /usr/bin/python3; GROVE_PYTHON_TEST_TIMEOUT bounds
# each test (seconds, default 900). The data files the tests read (cli/grove,
# the models) come from the Bazel runfiles of their py_test targets.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$(pwd)
xml_dir=${1:?usage: tools/test_wheel.sh XML_DIR [bazel build flags]}
shift
mkdir -p "$xml_dir"
xml_dir=$(cd "$xml_dir" && pwd)
python=${GROVE_TEST_PYTHON:-/usr/bin/python3}
timeout_s=${GROVE_PYTHON_TEST_TIMEOUT:-900}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# One JUnit file holding one case: NAME, OUTCOME (passed or failure), DETAIL.
write_case() {
  "$python" - "$1" "$2" "$3" "$4" <<'PY'
import sys, xml.etree.ElementTree as ET
path, name, outcome, detail = sys.argv[1:]
suite = ET.Element("testsuite", name="tools/test_wheel.sh", tests="1")
case = ET.SubElement(suite, "testcase", classname="test_wheel", name=name, time="0")
if outcome != "passed":
    ET.SubElement(case, "failure", message=detail.splitlines()[0] if detail else "").text = detail
root = ET.Element("testsuites")
root.append(suite)
ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
PY
}

# Whether a JUnit file holds a failing or erroneous case.
has_failure() {
  "$python" - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (ET.ParseError, OSError):
    sys.exit(1)
sys.exit(0 if any(c.find("failure") is not None or c.find("error") is not None
                  for c in root.iter("testcase")) else 1)
PY
}

install_log="$scratch/install.log"
wheel=$(GROVE_WHEEL_DIR="$scratch/dist" tools/build_wheel.sh "$@" 2>"$install_log" | tail -1)
venv="$scratch/venv"
if [ ! -f "$wheel" ]; then
  cat "$install_log" >&2
  write_case "$xml_dir/wheel.xml" wheel_builds failure "tools/build_wheel.sh failed: $(tail -5 "$install_log")"
  exit 1
fi
echo "test_wheel: built $(basename "$wheel")"
# The data files of the tests (cli/grove, models) are their runfiles.
if ! bazel build "$@" //tests/python/... >>"$install_log" 2>&1; then
  cat "$install_log" >&2
  write_case "$xml_dir/wheel.xml" python_tests_build failure "bazel build //tests/python/... failed"
  exit 1
fi
bin=$(bazel info "$@" bazel-bin 2>/dev/null)
if ! { "$python" -m venv --system-site-packages "$venv" &&
       "$venv/bin/python" -m pip install --no-index --no-deps --quiet "$wheel"; } >>"$install_log" 2>&1; then
  cat "$install_log" >&2
  write_case "$xml_dir/wheel.xml" wheel_installs failure "pip install of $(basename "$wheel") failed: $(tail -5 "$install_log")"
  exit 1
fi

# grove and libgrove.so must both come from the environment's site-packages.
loaded=$(cd "$scratch" && env -u GROVE_LIBRARY -u PYTHONPATH "$venv/bin/python" -c '
import grove, grove_weights
from grove import _capi
print(grove.__file__)
print(grove_weights.__file__)
print(_capi.library()._name)' 2>&1)
bad=$(grep -v "^$venv/lib/python3[0-9.]*/site-packages/" <<<"$loaded")
if [ -n "$bad" ] || [ "$(wc -l <<<"$loaded")" -ne 3 ]; then
  write_case "$xml_dir/wheel.xml" installed_package_loads_its_bundled_library failure \
    "expected grove, grove_weights and libgrove.so under $venv, found: $loaded"
  echo "test_wheel: the installed package does not load from $venv:" >&2
  echo "$loaded" >&2
  exit 1
fi
write_case "$xml_dir/wheel.xml" installed_package_loads_its_bundled_library passed ""

status=0
for test in tests/python/*_test.py; do
  name=$(basename "$test" .py)
  runfiles="$bin/tests/python/$name.runfiles"
  xml="$xml_dir/$name.xml"
  log="$xml_dir/$name.log"
  rm -f "$xml"
  mkdir -p "$scratch/tmp/$name"
  start=$(date +%s)
  (cd "$runfiles/grove" 2>/dev/null || cd "$scratch/tmp/$name"
   env -u GROVE_LIBRARY TEST_SRCDIR="$runfiles" TEST_WORKSPACE=grove \
     TEST_TMPDIR="$scratch/tmp/$name" XML_OUTPUT_FILE="$xml" \
     PYTHONPATH="$root/tests/python_support" \
     timeout "$timeout_s" "$venv/bin/python" "$root/$test") >"$log" 2>&1
  code=$?
  verdict=PASS
  if [ "$code" -eq 0 ] && [ ! -f "$xml" ]; then
    code=1  # nothing counted would pass for nothing run
    echo "$test wrote no JUnit results (end it with junit_main.main())" >>"$log"
  fi
  if [ "$code" -ne 0 ]; then
    verdict=FAIL
    status=1
    if [ ! -f "$xml" ] || ! has_failure "$xml"; then
      write_case "$xml_dir/$name.exit.xml" "${name}_exits_cleanly" failure \
        "$test exited with status $code (124: past ${timeout_s} s): $(tail -5 "$log")"
    fi
    tail -15 "$log" | sed 's/^/      | /'
    # A fuzz test's seeds come from the clock: its failure's first line (the
    # seed) is often above the tail, and the log is gone with the scratch dir.
    grep -m 3 "fuzz seed" "$log" | cut -c1-300 | sed 's/^/      | /'
  fi
  printf 'test_wheel: %-4s %-40s %4ss\n' "$verdict" "$test" "$(($(date +%s) - start))"
done
exit $status
