"""grove from Python: compile a grove JSON program and run it on NumPy arrays
or PyTorch tensors, through libgrove.so's C API (ctypes; no compiled module,
so one package serves any Python 3 and any PyTorch build).

    import grove
    model = grove.compile(program_json, backend="cudagraphs", device="sim")
    (y,) = model(x)            # x: a torch tensor or numpy array; y: the same kind

Inputs and bound params are viewed, never copied (Model.state(name).data_ptr()
is the caller's pointer). Outputs come back through DLPack without a copy
(Note [Kept outputs through DLPack] below).
"""

import ctypes
import itertools
import json
import threading
import weakref

from grove import _capi
from grove import dtypes
from grove._calls import CallGate
from grove._capi import GroveError, StaleOutputError

__all__ = ["compile", "Model", "GroveError", "StaleOutputError", "Output",
           "check_not_overwritten", "ThreadTrees", "thread_trees", "invocation"]

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

_held = {}
_tokens = itertools.count(1)


def _release(context):
    _held.pop(context, None)


_release_callback = _capi.RELEASE(_release)


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


def _storage_hook():
    torch = _torch()
    return getattr(torch._C, "_set_storage_access_error_msg", None) if torch else None


def _c_text(text, what):
    """`text` encoded for the C API, which reads a NUL-terminated string: a NUL
    inside it would silently end the text there, so it is refused."""
    if "\0" in text:
        raise ValueError("grove: %s holds a NUL character at offset %d; the C API reads text up "
                         "to the first NUL, so remove it (or escape it as \\u0000 inside a JSON "
                         "string)" % (what, text.index("\0")))
    return text.encode()


class Model:
    """A compiled grove program (a grove_model handle). One model may be
    called from many threads at once; close() waits for the calls in flight
    (Note [One model, many threads], _calls.py)."""

    def __init__(self, program, backend="eager", device="sim", dims=None, params=None,
                 never_capture=False, skip_warmup=False, stage="inference", copy_outputs=None,
                 verify=None):
        lib = _capi.library()
        text = _c_text(program if isinstance(program, str) else json.dumps(program),
                       "the program text")
        # Note [Verify mode] (verify.py): a graph backend's first calls are
        # compared with a grove eager twin of the same program.
        from grove import verify as verify_mode

        if verify is None:
            verify = verify_mode.enabled_by_environment()
        self._verify_twin = None
        self._calls_to_verify = verify_mode.verified_calls() if verify else 0
        self._verified_calls = 0
        self._program_name = None  # for VerifyError's messages only
        if verify and backend != "eager" and stage == "inference":
            self._verify_twin = Model(program, backend="eager", device=device, dims=dims,
                                      params=params, verify=False)
            self._program_name = (json.loads(text) if isinstance(program, str)
                                  else program).get("name", "?")
        self.backend = backend
        self.device = str(device)
        self._host_device = _parse_device(self.device)
        if self._host_device[0] == _capi.DEVICE_CUDA:
            self._host_device = (_capi.DEVICE_CPU, 0)
        options = {"backend": backend, "device": self.device, "never_capture": never_capture,
                   "skip_warmup": skip_warmup, "stage": stage}
        self.stage = stage
        # Note [Gradients handed out of the pool]: a call that may start a new
        # path of replays first gives still-held gradients memory of their own.
        self._keeps_handed_gradients = backend != "eager" and stage in ("forward", "inference")
        if dims:
            options["dims"] = dict(dims)
        params = dict(params or {})
        bindings = (_capi.StateBinding * max(len(params), 1))()
        self._bound_keepalive = []
        for index, (name, tensor) in enumerate(params.items()):
            encoded = _c_text(name, "param name %r" % name)
            desc, keep = describe(tensor, self._host_device, "param '%s'" % name)
            bindings[index] = _capi.StateBinding(encoded, desc)
            self._bound_keepalive.append(keep)
        handle = ctypes.c_void_p()
        _capi.check(lib.grove_compile(text, json.dumps(options).encode(), bindings,
                                      len(params), ctypes.byref(handle)))
        self._handle = handle
        count = ctypes.c_size_t()
        _capi.check(lib.grove_model_input_count(handle, ctypes.byref(count)))
        names = []
        for index in range(count.value):
            name = ctypes.c_char_p()
            _capi.check(lib.grove_model_input_name(handle, index, ctypes.byref(name)))
            names.append(name.value.decode())
        self.input_names = names
        _capi.check(lib.grove_model_output_count(handle, ctypes.byref(count)))
        self.output_count = count.value
        # copy_outputs: None follows Note [Kept outputs through DLPack]; else one
        # bool per output (Note [Saved activations stay in the pool], training.py).
        default_copy = Model.default_copy(backend)
        if copy_outputs is None:
            self._copy_flags = [default_copy] * self.output_count
        else:
            self._copy_flags = [bool(flag) for flag in copy_outputs]
            if len(self._copy_flags) != self.output_count:
                raise ValueError("grove: copy_outputs has %d flags for %d outputs"
                                 % (len(self._copy_flags), self.output_count))
        dtype = ctypes.c_int32()
        self._bool_outputs = []
        for index in range(self.output_count):
            _capi.check(lib.grove_model_output_dtype(handle, index, ctypes.byref(dtype)))
            self._bool_outputs.append(dtype.value == _capi.BOOL)
        # The fast path (Model.call_torch): per thread, one reused description
        # per input, rebuilt only when that input's layout changes.
        self._gate = CallGate(len(names), self.output_count)
        fast = _capi.fast_library()
        self._run_dlpack = fast.grove_model_run_dlpack
        self._dlpack_check = fast.grove_dlpack_check
        self._input_counts = [ctypes.c_size_t(n) for n in range(len(names) + 1)]
        self._output_capacity = ctypes.c_size_t(self.output_count)
        self._watch_kept = backend != "eager" and _storage_hook() is not None
        self._tag_outputs = backend != "eager" and copy_outputs is not None
        self._from_dlpack = _from_dlpack() if _torch() is not None else None

    @staticmethod
    def default_copy(backend):
        """Whether outputs of `backend` are copied by default (Note [Kept
        outputs through DLPack]): a graph backend's, where PyTorch has no
        storage hook."""
        return backend != "eager" and _storage_hook() is None

    def close(self):
        """Destroys the model once the calls in flight on other threads have
        returned; later calls raise GroveError."""
        gate = getattr(self, "_gate", None)
        if gate is not None and not gate.close():
            return
        if getattr(self, "_handle", None):
            if _handed_gradients and self.backend != "eager":
                # Note [Gradients handed out of the pool]: the tree frees its
                # pool once its last model goes, under a .grad still held.
                keep_handed_gradients()
            _capi.library().grove_model_destroy(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def run(self, *inputs, stream=None):
        """Runs the model; returns Output handles (no conversion)."""
        lib = _capi.library()
        count = len(inputs)
        descs = (_capi.TensorDesc * max(count, 1))()
        keep = []
        for index, value in enumerate(inputs):
            name = self.input_names[index] if index < len(self.input_names) else "extra"
            desc, kept = describe(value, self._host_device, "input '%s'" % name)
            descs[index] = desc
            keep.append(kept)
        outputs = (ctypes.c_void_p * max(self.output_count, 1))()
        produced = ctypes.c_size_t()
        try:
            state = self._gate.enter()
        except GroveError:
            _release_descs(descs, count)
            raise
        try:
            _capi.check(lib.grove_model_run(self._handle, descs, count, stream, outputs,
                                            self.output_count, ctypes.byref(produced)))
        finally:
            self._gate.leave(state)
        return [Output(outputs[i]) for i in range(produced.value)]

    def time_runs(self, *inputs, calls=100, stream=None):
        """Mean seconds of one call made `calls` times from C++ (no Python)."""
        lib = _capi.library()
        descs = (_capi.TensorDesc * max(len(inputs), 1))()
        keep = []
        for index, value in enumerate(inputs):
            desc, kept = describe(value, self._host_device, "input %d" % index)
            descs[index] = desc
            keep.append(kept)
        seconds = ctypes.c_double()
        try:
            state = self._gate.enter()
        except GroveError:
            _release_descs(descs, len(inputs))
            raise
        try:
            _capi.check(lib.grove_model_time_runs(self._handle, descs, len(inputs), stream,
                                                  calls, ctypes.byref(seconds)))
        finally:
            self._gate.leave(state)
        return seconds.value

    def __call__(self, *inputs, stream=None):
        """Runs the model on torch tensors (returns torch tensors) or numpy
        arrays (returns numpy arrays). Note [Kept outputs through DLPack]."""
        if self._verify_twin is not None and self._verified_calls < self._calls_to_verify:
            return self._verified_call(inputs, stream)
        if all(_is_torch(value) for value in inputs) and (inputs or _torch() is not None):
            return self.call_torch(inputs, stream)
        results = []
        for output in self.run(*inputs, stream=stream):
            value = output.to_numpy()
            # NumPy has no storage hook: a graph backend's outputs are copied.
            results.append(value.copy() if self.backend != "eager" else value)
        return results

    def _verified_call(self, inputs, stream):
        from grove import verify as verify_mode

        call = self._verified_calls
        self._verified_calls += 1
        expected = self._verify_twin(*inputs, stream=stream)
        twin, self._verify_twin = self._verify_twin, None
        try:
            results = self(*inputs, stream=stream)
        finally:
            self._verify_twin = twin
        if call + 1 >= self._calls_to_verify:
            self._verify_twin = None  # verified: the twin's memory goes
        torch = _torch()
        for index, (result, want) in enumerate(zip(results, expected)):
            if torch is not None and not _is_torch(result):
                result, want = torch.from_numpy(result), torch.from_numpy(want)
            problem = verify_mode.difference(result, want)
            if problem is not None:
                raise verify_mode.VerifyError(
                    "grove verify: model '%s' (%s, %s): output %d differs from grove eager: %s"
                    % (self._program_name, self.backend, verify_mode.phase_name(call), index,
                       problem))
        return results

    def call_torch(self, inputs, stream=None):
        """The fast path for torch tensors: inputs borrowed for the call (no
        callback; Note [Borrowed inputs], capi/grove.cc), outputs through
        DLPack (Note [Kept outputs through DLPack]). Returns a list."""
        if _handed_gradients and self._keeps_handed_gradients:
            keep_handed_gradients()
        gate = self._gate
        state = gate.enter()
        try:
            return self._call_torch(state, inputs, stream)
        finally:
            gate.leave(state)

    def describe_borrowed(self, state, inputs, count=None):
        """Fills the thread's reused descriptions with `inputs` (torch
        tensors, borrowed for one call: Note [Borrowed inputs], capi/grove.cc);
        `count` descriptions are expected (default: the model's inputs)."""
        layouts = state.layouts
        items = state.desc_items
        index = 0
        for tensor in inputs:
            layout = (tensor.shape, tensor.stride(), tensor.dtype, tensor.get_device())
            if layout != layouts[index]:
                desc, keep = describe(tensor, self._host_device, "input %d" % index,
                                      release=False)
                state.descs[index] = desc
                state.layout_arrays[index] = keep[:2]
                layouts[index] = layout
            else:
                items[index].data = tensor.data_ptr()
            index += 1
        return index

    def _call_torch(self, state, inputs, stream):
        if len(inputs) != len(state.layouts):
            self.run(*inputs, stream=stream)  # raises grove's message naming the inputs
        index = self.describe_borrowed(state, inputs)
        status = self._run_dlpack(self._handle, state.descs, self._input_counts[index],
                                  ctypes.c_void_p(stream) if stream else None, state.managed,
                                  self._output_capacity, state.produced_ref)
        if status:
            _capi.check(status)
        from_dlpack = self._from_dlpack
        results = []
        managed = state.managed
        kept = state.kept
        produced = state.produced.value
        for index in range(produced):
            pointer = managed[index]
            value = from_dlpack(_capsule_new(pointer, b"dltensor", None))
            if self._bool_outputs[index]:
                value = value.view(_torch().bool)
            if self._copy_flags[index]:
                value = value.clone()
            else:
                if self._tag_outputs:
                    # A training graph's saved activation: the backward that
                    # reads it checks it (check_not_overwritten) and names it,
                    # so the storage hook does not poison it first.
                    value._grove_output = pointer
                elif self._watch_kept:
                    kept.append((weakref.ref(value), pointer))
            results.append(value)
        if len(kept) > len(results):
            self._check_kept_dlpack(state, produced)
        return results

    def _check_kept_dlpack(self, state, newest):
        """Poisons every earlier output of this thread still alive that grove
        reports stale; the `newest` outputs (this call's) are fresh and kept
        unchecked."""
        hook = None
        alive = []
        kept = state.kept
        newest_entries = kept[len(kept) - newest:] if newest else []
        for reference, pointer in kept[:len(kept) - newest]:
            value = reference()
            if value is None:
                continue
            if self._dlpack_check(ctypes.c_void_p(pointer)) == 0:
                alive.append((reference, pointer))
                continue
            hook = hook or _storage_hook()
            message = _capi.library().grove_last_error().decode("utf-8", "replace")
            hook(value, "grove: " + message)
        state.kept = alive + newest_entries

    def _checked(self, call):
        """call(handle) inside the gate (Note [One model, many threads])."""
        state = self._gate.enter()
        try:
            _capi.check(call(self._handle))
        finally:
            self._gate.leave(state)
        return state

    def mark_step_begin(self):
        state = self._checked(_capi.library().grove_model_mark_step_begin)
        if state.kept:
            self._check_kept_dlpack(state, 0)

    def state(self, name):
        handle = ctypes.c_void_p()
        encoded = _c_text(name, "state name %r" % name)
        self._checked(lambda model: _capi.library().grove_model_state(model, encoded,
                                                                      ctypes.byref(handle)))
        return Output(handle.value)

    def _text(self, function):
        pointer = ctypes.c_void_p()
        self._checked(lambda model: function(model, ctypes.byref(pointer)))
        try:
            return ctypes.string_at(pointer.value).decode()
        finally:
            _capi.library().grove_string_free(pointer)

    def stats(self):
        return json.loads(self._text(_capi.library().grove_model_stats_json))

    def dot(self):
        return self._text(_capi.library().grove_model_dot)


# Note [Gradients handed out of the pool]: in a graph backend, the gradients a
# training step's backward returns are its outputs in the tree's pool, handed
# to autograd uncopied (it keeps each as its parameter's .grad). They stay
# valid through the step's path (the optimizer step reads them in place), but
# the next path's replays (the next step's forward, an evaluation) reuse that
# memory. So before a forward or inference call of a graph backend, every
# parameter whose .grad is still such a gradient gets a copy of it: a loop
# that sets the gradients to None (zero_grad's default) copies nothing, and
# gradient accumulation over several forwards keeps the right sums. A
# reference to a gradient taken elsewhere (g = p.grad, then p.grad = None) is
# not followed. The same copies are made before a graph backend's model is
# destroyed: the tree releases its pool with its last model, and a .grad
# viewing it would read freed memory. Guarded by
# TrainingTest.test_gradients_land_in_grad_without_a_copy_in_cudagraphs_mode,
# TrainingTest.test_gradient_accumulation_two_forwards_one_backward_each and
# TrainingTest.test_gradients_outlive_the_compiled_module.
_handed_gradients = []  # (weak reference to a parameter, data pointer of its gradient)


def hand_out_gradient(parameter, gradient):
    """Notes that `gradient`, pool memory of a graph backend, becomes
    `parameter`'s .grad (Note [Gradients handed out of the pool])."""
    _handed_gradients.append((weakref.ref(parameter), gradient.data_ptr()))


def keep_handed_gradients():
    """Copies every handed-out gradient still held as .grad into memory of its own."""
    handed = list(_handed_gradients)
    del _handed_gradients[:]
    for reference, pointer in handed:
        parameter = reference()
        grad = None if parameter is None else parameter.grad
        if grad is not None and grad.data_ptr() == pointer:
            parameter.grad = grad.clone()


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


def compile(program, backend="eager", device="sim", dims=None, params=None, **options):
    """Compiles a grove program (JSON text or a dict) into a Model."""
    return Model(program, backend=backend, device=device, dims=dims, params=params, **options)


class ThreadTrees:
    """One thread's trees of CUDA graphs (grove_trees_of_thread), entered from
    another thread with `with trees:` so that the calls made there land in
    them: the backward that PyTorch's autograd runs on its device thread uses
    the forward's trees (Note [Trees of another thread],
    cudagraph_trees/tree_manager.h)."""

    def __init__(self):
        handle = ctypes.c_void_p()
        _capi.check(_capi.library().grove_trees_of_thread(ctypes.byref(handle)))
        self._handle = handle
        self.thread = threading.get_ident()

    def __enter__(self):
        _capi.check(_capi.library().grove_trees_enter(self._handle))
        return self

    def __exit__(self, *exc):
        _capi.check(_capi.library().grove_trees_exit())
        return False

    def __del__(self):
        try:
            lib = _capi._library
            if lib is not None and getattr(self, "_handle", None):
                lib.grove_trees_destroy(self._handle)
                self._handle = None
        except (AttributeError, TypeError):  # interpreter shutdown: the module is gone
            pass


_thread_state = threading.local()


class invocation:
    """Runs the graph calls made inside it, on this thread, as one generation
    of grove's trees, so that an output of one model may be another's input
    (Note [Invocations of several models], cudagraph_trees/generations.h).
    key=None opens a fresh invocation; an integer key below 2**63 continues
    earlier invocations under the same key.

        with grove.invocation():
            (h,) = first(x)
            (y,) = second(h)
    """

    def __init__(self, key=None):
        self.key = int(key or 0)

    def __enter__(self):
        # The torch door opens one around every call: the fast library.
        _capi.check(_capi.fast_library().grove_invocation_begin(self.key))
        return self

    def __exit__(self, *exc):
        _capi.check(_capi.fast_library().grove_invocation_end())
        return False


def thread_trees():
    """The calling thread's ThreadTrees (one handle per thread)."""
    trees = getattr(_thread_state, "trees", None)
    if trees is None:
        trees = _thread_state.trees = ThreadTrees()
    return trees
