"""What one grove replay costs the host on CUDA, by graph size and kind of
node, next to PyTorch's own CUDAGraph.replay() of the same function
(issue 33, batch 1: is grove's C call the graph launch or grove's own work?).

    python3 benchmarks/door_replay_probe.py [--chains 1,8,32] [--rows 1,64] [--calls 200]

Each case is a chain of `n` matmuls (x @ w_i, then tanh) on a (rows, 256)
input with 256x256 weights bound as parameters, compiled by
grove.torch.compile_graph (cudagraphs, no dynamo). At 1 row grove computes
the GEMMs with its own small-M kernels; at 64 rows cuBLAS does, so the graph
holds library nodes. Per case, times of one call each made with the device
idle (door_call_layers' Note [Idle rows]):
  c_dlpack    grove's C call (grove_model_run_dlpack) and its DLPack outputs
  call_torch  grove.Model.call_torch (descriptions, the C call, outputs)
  torch_graph PyTorch's CUDAGraph.replay() of the function captured eagerly
and the kernels per call of each (torch.profiler). Skips without CUDA.
"""
import argparse
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "python"))
sys.path.insert(0, os.path.join(here, "..", "tests", "python"))
sys.path.insert(0, here)

WIDTH = 256


def chain(x, *weights):
    for weight in weights:
        x = torch.tanh(x @ weight)
    return x


def case(rows, length, calls):
    """{label: idle host us} and kernel counts of one chain."""
    import grove.torch
    from door_call_layers import per_call_idle
    from grove import _capi
    from grove import outputs as grove_outputs
    from torch_zoo import kernel_profile

    torch.manual_seed(0)
    weights = [torch.nn.Parameter(torch.randn(WIDTH, WIDTH, device="cuda") / 16,
                                  requires_grad=False) for _ in range(length)]
    x = torch.randn(rows, WIDTH, device="cuda")
    compiled = grove.torch.compile_graph(chain, [x] + weights)
    with torch.no_grad():
        for _ in range(3):
            compiled(x, *weights)
    fast = compiled.runner._fast
    if fast is None:
        return {"error": "not one grove segment"}
    model = fast["model"]
    inputs = [([x] + weights)[position] for position in fast["inputs"]]
    state = model._gate.state()
    count = model.describe_borrowed(state, inputs)
    run = model._run_dlpack

    def c_dlpack():
        _capi.check(run(model._handle, state.descs, model._input_counts[count], None,
                        state.managed, model._output_capacity, state.produced_ref))
        return grove_outputs.tensors_from_dlpack(state.managed, state.produced.value)

    result = {"rows": rows, "matmuls": length}
    with torch.no_grad():
        result["c_dlpack"] = per_call_idle(c_dlpack, calls)[0]
        result["call_torch"] = per_call_idle(lambda: model.call_torch(inputs, None), calls)[0]
        result["grove_kernels"] = kernel_profile(lambda *a: compiled(*a), [x] + weights).get(
            "kernels_per_call")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                chain(x, *weights)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            chain(x, *weights)
        torch.cuda.synchronize()
        result["torch_graph"] = per_call_idle(graph.replay, calls)[0]
        result["torch_kernels"] = kernel_profile(lambda *a: graph.replay(), []).get(
            "kernels_per_call")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", default="1,8,32")
    parser.add_argument("--rows", default="1,64")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("door_replay_probe: skipped: no CUDA device")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    print("%5s %8s %12s %12s %12s %8s %8s" % ("rows", "matmuls", "c_dlpack us", "call_torch us",
                                             "torch_graph", "grove k", "torch k"))
    for rows in (int(r) for r in args.rows.split(",")):
        for length in (int(n) for n in args.chains.split(",")):
            try:
                r = case(rows, length, args.calls)
            except Exception as error:  # one case failing leaves the others
                print("%5d %8d failed: %s" % (rows, length, str(error)[:200]), flush=True)
                continue
            if "error" in r:
                print("%5d %8d %s" % (rows, length, r["error"]), flush=True)
                continue
            print("%5d %8d %12.2f %12.2f %12.2f %8s %8s" % (
                rows, length, r["c_dlpack"], r["call_torch"], r["torch_graph"],
                r["grove_kernels"], r["torch_kernels"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
