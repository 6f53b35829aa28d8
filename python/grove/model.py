"""grove.Model: a compiled grove program called on torch tensors or NumPy
arrays (Note [Kept outputs through DLPack], outputs.py; Note [One model, many
threads], _calls.py), and grove.compile.
"""

import array
import ctypes
import json
import operator
import os
import sys
import weakref

from grove import _capi
from grove import cached_outputs
from grove._calls import CallGate
from grove._capi import GroveError
from grove._descs import _is_torch, _parse_device, _release_descs, _torch, describe
from grove.outputs import Output, _capsule_new, _from_dlpack, _storage_hook, tensors_from_dlpack
from grove.gradients import _handed_gradients, keep_handed_gradients

# Model.describe_borrowed: calls of this many inputs or more check their
# layouts by kind in C (map) and rewrite the data pointers in one assignment.
_BATCHED_INPUTS = 4
_DESC_WORDS = ctypes.sizeof(_capi.TensorDesc) // 8
_NO_INVOCATION = ctypes.c_uint64(2**64 - 1)  # GROVE_NO_INVOCATION
_SHAPE = operator.attrgetter("shape")
_DTYPE = operator.attrgetter("dtype")
_STRIDE = _DEVICE = _DATA_POINTER = None  # torch.Tensor's methods, once torch is imported


def _torch_methods():
    global _STRIDE, _DEVICE, _DATA_POINTER
    tensor = _torch().Tensor
    _STRIDE, _DEVICE, _DATA_POINTER = tensor.stride, tensor.get_device, tensor.data_ptr


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
                 verify=None, gradient_all_reduce=None, small_m_gemm=None, gemm_search=False,
                 sibling_gemms=False):
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
        if gradient_all_reduce is not None:  # Note [Gradient all-reduce in the door's backward]
            options["gradient_all_reduce"] = dict(gradient_all_reduce)
        if small_m_gemm is not None:  # its own choice (Note [Small-M GEMM selection])
            options["small_m_gemm"] = str(small_m_gemm)
        if gemm_search:  # Note [GEMM algorithms by measurement] for this model's GEMMs
            options["gemm_search"] = True
        if sibling_gemms:  # Note [Sibling GEMMs as one] for this model's program
            options["sibling_gemms"] = True
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
        # bool per output (Note [Saved activations stay in the pool], training_steps.py).
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
        self._run_dlpack_invocation = fast.grove_model_run_dlpack_invocation
        self._dlpack_check = fast.grove_dlpack_check
        self._input_counts = [ctypes.c_size_t(n) for n in range(len(names) + 1)]
        self._output_capacity = ctypes.c_size_t(self.output_count)
        # A backward's outputs are gradients (Note [Gradients handed out of
        # the pool], gradients.py): neither tagged nor watched, so they come
        # out in one pass (outputs.tensors_from_dlpack).
        watched = backend != "eager" and stage != "backward"
        self._watch_kept = watched and _storage_hook() is not None
        self._tag_outputs = watched and copy_outputs is not None
        self._plain_outputs = not (any(self._bool_outputs) or any(self._copy_flags)
                                   or self._watch_kept or self._tag_outputs)
        # Outputs only watched (a graph backend's inference outputs where
        # PyTorch has the storage hook): made and watched with no Python per output.
        self._watched_outputs = self._watch_kept and not (
            any(self._bool_outputs) or any(self._copy_flags) or self._tag_outputs)
        # Note [Outputs over cached storage] (capi/handout.cc): watched outputs
        # are handed out over cached torch storage, not through DLPack per call.
        self._cached_outputs = self._watched_outputs and cached_outputs.available()
        self._run_handout = fast.grove_model_run_handout
        self._from_dlpack = _from_dlpack() if _torch() is not None else None
        if _STRIDE is None and _torch() is not None:
            _torch_methods()

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
        if gate is not None:
            self._poison_closed_outputs(gate)

    def _poison_closed_outputs(self, gate):
        """Note [Outputs of a closed model are poisoned] (cached_outputs.py):
        the outputs kept past close() that grove reports stale now are poisoned."""
        kept, gate.closed_kept = gate.closed_kept, []
        orphans, gate.closed_orphans = gate.closed_orphans, []
        hook = _storage_hook()
        if hook is not None:
            for reference, pointer in kept:
                value = reference()
                if value is not None and _capi.fast_library().grove_dlpack_check(
                        ctypes.c_void_p(pointer)) != 0:
                    message = _capi.library().grove_last_error().decode("utf-8", "replace")
                    hook(value, "grove: " + message)
        cached_outputs.poison_stale_orphans(orphans)

    # Note [No close while the interpreter finalizes]: once Python finalizes
    # (after the atexit hooks; sys.is_finalizing()), PyTorch no longer keeps a
    # tensor's Python object alive for the C++ references taken from then on,
    # so close()'s work on tensors (a handed-out gradient copied into .grad,
    # outputs poisoned) can free a Python tensor that C++ still holds: the
    # training door over torch's DistributedDataParallel aborted at exit in
    # THPVariable_clear ("use_count() == 1") from keep_handed_gradients, inside
    # the last collection (session 21's r1, faulthandler's stack). A model
    # collected then is left to the process's end, which releases its device
    # memory anyway (Note [Managers destroyed at process exit]). With
    # GROVE_CLOSE_AT_FINALIZATION=1 it is closed as before. Test:
    # ExitReleaseTest.test_a_model_collected_while_finalizing_is_not_closed
    # (tests/python/exit_release_test.py).
    def __del__(self, _finalizing=sys.is_finalizing, _environ=os.environ):
        if _finalizing() and _environ.get("GROVE_CLOSE_AT_FINALIZATION") != "1":
            return
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
        seconds = ctypes.c_double()
        self._timed(inputs, lambda lib, descs: lib.grove_model_time_runs(
            self._handle, descs, len(inputs), stream, calls, ctypes.byref(seconds)))
        return seconds.value

    def time_runs_split(self, *inputs, calls=100, stream=None, idle=False):
        """(host, launch, wall): mean seconds per call of `calls` calls from
        C++, to each call's return, inside the graph launches, and to the
        stream's synchronization; idle: the device idle before each call
        (Note [The launch clock], runtime/launch_clock.h)."""
        seconds = [ctypes.c_double() for _ in range(3)]
        self._timed(inputs, lambda lib, descs: lib.grove_model_time_runs_split(
            self._handle, descs, len(inputs), stream, calls, 1 if idle else 0,
            *[ctypes.byref(value) for value in seconds]))
        return tuple(value.value for value in seconds)

    def _timed(self, inputs, run):
        """run(lib, descs) inside the gate, `inputs` described for it."""
        lib = _capi.library()
        descs = (_capi.TensorDesc * max(len(inputs), 1))()
        keep = []
        for index, value in enumerate(inputs):
            desc, kept = describe(value, self._host_device, "input %d" % index)
            descs[index] = desc
            keep.append(kept)
        try:
            state = self._gate.enter()
        except GroveError:
            _release_descs(descs, len(inputs))
            raise
        try:
            _capi.check(run(lib, descs))
        finally:
            self._gate.leave(state)

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

    def call_torch(self, inputs, stream=None, invocation=None):
        """The fast path for torch tensors: inputs borrowed for the call (no
        callback; Note [Borrowed inputs], capi/grove.cc), outputs through
        DLPack (Note [Kept outputs through DLPack]). Returns a list.
        invocation: None, or a key as grove.invocation takes: the call runs
        inside that invocation, begun and ended by the same C call (Note [One
        C call per door call], capi/grove.cc)."""
        if _handed_gradients and self._keeps_handed_gradients:
            keep_handed_gradients()
        gate = self._gate
        state = gate.enter()
        try:
            return self._call_torch(state, inputs, stream, invocation)
        finally:
            gate.leave(state)

    def describe_borrowed(self, state, inputs):
        """Fills the thread's reused descriptions with `inputs` (torch
        tensors, borrowed for one call: Note [Borrowed inputs], capi/grove.cc);
        returns how many. Where every input has the layout it had in the last
        call (an optimizer's gradients, step after step), the data pointers
        are rewritten in one pass in C, with no Python per input."""
        count = len(inputs)
        if count >= _BATCHED_INPUTS:
            batch = (list(map(_SHAPE, inputs)), list(map(_STRIDE, inputs)),
                     list(map(_DTYPE, inputs)), list(map(_DEVICE, inputs)))
            if batch == state.batch_layouts:
                state.data_words[0:count * _DESC_WORDS:_DESC_WORDS] = array.array(
                    "Q", map(_DATA_POINTER, inputs))
                return count
            index = self._describe_each(state, inputs)
            state.batch_layouts = batch
            return index
        return self._describe_each(state, inputs)

    def borrowed_describer(self, count):
        """describe_borrowed for calls of always `count` inputs: under
        _BATCHED_INPUTS it calls _describe_each every time, so that method
        itself (one frame less per call; it forgets the batched layouts as
        describe_borrowed did)."""
        return self.describe_borrowed if count >= _BATCHED_INPUTS else self._describe_each

    def _describe_each(self, state, inputs):
        # Each description rewritten below may change a layout the batched
        # path remembers (describe_borrowed sets it again after this call).
        state.batch_layouts = None
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

    def _call_torch(self, state, inputs, stream, invocation=None):
        if len(inputs) != len(state.layouts):
            self.run(*inputs, stream=stream)  # raises grove's message naming the inputs
        index = self.describe_borrowed(state, inputs)
        if self._cached_outputs:
            return self._call_cached(state, index, stream, invocation)
        if invocation is None:
            status = self._run_dlpack(self._handle, state.descs, self._input_counts[index],
                                      ctypes.c_void_p(stream) if stream else None, state.managed,
                                      self._output_capacity, state.produced_ref)
        else:
            status = self._run_dlpack_invocation(
                self._handle, ctypes.c_uint64(invocation), state.descs,
                self._input_counts[index], ctypes.c_void_p(stream) if stream else None,
                state.managed, self._output_capacity, state.produced_ref)
        if status:
            _capi.check(status)
        return self._dlpack_outputs(state)

    def _dlpack_outputs(self, state):
        """The torch tensors of the outputs a DLPack call left in the
        thread's state (Note [Kept outputs through DLPack], outputs.py)."""
        if self._plain_outputs:
            return tensors_from_dlpack(state.managed, state.produced.value)
        if self._watched_outputs:
            produced = state.produced.value
            results = tensors_from_dlpack(state.managed, produced)
            kept = state.kept
            kept.extend(zip(map(weakref.ref, results), state.managed[:produced]))
            if len(kept) > produced:
                self._check_kept_dlpack(state, produced)
            return results
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

    def use_cached_outputs(self, enabled):
        """Switches this model's hand-out between cached storage and DLPack
        (GROVE_DOOR_OUTPUTS's choice, made per model; benchmarks time both in
        one process). The calling thread's references nobody holds are
        released first. False where the cached hand-out is not available."""
        cached = self._gate.state().cached
        if cached is not None:
            cached.settle()
        self._cached_outputs = bool(enabled) and self._watched_outputs and \
            cached_outputs.available()
        return self._cached_outputs

    def _call_cached(self, state, index, stream, invocation):
        """The C call and the outputs of Note [Outputs over cached storage]
        (capi/handout.cc): the last call's unheld references released by the
        same C call."""
        cached = state.cached
        if cached is None:
            cached = state.cached = cached_outputs.CachedOutputs(self.output_count)
        released = cached.before_call()
        status = self._run_handout(
            self._handle, _NO_INVOCATION if invocation is None else ctypes.c_uint64(invocation),
            cached.release, cached.release_counts[released], state.descs,
            self._input_counts[index], ctypes.c_void_p(stream) if stream else None,
            state.managed, cached.keys, self._output_capacity, state.produced_ref)
        if status:
            _capi.check(status)
        return cached.after_call(state.managed, state.produced.value)

    # Note [The door's model call in one frame]: the torch door's call of its
    # one model (Note [One Python call per door call], runner.py) is
    # call_torch's steps for the inputs at fixed positions of dynamo's
    # arguments: the thread's CallState entered and left as
    # CallGate.enter/leave do (appended, the closed flag read after, removed
    # in a finally), the handed-gradients check, the reused descriptions, the
    # one C call and the hand-out (over cached storage, or DLPack's where the
    # cached one is off or missing: PyTorch < 2.1, GROVE_DOOR_OUTPUTS=dlpack),
    # in one closure over prepared locals instead of call_torch, _call_torch,
    # _call_cached and the gate's three methods (six Python frames and their
    # attribute lookups per call). It applies where the positions name one
    # argument per model input; else None and the door calls call_torch.
    # GROVE_DOOR_CALL=layers (read when the door is made) keeps call_torch,
    # for timing both in one process. Tests:
    # DoorCallTest.test_one_frame_model_call_matches_call_torch,
    # CachedOutputsTest (PyTorch >= 2.1: the cached hand-out).
    def door_caller(self, positions):
        """fn(args, stream, invocation) -> the outputs of this model for the
        inputs at `positions` of `args` (Note [The door's model call in one
        frame]), or None where it does not apply."""
        if len(positions) != len(self.input_names):
            return None
        gate = self._gate
        in_flight = gate._in_flight
        local = gate._local
        handle = self._handle
        run = self._run_handout
        count = self._input_counts[len(positions)]
        capacity = self._output_capacity
        describe_borrowed = self.borrowed_describer(len(positions))
        keeps = self._keeps_handed_gradients
        output_count = self.output_count
        positions = tuple(positions)
        single = positions[0] if len(positions) == 1 else None
        take = None if single is not None or not positions else operator.itemgetter(*positions)
        uint64, void_p = ctypes.c_uint64, ctypes.c_void_p

        model = self

        run_dlpack, run_dlpack_invocation = self._run_dlpack, self._run_dlpack_invocation
        dlpack_outputs = self._dlpack_outputs

        def call(args, stream, invocation):
            if keeps and _handed_gradients:
                keep_handed_gradients()
            try:
                state = local.state
            except AttributeError:
                state = gate.state()
            in_flight.append(state)
            try:
                if gate.closed:
                    raise GroveError(1, "grove: the model is closed; compile it again to call it")
                if single is not None:
                    inputs = [args[single]]
                else:
                    inputs = list(take(args)) if take is not None else []
                describe_borrowed(state, inputs)
                if not model._cached_outputs:  # DLPack's hand-out (use_cached_outputs)
                    if invocation is None:
                        status = run_dlpack(handle, state.descs, count,
                                            void_p(stream) if stream else None, state.managed,
                                            capacity, state.produced_ref)
                    else:
                        status = run_dlpack_invocation(
                            handle, uint64(invocation), state.descs, count,
                            void_p(stream) if stream else None, state.managed, capacity,
                            state.produced_ref)
                    if status:
                        _capi.check(status)
                    return dlpack_outputs(state)
                cached = state.cached
                if cached is None:
                    cached = state.cached = cached_outputs.CachedOutputs(output_count)
                released = cached.before_call()
                status = run(handle, _NO_INVOCATION if invocation is None else uint64(invocation),
                             cached.release, cached.release_counts[released], state.descs, count,
                             void_p(stream) if stream else None, state.managed, cached.keys,
                             capacity, state.produced_ref)
                if status:
                    _capi.check(status)
                return cached.after_call(state.managed, state.produced.value)
            finally:
                in_flight.remove(state)

        return call

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
        cached = self._gate.state().cached
        if cached is not None:
            cached.settle()  # what nobody holds is not kept past the step
        state = self._checked(_capi.library().grove_model_mark_step_begin)
        if state.kept:
            self._check_kept_dlpack(state, 0)
        if cached is not None and cached.held:
            cached.check_held()

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


def compile(program, backend="eager", device="sim", dims=None, params=None, **options):
    """Compiles a grove program (JSON text or a dict) into a Model."""
    return Model(program, backend=backend, device=device, dims=dims, params=params, **options)
