"""Training through grove: the forward and backward graphs AOTAutograd
partitions are each imported (grove.importer) and compiled by grove, the
forward as the tree's forward stage and the backward as its backward stage,
so the activations the forward saves stay in grove's memory (the tree's pool
in "cudagraphs" mode) until the backward reads them.

    import grove.training
    model = grove.training.compile_module(model)              # "cudagraphs"
    loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()

PyTorch's own optimizers work unchanged: parameters are bound (viewed, never
copied; their address is checked on every call) and gradients land in their
.grad through autograd. A call with gradients disabled (torch.no_grad()
evaluation) runs an inference compilation of the same module instead.
PyTorch 1.13 takes this path through functorch's aot_module; on PyTorch 2.x
the dynamo backend "grove" takes it for graphs that need gradients
(grove.torch).
"""

import torch

from grove.training_steps import (  # noqa: F401 (part of this module's interface)
    StepCompiler,
    StepContext,
    _attention_written_out,
    aot_backend,
    math_attention,
    static_positions,
    write_out_attention,
)


class TrainingModule(torch.nn.Module):
    """A module whose calls with gradients run AOTAutograd's forward and
    backward graphs through grove; calls without gradients run an inference
    compilation of the same module (compiled once per input shape)."""

    def __init__(self, module, mode="cudagraphs", strict=False, device=None):
        super().__init__()
        try:
            from functorch.compile import aot_module
        except ImportError as error:
            raise ImportError("grove.training.compile_module needs functorch's aot_module "
                              "(PyTorch 1.13); on PyTorch 2.x use torch.compile(model, "
                              "backend=\"grove\")") from error
        self.module = module
        # PyTorch 2.x's aot_module traces with fake tensors, which hold no data
        # for the constants grove binds: import each graph on its first call.
        lazy = not torch.__version__.startswith("1.")
        self.compiler = StepCompiler(mode, strict, device, name=type(module).__name__, lazy=lazy)
        # aot_module passes the parameters, then the buffers, then the inputs.
        self.compiler.input_labels = (
            [name for name, _ in _named(module.named_parameters)]
            + [name for name, _ in _named(module.named_buffers)])
        self._options = {"mode": mode, "strict": strict, "device": device}
        self._train = aot_module(module, fw_compiler=self.compiler.forward,
                                 bw_compiler=self.compiler.backward,
                                 partition_fn=self.compiler.partition)
        self._inference = {}
        self._traced = False
        self._traced_autocast = None

    def forward(self, *args):
        if torch.is_grad_enabled() and any(p.requires_grad for p in self.module.parameters()):
            state = _autocast_state()
            if self._traced:
                if state != self._traced_autocast:
                    raise RuntimeError(_autocast_changed(self._traced_autocast, state))
                return self._train(*args)
            with _attention_written_out(self.compiler.lazy):
                result = self._train(*args)
            self._traced = True
            self._traced_autocast = state
            return result
        return self._evaluate(*args)

    def _evaluate(self, *args):
        from grove import dynamo_backend as grove_torch

        # The parameters are bound constants of the traced graph: one whose
        # memory moved (p.data = ...) needs a new compilation.
        key = (tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a
                     for a in args),
               tuple(p.data_ptr() for p in self.module.parameters()), _autocast_state())
        compiled = self._inference.get(key)
        if compiled is None:
            compiled = grove_torch.compile_graph(_Stateless(self.module), list(args),
                                                 **self._options)
            self._inference[key] = compiled
        with torch.no_grad():
            return compiled(*args)

    def mark_step_begin(self):
        self.compiler.mark_step_begin()
        for compiled in self._inference.values():
            runner = getattr(compiled, "runner", None)
            if runner is not None:
                runner.mark_step_begin()


# Note [One autocast state per training trace]: AOTAutograd's aot_module
# (PyTorch 1.13) traces on the first call and replays that trace on every
# later one, so a module traced outside torch.autocast would run in f32 inside
# it (and one traced inside would cast outside), silently. The training trace
# remembers its autocast state and a call under another is refused; inference
# compilations are keyed by it. PyTorch 2.x's dynamo guards on autocast and
# recompiles instead. Test: tests/python/training_test.py
# (AutocastStateTest).
def _autocast_state():
    from grove.step import CompiledStep

    return CompiledStep._autocast_state()


def _describe_autocast(state):
    if state is None:
        return "outside torch.autocast"
    cpu, gpu, cpu_dtype, gpu_dtype = state
    return "under torch.autocast(%s)" % ", ".join(
        "%s: %s" % (device, dtype) for device, on, dtype in (("cpu", cpu, cpu_dtype),
                                                             ("cuda", gpu, gpu_dtype)) if on)


def _autocast_changed(traced, now):
    return ("grove.training.compile_module traced this module's training step %s and is now "
            "called %s; its trace holds that state's casts. Make one compile_module per "
            "autocast state (or use torch.compile(backend=\"grove\") on PyTorch 2.x, which "
            "recompiles)" % (_describe_autocast(traced), _describe_autocast(now)))


def _named(members):
    try:
        return list(members(remove_duplicate=False))
    except TypeError:  # an older signature
        return list(members())


class _Stateless:
    """The module as a function of its inputs (its parameters become get_attr
    constants of the traced graph, bound, never copied)."""

    def __init__(self, module):
        self.module = module

    def __call__(self, *args):
        return self.module(*args)


def compile_module(module, mode="cudagraphs", strict=False, device=None):
    """The module trained through grove (PyTorch 1.13's functorch path)."""
    return TrainingModule(module, mode=mode, strict=strict, device=device)


def compile_step(model, loss_fn, optimizer, mode="cudagraphs", device=None,
                 keep_gradients=False, strict=True, process_group=None):
    """The whole training step (forward, loss, backward, optimizer step) as
    grove graphs replayed back to back, the gradients kept in grove
    (grove/step.py): loss_fn(forward, *batch) returns the loss, where
    forward(*args) calls the model; the result takes a batch and returns
    the loss; process_group: data parallel over a torch.distributed group.
    A DistributedDataParallel model (PyTorch's or grove.torch's) trains as
    its module with the gradients averaged over its group."""
    from grove import step

    model, process_group = _unwrapped_data_parallel(model, process_group)
    return step.compile_step(model, loss_fn, optimizer, mode=mode, device=device,
                             keep_gradients=keep_gradients, strict=strict,
                             process_group=process_group)


def _unwrapped_data_parallel(model, process_group):
    """(module, group) of a DistributedDataParallel model: compile_step's
    data parallel averages the gradients over the group as DDP would (its
    parameters were broadcast from rank 0 when it was wrapped); any other
    model is returned as it is."""
    from torch.nn.parallel import DistributedDataParallel as TorchDistributedDataParallel

    if isinstance(model, TorchDistributedDataParallel):
        group, broadcasts = model.process_group, model.broadcast_buffers
    elif getattr(type(model), "grove_data_parallel", False):  # grove.torch.DistributedDataParallel
        import torch.distributed as dist

        group, broadcasts = dist.group.WORLD, model.broadcast_buffers
    else:
        return model, process_group
    what = "grove.training.compile_step of a %s" % type(model).__name__
    if process_group is not None and process_group is not group:
        raise ValueError("%s: the model's process group is its own; pass no other "
                         "process_group" % what)
    if broadcasts and any(True for _ in model.module.buffers()):
        raise ValueError("%s with buffers: the whole step does not broadcast rank 0's buffers "
                         "before each forward; wrap with broadcast_buffers=False, or pass the "
                         "module and process_group" % what)
    return model.module, group
