"""Outputs handed from grove to PyTorch and NumPy through DLPack: the Output
handle, the capsule, PyTorch's storage hook for overwritten outputs, and the
check of a saved output (Note [Kept outputs through DLPack] below).
"""

import ctypes
import itertools

from grove import _capi
from grove._capi import StaleOutputError
from grove._descs import _torch

# Note [Kept outputs through DLPack]: a replay of a CUDA graph writes its outputs
# into the same memory every time, so an output the caller still holds is
# overwritten by the next replay (the tree marks its storage: Note [Kept replay
# outputs], cudagraph_trees). DLPack hands PyTorch a bare pointer, so after each
# call the model asks grove (grove_tensor_is_valid) about every earlier output
# that is still alive and, where PyTorch has the storage hook
# (torch._C._set_storage_access_error_msg, PyTorch >= 2.1), makes any access to
# an overwritten one raise with grove's message, as PyTorch's own cudagraph
# trees do. Where there is no hook (older PyTorch, NumPy) the outputs of a
# graph backend are copied before they are returned, so nothing the caller holds
# is ever overwritten; eager outputs are fresh memory and never copied. Guarded
# by ModelTest.test_kept_outputs_of_a_graph_backend_never_change_under_the_caller
# and ModelTest.test_overwritten_output_raises_through_the_storage_hook
# (tests/python/model_test.py).

class Output:
    """An output tensor grove still holds (a C API handle)."""

    def __init__(self, handle):
        self._handle = ctypes.c_void_p(handle)

    def __del__(self):
        lib = _capi._library
        if lib is not None and self._handle:
            lib.grove_tensor_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def _get(self, function, ctype):
        value = ctype()
        _capi.check(function(self._handle, ctypes.byref(value)))
        return value.value

    @property
    def valid(self):
        return bool(self._get(_capi.library().grove_tensor_is_valid, ctypes.c_int32))

    @property
    def dtype(self):
        return _capi.DTYPE_NAMES[self._get(_capi.library().grove_tensor_dtype, ctypes.c_int32)]

    @property
    def shape(self):
        lib = _capi.library()
        rank = self._get(lib.grove_tensor_rank, ctypes.c_int32)
        shape = (ctypes.c_int64 * max(rank, 1))()
        _capi.check(lib.grove_tensor_shape(self._handle, shape))
        return tuple(shape[:rank])

    def data_ptr(self):
        return self._get(_capi.library().grove_tensor_data, ctypes.c_void_p) or 0

    def _capsule(self):
        managed = ctypes.c_void_p()
        _capi.check(_capi.library().grove_tensor_to_dlpack(self._handle, ctypes.byref(managed)))
        return _new_capsule(managed.value)

    def to_torch(self):
        """A torch tensor over the same memory (no copy)."""
        from torch.utils import dlpack

        tensor = dlpack.from_dlpack(self._capsule())
        if self.dtype == "bool":
            tensor = tensor.view(_torch().bool)
        return tensor

    def to_numpy(self):
        """A numpy array over the same memory (no copy; host and sim tensors only)."""
        import numpy

        array = numpy.from_dlpack(_DlpackExporter(self))
        if self.dtype == "bool":
            array = array.view(numpy.bool_)
        return array


class _DlpackExporter:
    def __init__(self, output):
        self._output = output

    def __dlpack__(self, stream=None):
        return self._output._capsule()

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU: numpy takes host memory only


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _new_capsule(pointer):
    return _capsule_new(pointer, b"dltensor", None)


_FROM_DLPACK = None


def _from_dlpack():
    global _FROM_DLPACK
    if _FROM_DLPACK is None:
        torch = _torch()
        _FROM_DLPACK = getattr(torch._C, "_from_dlpack", None)
        if _FROM_DLPACK is None:
            from torch.utils import dlpack

            _FROM_DLPACK = dlpack.from_dlpack
    return _FROM_DLPACK


def tensors_from_dlpack(managed, count):
    """Torch tensors over the first `count` DLManagedTensors of the ctypes
    array `managed`, made by one pass in C (map over the pointers: a capsule
    each, then torch's from_dlpack), no Python per tensor."""
    pointers = managed[:count]
    return list(map(_from_dlpack(), map(_capsule_new, pointers,
                                        itertools.repeat(b"dltensor", count),
                                        itertools.repeat(None, count))))


def _storage_hook():
    torch = _torch()
    return getattr(torch._C, "_set_storage_access_error_msg", None) if torch else None


def check_not_overwritten(tensor, what):
    """Raises StaleOutputError when `tensor` is an uncopied output of a graph
    backend (copy_outputs False) that a later replay overwrote; `what` names
    the tensor in the message."""
    pointer = getattr(tensor, "_grove_output", None)
    if pointer is None:
        return
    status = _capi.fast_library().grove_dlpack_check(ctypes.c_void_p(pointer))
    if status:
        message = _capi.library().grove_last_error().decode("utf-8", "replace")
        raise StaleOutputError(status, "grove: %s: %s" % (what, message))
