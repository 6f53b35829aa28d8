"""grove as a torch.compile backend.

    import grove.torch
    model = torch.compile(model, backend="grove")                       # cudagraphs
    model = torch.compile(model, backend="grove", options={"mode": "eager"})
    grove.torch.mark_step_begin()

The backend traces the graph dynamo hands it down to ATen (make_fx), imports
it (grove.importer: supported regions become grove programs, the rest runs in
PyTorch) and runs it through the C API on the caller's own tensors: inputs
and parameters are viewed, never copied, and outputs come back through DLPack.
Parameters (nn.Parameter inputs, and get_attr tensors) are bound to the grove
programs as params: their address is checked on every call.

Options: mode "cudagraphs" (default) or "eager"; strict (default False) raises
naming the first op grove cannot take instead of running it in PyTorch;
device (default: cuda:N for CUDA inputs, sim for CPU tensors); verify
(default: GROVE_VERIFY) checks each inference graph's warm-up, recording and
first replay against PyTorch eager, segment by segment (Note [Verify mode],
grove/verify.py). A graph that
needs gradients goes through AOTAutograd: grove compiles its forward and
backward as the tree's stages (grove.training). Each input shape
PyTorch guards on is one compilation; a graph with symbolic sizes
(dynamic=True, or dynamo's automatic dynamic shapes) is compiled once per
concrete shape it is called with (PerShapeGraph), one CUDA graph per shape in
the tree.
"""

import logging

from grove import optim  # noqa: F401 (grove.torch.optim: SGD, AdamW)
from grove.dynamo_backend import (  # noqa: F401 (grove.torch's interface)
    CompiledGraph,
    PerShapeGraph,
    _live_runners,
    compile_graph,
    compiled_graphs,
    grove_backend,
    mark_step_begin,
)


def _register():
    try:
        from torch._dynamo.backends.registry import register_backend
    except ImportError:  # PyTorch without dynamo (1.x): call grove_backend directly
        return False
    try:
        register_backend(compiler_fn=grove_backend, name="grove")
    except Exception as error:  # already registered by an earlier import
        logging.getLogger("grove").debug("backend 'grove' not registered again: %s", error)
    return True


registered = _register()


# Note [PyTorch's mark_step_begin starts grove's steps too]: code written for
# reduce-overhead calls torch.compiler.cudagraph_mark_step_begin() before each
# step (PyTorch's own warnings ask for it: a forward whose backward never
# runs, outputs kept across steps). Under backend="grove" that call reached
# only PyTorch's trees. It now also starts a step of every graph grove
# compiled (mark_step_begin), so such code needs no change. Bound where
# torch.compiler is looked up at the call (torch.compiler.cudagraph_mark_step_begin()),
# not in names imported from it before grove.torch. Test:
# TorchBackendTest.test_pytorchs_mark_step_begin_starts_groves_steps
# (tests/python/importer_test.py, PyTorch >= 2.1).
def _follow_pytorchs_mark_step_begin():
    import torch

    compiler = getattr(torch, "compiler", None)
    original = getattr(compiler, "cudagraph_mark_step_begin", None)
    if original is None or getattr(original, "grove_follows", False):
        return

    def cudagraph_mark_step_begin():
        original()
        mark_step_begin()

    cudagraph_mark_step_begin.__doc__ = original.__doc__
    cudagraph_mark_step_begin.grove_follows = True
    compiler.cudagraph_mark_step_begin = cudagraph_mark_step_begin


_follow_pytorchs_mark_step_begin()

from grove.ddp import DistributedDataParallel  # noqa: E402,F401 (grove.torch.DistributedDataParallel)

from grove import exit_release  # noqa: E402 (Note [Door state released at exit])

exit_release.install()
