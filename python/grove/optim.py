"""grove's captured optimizer step over PyTorch's parameters (also reached as
grove.torch.optim): one grove program updates every parameter and its state
in place (the ops sgd_momentum_update and adamw_update), compiled as a
training step's optimizer stage, so in "cudagraphs" mode the whole update is
one graph replay. The program is the one grove's C++ Trainer runs, built by
training/optimizer.cc through the C API (grove_optimizer_program),
with the gradients as inputs.

    optimizer = grove.optim.AdamW(model.parameters(), lr=1e-3)
    loss.backward(); optimizer.step(); optimizer.zero_grad()

The parameters are bound (viewed, never copied); the optimizer state
(momentum, exp_avg, exp_avg_sq) lives in grove's buffers; the gradients are
read from .grad each step; the hyper-parameters are device scalars rewritten
only when a value changes (param_groups[0]["lr"] follows schedulers).
update_in_backward=True: the update runs at the end of the torch door's
backward (Note [The optimizer's update inside the door's backward]).
One parameter group; every parameter must have a gradient at each step.
"""

import ctypes
import inspect
import itertools
import json
import operator
import os
import weakref

import torch

import grove
from grove import _capi
from grove import dtypes

# The floating dtypes grove's optimizer programs take (grove/dtypes.py names them).
_GRAD = operator.attrgetter("grad")
_SET_TO_NONE_DEFAULT = inspect.signature(torch.optim.Optimizer.zero_grad).parameters[
    "set_to_none"].default
_DTYPES = {dtype: name for dtype, name in dtypes.torch_names().items()
           if name in ("f32", "f16", "bf16")}


def optimizer_program(optimizer, params, gradients="inputs", name="grove_optim"):
    """The optimizer step program that training/optimizer.cc builds
    (grove_optimizer_program, capi/grove.h), as grove JSON text: `optimizer`
    "sgd_momentum" or "adamw", `params` [{"name", "shape", "dtype"}]. Its
    inputs are the hyper-parameters, then (gradients="inputs") "grad.<param>"
    per param, or (gradients="flat") one input "grads" holding every param's
    gradient in order, sliced per param inside the program."""
    request = json.dumps({"optimizer": optimizer, "params": params, "gradients": gradients,
                          "name": name})
    lib = _capi.library()
    text = ctypes.c_void_p()
    _capi.check(lib.grove_optimizer_program(request.encode(), ctypes.byref(text)))
    try:
        return ctypes.string_at(text.value).decode()
    finally:
        lib.grove_string_free(text)


# Note [The optimizer's update inside the door's backward]
# A grove optimizer made with update_in_backward=True (or under
# GROVE_OPTIM_IN_BACKWARD=1) runs its update at the end of the door's
# backward instead of at optimizer.step(): where one training graph of the
# torch door has exactly this optimizer's parameters as its leaf inputs, the
# door sets every one's .grad itself (Note [Gradients set directly by the
# door's function], door_function.py; none through autograd's AccumulateGrad,
# an anchor tensor keeps the outputs in autograd's graph) and then replays
# the update program in the forward's tree, on autograd's thread, with no
# Python stage between them; optimizer.step() then only clears the mark. The
# user gives up: reading parameters between backward() and step() (they are
# already updated), changing .grad between them (clipping, unscaling: not
# seen by the update), and accumulating over several backward() calls
# before one step() (refused: the second backward raises). A graph whose
# parameters are not exactly the optimizer's (a graph break, a frozen part)
# keeps the plain path: step() updates as usual. Measured (session 19, r2, H100,
# door_timeline.py, interleaved in one process): mlp16x512 b32 1322.0 us per
# step, 0.66x of reduce-overhead's 2006.0 and 0.72x of the door with
# PyTorch's fused AdamW (1827.4); the autograd engine, dynamo's call and the
# eager loss are most of what is left (grove's whole step: 452.5). Tests:
# DoorFunctionTest.test_update_in_backward_equals_step_after_backward,
# test_update_in_backward_refuses_a_second_backward_before_step and
# test_update_in_backward_needs_the_optimizers_exact_parameters
# (tests/python/door_function_test.py, sim).
_IN_BACKWARD = weakref.WeakSet()  # optimizers made with update_in_backward


def in_backward_for(parameters):
    """The grove optimizer made with update_in_backward whose parameters are
    exactly `parameters` (by identity, any order), or None (Note [The
    optimizer's update inside the door's backward])."""
    if not _IN_BACKWARD:
        return None
    wanted = set(map(id, parameters))
    for optimizer in list(_IN_BACKWARD):
        params = optimizer._params()
        if len(params) == len(wanted) and set(map(id, params)) == wanted:
            return optimizer
    return None


def _update_in_backward_default():
    value = os.environ.get("GROVE_OPTIM_IN_BACKWARD", "0")
    if value not in ("0", "1"):
        raise ValueError("grove: GROVE_OPTIM_IN_BACKWARD=%r; use 1 (update at the end of the "
                         "door's backward) or 0 (the default)" % value)
    return value == "1"


class _GroveOptimizer(torch.optim.Optimizer):
    _kind = None  # grove_optimizer_program's "optimizer"

    def __init__(self, params, defaults, mode, device, update_in_backward=None):
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("grove.optim: one parameter group only (found %d)"
                             % len(self.param_groups))
        if mode not in ("cudagraphs", "eager"):
            raise ValueError("grove.optim: mode=%r; use 'cudagraphs' or 'eager'" % (mode,))
        self.mode = mode
        self.device = device
        self._model = None
        self._hyper_names = None  # the program's hyper-parameter inputs, in call order
        self._grad_positions = None  # per program input after them: the parameter's index
        self._hyper = None
        self._hyper_values = None
        self._steps = 0
        # Note [The optimizer's update inside the door's backward]
        if update_in_backward is None:
            update_in_backward = _update_in_backward_default()
        self.update_in_backward = bool(update_in_backward)
        self._updated_in_backward = False
        if self.update_in_backward:
            _IN_BACKWARD.add(self)

    def _params(self):
        return self.param_groups[0]["params"]

    def _program(self, flat_gradients=False):
        """The update program as grove JSON text, built by C++ (grove_optimizer_program)
        with one "grad.<param>" input per parameter; flat_gradients: the gradients
        arrive instead as one flat input "grads" (every parameter's, in order: one
        buffer a process group's collective can reduce whole), sliced per parameter
        inside the program (compile_step with a process group, grove/step.py)."""
        params = []
        for index, param in enumerate(self._params()):
            if param.dtype not in _DTYPES:
                raise TypeError("grove.optim: parameter %d has dtype %s" % (index, param.dtype))
            params.append({"name": "param%d" % index, "shape": list(param.shape),
                           "dtype": _DTYPES[param.dtype]})
        name = "grove_%s" % type(self).__name__.lower()
        gradients = "flat" if flat_gradients else "inputs"
        return optimizer_program(self._kind, params, gradients=gradients, name=name)

    def _compile(self, flat_gradients=False):
        first = self._params()[0]
        device = self.device or ("cuda:%d" % (first.device.index or 0) if first.is_cuda else "sim")
        bound = {"param%d" % index: param.detach()
                 for index, param in enumerate(self._params())}
        self._model = grove.Model(self._program(flat_gradients), backend=self.mode,
                                  device=device, params=bound, stage="optimizer")
        # The hyper-parameters come first, then the gradients (one flat "grads"
        # or "grad.param<i>" per parameter, in any order).
        gradient_index = {"grad.param%d" % index: index for index in range(len(bound))}
        gradient_index["grads"] = 0
        names = self._model.input_names
        self._hyper_names = [name for name in names if name not in gradient_index]
        if names[:len(self._hyper_names)] != self._hyper_names:
            raise RuntimeError("grove.optim: the optimizer program's inputs %s do not list the "
                               "hyper-parameters first" % names)
        self._grad_positions = [gradient_index[name] for name in names[len(self._hyper_names):]]
        self._hyper = [torch.zeros((), dtype=torch.float32, device=first.device)
                       for _ in self._hyper_names]
        positions = self._grad_positions
        if positions == list(range(len(positions))):
            self._in_program_order = list
        elif len(positions) > 1:
            getter = operator.itemgetter(*positions)
            self._in_program_order = lambda grads: list(getter(grads))
        else:
            self._in_program_order = lambda grads: [grads[index] for index in positions]

    def _hyperparameters(self, group=None):
        """The device scalars, rewritten only where a value changed; `group`
        (default: this optimizer's one parameter group) gives the values."""
        by_name = self._values(self.param_groups[0] if group is None else group)
        values = [by_name[name] for name in self._hyper_names]
        if values != self._hyper_values:
            for tensor, value, old in zip(self._hyper, values, self._hyper_values or
                                          [None] * len(values)):
                if value != old:
                    tensor.fill_(value)
            self._hyper_values = values
        return self._hyper

    def zero_grad(self, set_to_none=None):
        """PyTorch's zero_grad, with this PyTorch's default for set_to_none
        (True from 2.0). set_to_none: every parameter's .grad becomes None in
        one pass in C (map), not a Python loop over the parameters under a
        profiler range as torch.optim.Optimizer's."""
        if set_to_none is None:
            set_to_none = _SET_TO_NONE_DEFAULT
        if not set_to_none:
            return super().zero_grad(set_to_none=False)
        params = self._params()
        list(map(setattr, params, itertools.repeat("grad", len(params)),
                 itertools.repeat(None, len(params))))
        return None

    @torch.no_grad()
    def step(self, closure=None):
        if self._updated_in_backward:
            # Note [The optimizer's update inside the door's backward]: done.
            self._updated_in_backward = False
            if closure is not None:
                raise RuntimeError("grove.optim: step(closure) with update_in_backward: the "
                                   "update ran in backward() already; pass no closure")
            return None
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._update()
        return loss

    def update_from_backward(self):
        """The update, run by the door's backward once it has set every
        parameter's .grad (Note [The optimizer's update inside the door's
        backward]); the next step() only clears the mark."""
        if self._updated_in_backward:
            raise RuntimeError(
                "grove.optim: a second backward() before optimizer.step(): with "
                "update_in_backward each backward updates the parameters, so gradients cannot "
                "be accumulated over several backward() calls; call step() after each one or "
                "make the optimizer with update_in_backward=False")
        with torch.no_grad():
            self._update()
        self._updated_in_backward = True

    def _update(self):
        params = self._params()
        # One pass in C per check (map), Python per parameter only where one fails.
        grads = list(map(_GRAD, params))
        if any(map(operator.is_, grads, itertools.repeat(None, len(grads)))):
            index = next(i for i, grad in enumerate(grads) if grad is None)
            raise RuntimeError(
                "grove.optim: parameter %d (shape %s) has no gradient; grove's optimizer "
                "updates every parameter each step: leave it out of the optimizer or give "
                "it a gradient" % (index, tuple(params[index].shape)))
        if not all(map(torch.Tensor.is_contiguous, grads)):
            grads = [grad if grad.is_contiguous() else grad.contiguous() for grad in grads]
        if self._model is None:
            self._compile()
        self._steps += 1
        self._model.call_torch(self._hyperparameters() + self._in_program_order(grads))


class SGD(_GroveOptimizer):
    """PyTorch's SGD (momentum, weight_decay; no dampening or Nesterov)."""

    _kind = "sgd_momentum"

    def __init__(self, params, lr=1e-3, momentum=0.0, weight_decay=0.0, dampening=0.0,
                 nesterov=False, mode="cudagraphs", device=None, update_in_backward=None):
        if dampening or nesterov:
            raise ValueError("grove.optim.SGD: dampening and nesterov are not supported")
        super().__init__(params, {"lr": lr, "momentum": momentum,
                                  "weight_decay": weight_decay}, mode, device,
                         update_in_backward)

    def _values(self, group):
        return {"lr": float(group["lr"]), "momentum": float(group["momentum"]),
                "weight_decay": float(group["weight_decay"])}


class AdamW(_GroveOptimizer):
    """PyTorch's AdamW (no amsgrad)."""

    _kind = "adamw"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, mode="cudagraphs", device=None, update_in_backward=None):
        if amsgrad:
            raise ValueError("grove.optim.AdamW: amsgrad is not supported")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps,
                                  "weight_decay": weight_decay}, mode, device,
                         update_in_backward)

    def _values(self, group):
        beta1, beta2 = group["betas"]
        return {"lr": float(group["lr"]), "beta1": float(beta1), "beta2": float(beta2),
                "eps": float(group["eps"]), "weight_decay": float(group["weight_decay"]),
                "step": float(self._steps)}
