#!/usr/bin/env bash
# Exits 0 when any of the given test source files names CUDA or a device
# parameterization, so that the test binary built from them can run something
# on a GPU host (Note [Bundle carries tests that can reach a GPU] in
# tools/gpu_bundle.sh); 1 otherwise. Files that do not exist are ignored.
#
#   tools/test_reaches_gpu.sh tests/runtime/dtype_test.cc
for file in "$@"; do
  if [ -f "$file" ] && grep -qiE 'cuda|DeviceTest|test_devices|GROVE_INSTANTIATE_DEVICE' "$file"; then
    exit 0
  fi
done
exit 1
