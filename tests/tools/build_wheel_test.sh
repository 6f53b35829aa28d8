#!/usr/bin/env bash
# tools/build_wheel.py writes a wheel pip installs and uninstalls cleanly: named
# grove-<version>-py3-none-linux_<machine>.whl, its RECORD lists every file with
# its sha256 and size, the same inputs give the same bytes, libgrove.so lands
# beside the installed grove package (where grove/_capi.py looks), and a
# version line that is missing is refused. On a fake package and library: the
# real wheel is installed and tested by tools/test_wheel.sh (tools/test.sh).
set -euo pipefail
tmp=${TEST_TMPDIR:-$(mktemp -d)}
python=/usr/bin/python3
[ -x "$python" ] || python=python3
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1

src="$tmp/python"
mkdir -p "$src/grove" "$src/grove_weights"
echo 'import os; HERE = os.path.dirname(__file__)' >"$src/grove/__init__.py"
echo '__version__ = "1.2.3"' >"$src/grove/version.py"
echo 'NAME = "grove_weights"' >"$src/grove_weights/__init__.py"
head -c 50000 /dev/urandom >"$tmp/libgrove.so"

first=$("$python" tools/build_wheel.py --library "$tmp/libgrove.so" --python "$src" --out "$tmp/a")
second=$("$python" tools/build_wheel.py --library "$tmp/libgrove.so" --python "$src" --out "$tmp/b")
wheel_name="grove-1.2.3-py3-none-linux_$(uname -m).whl"
[ "$(basename "$first")" = "$wheel_name" ] || { echo "wheel named $first, expected $wheel_name"; exit 1; }
cmp "$first" "$second" || { echo "two builds of the same inputs differ"; exit 1; }

"$python" - "$first" <<'PY'
import base64, csv, hashlib, io, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    names = wheel.namelist()
    record = list(csv.reader(io.StringIO(wheel.read("grove-1.2.3.dist-info/RECORD").decode())))
    listed = {row[0] for row in record}
    assert listed == set(names), ("RECORD and the zip differ", listed ^ set(names))
    for path, digest, size in record:
        if path.endswith("RECORD"):
            assert digest == "" and size == "", path
            continue
        data = wheel.read(path)
        want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == want and int(size) == len(data), (path, digest, want)
    wheel_file = wheel.read("grove-1.2.3.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: false" in wheel_file and "Tag: py3-none-linux_" in wheel_file, wheel_file
    assert "grove/libgrove.so" in names and "grove_weights/__init__.py" in names, names
    assert wheel.getinfo("grove/libgrove.so").external_attr >> 16 == 0o100755
print("RECORD matches the wheel's %d files" % len(names))
PY

"$python" -m venv --system-site-packages --without-pip "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --no-index --no-deps --quiet "$first"
site=$(cd "$tmp" && "$tmp/venv/bin/python" -c 'import grove; print(grove.HERE)')
case "$site" in
  "$tmp/venv/"*/site-packages/grove) ;;
  *) echo "grove imported from $site, not from the environment"; exit 1 ;;
esac
cmp "$site/libgrove.so" "$tmp/libgrove.so" || { echo "libgrove.so is not beside the package"; exit 1; }
"$tmp/venv/bin/python" -m pip uninstall --yes --quiet grove
if [ -e "$site" ] || ls -d "$(dirname "$site")"/grove* >/dev/null 2>&1; then
  echo "pip uninstall left files of the wheel behind:"; ls "$(dirname "$site")"; exit 1
fi

sed -i 's/^__version__.*/VERSION = 1/' "$src/grove/version.py"
if "$python" tools/build_wheel.py --library "$tmp/libgrove.so" --python "$src" --out "$tmp/c" \
     >"$tmp/refused.txt" 2>&1; then
  echo "a package without a version line was packed"; exit 1
fi
grep -q 'has no __version__' "$tmp/refused.txt" || { cat "$tmp/refused.txt"; exit 1; }
echo "build_wheel_test: all checks passed"
