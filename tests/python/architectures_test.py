"""CI's counterpart of gpu_zoo_test.py: the zoo's architectures in plain
PyTorch (tests/python/architectures.py), traced with make_fx (torch 1.13) and
run on sim through the importer in both modes, outputs uncopied as the door
leaves them on PyTorch >= 2.1. Every call (warm-up, recording, three
replays; float inputs fresh on every other call) is compared with PyTorch
eager: f32 within 1e-4 of the reference's largest magnitude, bf16 within
4e-2; cudagraphs equals grove eager bitwise. The ops each model leaves to
PyTorch are printed (the splits are part of what is tested)."""
import os
import sys
import unittest

import torch
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import architectures  # noqa: E402
from grove import importer  # noqa: E402
import junit_main  # noqa: E402

TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 4e-2}
CALLS = 5


def relative_error(result, expected):
    scale = max(expected.float().abs().max().item(), 1e-6)
    return (result.float() - expected.float()).abs().max().item() / scale


class RealArchitectureTest(unittest.TestCase):
    def check(self, name, module, inputs, dtype):
        module = module.to(dtype)
        inputs = [value.to(dtype) if value.is_floating_point() else value for value in inputs]
        with torch.no_grad():
            graph = make_fx(module)(*inputs)
        plan = importer.import_graph(graph, inputs, name=name)
        print("%s %s: ops run in PyTorch: %s" % (
            name, dtype, sorted({op for _, op, _ in plan.unsupported}) or "none"))
        torch.manual_seed(1)
        calls = []
        for call in range(CALLS):
            calls.append([torch.randn_like(value) if value.is_floating_point() and call % 2
                          else value for value in inputs])
        results = {}
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend, output_copies=lambda node: False)
            for call, arguments in enumerate(calls):
                with torch.no_grad():
                    expected = module(*arguments)
                result = runner(*arguments).clone()
                error = relative_error(result, expected)
                self.assertLessEqual(error, TOLERANCE[dtype], "%s %s %s call %d: error %.3g" % (
                    name, dtype, backend, call, error))
                results[(backend, call)] = result
        for call in range(CALLS):
            self.assertTrue(torch.equal(results[("eager", call)], results[("cudagraphs", call)]),
                            "%s %s call %d: cudagraphs differs from grove eager" % (
                                name, dtype, call))


def _add_cases():
    for index, (name, _, _) in enumerate(architectures.cases()):
        for dtype in (torch.float32, torch.bfloat16):
            def case(self, index=index, dtype=dtype):
                name, module, inputs = architectures.cases()[index]
                self.check(name, module, inputs, dtype)
            case.__name__ = "test_%s_%s" % (name, str(dtype).split(".")[-1])
            setattr(RealArchitectureTest, case.__name__, case)


_add_cases()

if __name__ == "__main__":
    junit_main.main()
