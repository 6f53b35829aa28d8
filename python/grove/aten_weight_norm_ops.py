"""Weight normalization (torch.nn.utils.weight_norm and its parametrization:
wav2vec2's and HuBERT's positional convolution, vocoders): the fused
_weight_norm_interface and its backward written out in grove ops."""

from grove.aten_ops import CONVERTERS, compute_dtype


def _other_dims(shape, dim):
    """The dims the norm sums over: all but `dim`."""
    return [d for d in range(len(shape)) if d != dim % max(len(shape), 1)]


def _sum_except(c, value, shape, dim):
    """`value` summed over every dim but `dim`, kept as size-1 dims."""
    dims = _other_dims(shape, dim)
    return c.emit("sum", [value], {"dims": dims, "keepdim": 1}) if dims else value


def _norms(c, v, shape, dim):
    """The 2-norms of v over every dim but `dim`, kept as size-1 dims."""
    return c.emit("sqrt", [_sum_except(c, c.emit("mul", [v, v]), shape, dim)])


def _weight_norm(c, a):
    """_weight_norm_interface(v, g, dim) -> (w, norms): w = v g / ||v||, the
    norm over every dim but `dim`; in f32 for bf16 and f16 (PyTorch keeps
    the norms in f32 there)."""
    v, dim = a["v"], int(a.get("dim", 0))
    shape, dtype = c.shape(v), c.dtype(v)
    compute = compute_dtype(dtype)
    vs = c.operand(v, compute)
    norms = _norms(c, vs, shape, dim)
    w = c.emit("mul", [vs, c.emit("div", [c.operand(a["g"], compute), norms])])
    results = c.result()
    return c.cast(w, compute, results[0].dtype), c.cast(norms, compute, results[1].dtype)


def _weight_norm_backward(c, a):
    """_weight_norm_interface_backward(grad_w, v, g, norms, dim) -> (grad_v,
    grad_g): with s = sum(grad_w v) over every dim but `dim`,
    grad_g = s / norms and grad_v = (g / norms) (grad_w - v grad_g / norms)."""
    v, dim = a["saved_v"], int(a["dim"])
    shape, dtype = c.shape(v), c.dtype(v)
    compute = compute_dtype(dtype)
    vs, grad = c.operand(v, compute), c.operand(a["grad_w"], compute)
    norms = c.operand(a["saved_norms"], compute)
    grad_g = c.emit("div", [_sum_except(c, c.emit("mul", [grad, vs]), shape, dim), norms])
    scale = c.emit("div", [c.operand(a["saved_g"], compute), norms])
    along = c.emit("mul", [vs, c.emit("div", [grad_g, norms])])
    grad_v = c.emit("mul", [scale, c.emit("sub", [grad, along])])
    results = c.result()
    return c.cast(grad_v, compute, results[0].dtype), c.cast(grad_g, compute, results[1].dtype)


CONVERTERS.update({
    "aten._weight_norm_interface": _weight_norm,
    "aten._weight_norm_interface_backward": _weight_norm_backward,
})
