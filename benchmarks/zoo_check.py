"""grove against eager PyTorch on torch_zoo's models (GPU, f32, TF32 off):
each model compiled with backend="grove" at the batches given, three calls
(warm-up, recording, replay) compared with eager on the same inputs (the
largest difference over the reference's largest magnitude), and grove's
lowered kernels per call printed. A quick check of lowering changes on the
zoo's own shapes (gpu_zoo_test covers the models at batch 2 in both dtypes).

    python3 benchmarks/zoo_check.py [--models gpt2,llama] [--batches 1,16] [--lowered DIR]

--lowered DIR writes each model's lowered steps (the backend stats'
"lowered" text: one line per kernel, GEMM, view and launch, with the node it
comes from) to DIR/MODEL_bBATCH.txt, for kernel-by-kernel diagnosis.
"""
import argparse
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import torch_zoo  # noqa: E402  (puts python/ and tests/python on the path)

TOLERANCE = 2e-3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,llama,bert,bart,vit,resnet18,mlp_mixer,"
                                            "transformer_decoder")
    parser.add_argument("--batches", default="1")
    parser.add_argument("--lowered", default="", help="write each model's lowered steps here")
    args = parser.parse_args()
    from torch_backend import skipped_without_cuda_or_dynamo

    if skipped_without_cuda_or_dynamo("zoo_check"):
        return 0
    import grove.torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    makers = {name: make for name, make, _ in torch_zoo.MODELS}
    failed = 0
    for name in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            torch.manual_seed(0)
            try:
                module, inputs = makers[name](batch)
                module = module.cuda().eval()
                inputs = tuple(value.cuda() for value in inputs)
                torch._dynamo.reset()
                # Held, so that no new graph can take a dead one's id.
                earlier_graphs = grove.torch.compiled_graphs()
                earlier = {id(graph) for graph in earlier_graphs}
                run = torch.compile(module, backend="grove", dynamic=False)
                worst = 0.0
                with torch.no_grad():
                    expected = module(*inputs)
                    scale = expected.abs().max().item() or 1.0
                    for _ in range(3):
                        worst = max(worst, (run(*inputs) - expected).abs().max().item() / scale)
                kernels = []
                lowered = []
                for graph in grove.torch.compiled_graphs():
                    if id(graph) in earlier:
                        continue  # an earlier model's graph (this one's are new)
                    for model in getattr(graph.runner, "models", lambda: [])():
                        for program in model.stats()["programs"]:
                            lowered.append(program["lowered"])
                            lines = program["lowered"].splitlines()
                            kernels.append("%d kernels + %d GEMMs" % (
                                sum(line.strip().startswith("kernel") for line in lines),
                                sum(line.strip().startswith("gemm") for line in lines)))
                if args.lowered:
                    os.makedirs(args.lowered, exist_ok=True)
                    with open(os.path.join(args.lowered, "%s_b%d.txt" % (name, batch)), "w") as out:
                        out.write("\n".join(lowered))
                ok = worst <= TOLERANCE
                failed += not ok
                print("%-20s b=%-3d %s  max |grove - eager| / max |eager| = %.2e; %s" % (
                    name, batch, "ok  " if ok else "FAIL", worst, ", ".join(kernels)),
                    flush=True)
            except Exception as error:
                failed += 1
                print("%-20s b=%-3d FAIL %s: %s" % (name, batch, type(error).__name__,
                                                    str(error)[:300]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
