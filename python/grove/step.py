"""The whole training step in grove: forward, loss and backward traced as one
graph (make_fx of the loss and torch.autograd.grad), the optimizer as grove's
update program, replayed back to back in one generation of grove's trees, one
C call each. The gradients stay in grove's memory (the joint graph's outputs,
read in place by the update: Note [Saved values kept in grove],
capi/kept_values.cc); nothing lands in .grad.

    step = grove.training.compile_step(model, lambda model, x, y: F.mse_loss(model(x), y),
                                       torch.optim.AdamW(model.parameters(), lr=1e-3))
    for x, y in data:
        loss = step(x, y)

Optimizers: grove.optim's SGD and AdamW, and PyTorch's SGD and AdamW, whose
step is run as grove's fused update (sgd_momentum_update, adamw_update) with
the hyper-parameters read from the PyTorch optimizer's param group at every
step (so learning-rate schedulers work); one param group, no Nesterov,
dampening, amsgrad or maximize; the optimizer's state starts from zero (pass a
fresh optimizer). Under torch.autocast the step is traced with autocast's
casts (one compilation per autocast state).
"""

import torch

import grove
from grove import _capi
from grove import handoff
from grove import importer
from grove import optim as grove_optim
from grove import training_steps


_BY_DEVICE = hasattr(torch, "get_autocast_dtype")


def _switch_on(name):
    """Whether the step switch `name` (on unless "0") is on; a value other
    than 0 or 1 raises ValueError. Read when a step compiles."""
    import os

    value = os.environ.get(name, "1")
    if value not in ("0", "1"):
        raise ValueError("grove: %s=%r; use 1 or 0" % (name, value))
    return value == "1"


# Note [GEMMs of the whole step by measurement]: the step's program compiles
# with the compile option gemm_search, so on cuda its library GEMMs take the
# fastest of cuBLASLt's candidates, timed once per process and shape (Note
# [GEMM algorithms by measurement], runtime/cuda/gemm_algorithm_search.h), for
# this program alone: inference models keep the heuristic's first, which
# session 18 measured faster in ViT. Eager warm-up and the captured replays
# run the same plan, so cudagraphs still equals eager; the losses differ from
# the heuristic's in the last bits (split-K sums f32 in another order).
# Measured (session 20, r1, H100, door_timeline.py, 10 interleaved blocks of
# 20 steps): gpt4x256 b8 1148.7 us per step against 1168.8 (every block
# faster: 1137.7-1164.6 against 1167.4-1173.3), 0.784x of PyTorch's
# hand-captured step against 0.798x. On by default (read when a step
# compiles); GROVE_STEP_GEMM_SEARCH=0 keeps the heuristic's first.
# Test: CompileStepTest.test_gemm_search_option_reaches_the_program
# (tests/python/step_test.py).
def gemm_search():
    """Whether the step's program searches its GEMM algorithms (Note [GEMMs
    of the whole step by measurement])."""
    return _switch_on("GROVE_STEP_GEMM_SEARCH")


# Note [Sibling GEMMs of the whole step]: GROVE_STEP_SIBLING_GEMMS=1 compiles
# the step's program with the compile option sibling_gemms (Note [Sibling GEMMs
# as one], compiler/lowering/sibling_gemms.h): each attention block's q/k/v
# projections, their weight gradients, their summed input gradient and their
# bias gradients as one GEMM (or sum) each; gpt4x256's step goes from 101
# library GEMMs to 77. Measured (session 21, r1, H100, door_timeline.py, 10
# interleaved blocks of 20 steps, one process): gpt4x256 b8 993.4 us per step
# against 1173.1 without it (every block faster: 987.4-1002.4 against
# 1164.1-1189.7), 0.679x of PyTorch's hand-captured step (1462.6) against
# 0.802x; its losses within 4.8e-7 of the unfused step's over 30 steps. On by
# default; GROVE_STEP_SIBLING_GEMMS=0 keeps the separate GEMMs. Read when a
# step compiles. Test: CompileStepTest.test_gpt_with_sibling_gemms_fused_tracks_eager
# (step_test.py), GpuStepTest.test_gpt_whole_step_with_sibling_gemms_fused
# (gpu_step_test.py; passed on an H100 in session 21's r2).
def sibling_gemms():
    """Whether the step's program fuses its sibling GEMMs (Note [Sibling
    GEMMs of the whole step])."""
    return _switch_on("GROVE_STEP_SIBLING_GEMMS")


class CompiledStep:
    """A training step compiled by compile_step; call it with a batch."""

    def __init__(self, model, loss_fn, optimizer, mode="cudagraphs", device=None,
                 keep_gradients=False, strict=True, process_group=None):
        if mode not in ("cudagraphs", "eager"):
            raise ValueError("grove: compile_step mode=%r; use 'cudagraphs' or 'eager'" % (mode,))
        self.module = model
        self.loss_fn = loss_fn
        self.mode = mode
        self.device = device
        self.strict = strict
        self.keep_gradients = keep_gradients
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        # Data parallel: the gradients are one flat buffer, averaged across
        # the group by one all-reduce between the two graphs.
        self.process_group = process_group
        self.flat = process_group is not None
        if self.flat and keep_gradients:
            raise ValueError("grove: compile_step keeps flat gradients under a process_group; "
                             "keep_gradients is for the per-parameter ones")
        self.update = _update_of(optimizer, self.params, mode, device)
        self.update.flat = self.flat
        self.compiled = {}  # autocast state -> (KeptForward, GraphRunner)
        self.token = None
        self.steps = 0

    @staticmethod
    def _autocast_state():
        """None outside autocast (two cheap calls), else its devices and dtypes."""
        if _BY_DEVICE:  # PyTorch >= 2.4
            cpu, gpu = torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda")
            if not (cpu or gpu):
                return None
            return (cpu, gpu, torch.get_autocast_dtype("cpu"), torch.get_autocast_dtype("cuda"))
        cpu, gpu = torch.is_autocast_cpu_enabled(), torch.is_autocast_enabled()
        if not (cpu or gpu):
            return None
        return (cpu, gpu, torch.get_autocast_cpu_dtype(), torch.get_autocast_gpu_dtype())

    def _compile(self, batch):
        from torch.fx.experimental.proxy_tensor import make_fx

        count = len(self.params)
        flat = self.flat
        names = self.names
        module = self.module
        loss_fn = self.loss_fn

        def joint(*values):
            parameters = dict(zip(names, values[:count]))

            def forward(*args, **kwargs):
                return _functional_call(module, parameters, args, kwargs)

            loss = loss_fn(forward, *values[count:])
            gradients = torch.autograd.grad(loss, values[:count], allow_unused=True)
            gradients = tuple(torch.zeros_like(value) if gradient is None else gradient
                              for gradient, value in zip(gradients, values[:count]))
            if flat:
                return loss.detach(), torch.cat([gradient.reshape(-1) for gradient in gradients])
            return (loss.detach(),) + gradients

        examples = list(self.params) + list(batch)
        # Fused attention kernels and their backwards are not grove ops:
        # written out as matmul and softmax while tracing (as the door does).
        with training_steps._attention_written_out(
                hasattr(torch.nn.functional, "scaled_dot_product_attention")), _compiling():
            graph = make_fx(joint)(*examples)
        plan = importer.import_graph(graph, examples, static_inputs=list(range(count)),
                                     strict=self.strict, name="%s_step" % type(module).__name__)
        device = self.device or _device_of(self.params[0])
        copy_loss = self.mode != "eager"
        outputs = set(_items(plan.output_arg)[1:])
        loss_node = _items(plan.output_arg)[0]

        def copies(node):
            if node is loss_node:
                return copy_loss
            return False if node in outputs else None

        options = {}  # compile options the step's switches turn on
        if gemm_search():
            options["gemm_search"] = True
        if sibling_gemms():
            options["sibling_gemms"] = True
        runner = plan.compile(backend=self.mode, device=device, output_copies=copies,
                              verify=False, **options)
        if not handoff.applicable(runner):
            raise importer.StrictModeError(
                "grove: compile_step needs the step's forward and backward to be one grove "
                "program; %d op(s) run in PyTorch: %s" % (
                    len(plan.unsupported),
                    ", ".join("%s (%s)" % (op, node) for node, op, _ in plan.unsupported)))
        forward = handoff.KeptForward(runner, 1)
        if len(forward.kept_names) != (1 if flat else count):
            raise importer.StrictModeError(
                "grove: compile_step keeps every gradient in grove, and %d of the %d gradients "
                "are not computed by the step's program (a parameter's gradient passed "
                "through or constant)" % (count - len(forward.kept_names), count))
        return forward, runner

    def __call__(self, *batch):
        key = self._autocast_state()
        compiled = self.compiled.get(key)
        if compiled is None:
            compiled = self.compiled[key] = self._compile(batch)
        forward = compiled[0]
        self.token = None  # the last step's gradients go before this step replays
        with grove.invocation():
            results = forward(*self.params, *batch)
            loss = results[0]
            token = results[1] if len(results) > 1 else None
            if token is not None:
                if self.flat:
                    self._all_reduce(token, forward)
                self.update.run(token)
        self.steps += 1
        if self.keep_gradients:
            self.token = token
        return loss

    def _all_reduce(self, token, forward):
        """Averages the flat gradient across the process group, in place in
        grove's memory (one DLPack tensor, one collective)."""
        import torch.distributed as dist

        (flat,) = [value for value in handoff.materialized([token], forward, [0])]
        dist.all_reduce(flat, group=self.process_group)
        flat.div_(dist.get_world_size(self.process_group))

    def gradients(self):
        """The last step's gradients, by parameter, as tensors over grove's
        memory (valid until the next step; clone to keep). Needs
        keep_gradients=True."""
        if self.token is None:
            raise RuntimeError("grove: no gradients kept; compile the step with "
                               "keep_gradients=True and call it first")
        import ctypes

        pointer = ctypes.c_void_p(self.token.data_ptr())
        values = []
        for index in range(len(self.params)):
            managed = ctypes.c_void_p()
            _capi.check(_capi.library().grove_kept_value(pointer, index, ctypes.byref(managed)))
            values.append(handoff._from_dlpack(managed.value))  # gradients: never bool
        return dict(zip(self.names, values))

    def runners(self):
        return [runner for _, runner in self.compiled.values()]


class _Update:
    """grove's update program over the step's parameters, fed the kept
    gradients by index and the hyper-parameters of `group_of()`."""

    def __init__(self, optimizer, group_of):
        self.optimizer = optimizer  # a grove.optim optimizer (its program and state)
        self.group_of = group_of
        self.call = None
        self.flat = False  # one flat gradient input (a process group's all-reduce)

    def run(self, token):
        optimizer = self.optimizer
        if optimizer._model is None:
            optimizer._compile(flat_gradients=self.flat)
            # Hyper-parameters first (described tensors), then the kept gradients.
            self.call = handoff.KeptCall(
                optimizer._model,
                [-1] * len(optimizer._hyper_names) + list(optimizer._grad_positions))
        optimizer._steps += 1
        status, _ = self.call.run(token, optimizer._hyperparameters(self.group_of()))
        if status:
            _capi.check(status)


def _update_of(optimizer, params, mode, device):
    if isinstance(optimizer, grove_optim._GroveOptimizer):
        _same_parameters(optimizer.param_groups, params)
        return _Update(optimizer, lambda: optimizer.param_groups[0])
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(optimizer, (torch.optim.AdamW, torch.optim.SGD)):
        raise TypeError("grove: compile_step takes grove.optim.SGD/AdamW or torch.optim.SGD/"
                        "AdamW, not %s" % type(optimizer).__name__)
    _same_parameters(groups, params)
    group = groups[0]
    if optimizer.state:
        raise ValueError("grove: compile_step starts the optimizer's state from zero, and this "
                         "%s has taken steps already; pass a fresh optimizer"
                         % type(optimizer).__name__)
    if isinstance(optimizer, torch.optim.AdamW):
        if group.get("amsgrad") or group.get("maximize"):
            raise ValueError("grove: compile_step runs AdamW without amsgrad and maximize")
        twin = grove_optim.AdamW(params, lr=group["lr"], betas=group["betas"], eps=group["eps"],
                                 weight_decay=group["weight_decay"], mode=mode, device=device)
    elif isinstance(optimizer, torch.optim.SGD):
        if group.get("nesterov") or group.get("dampening") or group.get("maximize"):
            raise ValueError("grove: compile_step runs SGD without nesterov, dampening and "
                             "maximize")
        twin = grove_optim.SGD(params, lr=group["lr"], momentum=group["momentum"],
                               weight_decay=group["weight_decay"], mode=mode, device=device)
    return _Update(twin, lambda: optimizer.param_groups[0])


def _same_parameters(groups, params):
    if len(groups) != 1:
        raise ValueError("grove: compile_step takes an optimizer with one param group "
                         "(found %d)" % len(groups))
    given = groups[0]["params"]
    if len(given) != len(params) or any(a is not b for a, b in zip(given, params)):
        raise ValueError("grove: the optimizer must update exactly the model's trainable "
                         "parameters, in model.parameters() order")


def _functional_call(module, parameters, args, kwargs):
    try:
        from torch.func import functional_call
    except ImportError:  # PyTorch 1.13
        from torch.nn.utils.stateless import functional_call
    return functional_call(module, parameters, args, kwargs)


def _device_of(tensor):
    return "cuda:%d" % (tensor.device.index or 0) if tensor.is_cuda else "sim"


def _items(output):
    return list(output) if isinstance(output, (tuple, list)) else [output]


# Note [Tracing the step as a compiler does]: the step is traced by make_fx,
# outside dynamo, so library code that asks torch.compiler.is_compiling()
# before a data-dependent check (Hugging Face's warning about padding without
# an attention mask reads input_ids' values) would take the eager branch and
# stop the trace at a tensor's .item(). While tracing, the flag PyTorch's own
# export sets for its make_fx trace (torch.compiler._is_compiling_flag, where
# this PyTorch has it) is set too. Guarded by StepTest.test_the_trace_runs_as_compiling
# (tests/python/step_test.py) and the zoo training table's HF rows.
class _compiling:
    def __enter__(self):
        self.saved = getattr(torch.compiler, "_is_compiling_flag", None) if hasattr(
            torch, "compiler") else None
        if self.saved is not None:
            torch.compiler._is_compiling_flag = True
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            torch.compiler._is_compiling_flag = self.saved
        return False


def compile_step(model, loss_fn, optimizer, mode="cudagraphs", device=None,
                 keep_gradients=False, strict=True, process_group=None):
    """The training step of `model` as grove graphs (see the module's
    docstring): loss_fn(forward, *batch) returns the loss, where forward calls
    the model; the returned callable takes the batch, runs forward, backward
    and the optimizer step, and returns the loss. process_group (a
    torch.distributed group, e.g. torch.distributed.group.WORLD): data
    parallel, the gradients averaged across it (as DistributedDataParallel
    does) by one all-reduce of one flat buffer between the graphs."""
    return CompiledStep(model, loss_fn, optimizer, mode=mode, device=device,
                        keep_gradients=keep_gradients, strict=strict,
                        process_group=process_group)
