"""grove's captured optimizer step over PyTorch's parameters (also reached as
grove.torch.optim): one grove program updates every parameter and its state
in place (the ops sgd_momentum_update and adamw_update), compiled as a
training step's optimizer stage, so in "cudagraphs" mode the whole update is
one graph replay.

    optimizer = grove.optim.AdamW(model.parameters(), lr=1e-3)
    loss.backward(); optimizer.step(); optimizer.zero_grad()

The parameters are bound (viewed, never copied); the optimizer state
(momentum, exp_avg, exp_avg_sq) lives in grove's buffers; the gradients are
read from .grad each step; the hyper-parameters are device scalars rewritten
only when a value changes (param_groups[0]["lr"] follows schedulers).
One parameter group; every parameter must have a gradient at each step.
"""

import torch

import grove
from grove import dtypes

# The floating dtypes grove's optimizer programs take (grove/dtypes.py names them).
_DTYPES = {dtype: name for dtype, name in dtypes.torch_names().items()
           if name in ("f32", "f16", "bf16")}


class _GroveOptimizer(torch.optim.Optimizer):
    _op = None
    _state_names = ()
    _hyper_names = ()

    def __init__(self, params, defaults, mode, device):
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("grove.optim: one parameter group only (found %d)"
                             % len(self.param_groups))
        if mode not in ("cudagraphs", "eager"):
            raise ValueError("grove.optim: mode=%r; use 'cudagraphs' or 'eager'" % (mode,))
        self.mode = mode
        self.device = device
        self._model = None
        self._hyper = None
        self._hyper_values = None
        self._steps = 0

    def _params(self):
        return self.param_groups[0]["params"]

    def _program(self, flat_gradients=False):
        """The update program; flat_gradients: its gradients arrive as one
        flat input "grads" (every parameter's, in order: one buffer a
        collective can reduce whole), sliced per parameter inside."""
        inputs, params, buffers, nodes = [], [], [], []
        offset = 0
        for index, param in enumerate(self._params()):
            if param.dtype not in _DTYPES:
                raise TypeError("grove.optim: parameter %d has dtype %s" % (index, param.dtype))
            entry = {"shape": list(param.shape), "dtype": _DTYPES[param.dtype]}
            if flat_gradients:
                numel = param.numel()
                nodes.append({"name": "grad%d_flat" % index, "op": "slice", "inputs": ["grads"],
                              "attrs": {"dim": 0, "start": offset, "end": offset + numel}})
                nodes.append({"name": "grad%d" % index, "op": "reshape",
                              "inputs": ["grad%d_flat" % index],
                              "attrs": {"shape": list(param.shape)}})
                offset += numel
            else:
                inputs.append(dict(entry, name="grad%d" % index))
            params.append(dict(entry, name="param%d" % index, init={"kind": "zeros"}))
            for state in self._state_names:
                buffers.append(dict(entry, name="%s%d" % (state, index), init={"kind": "zeros"}))
        if flat_gradients:
            dtypes_used = {param.dtype for param in self._params()}
            if len(dtypes_used) != 1:
                raise TypeError("grove.optim: flat gradients need one dtype for every "
                                "parameter (found %s)" % sorted(map(str, dtypes_used)))
            inputs.insert(0, {"name": "grads", "shape": [offset],
                              "dtype": _DTYPES[self._params()[0].dtype]})
        for name in self._hyper_names:
            inputs.append({"name": name, "shape": [], "dtype": "f32"})
        for index in range(len(self._params())):
            operands = ["param%d" % index, "grad%d" % index]
            operands += ["%s%d" % (state, index) for state in self._state_names]
            nodes.append({"name": "update%d" % index, "op": self._op,
                          "inputs": operands + list(self._hyper_names)})
        return {"name": "grove_%s" % type(self).__name__.lower(), "inputs": inputs,
                "params": params, "buffers": buffers, "nodes": nodes, "outputs": []}

    def _compile(self, flat_gradients=False):
        first = self._params()[0]
        device = self.device or ("cuda:%d" % (first.device.index or 0) if first.is_cuda else "sim")
        bound = {"param%d" % index: param.detach()
                 for index, param in enumerate(self._params())}
        self._model = grove.Model(self._program(flat_gradients), backend=self.mode,
                                  device=device, params=bound, stage="optimizer")
        self._hyper = [torch.zeros((), dtype=torch.float32, device=first.device)
                       for _ in self._hyper_names]

    def _hyperparameters(self):
        """The device scalars, rewritten only where a value changed."""
        values = self._values(self.param_groups[0])
        if values != self._hyper_values:
            for tensor, value, old in zip(self._hyper, values, self._hyper_values or
                                          [None] * len(values)):
                if value != old:
                    tensor.fill_(value)
            self._hyper_values = values
        return self._hyper

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = []
        for index, param in enumerate(self._params()):
            grad = param.grad
            if grad is None:
                raise RuntimeError(
                    "grove.optim: parameter %d (shape %s) has no gradient; grove's optimizer "
                    "updates every parameter each step: leave it out of the optimizer or give "
                    "it a gradient" % (index, tuple(param.shape)))
            grads.append(grad if grad.is_contiguous() else grad.contiguous())
        if self._model is None:
            self._compile()
        self._steps += 1
        self._model.call_torch(grads + self._hyperparameters())
        return loss


class SGD(_GroveOptimizer):
    """PyTorch's SGD (momentum, weight_decay; no dampening or Nesterov)."""

    _op = "sgd_momentum_update"
    _state_names = ("momentum_buffer",)
    _hyper_names = ("lr", "momentum", "weight_decay")

    def __init__(self, params, lr=1e-3, momentum=0.0, weight_decay=0.0, dampening=0.0,
                 nesterov=False, mode="cudagraphs", device=None):
        if dampening or nesterov:
            raise ValueError("grove.optim.SGD: dampening and nesterov are not supported")
        super().__init__(params, {"lr": lr, "momentum": momentum,
                                  "weight_decay": weight_decay}, mode, device)

    def _values(self, group):
        return [float(group["lr"]), float(group["momentum"]), float(group["weight_decay"])]


class AdamW(_GroveOptimizer):
    """PyTorch's AdamW (no amsgrad)."""

    _op = "adamw_update"
    _state_names = ("exp_avg", "exp_avg_sq")
    _hyper_names = ("lr", "beta1", "beta2", "eps", "weight_decay", "step")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, mode="cudagraphs", device=None):
        if amsgrad:
            raise ValueError("grove.optim.AdamW: amsgrad is not supported")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps,
                                  "weight_decay": weight_decay}, mode, device)

    def _values(self, group):
        beta1, beta2 = group["betas"]
        return [float(group["lr"]), float(beta1), float(beta2), float(group["eps"]),
                float(group["weight_decay"]), float(self._steps)]
