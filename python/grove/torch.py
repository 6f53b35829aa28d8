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
device (default: cuda:N for CUDA inputs, sim for CPU tensors). Inference only:
a graph that needs gradients runs in PyTorch (strict raises). Each input shape
PyTorch guards on is one compilation; symbolic shapes (dynamic=True) run in
PyTorch, so pass dynamic=False for one grove graph per shape.
"""

import logging
import weakref

import torch

from grove import importer

log = importer.log

_MODES = {"cudagraphs": "cudagraphs", "eager": "eager"}
_OPTIONS = ("mode", "strict", "device")
_live_runners = weakref.WeakSet()
_compiled = []  # weak references to every CompiledGraph, oldest first


def compiled_graphs():
    """The graphs this backend compiled that are still alive, oldest first."""
    alive = [reference() for reference in _compiled]
    _compiled[:] = [reference for reference, graph in zip(list(_compiled), alive)
                    if graph is not None]
    return [graph for graph in alive if graph is not None]


def mark_step_begin():
    """Starts a new step for every graph grove compiled: outputs of earlier
    calls may be overwritten by later ones (torch.compiler.cudagraph_mark_step_begin)."""
    for runner in list(_live_runners):
        runner.mark_step_begin()


class _Fallback(Exception):
    pass


def _static_positions(example_inputs):
    positions = []
    for index, value in enumerate(example_inputs):
        if isinstance(value, torch.nn.Parameter) or getattr(
                value, "_dynamo_static_input_type", None) is not None:
            positions.append(index)
    return positions


def _aten_graph(gm, example_inputs):
    from torch.fx.experimental.proxy_tensor import make_fx

    with torch.no_grad():
        return make_fx(gm)(*example_inputs)


class CompiledGraph:
    """What the backend returns to dynamo: a callable over the graph's inputs."""

    def __init__(self, runner):
        self.runner = runner
        _live_runners.add(runner)
        _compiled.append(weakref.ref(self))

    def __call__(self, *args):
        if self.runner._fast is not None:
            return self.runner(*args)  # grove alone: no autograd to switch off
        with torch.no_grad():
            return self.runner(*args)

    @property
    def unsupported(self):
        return self.runner.unsupported


def compile_graph(gm, example_inputs, mode="cudagraphs", strict=False, device=None):
    """Compiles an fx GraphModule for its example inputs; the backend's work."""
    if mode not in _MODES:
        raise ValueError("grove: option mode=%r; use 'cudagraphs' or 'eager'" % (mode,))
    try:
        for index, value in enumerate(example_inputs):
            if not isinstance(value, torch.Tensor):
                raise _Fallback("input %d is a %s, not a tensor (symbolic shapes: pass "
                                "dynamic=False)" % (index, type(value).__name__))
        if torch.is_grad_enabled() and any(
                value.requires_grad and not isinstance(value, torch.nn.Parameter)
                for value in example_inputs):
            raise _Fallback("an input requires grad; grove's backend is for inference")
    except _Fallback as reason:
        if strict:
            raise importer.StrictModeError("grove (strict): %s" % reason) from None
        log.info("graph runs in PyTorch: %s", reason)
        return gm.forward
    if device is None:
        cuda = [value for value in example_inputs if value.is_cuda]
        device = "cuda:%d" % (cuda[0].device.index or 0) if cuda else "sim"
    aten = _aten_graph(gm, example_inputs)
    plan = importer.import_graph(aten, example_inputs, static_inputs=_static_positions(
        example_inputs), strict=strict, name="torch_graph")
    for node_name, op, reason in plan.unsupported:
        log.info("unsupported op %s at node '%s' runs in PyTorch (%s)", op, node_name, reason)
    return CompiledGraph(plan.compile(backend=_MODES[mode], device=device))


def grove_backend(gm, example_inputs, options=None, **kwargs):
    """The dynamo backend "grove" (torch.compile(model, backend="grove", options={...}))."""
    options = dict(options or {})
    options.update(kwargs)
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ValueError("grove: unknown option(s) %s (known: %s)" % (", ".join(unknown),
                                                                      ", ".join(_OPTIONS)))
    return compile_graph(gm, example_inputs, **options)


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
