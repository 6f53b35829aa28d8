"""The ATen op converters of the importer (grove.importer): each emits the
grove nodes that compute one ATen node, or raises Unsupported so the node runs
in PyTorch. CONVERTERS maps an op's name ("aten.addmm") to its converter;
README.md's table lists what is covered."""

import math

import torch
import torch.fx

from grove.fx_common import Unsupported, dtype_name, op_name


class _Converter:
    """Emits grove nodes for one fx node into a segment."""

    def __init__(self, importer, segment, node):
        self.importer = importer
        self.segment = segment
        self.node = node
        self.values = importer.values

    # Values -------------------------------------------------------------
    def value(self, arg):
        return self.values[arg] if isinstance(arg, torch.fx.Node) else arg

    def shape(self, arg):
        return list(self.value(arg).shape)

    def dtype(self, arg):
        return self.value(arg).dtype

    def result(self):
        return self.values[self.node]

    def emit(self, op, inputs, attrs=None):
        segment = self.segment
        segment.counter += 1
        name = "%s.%d" % (self.node.name, segment.counter)
        entry = {"name": name, "op": op, "inputs": list(inputs)}
        if attrs:
            if op == "full" and math.isinf(attrs.get("value", 0.0)):
                attrs = dict(attrs, value=json_infinity(attrs["value"], attrs.get("dtype")))
            entry["attrs"] = attrs
        segment.program_nodes.append(entry)
        return name

    def tensor(self, arg, position=None):
        """The grove name of fx value `arg` in this segment."""
        return self.importer.name_in_segment(self.segment, arg, position)

    def scalar(self, value, dtype):
        if isinstance(value, bool) and dtype != torch.bool:
            value = float(value)
        return self.emit("full", [], {"value": float(value), "shape": [],
                                      "dtype": dtype_name(dtype)})

    def operand(self, arg, dtype):
        """`arg` (a tensor node or a Python number) as a grove value of `dtype`."""
        if isinstance(arg, torch.fx.Node):
            name = self.tensor(arg)
            if self.dtype(arg) != dtype:
                name = self.emit("cast", [name], {"dtype": dtype_name(dtype)})
            return name
        if isinstance(arg, (int, float, bool)):
            return self.scalar(arg, dtype)
        raise Unsupported("operand %r" % (arg,))

    def cast(self, name, from_dtype, to_dtype):
        if from_dtype == to_dtype:
            return name
        return self.emit("cast", [name], {"dtype": dtype_name(to_dtype)})


# Note [Infinite constants]: a program travels as JSON, which has no
# infinity, and a constant was once clamped to f32's largest finite value
# (masked_fill(mask, -inf) gave -3.4e38, where PyTorch has -inf: a row of
# scores all masked softmaxed to a uniform row instead of PyTorch's NaN, and
# an output holding the mask showed the difference). f32, bf16 and f16
# constants compute in f32, and 1e39 rounds to f32's infinity when the kernel
# is built (llvm::ConstantFP of a float), so an infinite constant travels as
# +-1e39 and is infinite in the kernel; f64 keeps its largest finite value.
# Test: MathOpsTest.test_infinite_constants_stay_infinite
# (tests/python/importer_math_ops_test.py).
def json_infinity(value, dtype):
    """A finite JSON number that a `full` of `dtype` reads as `value` (+-inf)."""
    return math.copysign(1.7976931348623157e308 if dtype == "f64" else 1e39, value)


def compute_dtype(dtype):
    """The dtype a converter computes statistics and weights in: f32 for bf16
    and f16 (as PyTorch's kernels accumulate), else `dtype` itself."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def _dims(value, rank):
    if value is None:
        return []
    if isinstance(value, int):
        value = [value]
    return [d % rank if rank else 0 for d in value]


_BOOL_ARITHMETIC = {"mul": "bitwise_and", "add": "bitwise_or"}


def _binary(op):
    def convert(c, a):
        dtype = c.result().dtype
        left = a.get("self", a.get("input"))
        right = a.get("other")
        if dtype == torch.bool and op in _BOOL_ARITHMETIC and a.get("alpha", 1) in (None, 1):
            # bool * bool is and, bool + bool or (isfinite's decomposition).
            return c.emit(_BOOL_ARITHMETIC[op], [c.operand(left, dtype), c.operand(right, dtype)])
        if dtype == torch.bool and op not in ("lt", "le", "gt", "ge", "eq", "ne"):
            raise Unsupported("%s of bool tensors" % op)
        if op in ("lt", "le", "gt", "ge", "eq", "ne"):
            operand_dtype = torch.result_type(c.value(left), c.value(right))
        else:
            operand_dtype = dtype
        x = c.operand(left, operand_dtype)
        y = c.operand(right, operand_dtype)
        alpha = a.get("alpha", 1)
        if alpha not in (None, 1):
            y = c.emit("mul", [y, c.scalar(alpha, operand_dtype)])
        return c.emit(op, [x, y])

    return convert


def _unary(op):
    def convert(c, a):
        x = a.get("self", a.get("input"))
        if not c.dtype(x).is_floating_point and op not in ("neg", "relu"):
            # torch.sqrt of an integer tensor is a float one: cast first.
            dtype = c.result().dtype
            if not dtype.is_floating_point:
                raise Unsupported("%s of a %s tensor" % (op, c.dtype(x)))
            return c.emit(op, [c.operand(x, dtype)])
        return c.emit(op, [c.tensor(x)])

    return convert


def _rsub(c, a):
    dtype = c.result().dtype
    x = c.operand(a["self"], dtype)
    y = c.operand(a["other"], dtype)
    if a.get("alpha", 1) not in (None, 1):
        x = c.emit("mul", [x, c.scalar(a["alpha"], dtype)])
    return c.emit("sub", [y, x])


def _div(c, a):
    dtype = c.result().dtype
    mode = a.get("rounding_mode")
    x, y = c.operand(a["self"], dtype), c.operand(a["other"], dtype)
    if mode is not None and not dtype.is_floating_point:
        if dtype == torch.bool:
            raise Unsupported("div of bools with rounding_mode=%r" % mode)
        return c.emit("floor_divide" if mode == "floor" else "truncate_divide", [x, y])
    quotient = c.emit("div", [x, y])
    return quotient if mode is None else c.emit(mode, [quotient])  # "floor" or "trunc"


def _floor_divide(c, a):
    return _div(c, dict(a, rounding_mode="floor"))


def _pow(c, a):
    dtype = c.result().dtype
    base = a.get("self")
    exponent = a.get("exponent")
    if not dtype.is_floating_point:
        raise Unsupported("pow of integers")
    if exponent == 2 and isinstance(base, torch.fx.Node):
        x = c.operand(base, dtype)
        return c.emit("mul", [x, x])
    if exponent == 0.5 and isinstance(base, torch.fx.Node):
        # PyTorch takes x ** 0.5 as sqrt(x): NaN at -inf and -0.0 at -0.0,
        # where pow gives inf and 0.0.
        return c.emit("sqrt", [c.operand(base, dtype)])
    return c.emit("pow", [c.operand(base, dtype), c.operand(exponent, dtype)])


def _reciprocal(c, a):
    dtype = c.result().dtype
    return c.emit("div", [c.scalar(1.0, dtype), c.operand(a["self"], dtype)])


def magnitude(c, name, dtype):
    """|name| for a value of a signed `dtype`: the value where it is above
    zero, else 0 - value (so |-0.0| is +0.0, as PyTorch's, and NaN stays
    NaN)."""
    zero = c.scalar(0, dtype)
    positive = c.emit("gt", [name, zero])
    return c.emit("where", [positive, name, c.emit("sub", [zero, name])])


def _abs(c, a):
    x = a["self"]
    dtype = c.dtype(x)
    if dtype == torch.bool:
        return c.tensor(x)
    return magnitude(c, c.tensor(x), dtype)


def _silu(c, a):
    x = c.tensor(a["self"])
    return c.emit("mul", [x, c.emit("sigmoid", [x])])


def _gelu(c, a):
    approximate = a.get("approximate", "none")
    x = c.tensor(a["self"])
    if approximate == "tanh":
        return c.emit("gelu", [x])
    return _exact_gelu(c, x, c.dtype(a["self"]))


def _exact_gelu(c, x, dtype):
    """0.5 x (1 + erf(x / sqrt 2)), PyTorch's default gelu."""
    if not c.importer.has_erf:
        raise Unsupported("gelu(approximate='none') needs erf, which this grove lacks")
    inner = c.emit("erf", [c.emit("mul", [x, c.scalar(1 / math.sqrt(2.0), dtype)])])
    one_plus = c.emit("add", [inner, c.scalar(1.0, dtype)])
    return c.emit("mul", [c.emit("mul", [x, c.scalar(0.5, dtype)]), one_plus])


def _where(c, a):
    dtype = c.result().dtype
    condition = c.operand(a["condition"], torch.bool)
    return c.emit("where", [condition, c.operand(a["self"], dtype), c.operand(a["other"], dtype)])


def _masked_fill(c, a):
    dtype = c.result().dtype
    mask = c.operand(a["mask"], torch.bool)
    return c.emit("where", [mask, c.operand(a["value"], dtype), c.tensor(a["self"])])


def _logical_not(c, a):
    x = a["self"]
    if c.dtype(x) != torch.bool:
        raise Unsupported("bitwise_not of a %s tensor" % c.dtype(x))
    return c.emit("eq", [c.tensor(x), c.scalar(False, torch.bool)])


def _is_transposed_weight(c, arg):
    """Whether `arg` is t(w) of a 2-d w that grove computes (x @ w.t() is linear)."""
    return (isinstance(arg, torch.fx.Node) and op_name(arg.target) == "aten.t"
            and not c.importer.is_torch_node(arg) and len(c.shape(arg.args[0])) == 2)


def _matmul(c, a):
    x, y = a["self"], a.get("mat2", a.get("other"))
    if len(c.shape(x)) < 2 or len(c.shape(y)) < 2:
        raise Unsupported("matmul of a vector")
    if op_name(c.node.target) == "aten.mm" and _is_transposed_weight(c, y):
        return c.emit("linear", [c.tensor(x), c.tensor(y.args[0])])
    return c.emit("matmul", [c.tensor(x), c.tensor(y)])


def _scaled_sum(c, product, bias, alpha, beta, dtype):
    """beta bias + alpha product (addmm's and baddbmm's), the bias not read
    with beta 0 (PyTorch documents that its NaNs and infinities then do not
    reach the result)."""
    if alpha != 1:
        product = c.emit("mul", [product, c.scalar(alpha, dtype)])
    if beta == 0:
        return product
    bias = c.operand(bias, dtype)
    if beta != 1:
        bias = c.emit("mul", [bias, c.scalar(beta, dtype)])
    return c.emit("add", [product, bias])


def _baddbmm(c, a):
    """beta self + alpha (batch1 @ batch2), batched (BLOOM's ALiBi scores)."""
    dtype = c.result().dtype
    product = c.emit("matmul", [c.operand(a["batch1"], dtype), c.operand(a["batch2"], dtype)])
    return _scaled_sum(c, product, a["self"], a.get("alpha", 1), a.get("beta", 1), dtype)


def _addmm(c, a):
    bias, x, y = a["self"], a["mat1"], a["mat2"]
    beta, alpha = a.get("beta", 1), a.get("alpha", 1)
    # addmm(b, x, t(w)) is linear(x, w, b): one GEMM with its bias epilogue.
    if (_is_transposed_weight(c, y) and beta == 1 and alpha == 1
            and isinstance(bias, torch.fx.Node) and len(c.shape(bias)) == 1):
        return c.emit("linear", [c.tensor(x), c.tensor(y.args[0]), c.tensor(bias)])
    # Note [Bias epilogues of addmm]: addmm(b, x, w) of a 2-d w stored [in, out]
    # (GPT-2's Conv1D) is linear(x, t(w), b) too: t(w) is a view the GEMM reads
    # as it is, and the bias rides in the GEMM's epilogue instead of an add
    # kernel after it (two per GPT-2 layer at batch 16). Test: importer_test's
    # test_addmm_of_an_untransposed_weight_is_one_linear.
    if (beta == 1 and alpha == 1 and isinstance(bias, torch.fx.Node) and
            isinstance(y, torch.fx.Node) and len(c.shape(y)) == 2 and len(c.shape(bias)) == 1
            and c.shape(bias)[0] == c.shape(y)[1] and c.dtype(bias) == c.dtype(y)):
        weight = c.emit("transpose", [c.tensor(y)], {"dim0": 0, "dim1": 1})
        return c.emit("linear", [c.tensor(x), weight, c.tensor(bias)])
    product = c.emit("matmul", [c.tensor(x), c.tensor(y)])
    return _scaled_sum(c, product, bias, alpha, beta, c.result().dtype)


def _linear(c, a):
    inputs = [c.tensor(a["input"]), c.tensor(a["weight"])]
    if a.get("bias") is not None:
        inputs.append(c.tensor(a["bias"]))
    return c.emit("linear", inputs)


def _t(c, a):
    x = a["self"]
    if len(c.shape(x)) < 2:
        return c.tensor(x)
    return c.emit("transpose", [c.tensor(x)], {"dim0": 0, "dim1": 1})


def _reshape(c, a):
    x = a["self"]
    shape = list(c.result().shape)
    if shape == c.shape(x):
        return c.tensor(x)
    return c.emit("reshape", [c.tensor(x)], {"shape": shape})


def _permute(c, a):
    return c.emit("permute", [c.tensor(a["self"])], {"order": list(a["dims"])})


def _transpose(c, a):
    return c.emit("transpose", [c.tensor(a["self"])], {"dim0": a["dim0"], "dim1": a["dim1"]})


def broadcast_to(c, name, dtype, shape):
    """`name` (a value of `dtype` that broadcasts to `shape`) materialized in
    `shape`: plus zeros of that shape, or for bools selected against false."""
    if dtype == torch.bool:
        true = c.emit("full", [], {"value": 1.0, "shape": list(shape), "dtype": "bool"})
        return c.emit("where", [name, true, c.scalar(False, torch.bool)])
    zeros = c.emit("full", [], {"value": 0.0, "shape": list(shape), "dtype": dtype_name(dtype)})
    return c.emit("add", [name, zeros])


def _expand(c, a):
    x = a["self"]
    shape = list(c.result().shape)
    if shape == c.shape(x):
        return c.tensor(x)
    return broadcast_to(c, c.tensor(x), c.dtype(x), shape)


def _slice(c, a):
    x = a["self"]
    if a.get("step", 1) not in (None, 1):
        raise Unsupported("slice with step %s" % a["step"])  # aten_layout_ops takes it
    size = c.shape(x)[a["dim"]]
    start = a.get("start") or 0
    end = a.get("end")
    end = size if end is None else max(min(end, size), -size)
    if start == 0 and end == size:
        return c.tensor(x)
    return c.emit("slice", [c.tensor(x)], {"dim": a["dim"], "start": start, "end": end})


def _select(c, a):
    x = a["self"]
    dim = a["dim"] % len(c.shape(x))
    index = a["index"] % c.shape(x)[dim]
    picked = c.emit("slice", [c.tensor(x)], {"dim": dim, "start": index, "end": index + 1})
    return c.emit("reshape", [picked], {"shape": list(c.result().shape)})


def _cat(c, a):
    tensors = [t for t in a["tensors"] if c.value(t).numel() > 0 or len(a["tensors"]) == 1]
    dtype = c.result().dtype
    dim = a.get("dim", 0) % len(c.result().shape)
    if len(tensors) == 1:
        return c.operand(tensors[0], dtype)
    return c.emit("concat", [c.operand(t, dtype) for t in tensors], {"dim": dim})


def _stack(c, a):
    """stack(tensors, dim): each tensor given a length-1 dim at `dim`, then
    concatenated there (the backward of unbind, as in timm's attention)."""
    dtype = c.result().dtype
    dim = a.get("dim", 0) % len(c.result().shape)
    pieces = []
    for tensor in a["tensors"]:
        shape = list(c.shape(tensor))
        shape.insert(dim, 1)
        pieces.append(c.emit("reshape", [c.operand(tensor, dtype)], {"shape": shape}))
    if len(pieces) == 1:
        return pieces[0]
    return c.emit("concat", pieces, {"dim": dim})


def _split(c, a):
    x = a["self"]
    dim = a.get("dim", 0) % len(c.shape(x))
    names, start = [], 0
    for piece in c.result():
        end = start + piece.shape[dim]
        names.append(c.emit("slice", [c.tensor(x)], {"dim": dim, "start": start, "end": end}))
        start = end
    return tuple(names)


def _full_like(value):
    def convert(c, a):
        result = c.result()
        fill = a.get("fill_value", value)
        return c.emit("full", [], {"value": float(fill), "shape": list(result.shape),
                                   "dtype": dtype_name(result.dtype)})

    return convert


def _fill(c, a):
    """fill.Scalar and fill.Tensor (functionalized fill_): the value, a number
    or a one-element tensor (a lifted constant: torchvision Swin's mask in a
    training graph), in the result's shape and dtype."""
    value = a.get("value")
    if not isinstance(value, torch.fx.Node):
        return _full_like(value)(c, {"fill_value": value})
    if c.value(value).numel() != 1:
        raise Unsupported("fill with a tensor of %d elements" % c.value(value).numel())
    result = c.result()
    shape, dtype = list(result.shape), result.dtype
    one = c.emit("reshape", [c.operand(value, dtype)], {"shape": [1] * len(shape)})
    return broadcast_to(c, one, dtype, shape)


def row_major_strides(size):
    """The strides of a contiguous tensor of `size`, as PyTorch gives them
    (an extent of 0 counts as 1)."""
    strides, step = [], 1
    for extent in reversed(list(size)):
        strides.append(step)
        step *= max(int(extent), 1)
    return list(reversed(strides))


def _empty_strided(c, a):
    """new_empty_strided and empty_strided with row-major strides (PyTorch
    2.x's decompositions make them to copy into): values nobody may read
    before writing, so zeros. Other strides order the elements differently
    for the ops that follow (as_strided, copy_): not taken."""
    size = [int(extent) for extent in a["size"]]
    if [int(step) for step in a["stride"]] != row_major_strides(size) and \
            c.result().numel() > 1:
        raise Unsupported("%s with strides %s" % (op_name(c.node.target), list(a["stride"])))
    return _full_like(0.0)(c, {})


def _unbind(c, a):
    x = a["self"]
    dim = a.get("dim", 0) % len(c.shape(x))
    names = []
    for index, piece in enumerate(c.result()):
        picked = c.emit("slice", [c.tensor(x)], {"dim": dim, "start": index, "end": index + 1})
        names.append(c.emit("reshape", [picked], {"shape": list(piece.shape)}))
    return tuple(names)


def _softmax(log):
    def convert(c, a):
        x = a["self"]
        if not c.dtype(x).is_floating_point:
            raise Unsupported("softmax of integers")
        name = c.tensor(x)
        if c.result().dtype != c.dtype(x):
            name = c.cast(name, c.dtype(x), c.result().dtype)
        return c.emit("log_softmax" if log else "softmax", [name], {"dim": a["dim"]})

    return convert


def _layer_norm(c, a):
    x = a["input"]
    shape = c.shape(x)
    normalized = list(a["normalized_shape"])
    if len(normalized) != 1:
        raise Unsupported("layer_norm over %d dims" % len(normalized))
    dtype = c.dtype(x)
    features = shape[-1]
    weight = a.get("weight")
    bias = a.get("bias")
    weight_name = c.tensor(weight) if weight is not None else c.emit(
        "full", [], {"value": 1.0, "shape": [features], "dtype": dtype_name(dtype)})
    bias_name = c.tensor(bias) if bias is not None else c.emit(
        "full", [], {"value": 0.0, "shape": [features], "dtype": dtype_name(dtype)})
    out = c.emit("layer_norm", [c.tensor(x), weight_name, bias_name], {"eps": float(a["eps"])})
    if op_name(c.node.target) == "aten.native_layer_norm":
        # A training graph saves the row statistics for the backward.
        wanted = {user.args[1] for user in c.node.users if user.users}
        if not wanted & {1, 2}:
            return (out, None, None)
        name = c.tensor(x)
        last = len(shape) - 1
        mean = c.emit("mean", [name], {"dims": [last], "keepdim": 1})
        centered = c.emit("sub", [name, mean])
        variance = c.emit("mean", [c.emit("mul", [centered, centered])],
                          {"dims": [last], "keepdim": 1})
        rstd = c.emit("rsqrt", [c.emit("add", [variance, c.scalar(float(a["eps"]), dtype)])])
        statistics = []
        for position, value in ((1, mean), (2, rstd)):
            saved = c.result()[position]
            if list(saved.shape) != shape[:-1] + [1]:
                value = c.emit("reshape", [value], {"shape": list(saved.shape)})
            statistics.append(c.cast(value, dtype, saved.dtype))
        return (out, statistics[0], statistics[1])
    return out


def _embedding(c, a):
    return c.emit("embedding", [c.tensor(a["weight"]), c.tensor(a["indices"])])


def _reduce(op):
    def convert(c, a):
        x = a["self"]
        rank = len(c.shape(x))
        dims = _dims(a.get("dim"), rank)
        value = c.tensor(x)
        if a.get("dtype") is not None and a["dtype"] != c.dtype(x):
            # PyTorch casts the input to `dtype` before reducing (autocast's
            # float32 sums of bf16 values).
            if not (a["dtype"].is_floating_point and c.dtype(x).is_floating_point):
                raise Unsupported("%s with dtype=%s" % (op, a["dtype"]))
            value = c.cast(value, c.dtype(x), a["dtype"])
        result = c.result().dtype
        if c.dtype(x) == torch.bool:
            # grove reduces no bools: a sum counts them as int64 (PyTorch's
            # result), amax takes them as int32 and gives bool back.
            work = torch.int32 if result == torch.bool else result
            value = c.cast(value, torch.bool, work)
        keepdim = 1 if a.get("keepdim") else 0
        if rank == 0:
            return c.cast(value, work, result) if c.dtype(x) == torch.bool else value

        def reduce(name):
            return reduced_over(c, op, name, rank, dims, keepdim)

        if op == "max" and result in INTEGER_MAXIMA:
            top, _ = integer_maximum(c, value, result, dims or list(range(rank)))
            reduced = c.emit("reshape", [top], {"shape": list(c.result().shape)})
        elif op == "sum" and not result.is_floating_point:
            count = 1
            for d in (dims or range(rank)):
                count *= c.shape(x)[d]
            if c.dtype(x) != torch.bool:
                value = c.cast(value, c.dtype(x), result)  # int32 sums to int64, as PyTorch
            reduced = integer_sum(c, value, result, count, c.dtype(x) == torch.bool, reduce)
        else:
            reduced = reduce(value)
        if c.dtype(x) == torch.bool and result == torch.bool:
            reduced = c.cast(reduced, torch.int32, torch.bool)
        return reduced

    return convert


# Note [Integer maxima in f32-exact pieces]: grove's reductions accumulate
# in f32 (Note [Kernel spec reductions]), which holds integers exactly only
# up to 2^24. An integer's maximum is taken in pieces that f32 holds exactly:
# the value's high bits (x with its low bits cleared: a multiple of 2^low with
# at most 24 significant bits, sign included), then among the positions that
# reach that maximum the next bits, and so on; the pieces' sum is the maximum
# and the first position left is its index. Each piece is cut with
# bitwise_and by a mask f32 also holds exactly. Guarded by
# MathOpsTest.test_argmax_and_max_of_integers_and_bools
# (tests/python/importer_math_ops_test.py), with int64 values near +-2^62,
# for argmax, max/min and amax alike.
INTEGER_MAXIMA = {
    torch.int64: [-(1 << 40), (1 << 40) - (1 << 16), (1 << 16) - 1],
    torch.int32: [-(1 << 16), (1 << 16) - 1],
}


def integer_maximum(c, name, dtype, dims):
    """(the maximum of integer value `name` over `dims`, kept as size 1; the
    bool mask of the positions holding it), exact (Note [Integer maxima in
    f32-exact pieces]); `dtype` in INTEGER_MAXIMA."""
    lowest = c.scalar(float(torch.iinfo(dtype).min), dtype)
    reaching, top = None, None
    for mask in INTEGER_MAXIMA[dtype]:
        piece = c.emit("bitwise_and", [name, c.scalar(float(mask), dtype)])
        considered = piece if reaching is None else c.emit("where", [reaching, piece, lowest])
        piece_top = c.emit("max", [considered], {"dims": list(dims), "keepdim": 1})
        hits = c.emit("eq", [piece, piece_top])
        reaching = hits if reaching is None else c.emit("bitwise_and", [reaching, hits])
        top = piece_top if top is None else c.emit("add", [top, piece_top])
    return top, reaching


# Note [Integer sums in f32-exact pieces]: grove's reductions accumulate in f32
# (Note [Kernel spec reductions]), exact for integers only up to 2^24. A sum of
# 0/1 values (a bool mask counted) is exact below 2^24 elements a sum. Other
# integers are summed in 8-bit pieces (x & (255 << 8k), the top piece signed):
# each piece's sum is 2^(8k) times a sum of values under 256, exact while the
# count stays under 2^24 / 255, and the pieces' sums add in integer
# arithmetic. A longer sum is left to PyTorch, said why. Test:
# MathOpsTest.test_integer_sums_are_exact (tests/python/importer_math_ops_test.py).
_PIECE_BITS = {torch.int64: 64, torch.int32: 32}  # grove's integer dtypes
_EXACT = 1 << 24


def integer_sum(c, value, dtype, count, counts_bools, reduce):
    """reduce(value) for a sum of integers, exact (Note [Integer sums in
    f32-exact pieces]); `value` already has the result's integer dtype."""
    if counts_bools:
        if count >= _EXACT:
            raise Unsupported("a count of %d booleans (grove's f32 sums are exact below 2^24)"
                              % count)
        return reduce(value)
    if count * 255 >= _EXACT:
        raise Unsupported("a sum of %d integers (grove's f32 sums take them exactly in 8-bit "
                          "pieces below %d)" % (count, _EXACT // 255))
    bits = _PIECE_BITS[dtype]
    total = None
    for shift in range(0, bits, 8):
        mask = 255 << shift
        if shift + 8 == bits:
            mask -= 1 << bits  # the top piece keeps the sign (two's complement)
        piece = c.emit("bitwise_and", [value, c.scalar(mask, dtype)])
        summed = reduce(piece)
        total = summed if total is None else c.emit("add", [total, summed])
    return total


def reduced_over(c, op, name, rank, dims, keepdim):
    """`op` of a rank-`rank` value over `dims` (empty: all), keeping them as
    size 1 where keepdim: a full reduction (full_reduction) when it reduces
    every dim away."""
    if not keepdim and sorted(dims or range(rank)) == list(range(rank)):
        return full_reduction(c, op, name, rank)
    return c.emit(op, [name], {"dims": list(dims), "keepdim": 1 if keepdim else 0})


def full_reduction(c, op, name, rank):
    """`op` over every dim of a rank-`rank` value, to a 0-d value. Over the
    last dim first, then the rest: grove's lowering fails on some single
    full reductions of broadcast operands ("keeps needing relaid copies", a
    scheduler bug reported with its repro)."""
    if rank >= 2:
        name = c.emit(op, [name], {"dims": [rank - 1], "keepdim": 0})
    return c.emit(op, [name], {"dims": [], "keepdim": 0})


def variance_and_mean(c, a):
    """(the variance var, std and var_mean take: over `dim`, shaped by
    keepdim, divided by the count less the correction; the mean, dims kept)
    from two passes over x."""
    x = a["self"]
    rank = len(c.shape(x))
    dims = _dims(a.get("dim"), rank) or list(range(rank))
    if "correction" in a and "unbiased" not in a:
        correction = 1 if a.get("correction") is None else a["correction"]
    else:
        correction = 1 if a.get("unbiased", True) else 0
    dtype = c.dtype(x)
    count = 1
    for d in dims:
        count *= c.shape(x)[d]
    name = c.tensor(x)
    mean = c.emit("mean", [name], {"dims": dims, "keepdim": 1})
    centered = c.emit("sub", [name, mean])
    total = c.emit("sum", [c.emit("mul", [centered, centered])],
                   {"dims": dims, "keepdim": 1 if a.get("keepdim") else 0})
    return c.emit("div", [total, c.scalar(max(count - correction, 0), dtype)]), mean


def _var(c, a):
    return variance_and_mean(c, a)[0]


def _to_copy(c, a):
    x = a["self"]
    target = c.result().dtype
    if c.result().device != c.value(x).device:
        raise Unsupported("a copy to another device")
    return c.cast(c.tensor(x), c.dtype(x), target)


def _identity(c, a):
    return c.tensor(a.get("self", a.get("input")))


def _dropout(c, a):
    if a.get("train"):
        raise Unsupported("dropout in training mode")
    name = c.tensor(a["input"])
    if op_name(c.node.target) == "aten.native_dropout":
        return (name, None)
    return name


# Note [Fused attention in the importer]: scaled_dot_product_attention (and
# PyTorch's fused variants of it) becomes grove's one `attention` op where the
# op takes it: queries, keys and values of one rank >= 3 with equal leading
# dims, key heads dividing query heads (grouped-query attention only with
# enable_gqa, as PyTorch requires), a bool or float mask, head width <=
# MAX_FUSED_HEAD and keys <= MAX_FUSED_KEYS. GROVE_FUSED_ATTENTION says where:
# "auto" (the default) only where the runtime's sequence attention kernel
# takes the sizes (its keys, values and per-warp rows fit 48 KiB of shared
# memory: Note [Sequence attention kernel], runtime/sequence_attention_kernel.h),
# so that the op runs as that one launch with no copies; "1" wherever the op
# takes it (longer sequences then run the generated kernel, Note [Fused
# attention kernel]); "0" never. Anything else is written out as matmul,
# scale, mask, softmax and matmul. On an H100 the generated kernel had made
# batch-1 calls slower than written out (session 15: GPT-2 189.7 against
# 130.8 us) and batch 16 too (LLaMA 286.7 against 242.8); the sequence kernel
# is one launch with no copies (torch_zoo --attention-ab compares it with
# written out). Tests: importer_ops_test's AttentionTest.
MAX_FUSED_HEAD = 128
MAX_FUSED_KEYS = 512
# The sequence kernel's shared memory in floats, its warps per block and the
# most query rows a block stages (runtime/sequence_attention_kernel.cc).
SEQUENCE_KERNEL_FLOATS = 48 * 1024 // 4
SEQUENCE_KERNEL_WARPS = 4
SEQUENCE_KERNEL_ROWS = 16
FUSED_ATTENTION_MODES = ("auto", "1", "0")


def _fused_attention_mode():
    import os

    value = os.environ.get("GROVE_FUSED_ATTENTION", "auto")
    if value not in FUSED_ATTENTION_MODES:
        raise ValueError("GROVE_FUSED_ATTENTION=%r; use auto (the attention op where the "
                         "sequence attention kernel takes it, the default), 1 (wherever the op "
                         "takes it) or 0 (write it out as matmuls and softmax)" % value)
    return value


def _sequence_kernel_fits(keys, head, value_head):
    """Whether the sequence attention kernel's shared memory holds these sizes."""
    return (keys * (head + 1) + keys * value_head + SEQUENCE_KERNEL_ROWS * head +
            SEQUENCE_KERNEL_WARPS * keys <= SEQUENCE_KERNEL_FLOATS)


def _fused_attention(c, a, scale):
    """The `attention` node of Note [Fused attention in the importer], or None
    where the op does not take this call."""
    q, k, v = a["query"], a["key"], a["value"]
    mask = a.get("attn_mask", a.get("attn_bias"))
    q_shape, k_shape, v_shape = c.shape(q), c.shape(k), c.shape(v)
    rank = len(q_shape)
    dtype = c.dtype(q)
    mode = _fused_attention_mode()
    if (mode == "0" or rank < 3 or len(k_shape) != rank or
            len(v_shape) != rank or dtype not in (torch.float32, torch.bfloat16, torch.float16) or
            c.dtype(k) != dtype or c.dtype(v) != dtype):
        return None
    heads, key_heads = q_shape[-3], k_shape[-3]
    if (q_shape[:-3] != k_shape[:-3] or k_shape[:-1] != v_shape[:-1] or
            k_shape[-1] != q_shape[-1] or heads % key_heads != 0 or
            (key_heads != heads and not a.get("enable_gqa"))):
        return None
    if (not 1 <= q_shape[-1] <= MAX_FUSED_HEAD or not 1 <= v_shape[-1] <= MAX_FUSED_HEAD or
            k_shape[-2] > MAX_FUSED_KEYS):
        return None
    if mode == "auto" and not _sequence_kernel_fits(k_shape[-2], q_shape[-1], v_shape[-1]):
        return None
    operands = [c.tensor(q), c.tensor(k), c.tensor(v)]
    if mask is not None:
        scores = q_shape[:-1] + [k_shape[-2]]
        mask_shape = c.shape(mask)
        if len(mask_shape) > rank or any(
                size not in (1, scores[rank - len(mask_shape) + d])
                for d, size in enumerate(mask_shape)):
            return None
        operands.append(c.tensor(mask) if c.dtype(mask) in (torch.bool, dtype)
                        else c.operand(mask, dtype))
    return c.emit("attention", operands, {"scale": float(scale),
                                          "causal": 1 if a.get("is_causal") else 0})


# Attention ops with one result (PyTorch's fused variants return several);
# grove_scaled_dot_product_attention: Note [Attention kept whole through
# tracing] (kept_attention.py).
_ONE_RESULT_ATTENTION = {"aten.scaled_dot_product_attention",
                         "grove.grove_scaled_dot_product_attention"}


def _repeat_heads(c, x, heads):
    """Key or value `x` [..., Hk, T, D] with each head repeated for the
    Hq / Hk query heads of its group (grouped-query attention written out)."""
    shape = c.shape(x)
    group = heads // shape[-3]
    grouped = shape[:-2] + [1] + shape[-2:]
    wide = shape[:-2] + [group] + shape[-2:]
    zeros = c.emit("full", [], {"value": 0.0, "shape": wide, "dtype": dtype_name(c.dtype(x))})
    repeated = c.emit("add", [c.emit("reshape", [c.tensor(x)], {"shape": grouped}), zeros])
    return c.emit("reshape", [repeated], {"shape": shape[:-3] + [heads] + shape[-2:]})


def _attention(c, a):
    """scaled_dot_product_attention: softmax(q k^T * scale + mask) v."""
    q, k, v = a["query"], a["key"], a["value"]
    dtype = c.dtype(q)
    if a.get("dropout_p"):
        raise Unsupported("attention with dropout")
    head = c.shape(q)[-1]
    scale = a.get("scale") or 1.0 / math.sqrt(head)
    fused = _fused_attention(c, a, scale)
    if fused is not None:
        if op_name(c.node.target) not in _ONE_RESULT_ATTENTION:
            return (fused,) + (None,) * (len(c.result()) - 1)
        return fused
    if a.get("enable_gqa") and c.shape(k)[-3] != c.shape(q)[-3]:
        k, v = (_repeat_heads(c, x, c.shape(q)[-3]) for x in (k, v))
    else:
        k, v = c.tensor(k), c.tensor(v)
    keys = c.emit("transpose", [k], {"dim0": -2, "dim1": -1})
    scores = c.emit("mul", [c.emit("matmul", [c.tensor(q), keys]), c.scalar(scale, dtype)])
    mask = a.get("attn_mask", a.get("attn_bias"))
    if mask is not None:
        if c.dtype(mask) == torch.bool:
            scores = c.emit("where", [c.tensor(mask), scores, c.scalar(-math.inf, dtype)])
        else:
            scores = c.emit("add", [scores, c.operand(mask, dtype)])
    if a.get("is_causal"):
        rows, cols = c.shape(q)[-2], c.shape(a["key"])[-2]
        causal = torch.ones(rows, cols, dtype=torch.bool, device=c.value(q).device).tril()
        scores = c.emit("where", [c.importer.constant(c.segment, causal), scores,
                                  c.scalar(-math.inf, dtype)])
    weights = c.emit("softmax", [scores], {"dim": -1})
    out = c.emit("matmul", [weights, v])
    if op_name(c.node.target) not in _ONE_RESULT_ATTENTION:
        return (out,) + (None,) * (len(c.result()) - 1)
    return out


CONVERTERS = {
    "aten.add": _binary("add"),
    "aten.sub": _binary("sub"),
    "aten.mul": _binary("mul"),
    "aten.div": _div,
    "aten.floor_divide": _floor_divide,
    "aten.rsub": _rsub,
    "aten.pow": _pow,
    "aten.lt": _binary("lt"),
    "aten.le": _binary("le"),
    "aten.gt": _binary("gt"),
    "aten.ge": _binary("ge"),
    "aten.eq": _binary("eq"),
    "aten.ne": _binary("ne"),
    "aten.neg": _unary("neg"),
    "aten.exp": _unary("exp"),
    "aten.log": _unary("log"),
    "aten.sqrt": _unary("sqrt"),
    "aten.rsqrt": _unary("rsqrt"),
    "aten.tanh": _unary("tanh"),
    "aten.sigmoid": _unary("sigmoid"),
    "aten.relu": _unary("relu"),
    "aten.reciprocal": _reciprocal,
    "aten.silu": _silu,
    "aten.abs": _abs,
    "aten.gelu": _gelu,
    "aten.where": _where,
    "aten.masked_fill": _masked_fill,
    "aten.bitwise_not": _logical_not,
    "aten.logical_not": _logical_not,
    "aten.mm": _matmul,
    "aten.bmm": _matmul,
    "aten.matmul": _matmul,
    "aten.addmm": _addmm,
    "aten.baddbmm": _baddbmm,
    "aten.linear": _linear,
    "aten.t": _t,
    "aten.view": _reshape,
    "aten._unsafe_view": _reshape,
    "aten.reshape": _reshape,
    "aten._reshape_alias": _reshape,
    "aten.unsqueeze": _reshape,
    "aten.squeeze": _reshape,
    "aten.flatten": _reshape,
    "aten.permute": _permute,
    "aten.transpose": _transpose,
    "aten.expand": _expand,
    "aten.slice": _slice,
    "aten.select": _select,
    "aten.cat": _cat,
    "aten.stack": _stack,
    "aten.split": _split,
    "aten.split_with_sizes": _split,
    "aten._softmax": _softmax(False),
    "aten._safe_softmax": _softmax(False),
    "aten.full_like": _full_like(None),
    "aten.zeros_like": _full_like(0.0),
    "aten.ones_like": _full_like(1.0),
    "aten.new_zeros": _full_like(0.0),
    "aten.new_ones": _full_like(1.0),
    "aten.new_empty": _full_like(0.0),
    "aten.new_full": _full_like(None),
    "aten.empty_like": _full_like(0.0),
    "aten.new_empty_strided": _empty_strided,
    "aten.empty_strided": _empty_strided,
    "aten.fill": _fill,
    "aten.unbind": _unbind,
    "aten.softmax": _softmax(False),
    "aten._log_softmax": _softmax(True),
    "aten.log_softmax": _softmax(True),
    "aten.native_layer_norm": _layer_norm,
    "aten.layer_norm": _layer_norm,
    "aten.embedding": _embedding,
    "aten.sum": _reduce("sum"),
    "aten.mean": _reduce("mean"),
    "aten.amax": _reduce("max"),
    "aten.var": _var,
    "aten._to_copy": _to_copy,
    "aten.to": _to_copy,
    "aten.clone": _identity,
    "aten.alias": _identity,
    "aten.detach": _identity,
    "aten.contiguous": _identity,
    "aten.lift_fresh_copy": _identity,
    "aten.dropout": _dropout,
    "aten.native_dropout": _dropout,
    "aten.scaled_dot_product_attention": _attention,
    "aten._scaled_dot_product_flash_attention": _attention,
    "aten._scaled_dot_product_efficient_attention": _attention,
    "aten._scaled_dot_product_flash_attention_for_cpu": _attention,
    "aten._scaled_dot_product_cudnn_attention": _attention,
    "aten._scaled_dot_product_attention": _attention,
    "aten._scaled_dot_product_attention_forward": _attention,
    "grove.grove_scaled_dot_product_attention": _attention,
}


# Assertions tracing inserts about dtypes and sizes; grove checks every input's
# type on each call, so they are dropped instead of splitting the graph.


def converter_in_front(names, applies, converter):
    """Puts `converter` before the one registered under each of `names` for
    the nodes where applies(c, a) holds (3-d and transposed convolutions in
    front of the 2-d converters)."""
    for name in names:
        def convert(c, a, others=CONVERTERS[name]):
            return converter(c, a) if applies(c, a) else others(c, a)

        others = CONVERTERS[name]
        # The modules that convert the op, for tools/op_table.py.
        convert.grove_modules = [converter.__module__] + getattr(
            others, "grove_modules", [getattr(others, "__module__", __name__)])
        CONVERTERS[name] = convert
