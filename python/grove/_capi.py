"""ctypes declarations of capi/grove.h and the loading of libgrove.so.

The library is found through GROVE_LIBRARY (a path), next to this package, or
in a Bazel runfiles tree (capi/libgrove.so beside python/). The structs mirror
the header's layout exactly; the header only ever appends fields.
"""

import ctypes
import os
import sys

from grove import dtypes

# The C API version this binding speaks (GROVE_CAPI_VERSION in capi/grove.h);
# the library's is checked when it loads. Test: tests/python/capi_binding_test.py.
CAPI_VERSION = 8
# Longest group id grove_group_new_id makes (GROVE_GROUP_ID_MAX).
GROUP_ID_MAX = 256

OK = 0
STATUS_NAMES = {
    1: "invalid argument",
    2: "shape",
    3: "dtype",
    4: "device",
    5: "stale",
    6: "model format",
    7: "out of memory",
    8: "capacity",
    9: "internal",
}

F32, F16, BF16, I32, I64, BOOL, F64 = (dtypes.CODES[name] for name in
                                        ("f32", "f16", "bf16", "i32", "i64", "bool", "f64"))
DTYPE_NAMES = dtypes.NAMES
DEVICE_CPU, DEVICE_SIM, DEVICE_CUDA = range(3)

RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class TensorDesc(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("device_type", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("release", RELEASE),
        ("release_context", ctypes.c_void_p),
    ]


class StateBinding(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("tensor", TensorDesc)]


class GroveError(RuntimeError):
    """A failing C API call: `status` is the grove_status, the message grove's."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class StaleOutputError(GroveError):
    """An output a later replay overwrote, or whose step ended."""


# Note [Out of memory is PyTorch's out of memory]
# A grove call that cannot get device memory raised a plain GroveError, so the
# code PyTorch users write around that failure did not see it: `except
# torch.cuda.OutOfMemoryError` (a smaller batch, a cache emptied) and the batch
# size finders of accelerate and Lightning, which look for that class or for
# "CUDA out of memory." in the message, let the error end the run. It is now
# OutOfMemoryError, which where PyTorch is loaded is also PyTorch's
# OutOfMemoryError, and a cuda device's message begins "CUDA out of memory."
# (caching_allocator.cc). The call fails whole and the model stays usable: a
# smaller call after it runs, and the failed call fails the same way again.
# Tests: OutOfMemoryTest (tests/python/out_of_memory_test.py, sim with
# GROVE_SIM_MEMORY_BYTES).
class OutOfMemoryError(GroveError):
    """Device memory ran out during a grove call (grove_status 7)."""


_OUT_OF_MEMORY = {}


def torch_out_of_memory_class():
    """PyTorch's OutOfMemoryError (torch.OutOfMemoryError, or 1.13's
    torch.cuda.OutOfMemoryError) where PyTorch is loaded, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return (getattr(torch, "OutOfMemoryError", None)
            or getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None))


def _out_of_memory_class():
    """OutOfMemoryError, joined with PyTorch's own where PyTorch is loaded."""
    base = torch_out_of_memory_class()
    if base is None:
        return OutOfMemoryError
    if base not in _OUT_OF_MEMORY:
        _OUT_OF_MEMORY[base] = type("OutOfMemoryError", (OutOfMemoryError, base),
                                    {"__module__": __name__, "__doc__": OutOfMemoryError.__doc__})
    return _OUT_OF_MEMORY[base]


def _candidates():
    explicit = os.environ.get("GROVE_LIBRARY")
    if explicit:
        return [explicit]
    here = os.path.dirname(os.path.abspath(__file__))
    found = [os.path.join(here, "libgrove.so")]
    # Bazel runfiles: <runfiles>/<workspace>/python/grove -> <workspace>/capi.
    found.append(os.path.join(here, "..", "..", "capi", "libgrove.so"))
    runfiles = os.environ.get("RUNFILES_DIR") or os.environ.get("TEST_SRCDIR")
    if runfiles:
        for workspace in sorted(os.listdir(runfiles)) if os.path.isdir(runfiles) else []:
            found.append(os.path.join(runfiles, workspace, "capi", "libgrove.so"))
    return found


_library = None
_fast = None


def fast_library():
    """libgrove.so again through ctypes.PyDLL, with no argument conversion: the
    per-call entry points (run_dlpack, dlpack_check, and the invocation
    around a door call) called with prepared ctypes objects. PyDLL keeps the
    GIL during the call, which saves its release and reacquisition (a grove
    call never waits on Python)."""
    global _fast
    if _fast is None:
        lib = ctypes.PyDLL(library()._name)
        for name in ("grove_model_run_dlpack", "grove_dlpack_check", "grove_invocation_begin",
                     "grove_invocation_end", "grove_model_run_keeping",
                     "grove_model_run_with_kept", "grove_model_run_dlpack_invocation",
                     "grove_model_run_handout", "grove_trees_enter", "grove_trees_exit"):
            getattr(lib, name).restype = ctypes.c_int
        lib.grove_invocation_begin.argtypes = [ctypes.c_uint64]
        lib.grove_invocation_end.argtypes = []
        lib.grove_trees_exit.argtypes = []
        _fast = lib
    return _fast


def library():
    """The loaded libgrove.so with its function signatures declared."""
    global _library
    if _library is not None:
        return _library
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            loaded = _declare(ctypes.CDLL(os.path.abspath(path)))
            version = loaded.grove_capi_version()
            if version != CAPI_VERSION:
                raise ImportError(
                    "grove: %s speaks C API version %d, and this grove package needs version "
                    "%d; use the libgrove.so built with this package (bazel build "
                    "//capi:libgrove.so)" % (path, version, CAPI_VERSION))
            _library = loaded
            return _library
        tried.append(path)
    raise ImportError(
        "grove: libgrove.so not found (looked at %s); build it with "
        "`bazel build //capi:libgrove.so` and set GROVE_LIBRARY to its path" % ", ".join(tried)
    )


VOID_FUNCTIONS = ("grove_model_destroy", "grove_tensor_destroy", "grove_string_free",
                  "grove_trees_destroy")


def signatures():
    """{name: argument types} of every grove_status function this binding declares."""
    p = ctypes.c_void_p
    size = ctypes.c_size_t
    i32p = ctypes.POINTER(ctypes.c_int32)
    i64p = ctypes.POINTER(ctypes.c_int64)
    signatures = {
        "grove_compile": [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(StateBinding), size,
                          ctypes.POINTER(p)],
        "grove_model_input_count": [p, ctypes.POINTER(size)],
        "grove_model_input_name": [p, size, ctypes.POINTER(ctypes.c_char_p)],
        "grove_model_output_count": [p, ctypes.POINTER(size)],
        "grove_model_run": [p, ctypes.POINTER(TensorDesc), size, p, ctypes.POINTER(p), size,
                            ctypes.POINTER(size)],
        "grove_model_run_dlpack": [p, ctypes.POINTER(TensorDesc), size, p, ctypes.POINTER(p),
                                   size, ctypes.POINTER(size)],
        "grove_model_run_dlpack_invocation": [p, ctypes.c_uint64, ctypes.POINTER(TensorDesc),
                                              size, p, ctypes.POINTER(p), size,
                                              ctypes.POINTER(size)],
        "grove_dlpack_check": [p],
        "grove_model_run_handout": [p, ctypes.c_uint64, ctypes.POINTER(p), size,
                                    ctypes.POINTER(TensorDesc), size, p, ctypes.POINTER(p),
                                    ctypes.POINTER(ctypes.c_uint64), size, ctypes.POINTER(size)],
        "grove_dlpack_unowned": [p, ctypes.POINTER(p)],
        "grove_dlpack_release": [ctypes.POINTER(p), size],
        "grove_model_run_keeping": [p, ctypes.POINTER(TensorDesc), size, p, i64p, size,
                                    ctypes.POINTER(p), i64p, size, ctypes.c_int64,
                                    ctypes.POINTER(p)],
        "grove_model_run_with_kept": [p, p, i64p, size, ctypes.POINTER(TensorDesc), size, p,
                                      ctypes.POINTER(p), size, ctypes.POINTER(size)],
        "grove_kept_check": [p, i64p],
        "grove_kept_value": [p, size, ctypes.POINTER(p)],
        "grove_model_output_dtype": [p, size, i32p],
        "grove_model_borrowed_copies": [p, ctypes.POINTER(ctypes.c_int64)],
        "grove_model_state": [p, ctypes.c_char_p, ctypes.POINTER(p)],
        "grove_model_time_runs": [p, ctypes.POINTER(TensorDesc), size, p, ctypes.c_int64,
                                  ctypes.POINTER(ctypes.c_double)],
        "grove_model_time_runs_split": [p, ctypes.POINTER(TensorDesc), size, p, ctypes.c_int64,
                                        ctypes.c_int, ctypes.POINTER(ctypes.c_double),
                                        ctypes.POINTER(ctypes.c_double),
                                        ctypes.POINTER(ctypes.c_double)],
        "grove_model_mark_step_begin": [p],
        "grove_trees_of_thread": [ctypes.POINTER(p)],
        "grove_trees_enter": [p],
        "grove_trees_exit": [],
        "grove_invocation_begin": [ctypes.c_uint64],
        "grove_invocation_end": [],
        "grove_model_stats_json": [p, ctypes.POINTER(p)],
        "grove_model_dot": [p, ctypes.POINTER(p)],
        "grove_optimizer_program": [ctypes.c_char_p, ctypes.POINTER(p)],
        "grove_tensor_dtype": [p, i32p],
        "grove_tensor_device": [p, i32p, i32p],
        "grove_tensor_rank": [p, i32p],
        "grove_tensor_shape": [p, i64p],
        "grove_tensor_strides": [p, i64p],
        "grove_tensor_data": [p, ctypes.POINTER(p)],
        "grove_tensor_is_valid": [p, i32p],
        "grove_tensor_copy_to_host": [p, p, size],
        "grove_tensor_to_dlpack": [p, ctypes.POINTER(p)],
        "grove_group_new_id": [ctypes.c_char_p, p, size, ctypes.POINTER(size)],
        "grove_group_join": [ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32, p, size,
                             ctypes.c_int64],
        "grove_group_leave": [ctypes.c_char_p],
    }
    return signatures


def _declare(lib):
    p = ctypes.c_void_p
    for name, arguments in signatures().items():
        function = getattr(lib, name)
        function.argtypes = arguments
        function.restype = ctypes.c_int
    for name in VOID_FUNCTIONS:
        getattr(lib, name).argtypes = [p]
        getattr(lib, name).restype = None
    lib.grove_last_error.argtypes = []
    lib.grove_last_error.restype = ctypes.c_char_p
    lib.grove_capi_version.restype = ctypes.c_int
    return lib


def check(status):
    """Raises GroveError (StaleOutputError for stale data) unless status is OK."""
    if status != OK:
        message = library().grove_last_error().decode("utf-8", "replace")
        kind = (StaleOutputError if status == 5
                else _out_of_memory_class() if status == 7 else GroveError)
        raise kind(status, message)
