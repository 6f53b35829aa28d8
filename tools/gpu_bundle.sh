#!/usr/bin/env bash
# Builds every test binary (cc_test) and benchmark binary (cc_binary under
# benchmarks/) here, optimized and stripped, and copies them with the data files
# their runfiles name into gpu_bundle/ (git-ignored), next to a runner,
# gpu_bundle/run_all.sh, that runs them all on a GPU host and prints one
# summary. The bundle carries no CUDA library: binaries link cudart statically
# and open cuBLAS from the host's CUDA Toolkit at run time. See the README, "Running on a GPU host".
#
#   tools/gpu_bundle.sh [extra bazel build flags]
#
# GROVE_BAZEL_OUTPUT_BASE picks Bazel's output base (default: Bazel's own).
# GROVE_BUNDLE_LIMIT_MIB caps the bundle (default 64). GROVE_BUNDLE_ONLY=tests
# or =benchmarks packs only the test or the benchmark binaries;
# GROVE_BUNDLE_TESTS and GROVE_BUNDLE_PYTHON_TESTS (regular expressions, or
# 'none' for the Python ones) pack a part of the tests. Past GROVE_BUNDLE_PACK_MIB
# (default 60) MiB of raw files the tree is packed as payload.tar.xz, which
# run_all.sh unpacks: a large xz dictionary shares the statically linked LLVM
# and runtime code between binaries. GROVE_BUNDLE_XZ replaces the LZMA2
# options (default preset=1,dict=1024MiB; preset=3,dict=1536MiB packs tighter
# and slower, for a suite grown past the limit).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bundle="$root/gpu_bundle"
limit_mib=${GROVE_BUNDLE_LIMIT_MIB:-64}
pack_mib=${GROVE_BUNDLE_PACK_MIB:-60}

bazel_cmd=(bazel)
if [ -n "${GROVE_BAZEL_OUTPUT_BASE:-}" ]; then
  bazel_cmd+=(--output_base="$GROVE_BAZEL_OUTPUT_BASE")
fi

# Top-level packages, leaving out Bazel's convenience symlinks and the bundle.
scopes=()
for dir in */; do
  dir=${dir%/}
  case "$dir" in
    bazel-* | gpu_bundle | third_party) continue ;;
  esac
  [ -L "$dir" ] && continue
  if find "$dir" \( -name BUILD -o -name BUILD.bazel \) -print -quit | grep -q .; then
    scopes+=("//$dir/...")
  fi
done
universe=$(printf ' + %s' "${scopes[@]}")
universe=${universe# + }

echo "gpu_bundle: querying test and benchmark targets in ${scopes[*]}"
mapfile -t tests < <("${bazel_cmd[@]}" query --noshow_progress "kind(cc_test, $universe)" 2>/dev/null)
benchmarks=()
if [ -d benchmarks ]; then
  mapfile -t benchmarks < <("${bazel_cmd[@]}" query --noshow_progress \
    "kind(cc_binary, //benchmarks/...)" 2>/dev/null)
fi
if [ ${#tests[@]} -eq 0 ]; then
  echo "gpu_bundle: bazel query found no cc_test targets" >&2
  exit 1
fi

# Note [Bundle carries tests that can reach a GPU]
# A test binary whose sources never name CUDA or a device parameterization and
# that does not run the grove binary (whose default device is cuda where one
# exists) runs the same on the GPU host as here, so it stays out of the bundle,
# which must fit the GPU tool's 64 MiB (every binary carries its own static
# LLVM). sim_only.txt lists them; they ran in this machine's suite.
# Test: tests/tools/test_reaches_gpu_test.sh.
runs_grove=$("${bazel_cmd[@]}" query --noshow_progress   "attr(data, '//cli:grove', kind(cc_test, $universe))" 2>/dev/null || true)
gpu_tests=()
sim_only=()
for test in "${tests[@]}"; do
  mapfile -t sources < <("${bazel_cmd[@]}" query --noshow_progress "labels(srcs, $test)" 2>/dev/null |
    sed -n 's|^//\([^:]*\):\(.*\)$|\1/\2|p; s|^//:\(.*\)$|\1|p')
  if grep -qxF "$test" <<<"$runs_grove" || tools/test_reaches_gpu.sh "${sources[@]}"; then
    gpu_tests+=("$test")
  else
    sim_only+=("$test")
  fi
done
tests=("${gpu_tests[@]}")
# GROVE_BUNDLE_ONLY=tests or =benchmarks packs one half, for a suite whose
# whole bundle no longer fits one call's 64 MiB (two runs, one per half).
case "${GROVE_BUNDLE_ONLY:-}" in
  "") ;;
  tests) benchmarks=() ;;
  benchmarks) tests=() ;;
  *) echo "gpu_bundle: GROVE_BUNDLE_ONLY must be tests or benchmarks" >&2; exit 2 ;;
esac
# GROVE_BUNDLE_TESTS=REGEX keeps the test binaries whose label matches (an
# extended regular expression, e.g. '^//tests/(serving|cli)/'), and
# GROVE_BUNDLE_PYTHON_TESTS=REGEX the Python tests whose path matches ('none':
# no Python tests, and no wheel): a tests half still past 64 MiB, or a test
# run longer than one call's 10 minutes, splits into parts of its own.
if [ -n "${GROVE_BUNDLE_TESTS:-}" ]; then
  mapfile -t tests < <(printf '%s\n' "${tests[@]}" | grep -E -- "$GROVE_BUNDLE_TESTS" || true)
  if [ ${#tests[@]} -eq 0 ]; then
    echo "gpu_bundle: GROVE_BUNDLE_TESTS='$GROVE_BUNDLE_TESTS' matches no test binary" >&2
    exit 2
  fi
fi
python_tests_wanted() {  # reads test paths, prints those GROVE_BUNDLE_PYTHON_TESTS keeps
  case "${GROVE_BUNDLE_PYTHON_TESTS:-}" in
    "") cat ;;
    none) cat >/dev/null ;;
    *) grep -E -- "$GROVE_BUNDLE_PYTHON_TESTS" || true ;;
  esac
}
echo "gpu_bundle: ${#tests[@]} test binaries that can reach a GPU (${#sim_only[@]} sim-only left out), ${#benchmarks[@]} benchmark binaries"

events=$(mktemp)
# --keep_going: a target another change broke is reported (and counted as a
# failure by run_all.sh) instead of holding back every other binary. The build
# event file says which targets built.
"${bazel_cmd[@]}" build --keep_going --symlink_prefix=/ -c opt --strip=always \
  --build_event_json_file="$events" "$@" "${tests[@]}" "${benchmarks[@]}" ||
  echo "gpu_bundle: some targets did not build (see above)"
built=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    event = json.loads(line)
    label = event.get("id", {}).get("targetCompleted", {}).get("label")
    if label and event.get("completed", {}).get("success"):
        print(label)
' "$events")
rm -f "$events"
bin=$("${bazel_cmd[@]}" info --symlink_prefix=/ -c opt bazel-bin 2>/dev/null)

rm -rf "$bundle"
mkdir -p "$bundle/grove"
: >"$bundle/tests.txt"
: >"$bundle/benchmarks.txt"
: >"$bundle/not_built.txt"
printf '%s\n' "${sim_only[@]}" >"$bundle/sim_only.txt"

# Debian libraries an ELF file loads that a GPU host may lack (gRPC, protobuf,
# Abseil, SentencePiece and what they load), copied into grove/_syslib, which
# run_all.sh puts on LD_LIBRARY_PATH. The C and C++ runtimes and CUDA's own
# libraries are the host's.
copy_system_libraries() {
  local elf=$1
  [ "$(head -c 4 "$elf" | od -An -c | tr -d ' ')" = '177ELF' ] || return 0
  ldd "$elf" 2>/dev/null | awk '/=> \// {print $1, $3}' | while read -r name path; do
    case "$name" in
      libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux*.so* | \
        libstdc++.so* | libgcc_s.so* | libcuda.so* | libcudart.so* | libcublas*.so* | \
        libnvidia*.so* | libz.so*) ;;
      *)
        mkdir -p "$bundle/grove/_syslib"
        [ -f "$bundle/grove/_syslib/$name" ] || cp -L "$path" "$bundle/grove/_syslib/$name" ;;
    esac
  done
}

# Copies a built binary, the shared objects Bazel built for it, and every
# data file its runfiles manifest lists, into the bundle's runfiles-like tree
# (gpu_bundle/grove/<workspace path>), which run_all.sh uses as TEST_SRCDIR.
copy_target() {
  local label=$1 list=$2
  local path=${label#//}
  path=${path/://}
  local binary="$bin/$path"
  if ! grep -qxF "$label" <<<"$built"; then
    echo "gpu_bundle: $label did not build; run_all.sh will report it as failed" >&2
    echo "$path" >>"$bundle/not_built.txt"
    return 0
  fi
  mkdir -p "$bundle/grove/$(dirname "$path")"
  cp "$binary" "$bundle/grove/$path"
  # Bazel's --strip=always drops debug info only; the symbol table is 15% of a
  # binary and nothing looks it up (the JIT resolves through the dynamic table).
  chmod u+w "$bundle/grove/$path" && strip --strip-all "$bundle/grove/$path"
  echo "$path" >>"$bundle/$list"
  local needed
  needed=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  for library in $needed; do
    case "$library" in
      libcuda.so* | libcudart.so* | libcublas* | libcudnn* | libnvrtc*)
        echo "gpu_bundle: $path needs $library at load time; grove binaries must link cudart" \
             "statically and dlopen cuBLAS" >&2
        exit 1 ;;
    esac
    if [ -f "$bin/_solib_k8/$library" ]; then
      mkdir -p "$bundle/grove/_solib_k8"
      [ -f "$bundle/grove/_solib_k8/$library" ] ||
        { cp -L "$bin/_solib_k8/$library" "$bundle/grove/_solib_k8/$library" &&
          chmod u+w "$bundle/grove/_solib_k8/$library" &&
          strip --strip-unneeded "$bundle/grove/_solib_k8/$library"; }
    fi
  done
  copy_system_libraries "$binary"
  local manifest="$binary.runfiles/MANIFEST"
  [ -f "$manifest" ] || return 0
  while read -r runfile real; do
    [ -n "$real" ] || continue
    case "$runfile" in
      "grove/$path" | grove/_solib_*) continue ;;
    esac
    case "$real" in
      */libcuda* | */libcublas*) continue ;;
    esac
    if [ ! -e "$bundle/$runfile" ]; then
      mkdir -p "$bundle/$(dirname "$runfile")"
      cp -L "$real" "$bundle/$runfile"
      copy_system_libraries "$real"  # the grove binary the command tests run
    fi
  done <"$manifest"
}

for target in "${tests[@]}"; do copy_target "$target" tests.txt; done
# A test's `env` attribute (bazel test sets it; run_all.sh runs binaries
# directly) goes into <binary>.env as KEY=VALUE lines, which run_all.sh applies.
"${bazel_cmd[@]}" query --noshow_progress --output=build "kind(cc_test, $universe)" 2>/dev/null |
  python3 -c '
import os, re, sys
root, bundle = sys.argv[1], sys.argv[2]
for block in re.split(r"\n(?=# )", sys.stdin.read()):
    where = re.match(r"# (\S+)/BUILD(?:\.bazel)?:", block)
    name = re.search(r"name = \"([^\"]+)\"", block)
    env = re.search(r"env = \{([^}]*)\}", block)
    if not (where and name and env):
        continue
    package = os.path.relpath(where.group(1), root)
    binary = os.path.join(bundle, "grove", package, name.group(1))
    if not os.path.exists(binary):
        continue
    with open(binary + ".env", "w") as out:
        for key, value in re.findall(r"\"([^\"]+)\": \"([^\"]*)\"", env.group(1)):
            out.write("%s=%s\n" % (key, value))
' "$root" "$bundle"
for target in "${benchmarks[@]}"; do copy_target "$target" benchmarks.txt; done
# The Python package over libgrove.so (issue 19) as its wheel (issue 36:
# tools/build_wheel.py, the package and the library), its tests and the torch
# backend benchmark; run_all.sh installs the wheel into a fresh virtual
# environment of the host's python3 (which sees its PyTorch) and runs them there.
: >"$bundle/python_tests.txt"
if [ "${GROVE_BUNDLE_PYTHON_TESTS:-}" = none ] && [ "${GROVE_BUNDLE_ONLY:-}" = tests ]; then
  echo "gpu_bundle: GROVE_BUNDLE_PYTHON_TESTS=none: no wheel and no Python tests"
elif "${bazel_cmd[@]}" build --symlink_prefix=/ -c opt --strip=always "$@" //capi:libgrove.so; then
  mkdir -p "$bundle/grove/wheel" "$bundle/grove/tests/python" \
    "$bundle/grove/tests/python_support" "$bundle/grove/benchmarks"
  stripped=$(mktemp -d)
  cp "$bin/capi/libgrove.so" "$stripped/libgrove.so"
  chmod u+w "$stripped/libgrove.so"
  strip --strip-unneeded "$stripped/libgrove.so"
  python3 tools/build_wheel.py --library "$stripped/libgrove.so" --out "$bundle/grove/wheel" \
    --store-library
  rm -rf "$stripped"
  cp tests/python/*.py "$bundle/grove/tests/python/"
  # What capi_binding_test and op_table_test read from the repository.
  mkdir -p "$bundle/grove/capi" "$bundle/grove/tools"
  cp capi/grove.h "$bundle/grove/capi/"
  cp tools/op_table.py README.md "$bundle/grove/tools/" && mv "$bundle/grove/tools/README.md" "$bundle/grove/"
  cp tests/python_support/junit_main.py "$bundle/grove/tests/python_support/"
  cp benchmarks/torch_backend.py "$bundle/grove/benchmarks/"
  # The zoo of real models (issue 33) and its training table (issue 34); they import
  # tests/python's model builders, copied above.
  cp benchmarks/torch_zoo.py benchmarks/zoo_training.py "$bundle/grove/benchmarks/"
  cp tools/bounded_child.py tools/child_turns.py "$bundle/grove/tools/"  # torch_zoo's decode children
  # The decode benchmark's PyTorch side (issue 38), run by hand after benchmarks/decode/decode.
  mkdir -p "$bundle/grove/benchmarks/decode"
  cp benchmarks/decode/compare_hf.py "$bundle/grove/benchmarks/decode/"
  # A benchmarks half lists no tests (Note [Steps a half bundle does not carry]): the
  # Python tests run with the tests half, which carries the CLI some of them start.
  if [ "${GROVE_BUNDLE_ONLY:-}" != benchmarks ]; then
    printf '%s\n' tests/python/*_test.py | python_tests_wanted >>"$bundle/python_tests.txt"
  fi
  # Decoders against transformers (issue 38); they run the bundle's cli/grove.
  mkdir -p "$bundle/grove/tests/serving/llm"
  cp tests/serving/llm/*.py "$bundle/grove/tests/serving/llm/"
  cp tests/serving/serve_process.py "$bundle/grove/tests/serving/"
  if [ "${GROVE_BUNDLE_ONLY:-}" != benchmarks ]; then
    # `grove serve MODEL_DIR --device cuda` (gpu_llm_http_test): 8 concurrent clients and a disconnect.
    printf '%s\n' tests/serving/llm/gpu_transformers_test.py tests/serving/llm/gpu_llm_http_test.py |
      python_tests_wanted >>"$bundle/python_tests.txt"
  fi
  # Note [A part that runs the CLI carries it]: cli/grove otherwise comes only
  # as the command tests' runfile, so a part without tests/cli (GROVE_BUNDLE_TESTS)
  # whose Python tests start the binary would fail on the GPU host with "no such
  # file" (session 19's test call: gpu_transformers_test 0 of 4). Such a part
  # builds and carries the binary itself; tools/starts_grove_cli.sh names the
  # tests that start it. Test: tests/tools/starts_grove_cli_test.sh.
  mapfile -t packed_python_tests <"$bundle/python_tests.txt"
  if [ ! -e "$bundle/grove/cli/grove" ] && [ ${#packed_python_tests[@]} -gt 0 ] &&
    tools/starts_grove_cli.sh "${packed_python_tests[@]}" | grep -q .; then
    "${bazel_cmd[@]}" build --symlink_prefix=/ -c opt --strip=always "$@" //cli:grove
    mkdir -p "$bundle/grove/cli"
    cp -L "$bin/cli/grove" "$bundle/grove/cli/grove"
    copy_system_libraries "$bin/cli/grove"
  fi
else
  echo "capi/libgrove.so" >>"$bundle/not_built.txt"
fi
cp tools/gpu_run_all.sh "$bundle/run_all.sh"
chmod +x "$bundle/run_all.sh"
git rev-parse --short HEAD >"$bundle/commit.txt" 2>/dev/null || echo unknown >"$bundle/commit.txt"

raw_kib=$(du -sk "$bundle" | cut -f1)
if [ "$raw_kib" -gt $((pack_mib * 1024)) ]; then
  echo "gpu_bundle: $((raw_kib / 1024)) MiB of files; packing them as payload.tar.xz"
  tar -C "$bundle" -cf - grove | xz -T1 --lzma2="${GROVE_BUNDLE_XZ:-preset=1,dict=1024MiB}" >"$bundle/payload.tar.xz"
  rm -rf "$bundle/grove"
fi
total_kib=$(du -sk "$bundle" | cut -f1)
if [ "$total_kib" -gt $((limit_mib * 1024)) ]; then
  echo "gpu_bundle: the bundle is $((total_kib / 1024)) MiB, over the ${limit_mib} MiB limit" >&2
  exit 1
fi
echo "gpu_bundle: $bundle holds ${#tests[@]} tests and ${#benchmarks[@]} benchmarks" \
     "($((total_kib / 1024)) MiB). On a GPU host: bash gpu_bundle/run_all.sh [--benchmarks]"
