"""A training step's forward and backward with the saved activations kept in
grove: the forward hands PyTorch its user outputs and one token tensor (saved
by autograd in place of every activation grove computed), the backward hands
the token back and grove passes the activations on inside the C API (Note
[Saved values kept in grove], capi/kept_values.cc). One C call per stage, no
DLPack tensor and no check per activation; the user's outputs and the
gradients cross as before (Note [Saved activations stay in the pool],
training.py; Note [Gradients handed out of the pool], gradients.py).

grove.training keeps a forward's activations where the forward is one grove
segment (GraphRunner's fast plan; GROVE_KEEP_SAVED=0 turns it off); a
backward that is not one segment gets them as tensors (materialized).
grove.step passes its gradients from the joint graph to the update the same
way (KeptCall)."""

import ctypes
import itertools
import operator
import threading

import torch

import grove
from grove import _capi
from grove import gradients
from grove import outputs
from grove.output_picker import OutputPicker
from grove.runner import (StaticInputMovedError, _current_stream_of, _static_check,
                          _static_inputs_in_place, _stream_of)

_HANDED, _TOKEN, _ARGUMENT, _VALUE = range(4)
# Token values: one per KeptForward, far from any small integer a graph
# could pass as a one-element int64 tensor of its own.
_tags = itertools.count(0x67726f7665000000)


def applicable(runner):
    """Whether `runner` (a GraphRunner) is one grove segment the kept path takes."""
    return runner._fast is not None and runner.verify is False


class KeptForward:
    """The forward: outputs [user outputs..., saved values...] where every
    saved value grove computed is the call's token."""

    def __init__(self, runner, user_outputs):
        fast = runner._fast
        self.runner = runner
        self.fast = fast
        self.model = fast["model"]
        self.slots = []
        handed, kept = [], []
        self.kept_names = []  # the saved activations' names, by kept index
        items = _items(runner.plan.output_arg)
        for position, (kind, value) in enumerate(fast["sources"]):
            saved = position >= user_outputs
            if kind == 0 and saved:
                kept.append(value)
                self.kept_names.append(getattr(items[position], "name", str(position)))
                self.slots.append((_TOKEN, None))
            elif kind == 0:
                handed.append(value)
                self.slots.append((_HANDED, len(handed) - 1))
            elif kind == 1:
                self.slots.append((_ARGUMENT, value))
            else:
                self.slots.append((_VALUE, value))
        self.handed = handed
        # The outputs from [handed..., token] and the call's arguments: a list.
        self.pick_outputs = OutputPicker([self._source(kind, value) for kind, value in self.slots],
                                         len(handed) + 1, list)
        self.kept_bool = [self.model._bool_outputs[index] for index in kept]
        self._handed = (ctypes.c_int64 * max(len(handed), 1))(*handed)
        self._kept = (ctypes.c_int64 * max(len(kept), 1))(*kept)
        # PyDLL without argument types: size_t arguments as c_size_t objects.
        self._counts = (ctypes.c_size_t(len(handed)), ctypes.c_size_t(len(kept)))
        self._managed = (ctypes.c_void_p * max(len(handed), 1))()
        self._token = ctypes.c_void_p()
        self._token_ref = ctypes.byref(self._token)
        self.tag = ctypes.c_int64(next(_tags))  # the token's value: this forward's
        self._run = _capi.fast_library().grove_model_run_keeping

    def _source(self, kind, value):
        if kind == _HANDED:
            return ("result", value)
        if kind == _TOKEN:
            return ("result", len(self.handed))
        if kind == _ARGUMENT:
            return ("argument", value)
        return ("value", value)

    def __call__(self, *args):
        inputs = _checked_inputs(self.fast, args)
        model = self.model
        if gradients._handed_gradients and model._keeps_handed_gradients:
            gradients.keep_handed_gradients()
        stream = _stream_of(inputs[0]) if inputs and inputs[0].is_cuda else None
        state = model._gate.enter()
        try:
            count = model.describe_borrowed(state, inputs)
            status = self._run(model._handle, state.descs, model._input_counts[count],
                               ctypes.c_void_p(stream) if stream else None, self._handed,
                               self._counts[0], self._managed, self._kept, self._counts[1],
                               self.tag, self._token_ref)
            if status:
                _capi.check(status)
            handed = [_tensor(self._managed[k], model, index)
                      for k, index in enumerate(self.handed)]
            token = None
            if self._token.value:
                token = _from_dlpack(self._token.value)
        finally:
            model._gate.leave(state)
        handed.append(token)
        return self.pick_outputs(handed, args)

    # Note [The door's stages in one frame]
    # A training step through the door's own function (Note [The door's own
    # autograd function], door_function.py) calls its forward and backward
    # graphs through layers made for AOTAutograd's calling convention: the
    # lazy compile (training_steps._Lazy), the boxed call with its error
    # labels and the step's trees (training_steps._boxed), then KeptForward
    # or KeptBackward, the static check, the model's gate, its descriptions,
    # the outputs made one by one, the output picker and the gradient
    # hand-out: 20-25 Python frames per stage. Once a stage has been called
    # (compiled, planned, verified), stage_call makes the same steps one
    # closure over prepared locals: the step's trees (entered where autograd
    # runs the backward on another thread), the bound inputs' check, the
    # handed gradients' copy (forward), the gate entered and left as
    # CallGate does, the reused descriptions, the one C call
    # (grove_model_run_keeping / grove_model_run_with_kept), the outputs
    # made by one map where none is copied or a bool, picked by one
    # itemgetter, and the backward's gradients noted as one set. A bound
    # input that moved, or anything the closure does not take, goes to the
    # layered call, which raises or runs it as before. GROVE_DOOR_STAGE=layers
    # (read when the door's function is made) keeps the layered calls, for
    # timing both in one process. Tests: DoorFunctionTest.
    # test_stages_in_one_frame_match_the_layered_calls
    # (tests/python/door_function_test.py).
    def stage_call(self, step, layered):
        """fn(args) -> the forward's outputs (as __call__ returns them), in
        one frame (Note [The door's stages in one frame]); `step` is the
        StepContext, `layered(list)` the boxed call taking any call the
        closure does not. None where it does not apply."""
        if step is None:
            return None
        model = self.model
        fast = self.fast
        checks = fast["checks"]
        static_check = _static_check(checks) if checks else None
        positions = tuple(fast["inputs"])
        take = _taker(positions)
        single = positions[0] if len(positions) == 1 else None
        stream_of = _current_stream_of(model.device)
        gate = model._gate
        in_flight, local = gate._in_flight, gate._local
        describe_borrowed = model.borrowed_describer(len(positions))
        handle, run = model._handle, self._run
        count = model._input_counts[len(positions)]
        handed_positions, handed_count = self._handed, self._counts[0]
        managed, kept, kept_count = self._managed, self._kept, self._counts[1]
        handed_made = len(self.handed)
        tag, token, token_ref = self.tag, self._token, self._token_ref
        keeps = model._keeps_handed_gradients
        handed_gradients = gradients._handed_gradients
        keep_handed = gradients.keep_handed_gradients
        from_dlpack = outputs._from_dlpack()
        capsule = outputs._capsule_new
        make = [_tensor_maker(model, index) for index in self.handed]
        clones = [index for index, maker in enumerate(make) if maker is _clone]
        plain_or_cloned = all(maker in (None, _clone) for maker in make)
        pick = self.pick_outputs
        get_ident = threading.get_ident
        void_p = ctypes.c_void_p
        names = (b"dltensor",) * len(make)
        nones = (None,) * len(make)

        def call(args):
            trees = step.trees
            if trees is None or trees.thread != get_ident():
                step.trees = grove.thread_trees()
            if static_check is not None and not static_check(args):
                return layered(list(args))  # raises, naming the parameter
            inputs = [args[single]] if single is not None else take(args)
            if handed_gradients and keeps:
                keep_handed()
            stream = stream_of() if stream_of is not None else None
            try:
                state = local.state
            except AttributeError:
                state = gate.state()
            in_flight.append(state)
            try:
                if gate.closed:
                    raise grove.GroveError(
                        1, "grove: the model is closed; compile it again to call it")
                describe_borrowed(state, inputs)
                status = run(handle, state.descs, count, void_p(stream) if stream else None,
                             handed_positions, handed_count, managed, kept, kept_count, tag,
                             token_ref)
                if status:
                    _capi.check(status)
                if plain_or_cloned:
                    results = list(map(from_dlpack, map(capsule, managed[:handed_made],
                                                        names, nones)))
                    for index in clones:
                        results[index] = results[index].clone()
                else:
                    results = [maker(from_dlpack(capsule(pointer, b"dltensor", None)))
                               if maker is not None else
                               from_dlpack(capsule(pointer, b"dltensor", None))
                               for maker, pointer in zip(make, managed[:handed_made])]
                results.append(from_dlpack(capsule(token.value, b"dltensor", None))
                               if token.value else None)
            finally:
                in_flight.remove(state)
            return pick(results, args)

        return call


class KeptBackward:
    """The backward of a KeptForward: the token's positions among its
    arguments are found on the first call (AOTAutograd passes the saved
    values in the forward's order), the kept values go to grove by index."""

    def __init__(self, runner, forwards, graph, check_saved):
        """forwards: the KeptForwards of the step compiler (the one whose
        token arrives is this backward's); check_saved(args): the per-tensor
        check, for a backward whose forward kept nothing."""
        self.runner = runner
        self.forwards = forwards
        self.forward = None
        self.graph = graph
        self.check_saved = check_saved
        self.fast = runner._fast
        self.model = self.fast["model"] if self.fast is not None else None
        self.token_positions = None

    def _plan(self, args):
        self.forward, positions = find_tokens(args, self.forwards)
        self.token_positions = positions
        if not positions:
            return
        if len(positions) != len(self.forward.kept_names):
            raise RuntimeError(
                "grove: the %s graph received %d saved-activation tokens where its forward "
                "keeps %d activations; this AOTAutograd orders saved values in a way grove "
                "does not know (report it)" % (self.graph, len(positions),
                                              len(self.forward.kept_names)))
        kept_index = {position: index for index, position in enumerate(positions)}
        if self.fast is None:
            self.sources = None
            return
        # A kept value bound as a param (Note [Saved parameters],
        # training_steps.py: a weight's transpose) is no segment input; its
        # token is no tensor to check: the forward checked the parameter.
        checks = [(position, address) for position, address in self.fast["checks"]
                  if position not in kept_index]
        self.checked = {key: value for key, value in self.fast.items()
                        if key not in ("checks", "static_check")}
        self.checked["checks"] = checks
        sources = [kept_index.get(position, -1) for position in self.fast["inputs"]]
        self.sources = sources
        self.pick_outputs = self.fast["pick"]
        self.kept_call = KeptCall(self.model, sources)
        self.described = [position for position in self.fast["inputs"]
                          if position not in kept_index]

    def __call__(self, *args):
        if self.token_positions is None:
            self._plan(args)
        if not self.token_positions:
            self.check_saved(args)
            return self.runner(*args)
        token = args[self.token_positions[0]]
        if self.sources is None:  # not one segment: the activations as tensors
            return self.runner(*self._materialized(args, token))
        return self.pick_outputs(self.call_model(args, token), args)

    def call_model(self, args, token):
        """The segment's outputs (one C call: grove_model_run_with_kept)."""
        if self.checked["checks"]:  # bound inputs (Note [Saved parameters], training_steps.py)
            _checked_inputs(self.checked, args)
        inputs = [args[position] for position in self.described]
        status, results = self.kept_call.run(token, inputs)
        if status:
            self._raise(status, token)
        return results

    def _raise(self, status, token):
        if status == 5:
            first = ctypes.c_int64(-1)
            _capi.library().grove_kept_check(ctypes.c_void_p(token.data_ptr()),
                                             ctypes.byref(first))
            if first.value >= 0:
                raise grove.StaleOutputError(status, (
                    "grove: the %s graph reads saved activation '%s', which a later forward "
                    "overwrote; run each backward before the next step's forward "
                    "(mark_step_begin ends a step)"
                    % (self.graph, self.forward.kept_names[first.value])))
        _capi.check(status)

    def _materialized(self, args, token):
        first = ctypes.c_int64(-1)
        _capi.check(_capi.library().grove_kept_check(ctypes.c_void_p(token.data_ptr()),
                                                     ctypes.byref(first)))
        if first.value >= 0:
            self._raise(5, token)
        return materialized(args, self.forward, self.token_positions)

    def stage_call(self, step, handout, layered):
        """fn(args) -> the backward's gradients, handed out (as the boxed
        call returns them: a list), in one frame (Note [The door's stages in
        one frame]); `handout` is the boxed call's GradientHandout, planned.
        None where it does not apply."""
        if (step is None or not self.token_positions or self.sources is None
                or handout.copied is None):
            return None
        model = self.model
        kept_call = self.kept_call
        checks = self.checked["checks"]
        static_check = _static_check(checks) if checks else None
        take = _taker(tuple(self.described))
        single = self.described[0] if len(self.described) == 1 else None
        token_position = self.token_positions[0]
        stream_of = _current_stream_of(model.device)
        gate = model._gate
        in_flight, local = gate._in_flight, gate._local
        describe_borrowed = model.borrowed_describer(len(self.described))
        handle, run = model._handle, kept_call._run
        count = model._input_counts[len(self.described)]
        sources, source_count = kept_call._sources, kept_call._source_count
        managed, capacity = kept_call._managed, model._output_capacity
        produced, produced_ref = kept_call._produced, kept_call._produced_ref
        if not kept_call._plain:
            return None
        from_dlpack = outputs._from_dlpack()
        capsule = outputs._capsule_new
        names = (b"dltensor",) * model.output_count
        nones = (None,) * model.output_count
        pick = self.pick_outputs
        copied, references, pick_handed = handout.copied, handout.references, handout.pick
        handed_gradients = gradients._handed_gradients
        data_pointer = _DATA_POINTER
        get_ident = threading.get_ident
        void_p = ctypes.c_void_p

        def body(args):
            if static_check is not None and not static_check(args):
                return layered(list(args))  # raises, naming the input
            token = args[token_position]
            inputs = [args[single]] if single is not None else take(args)
            stream = stream_of() if stream_of is not None else None
            try:
                state = local.state
            except AttributeError:
                state = gate.state()
            in_flight.append(state)
            try:
                if gate.closed:
                    raise grove.GroveError(
                        1, "grove: the model is closed; compile it again to call it")
                describe_borrowed(state, inputs)
                status = run(handle, void_p(token.data_ptr()), sources, source_count,
                             state.descs, count, void_p(stream) if stream else None, managed,
                             capacity, produced_ref)
                if status:
                    self._raise(status, token)
                made = produced.value
                results = list(map(from_dlpack, map(capsule, managed[:made], names[:made],
                                                    nones[:made])))
            finally:
                in_flight.remove(state)
            results = list(pick(results, args))
            for index in copied:
                results[index] = results[index].clone()
            if references:  # Note [Gradients handed out of the pool]: one set
                handed_gradients.append(
                    (references, list(map(data_pointer, pick_handed(results)))))
            return results

        fast = _capi.fast_library()
        trees_enter, trees_exit = fast.grove_trees_enter, fast.grove_trees_exit

        def call(args):
            trees = step.trees
            if trees is None or trees.thread == get_ident():
                return body(args)
            # Autograd's device thread: the forward's trees, entered and left
            # as ThreadTrees' `with` does, without its frames.
            status = trees_enter(trees._handle)
            if status:
                _capi.check(status)
            try:
                return body(args)
            finally:
                status = trees_exit()
                if status:
                    _capi.check(status)

        return call


def find_tokens(args, forwards):
    """(the KeptForward whose tokens are among `args`, their positions), or
    (None, []) when none is."""
    candidates = [(index, int(value.item())) for index, value in enumerate(args)
                  if isinstance(value, torch.Tensor) and value.dtype == torch.int64
                  and value.dim() == 1 and value.numel() == 1 and not value.is_cuda]
    tags = {forward.tag.value: forward for forward in forwards}
    found = [(index, tags[tag]) for index, tag in candidates if tag in tags]
    if not found:
        return None, []
    forward = found[0][1]
    return forward, [index for index, owner in found if owner is forward]


def materialized(args, forward, positions):
    """`args` with the tokens at `positions` replaced by the kept values they
    stand for, as tensors over grove's memory (for a graph grove imports or
    runs piece by piece)."""
    args = list(args)
    if not positions:
        return args
    pointer = ctypes.c_void_p(args[positions[0]].data_ptr())
    for index, position in enumerate(positions):
        managed = ctypes.c_void_p()
        _capi.check(_capi.library().grove_kept_value(pointer, index, ctypes.byref(managed)))
        value = _from_dlpack(managed.value)
        args[position] = value.view(torch.bool) if forward.kept_bool[index] else value
    return args


class KeptCall:
    """Calls of one grove.Model whose inputs are partly kept values: input i
    is kept value sources[i] of a token's set (sources[i] >= 0) or the next
    of the described tensors (-1)."""

    def __init__(self, model, sources):
        self.model = model
        self.sources = list(sources)
        self._sources = (ctypes.c_int64 * max(len(self.sources), 1))(*self.sources)
        self._managed = (ctypes.c_void_p * max(model.output_count, 1))()
        self._produced = ctypes.c_size_t()
        self._produced_ref = ctypes.byref(self._produced)
        self._source_count = ctypes.c_size_t(len(self.sources))
        self._run = _capi.fast_library().grove_model_run_with_kept
        # Gradients: no bool output, none copied; one comprehension makes them.
        self._plain = not any(model._bool_outputs) and not any(model._copy_flags)

    def run(self, token, inputs):
        """(status, outputs as torch tensors): one C call."""
        model = self.model
        stream = _stream_of(inputs[0]) if inputs and inputs[0].is_cuda else None
        state = model._gate.enter()
        try:
            count = model.describe_borrowed(state, inputs)
            status = self._run(model._handle, ctypes.c_void_p(token.data_ptr()), self._sources,
                               self._source_count, state.descs, model._input_counts[count],
                               ctypes.c_void_p(stream) if stream else None, self._managed,
                               model._output_capacity, self._produced_ref)
            if status:
                return status, None
            managed = self._managed
            if self._plain:
                return 0, outputs.tensors_from_dlpack(managed, self._produced.value)
            return 0, [_tensor(managed[index], model, index)
                       for index in range(self._produced.value)]
        finally:
            model._gate.leave(state)


def _checked_inputs(fast, args):
    """The segment's inputs, after the bound parameters' address check (GraphRunner's)."""
    if fast["checks"] and not _static_inputs_in_place(args, fast):
        for position, address in fast["checks"]:
            if args[position].data_ptr() != address:
                raise StaticInputMovedError(
                    position, "grove: static input %d moved (its data pointer changed since "
                    "compilation); params are bound, never copied: recompile" % position)
    return [args[position] for position in fast["inputs"]]


_DATA_POINTER = torch.Tensor.data_ptr


def _clone(value):
    return value.clone()


def _tensor_maker(model, index):
    """None where output `index` of `model` is handed over as DLPack makes
    it, _clone where it is only copied, else a function of the tensor (a
    bool output's view, then its copy): _tensor's steps after from_dlpack."""
    boolean, copied = model._bool_outputs[index], model._copy_flags[index]
    if not boolean:
        return _clone if copied else None
    if copied:
        return lambda value: value.view(torch.bool).clone()
    return lambda value: value.view(torch.bool)


def _taker(positions):
    """args -> the list of the arguments at `positions`."""
    if not positions:
        return lambda args: []
    if len(positions) == 1:
        position = positions[0]
        return lambda args: [args[position]]
    getter = operator.itemgetter(*positions)
    return lambda args: list(getter(args))


def _from_dlpack(pointer):
    return outputs._from_dlpack()(outputs._capsule_new(pointer, b"dltensor", None))


def _tensor(pointer, model, index):
    value = _from_dlpack(pointer)
    if model._bool_outputs[index]:
        value = value.view(torch.bool)
    if model._copy_flags[index]:
        value = value.clone()
    return value


def _items(output):
    return list(output) if isinstance(output, (tuple, list)) else [output]
