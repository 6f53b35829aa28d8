"""TensorDesc views of torch tensors and NumPy arrays for the C API, and the
objects a description holds alive until grove releases it. PyTorch is
imported only when a torch value is met (NumPy users need no torch).
"""

import ctypes
import itertools

from grove import _capi
from grove import dtypes

_held = {}
_tokens = itertools.count(1)


def _release(context, _forget=_held.pop):
    _forget(context, None)


# Note [Releases during interpreter exit]: grove calls _release_callback when
# it drops a borrowed description, which may happen as late as the
# interpreter's exit (a parameter's .grad over pool memory freed while module
# dictionaries are cleared frees the storage that holds a bound parameter). So
# the callback must outlive every module: it holds one reference that is never
# dropped (a ctypes thunk freed before its last call is a jump into freed
# memory), and _release reads nothing from the module's globals (its dict is
# bound as a default). Guarded by TrainingExitTest (tests/python/handout_test.py).
_release_callback = _capi.RELEASE(_release)
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_release_callback))


def _release_descs(descs, count):
    """Runs the releases of descriptions no grove call took."""
    for index in range(count):
        if descs[index].release:
            _release(descs[index].release_context)


def _hold(obj):
    token = next(_tokens)
    _held[token] = obj
    return token


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


_TENSOR_TYPE = None


def _is_torch(value):
    global _TENSOR_TYPE
    if _TENSOR_TYPE is None:
        torch = _torch()
        _TENSOR_TYPE = torch.Tensor if torch is not None else type(None)
    return isinstance(value, _TENSOR_TYPE) and _TENSOR_TYPE is not type(None)


def _parse_device(device):
    text = str(device)
    kind, _, index = text.partition(":")
    codes = {"cpu": _capi.DEVICE_CPU, "sim": _capi.DEVICE_SIM, "cuda": _capi.DEVICE_CUDA}
    if kind not in codes:
        raise ValueError("grove: unknown device %r (use 'sim', 'cuda' or 'cuda:N')" % text)
    return codes[kind], int(index or 0)


def describe(value, host_device, what, release=True):
    """A TensorDesc viewing `value` (a torch tensor or numpy array) and the
    objects that must stay alive while the description is in use. Host memory
    is described as `host_device` (sim memory is host memory)."""
    if _is_torch(value):
        codes = dtypes.torch_codes()
        if value.dtype not in codes:
            raise TypeError("grove: %s has dtype %s, which grove does not take" % (what, value.dtype))
        dtype = codes[value.dtype]
        if value.is_cuda:
            device = (_capi.DEVICE_CUDA, value.device.index or 0)
        elif value.device.type == "cpu":
            device = host_device
        else:
            raise TypeError("grove: %s is on %s; grove takes cpu (as sim) and cuda tensors"
                            % (what, value.device))
        shape, strides, data = tuple(value.shape), value.stride(), value.data_ptr()
    else:
        import numpy

        array = value if isinstance(value, numpy.ndarray) else numpy.asarray(value)
        name = str(array.dtype)
        if name not in dtypes.NUMPY_CODES:
            raise TypeError("grove: %s has dtype %s, which grove does not take" % (what, name))
        dtype = dtypes.NUMPY_CODES[name]
        device = host_device
        size = array.itemsize
        if any(stride % size for stride in array.strides):
            raise ValueError("grove: %s has strides %s that are not whole elements"
                             % (what, array.strides))
        shape, strides = array.shape, tuple(stride // size for stride in array.strides)
        data = array.ctypes.data
        value = array
    rank = len(shape)
    shape_array = (ctypes.c_int64 * max(rank, 1))(*shape)
    stride_array = (ctypes.c_int64 * max(rank, 1))(*strides)
    desc = _capi.TensorDesc(data, dtype, device[0], device[1], rank, shape_array, stride_array)
    if release:
        desc.release = _release_callback
        # A torch tensor is held through an alias of its storage, so a later
        # `param.data = other` cannot free the memory grove still reads.
        desc.release_context = _hold(value.detach() if _is_torch(value) else value)
    return desc, (shape_array, stride_array, value)
