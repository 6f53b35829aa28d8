"""GPU time of grove's GEMMs of 1 to 64 rows, per shape and kernel choice, in
one process (Note [Small-M tiled GEMM] in runtime/cuda/small_m_tiled_gemm.h).

    python3 benchmarks/small_m_gemm_probe.py [--shapes 16x512x512,...] [--layers 8]
        [--variants auto,notiled,library,t8x2] [--json out.json]

Each shape MxKxN[:dtype][:epilogue] (dtype f32 | bf16 | f16, epilogue bias |
gelu | relu | none; default f32 and bias) becomes a grove program of --layers
linear layers with weights of their own (chained when K = N, as an MLP's, else
all reading the same input), compiled for cudagraphs on cuda:0 and timed from
C++ (Model.time_runs: graph replays, no Python), so each row is the GPU time of
one layer's GEMM plus its share of a replay. Variants set the environment
before their compile (the selection reads it then, and keys its measurements
by it):
  auto      the default: the tuning times grove's generated kernel, cuda's
            tiled kernel and cuBLAS per shape and keeps the fastest;
  notiled   GROVE_SMALL_M_TILED=0 (session 20's choice: generated or cuBLAS);
  library   GROVE_SMALL_M_GEMM=off and GROVE_SMALL_M_TILED=0 (cuBLAS only);
  generated GROVE_SMALL_M_GEMM=on and GROVE_SMALL_M_TILED=0 (the generated
            kernel's default variant up to 32 rows, unmeasured: for ncu);
  tRxC      GROVE_SMALL_M_TILED=RxC (or tRxCxW): that tile of the tiled kernel, forced.
torch eager (F.linear on the same weights, in a CUDA graph) is the first column.
Every variant's output is compared with torch's (max |difference| printed).
Ends with the tuning table's entries for the shapes (grove / tiled / library us).
"""
import argparse
import json
import os
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "python"))

DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}
DEFAULT_SHAPES = ("1x512x512,16x512x512:f32:gelu,64x512x512:f32:gelu,16x512x2048,16x2048x512,"
                  "32x256x768,16x512x512:bf16:none")


def parse_shape(text):
    parts = text.split(":")
    m, k, n = (int(v) for v in parts[0].split("x"))
    dtype = parts[1] if len(parts) > 1 else "f32"
    epilogue = parts[2] if len(parts) > 2 else "bias"
    if dtype not in DTYPES or epilogue not in ("bias", "gelu", "relu", "none"):
        raise SystemExit("small_m_gemm_probe: bad shape %r (MxKxN[:f32|bf16|f16][:bias|gelu|"
                         "relu|none])" % text)
    return m, k, n, dtype, epilogue


def program(m, k, n, dtype, epilogue, layers):
    chained = k == n
    params, nodes = [], []
    source = "x"
    outputs = []
    for i in range(layers):
        params.append({"name": "w%d" % i, "shape": [n, k], "dtype": dtype,
                       "init": {"kind": "zeros"}})
        operands = [source if chained else "x", "w%d" % i]
        if epilogue != "none":
            params.append({"name": "b%d" % i, "shape": [n], "dtype": dtype,
                           "init": {"kind": "zeros"}})
            operands.append("b%d" % i)
        nodes.append({"name": "fc%d" % i, "op": "linear", "inputs": operands})
        result = "fc%d" % i
        if epilogue in ("gelu", "relu"):
            nodes.append({"name": "act%d" % i, "op": epilogue, "inputs": [result]})
            result = "act%d" % i
        source = result
        if not chained:
            outputs.append(result)
    return {"name": "probe_%dx%dx%d" % (m, k, n), "dims": {},
            "inputs": [{"name": "x", "shape": [m, k], "dtype": dtype}],
            "params": params, "buffers": [], "nodes": nodes,
            "outputs": [source] if chained else outputs}


def torch_reference(torch, weights, x, k, n, epilogue, layers):
    import torch.nn.functional as F

    def run():
        source = x
        outs = []
        for i in range(layers):
            y = F.linear(source if k == n else x, weights["w%d" % i], weights.get("b%d" % i))
            if epilogue == "gelu":
                y = F.gelu(y, approximate="tanh")
            elif epilogue == "relu":
                y = F.relu(y)
            source = y
            outs.append(y)
        return outs[-1] if k == n else outs
    return run


def graph_us(torch, run, repeats=50):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        run()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            run()
    graph.replay()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = 1e30
    for _ in range(3):
        start.record()
        for _ in range(repeats):
            graph.replay()
        stop.record()
        stop.synchronize()
        best = min(best, 1000.0 * start.elapsed_time(stop) / repeats)
    return best


VARIANT_ENV = {"auto": {}, "notiled": {"GROVE_SMALL_M_TILED": "0"},
               "generated": {"GROVE_SMALL_M_GEMM": "on", "GROVE_SMALL_M_TILED": "0"},
               "library": {"GROVE_SMALL_M_GEMM": "off", "GROVE_SMALL_M_TILED": "0"}}


def variant_env(name):
    if name in VARIANT_ENV:
        return VARIANT_ENV[name]
    if name.startswith("t") and "x" in name:
        return {"GROVE_SMALL_M_TILED": name[1:]}
    raise SystemExit("small_m_gemm_probe: unknown variant %r (auto, notiled, library, tRxC)"
                     % name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--variants", default="auto,notiled,library")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("small_m_gemm_probe: skipped (no CUDA device)")
        return 0
    if "GROVE_CACHE_DIR" not in os.environ:
        os.environ["GROVE_CACHE_DIR"] = tempfile.mkdtemp(prefix="grove_probe_")
    import grove

    torch.backends.cuda.matmul.allow_tf32 = False
    variants = args.variants.split(",")
    print("%-26s %9s " % ("shape (per layer, us)", "torch") +
          " ".join("%14s" % v for v in variants))
    rows = []
    for text in args.shapes.split(","):
        m, k, n, dtype, epilogue = parse_shape(text)
        tdtype = getattr(torch, DTYPES[dtype])
        gen = torch.Generator(device="cuda").manual_seed(m * 1000 + n)
        weights = {}
        for i in range(args.layers):
            weights["w%d" % i] = (torch.rand(n, k, device="cuda", generator=gen, dtype=tdtype)
                                  - 0.5) * (2.0 / k ** 0.5)
            if epilogue != "none":
                weights["b%d" % i] = (torch.rand(n, device="cuda", generator=gen,
                                                 dtype=tdtype) - 0.5) * 0.1
        x = torch.randn(m, k, device="cuda", generator=gen, dtype=tdtype)
        run = torch_reference(torch, weights, x, k, n, epilogue, args.layers)
        with torch.no_grad():
            expected = run()
            torch_us = graph_us(torch, run) / args.layers
        expected = [expected] if k == n else expected
        row = {"shape": text, "torch_us": torch_us}
        cells = []
        for variant in variants:
            saved = {key: os.environ.get(key) for key in variant_env(variant)}
            os.environ.update(variant_env(variant))
            try:
                model = grove.compile(program(m, k, n, dtype, epilogue, args.layers),
                                      backend="cudagraphs", device="cuda:0", params=weights)
                model(x)  # warm-up; the second call runs the recorded graph
                diff = max((a.double() - b.double()).abs().max().item()
                           for a, b in zip(model(x), expected))
                torch.cuda.synchronize()
                us = 1e6 * model.time_runs(x, calls=args.calls) / args.layers
                row[variant] = {"us": us, "max_diff": diff}
                cells.append("%6.2f (%6.0e)" % (us, diff))
                model.close()
            except Exception as error:  # one variant's failure must not hide the others
                row[variant] = {"error": str(error)[:300]}
                cells.append("%14s" % "error")
                print("  %s %s: %s" % (text, variant, str(error)[:300]))
            finally:
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
        rows.append(row)
        print("%-26s %9.2f " % (text, torch_us) + " ".join(cells), flush=True)
    table = os.path.join(os.environ["GROVE_CACHE_DIR"], "gemm_tuning.json")
    if os.path.exists(table):
        entries = json.load(open(table))["entries"]
        for key, entry in sorted(entries.items()):
            print("  tuned %-78s grove %6.2f (%dx%d) tiled %6.2f (%dx%dx%d) lib %6.2f" % (
                key.split("|", 1)[1][:78], entry["grove_us"], entry.get("grove_rows", 0),
                entry.get("grove_columns", 1), entry.get("tiled_us", 0),
                entry.get("tiled_rows", 0), entry.get("tiled_columns", 0),
                entry.get("tiled_warps", 0), entry["library_us"]))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"layers": args.layers, "rows": rows,
                       "device": torch.cuda.get_device_name()}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
