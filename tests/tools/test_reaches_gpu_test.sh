#!/usr/bin/env bash
# tools/test_reaches_gpu.sh keeps a test binary in the GPU bundle when a source
# names CUDA or a device parameterization, and leaves a host-only one out.
set -euo pipefail
script="$TEST_SRCDIR/grove/tools/test_reaches_gpu.sh"
dir=$(mktemp -d)
printf 'TEST(Parse, Json) { EXPECT_EQ(1, 1); }\n' >"$dir/host_only_test.cc"
printf 'class T : public grove::testing::DeviceTest {};\n' >"$dir/device_test.cc"
printf 'if (runtime::kCudaDevice.available()) {}\n' >"$dir/names_cuda_test.cc"
fail() { echo "FAIL: $*"; exit 1; }
"$script" "$dir/host_only_test.cc" && fail "a host-only source was said to reach a GPU"
"$script" "$dir/device_test.cc" || fail "a DeviceTest source was left out"
"$script" "$dir/names_cuda_test.cc" || fail "a source naming cuda was left out"
"$script" "$dir/host_only_test.cc" "$dir/device_test.cc" || fail "one reaching source of two was missed"
"$script" "$dir/missing.cc" && fail "a missing file was said to reach a GPU"
echo "PASS: test_reaches_gpu.sh"
