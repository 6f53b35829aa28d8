#!/usr/bin/env bash
# Runs serve_http on sim with a small max batch, one low rate and short runs;
# checks a row per backend and encoding, no errors, the comparison table and
# the JSON; then the same with --binary on gelu512 (benchmarks/serve_http/models);
# then gRPC and JSON with connections held open.
set -euo pipefail
binary="benchmarks/serve_http/serve_http"
json="${TEST_TMPDIR:-/tmp}/serve_http.json"
output=$("$binary" --device sim --rates 40 --max-batches 4 --clients 4 --duration-ms 500 \
  --max-wait-us 2000 --encodings json,binary --held-rates none --json "$json")
echo "$output"
for backend in eager cudagraphs; do
  for encoding in json binary; do
    grep -Eq "^ +4 +$backend +$encoding +40 " <<<"$output" ||
      { echo "missing row for $backend, $encoding" >&2; exit 1; }
  done
done
grep -q "best answered/s, cudagraphs over eager" <<<"$output" ||
  { echo "missing comparison table" >&2; exit 1; }
python3 - "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
runs = report["results"]
assert len(runs) == 4, f"expected 4 runs, found {len(runs)}"
assert sorted(run["encoding"] for run in runs) == ["binary", "binary", "json", "json"], runs
for run in runs:
    assert run["errors"] == 0, run
    assert run["answered"] + run["rejected"] == run["sent"], run
    assert run["answered"] > 0 and "latency" in run, run
    front = run["front_threads"]
    assert 0 <= front["user_share"] <= 1 and front["voluntary_switches_per_answer"] >= 0, run
graphs = [s for s in report["servers"] if s["backend"] == "cudagraphs"][0]
assert graphs["backend_snapshots"][0]["tree"]["replays"] > 0, graphs
PY
output=$("$binary" --device sim --models benchmarks/serve_http/models --model gelu512 --binary \
  --rates 200 --max-batches 8 --clients 8 --duration-ms 300 --backends cudagraphs --held-rates none)
echo "$output"
grep -Eq "^ +8 +cudagraphs +binary +200 +[0-9]+ +[0-9]+ +0 +0 " <<<"$output" ||
  { echo "missing or failing --binary row" >&2; exit 1; }
# gRPC beside JSON, each also with 40 idle and 8 slowloris connections held open.
output=$("$binary" --device sim --models benchmarks/serve_http/models --model gelu512 \
  --encodings grpc,json --rates 200 --max-batches 8 --clients 4 --grpc-clients 4 --duration-ms 300 \
  --backends eager --idle-connections 40 --slowloris-connections 8 --trickle-ms 20)
echo "$output"
for encoding in grpc json; do
  grep -Eq "^ +8 +eager +$encoding +200 +[0-9]+ +[0-9]+ +0 +0 +.* +40 idle \+ 8 slow *$" <<<"$output" ||
    { echo "missing or failing held-open $encoding row" >&2; exit 1; }
  grep -Eq "^ +8 +eager +$encoding +200 +[0-9]+ +[0-9]+ +0 +0 " <<<"$output" ||
    { echo "missing or failing $encoding row" >&2; exit 1; }
done
grep -q "p99 with 40 idle + 8 slow connections held open over p99 without" <<<"$output" ||
  { echo "missing held-open table" >&2; exit 1; }
# Three connections per client (Note [Requests in flight per client]), HTTP and gRPC.
output=$("$binary" --device sim --models benchmarks/serve_http/models --model gelu512 \
  --encodings json,grpc --rates 300 --max-batches 8 --clients 2 --connections 3 \
  --grpc-clients 2 --grpc-connections 3 --duration-ms 300 \
  --backends eager --warmup-ms 0)
echo "$output"
for encoding in json grpc; do
  grep -Eq "^ +8 +eager +$encoding +300 +[0-9]+ +[0-9]+ +0 +0 " <<<"$output" ||
    { echo "missing or failing $encoding row with --connections 3" >&2; exit 1; }
done
# The default held-open measure (10,000 idle + 500 slowloris at 32,000/s, cudagraphs), scaled
# down: held rows only at the --held-rates rate, only for the --held-backends backend.
output=$("$binary" --device sim --models benchmarks/serve_http/models --model gelu512 \
  --encodings json --rates 100,200 --max-batches 8 --clients 2 --duration-ms 300 \
  --idle-connections 30 --slowloris-connections 4 --trickle-ms 20 --held-rates 200 \
  --held-backends cudagraphs)
echo "$output"
grep -Eq "^ +8 +cudagraphs +json +200 +[0-9]+ +[0-9]+ +0 +0 +.* +30 idle \+ 4 slow *$" <<<"$output" ||
  { echo "missing held-open row at the --held-rates rate" >&2; exit 1; }
if grep -Eq "^ +8 +(eager +json +200|cudagraphs +json +100) .* slow *$" <<<"$output"; then
  echo "held-open row outside --held-rates / --held-backends" >&2; exit 1
fi
# A held rate that --rates lacks is still run, alone and held open (Note [Held rates run whatever
# --rates says]); session 17's final lease measured no held connections for want of it.
output=$("$binary" --device sim --models benchmarks/serve_http/models --model gelu512 \
  --encodings json --rates 100 --max-batches 8 --clients 2 --duration-ms 300 \
  --idle-connections 30 --slowloris-connections 4 --trickle-ms 20 --held-rates 200 \
  --held-backends cudagraphs)
echo "$output"
grep -Eq "^ +8 +cudagraphs +json +200 +[0-9]+ +[0-9]+ +0 +0 +.* +30 idle \+ 4 slow *$" <<<"$output" ||
  { echo "missing held-open row at a --held-rates rate outside --rates" >&2; exit 1; }
grep -Eq "^ +8 +cudagraphs +json +200 +[0-9]+ +[0-9]+ +0 +0 +.*[0-9.]+ / [0-9.]+ / [0-9.]+ *$" <<<"$output" ||
  { echo "missing run alone at a --held-rates rate outside --rates" >&2; exit 1; }
grep -Eq "^ +8 +cudagraphs +json +200 .* (met|missed) *$" <<<"$output" ||
  { echo "missing held-open comparison row" >&2; exit 1; }
if grep -Eq "^ +8 +eager +json +200 " <<<"$output"; then
  echo "eager ran the held rate though --held-backends is cudagraphs" >&2; exit 1
fi
# Held runs repeated (Note [Held verdict from repeats]): alone and held twice each, the verdict
# from the medians, each run's tail and the trickle bursts (Note [Where the tail arrived]).
json_repeats="${TEST_TMPDIR:-/tmp}/serve_http_repeats.json"
output=$("$binary" --device sim --models benchmarks/serve_http/models --model gelu512 \
  --encodings json --rates 200 --max-batches 8 --clients 2 --duration-ms 300 \
  --idle-connections 30 --slowloris-connections 4 --trickle-ms 20 --trickle-groups 2 \
  --held-rates 200 --held-backends cudagraphs --held-repeats 2 --warmup-ms 100 --json "$json_repeats")
echo "$output"
[ "$(grep -Ec "^ +8 +cudagraphs +json +200 .* 30 idle \+ 4 slow *$" <<<"$output")" = 2 ] ||
  { echo "expected two held-open rows with --held-repeats 2" >&2; exit 1; }
grep -Eq "^ +8 +cudagraphs +json +200 +[0-9]+ +[0-9]+ +[0-9.]+x +[0-9]+, [0-9]+ +[0-9]+, [0-9]+ " \
  <<<"$output" || { echo "missing held verdict with two p99s each" >&2; exit 1; }
[ "$(grep -Ec "^  8 cudagraphs json 200/s (held |alone) #[01]: [0-9]+ >= " <<<"$output")" = 4 ] ||
  { echo "expected four tail lines" >&2; exit 1; }
python3 - "$json_repeats" <<'PY'
import json, statistics, sys
report = json.load(open(sys.argv[1]))
verdicts = report["held_verdicts"]
assert report["held_repeats"] == 2 and len(verdicts) == 1, verdicts
assert report["warmup_ms"] == 100, report["warmup_ms"]
# The warm-up runs are no rows: eager's run, then cudagraphs alone and held per repeat.
assert len(report["results"]) == 5, [(r["backend"], r.get("held_open")) for r in report["results"]]
v = verdicts[0]
assert len(v["p99_us_alone_runs"]) == 2 and len(v["p99_us_held_runs"]) == 2, v
assert v["p99_us_held_median"] == statistics.median(v["p99_us_held_runs"]), v
held = [r for r in report["results"] if r.get("held_open")]
assert sorted(r["repeat"] for r in held) == [0, 1], held
for r in held:
    assert r["tail"]["count"] >= 1 and r["tail"]["bins_10ms"] >= 1, r
    # 300 ms held at 20 ms a period in two groups: bursts every 10 ms inside the window.
    assert len(r["trickle_bursts_ms"]) >= 10, r["trickle_bursts_ms"]
PY
if "$binary" --grpc-clients 0 >/dev/null 2>&1; then echo "--grpc-clients 0 was accepted" >&2; exit 1; fi
if "$binary" --clients 0 >/dev/null 2>&1; then echo "--clients 0 was accepted" >&2; exit 1; fi
if "$binary" --held-rates fast >/dev/null 2>&1; then echo "--held-rates fast was accepted" >&2; exit 1; fi
if "$binary" --encodings xml >/dev/null 2>&1; then echo "--encodings xml was accepted" >&2; exit 1; fi
echo "ok"
