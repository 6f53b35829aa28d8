"""What the ATen importer's parts share: its errors, dtype names, op names
and a node's arguments by schema name."""

import operator

import torch
import torch.fx

from grove import dtypes


class Unsupported(Exception):
    """A node grove cannot take; it runs in PyTorch (or raises under strict)."""


class StrictModeError(RuntimeError):
    """strict=True and the graph holds an op grove does not take."""


def dtype_name(dtype):
    names = dtypes.torch_names()
    if dtype not in names:
        raise Unsupported("dtype %s" % dtype)
    return names[dtype]


# Note [Op names keep their namespace]: op_name once named every operator
# overload "aten.<name>", so a custom op of another library with an ATen op's
# name (mylib::add, transformers::grouped_mm_fallback) reached the ATen
# converter of that name: another op's semantics, silently. An op is named by
# its own namespace ("aten.addmm", "grove.grove_scaled_dot_product_attention",
# "transformers.grouped_mm_fallback"), and only converters registered under
# that namespace take it. Test: ImporterTest.test_a_custom_op_named_like_an_
# aten_op_runs_in_pytorch (tests/python/importer_test.py).
def op_name(target):
    """'aten.addmm' for aten.addmm.default ('<namespace>.<name>' for another
    library's op); the callable's name otherwise."""
    if isinstance(target, torch._ops.OpOverload):
        namespace = target._schema.name.split("::", 1)[0] if "::" in target._schema.name \
            else "aten"
        return "%s.%s" % (namespace, target.overloadpacket.__name__)
    if target is operator.getitem:
        return "getitem"
    return getattr(target, "__name__", str(target))


def node_arguments(node):
    """The node's arguments by schema name, defaults filled in."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return {}
    schema = target._schema
    result = {}
    positional = list(node.args)
    for index, argument in enumerate(schema.arguments):
        if index < len(positional):
            result[argument.name] = positional[index]
        elif argument.name in node.kwargs:
            result[argument.name] = node.kwargs[argument.name]
        elif argument.has_default_value():
            result[argument.name] = argument.default_value
        else:
            result[argument.name] = None
    return result


def laid_out(value, strides, offset=0):
    """A copy of tensor `value` in a storage of its own, laid out with
    `strides` (in elements) from element `offset`."""
    extent = offset + sum((size - 1) * stride for size, stride in zip(value.shape, strides)) + 1
    storage = torch.empty(max(extent, offset + 1), dtype=value.dtype, device=value.device)
    copy = storage.as_strided(value.shape, strides, offset)
    copy.copy_(value)
    return copy
