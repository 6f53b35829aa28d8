"""One torch_zoo model through backend="grove", with nothing else on the GPU
first (no eager reference, no reduce-overhead): the target for a kernel
profiler (ncu with --launch-count and --kernel-name), so that the first
kernels it sees are grove's own (the warm-up call, then replays).

    python3 benchmarks/zoo_replay.py --model mlp_mixer [--batch 1] [--calls 5]

Exactness is zoo_check.py's job; this only runs the calls.
"""
import argparse
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import torch_zoo  # noqa: E402  (puts python/ and tests/python on the path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True,
                        choices=[name for name, _, _ in torch_zoo.MODELS])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    from torch_backend import skipped_without_cuda_or_dynamo

    if skipped_without_cuda_or_dynamo("zoo_replay"):
        return 0
    import grove.torch  # registers the backend

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    make = {name: make for name, make, _ in torch_zoo.MODELS}[args.model]
    torch.manual_seed(0)
    module, inputs = make(args.batch)
    module = module.cuda().eval()
    inputs = tuple(value.cuda() for value in inputs)
    run = torch.compile(module, backend="grove", dynamic=False)
    with torch.no_grad():
        for _ in range(args.calls):
            run(*inputs)
    torch.cuda.synchronize()
    print("zoo_replay: %s b=%d, %d calls through grove, %d graphs compiled" % (
        args.model, args.batch, args.calls, len(grove.torch.compiled_graphs())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
