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


class StorageOutsideOperandError(RuntimeError):
    """A step left to PyTorch reads memory around a value grove computes
    (Note [Layouts a PyTorch step reads], importer.py)."""


def draws_random_numbers(node):
    """Whether fx `node` is an ATen op that draws from PyTorch's generator
    (Note [Random draws are never constants], importer.py)."""
    tag = getattr(getattr(torch, "Tag", None), "nondeterministic_seeded", None)
    return node.op == "call_function" and tag is not None and \
        tag in getattr(node.target, "tags", ())


def untyped_storage(tensor):
    """The untyped storage under `tensor` (PyTorch 2.x's untyped_storage(),
    1.13's storage().untyped())."""
    method = getattr(tensor, "untyped_storage", None)
    return method() if method is not None else tensor.storage().untyped()


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


# Note [Strided windows over a value's own elements]: as_strided reads memory
# by strides, and grove's values have no memory layout; but where every
# position a window reads holds an element of its operand (as laid out in the
# import run, Note [The import run follows the traced strides]), the window is
# a gather of those elements by constant ids (HF Longformer's overlapping
# chunks of a transposed projection). A position outside the operand's
# elements (a slice's neighbours in its base) is memory grove's copy of the
# value does not have. Tests: ImporterTest.
# test_as_strided_windows_over_the_operand_run_in_grove and
# test_as_strided_past_a_grove_value_is_refused (tests/python/importer_test.py).
def strided_window_ids(value, size, stride, offset=None):
    """Per element of as_strided(value, size, stride, offset) (row-major),
    the row-major index of value's element at that storage position, as an
    int64 tensor; None where a position holds none of value's elements
    (Note [Strided windows over a value's own elements]). offset None:
    value's own storage offset."""
    offset = value.storage_offset() if offset is None else int(offset)
    size, stride = [int(extent) for extent in size], [int(step) for step in stride]
    if value.numel() == 0 or any(extent == 0 for extent in size):
        return None

    def last(shape, strides, start):
        return start + sum((extent - 1) * step for extent, step in zip(shape, strides))

    reach = max(last(value.shape, value.stride(), value.storage_offset()),
                last(size, stride, offset)) + 1
    storage = torch.arange(reach)
    held = torch.as_strided(storage, value.shape, value.stride(), value.storage_offset())
    owner = torch.full((reach,), -1, dtype=torch.int64)
    owner[held.reshape(-1)] = torch.arange(value.numel())
    ids = owner[torch.as_strided(storage, size, stride, offset).reshape(-1)]
    return None if bool((ids < 0).any()) else ids


def _overlaps(shape, strides):
    """Whether a layout holds one storage element for two of its positions
    (an expand's stride 0, overlapping windows)."""
    dims = sorted((stride, size) for size, stride in zip(shape, strides) if size > 1)
    reach = 0  # the storage span of the dims taken so far, less one
    for stride, size in dims:
        if stride <= reach:
            return True
        reach += (size - 1) * stride
    return False


def laid_out(value, strides, offset=0):
    """A copy of tensor `value` in a storage of its own, laid out with
    `strides` (in elements) from element `offset`. Where the layout holds one
    element for several positions (an expanded value's traced strides), the
    positions that share an element hold equal values, and any one of them
    is written there."""
    extent = offset + sum((size - 1) * stride for size, stride in zip(value.shape, strides)) + 1
    storage = torch.empty(max(extent, offset + 1), dtype=value.dtype, device=value.device)
    copy = storage.as_strided(value.shape, strides, offset)
    if value.numel() and _overlaps(value.shape, strides):
        positions = torch.arange(storage.numel(), device=value.device).as_strided(
            value.shape, strides, offset)
        storage[positions.reshape(-1)] = value.reshape(-1)
        return copy
    copy.copy_(value)
    return copy
