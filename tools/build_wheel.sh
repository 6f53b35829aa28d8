#!/usr/bin/env bash
# Builds grove's wheel in one command: //capi:libgrove.so with Bazel (extra
# arguments go to bazel build, e.g. -c opt), stripped of symbols nothing looks
# up, packed with python/grove and python/grove_weights by tools/build_wheel.py
# into dist/grove-<version>-py3-none-linux_x86_64.whl (the last line printed).
#
#   tools/build_wheel.sh [bazel build flags]
#   pip install dist/grove-*.whl
#
# GROVE_WHEEL_DIR replaces dist/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${GROVE_WHEEL_DIR:-dist}
bazel build "$@" //capi:libgrove.so >&2
bin=$(bazel info "$@" bazel-bin 2>/dev/null)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp "$bin/capi/libgrove.so" "$scratch/libgrove.so"
chmod u+w "$scratch/libgrove.so"
strip --strip-unneeded "$scratch/libgrove.so"
python3 tools/build_wheel.py --library "$scratch/libgrove.so" --out "$out"
