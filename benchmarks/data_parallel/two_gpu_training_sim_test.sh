#!/usr/bin/env bash
# two_gpu_training.sh with DEVICE=sim (what CI can run): its first part runs
# data_parallel on 1 and 2 sim ranks and prints both rows with the collectives
# captured; its second part (torchrun, 2 CUDA devices) says it is skipped.
set -euo pipefail
out="${TEST_TMPDIR:-/tmp}/two_gpu_training"
output=$(DEVICE=sim OUT="$out" DATA_PARALLEL=benchmarks/data_parallel/data_parallel \
  bash benchmarks/data_parallel/two_gpu_training.sh)
echo "$output"
for devices in 1 2; do
  grep -Eq "^gpt4x256 b=1 T=4 +cudagraphs +$devices .* yes$" <<<"$output" ||
    { echo "missing the cudagraphs row on $devices sim rank(s)" >&2; exit 1; }
done
grep -q "^rc=0$" <<<"$output" || { echo "data_parallel failed" >&2; exit 1; }
grep -q "skipped: DEVICE=sim" <<<"$output" || { echo "part 2 did not say it was skipped" >&2; exit 1; }
[ -s "$out/data_parallel_2gpu.json" ] || { echo "no JSON written" >&2; exit 1; }
echo "ok"
