"""Runs an imported graph (importer.Plan): grove segments compiled through the
C API, the nodes grove cannot take in PyTorch between them (Note [Splitting a
graph], importer.py)."""

import functools
import logging
import operator
import os

import torch
import torch.fx

import grove
from grove import input_aliases as aliases_of_inputs, parameter_views
from grove import verify as verify_mode
from grove.fx_common import laid_out, untyped_storage
from grove.inplace import mutates_first_argument
from grove.output_picker import OutputPicker
from grove.segments import segment_program


_log = logging.getLogger("grove")


class StaticInputMovedError(RuntimeError):
    """A bound static input (a parameter) is no longer at the address it was
    compiled with; `position` is its place among the graph's inputs."""

    def __init__(self, position, message):
        super().__init__(message)
        self.position = position


class GraphRunner:
    def __init__(self, plan, backend="eager", device="sim", output_copies=None, verify=None,
                 state_outputs=(), gradient_all_reduce=None, reuse_state=False,
                 warm_up_outputs_leave_pool=False, input_aliases=False, **options):
        """output_copies: None, or a function of an fx node returning whether
        a segment output computing it is copied out of grove's memory (True,
        False, or None for grove.Model's default). verify: check the first
        calls against PyTorch eager (Note [Verify mode], verify.py); None
        follows GROVE_VERIFY. state_outputs: fx nodes of the graph's outputs
        the caller keeps as state (Note [State outputs leave the pool]).
        gradient_all_reduce: None, or a function of a segment's output fx
        nodes returning its "gradient_all_reduce" option or None (Note
        [Gradient all-reduce in the door's backward], gradient_reduce.py).
        reuse_state: each state output is copied into the memory of the
        previous call's copy (Note [Reused state copies]).
        warm_up_outputs_leave_pool: the first call's outputs are copied out
        of the tree's pool (Note [Warm-up outputs leave the pool]).
        input_aliases: outputs that alias inputs are made from the caller's
        tensors (Note [Outputs that alias inputs], input_aliases.py)."""
        self.gradient_all_reduce = gradient_all_reduce
        self.plan = plan
        # Note [Bound bases read as bases] (parameter_views.py): placeholders
        # whose argument is read as its base.
        self._bound_bases = [node for node in plan.placeholders
                             if parameter_views.BASE_ORDER in node.meta]
        self.verify = verify_mode.enabled_by_environment() if verify is None else bool(verify)
        self.verified_calls = 0
        self.calls_to_verify = verify_mode.verified_calls() if self.verify else 0
        self.output_copies = output_copies
        self.backend = backend
        self.device = device
        self.options = options
        self.segments = []  # (Segment, grove.Model, bound param nodes and tensors)
        self.steps = []
        for kind, step in plan.steps:
            if kind == "grove":
                compiled = self._compile(step)
                self.segments.append(compiled)
                self.steps.append(("grove", compiled))
            else:
                self.steps.append(("torch", step))
        self.static_positions = sorted(plan.static_positions)
        self.constants = dict(plan.constants)
        for node in plan.module.graph.nodes:
            if node.op == "get_attr":
                self.constants[node] = _attribute(plan.module, node.target)
        # Note [Constant outputs are handed out fresh]: which outputs, once.
        outputs = []
        torch.fx.node.map_arg(plan.output_arg, outputs.append)
        self._fresh = {node for node in outputs if self._hands_out_fresh(node)}
        # Note [Outputs that alias inputs] (input_aliases.py): made from the
        # caller's tensors after each call, on the general path.
        self._aliases = aliases_of_inputs.aliased_outputs(plan.module.graph) if input_aliases \
            else []
        self._fast = None if self._aliases else self._fast_plan()
        self._bound = self._bound_inputs()
        self._state_positions = self._state_output_positions(state_outputs)
        self.reuse_state = bool(reuse_state)
        self._state_copies = {}  # output position -> the last copy (reuse_state)
        # Note [Host tensors passed to a device graph] (dynamo_backend.py).
        self.host_positions = ()
        # The inputs the graph writes, set by the door (Note [Inputs that share
        # memory with a written input], aliased_writes.py).
        self.written_positions = ()
        # Note [Warm-up outputs leave the pool]: pending until the first call.
        self._warm_up_copies = bool(warm_up_outputs_leave_pool) and self._outputs_in_pool()

    # Note [State outputs leave the pool]: a tensor a graph writes in place and
    # returns (a KV cache made and filled inside the compiled region, a
    # counter moved to the device and advanced) is state the caller keeps and
    # feeds back, often as an input the next graph writes. Left in the graph
    # tree's pool it would be reclaimed when the generation ends (a later
    # call would find its input stale) and a copy-back into it is refused
    # (Note [Copy-back into the pool]). So under a graph backend such outputs
    # are cloned into memory of their own at each call (a prefill's few
    # tensors, once per sequence), and with dynamo each clone is marked a
    # static address (guarded: dynamo recompiles for another tensor), as
    # Hugging Face marks the caches it makes outside compiled code: the graphs
    # that later update it write it in place instead of copying it back.
    # Test: InputWritesTest.test_state_made_inside_the_graph_leaves_the_pool
    # (sim, copy-back), GpuDecodeTest (static).
    def _state_output_positions(self, state_outputs):
        if self.backend == "eager" or not state_outputs:
            return None
        output = self.plan.output_arg
        items = list(output) if isinstance(output, (tuple, list)) else [output]
        positions = [index for index, item in enumerate(items)
                     if isinstance(item, torch.fx.Node) and item in state_outputs
                     and item.op != "placeholder"]
        return positions or None

    def _state_left_pool(self, result):
        positions = self._state_positions
        if positions is None:
            return result
        if not isinstance(result, (tuple, list)):
            if isinstance(result, torch.Tensor):
                return self._state_left_pool_at(0, result)
            return result
        values = list(result)
        for position in positions:
            if isinstance(values[position], torch.Tensor):
                values[position] = self._state_left_pool_at(position, values[position])
        return type(result)(values)

    # Note [Reused state copies]
    # With the option reuse_state, a state output (Note [State outputs leave
    # the pool]) is copied into the previous call's copy of the same output
    # (same shape, strides, dtype and device) instead of new memory, so the
    # state keeps its address from one call to the next: a cache HF's
    # generate makes inside the compiled prefill of every sequence stays
    # where the decode graph bound it, which then writes it in place and is
    # never demoted (Note [Static inputs that move], dynamo_backend.py), and
    # no step copies it in or back. The price, as with reduce-overhead's
    # outputs: the state an earlier call returned is overwritten by the next
    # call that makes it again (an old cache kept past its sequence must be
    # cloned by the caller). Off by default. Test:
    # InputWritesTest.test_reused_state_keeps_its_address (sim).
    def _state_left_pool_at(self, position, tensor):
        if self.reuse_state:
            kept = self._state_copies.get(position)
            if (kept is not None and kept.shape == tensor.shape and kept.dtype == tensor.dtype
                    and kept.device == tensor.device and kept.stride() == tensor.stride()):
                kept.copy_(tensor)
                return kept
        copy = _state_copy(tensor)
        if self.reuse_state:
            self._state_copies[position] = copy
        return copy

    def _fast_plan(self):
        """For a graph that is one grove segment fed only by placeholders and
        returning its outputs (the common case): what a call needs, by position,
        so it skips the environment of values."""
        if len(self.steps) != 1 or self.steps[0][0] != "grove":
            return None
        compiled = self.steps[0][1]
        positions = {node: index for index, node in enumerate(self.plan.placeholders)}
        if not all(node in positions for node in compiled["inputs"]):
            return None
        produced = {node: index for index, (node, _) in enumerate(compiled["segment"].outputs)}
        output = self.plan.output_arg
        items = list(output) if isinstance(output, (tuple, list)) else [output]
        # Outputs the segment computes, and (training graphs) inputs passed
        # through, folded constants (a mask saved for the backward) and None
        # gradients: (0, output index), (1, argument position), (2, value).
        sources = []
        for item in items:
            if isinstance(item, torch.fx.Node) and item in produced:
                sources.append((0, produced[item]))
            elif isinstance(item, torch.fx.Node) and item in positions:
                sources.append((1, positions[item]))
            elif isinstance(item, torch.fx.Node) and item in self.constants:
                sources.append((2, self.constants[item]))
            elif item is None:
                sources.append((2, None))
            else:
                return None
        container = type(output) if isinstance(output, (tuple, list)) else None
        fresh = [item in self._fresh for item, (kind, _) in zip(items, sources) if kind == 2]
        return {
            # results, args -> the graph's outputs, no Python per output
            "pick": OutputPicker([(("result", "argument", "value")[kind], value)
                                  for kind, value in sources], compiled["model"].output_count,
                                 container, fresh),
            "model": compiled["model"],
            "inputs": [positions[node] for node in compiled["inputs"]],
            "checks": [(positions[node], address) for node, address in compiled["bound"]],
            "sources": sources,
            "container": container,
        }

    def _compile(self, segment):
        program = segment_program(self.plan.name, segment)
        params = {name: tensor for name, (tensor, _) in segment.params.items()}
        options = dict(self.options)
        if self.output_copies is not None:
            default = grove.Model.default_copy(self.backend)
            flags = [self.output_copies(node) for node, _ in segment.outputs]
            options["copy_outputs"] = [default if flag is None else flag for flag in flags]
        if self.gradient_all_reduce is not None:
            reduce = self.gradient_all_reduce([node for node, _ in segment.outputs])
            if reduce is not None:
                options["gradient_all_reduce"] = reduce
        # The runner verifies its segments against PyTorch itself.
        model = grove.Model(program, backend=self.backend, device=self.device, params=params,
                            verify=False, **options)
        bound = [(node, tensor.data_ptr()) for _, (tensor, node) in segment.params.items()
                 if node is not None and node.op == "placeholder"]
        return {"segment": segment, "model": model, "bound": bound,
                "inputs": [node for _, node in segment.inputs]}

    @property
    def unsupported(self):
        return self.plan.unsupported

    def _bound_inputs(self):
        """(position among the graph's inputs, address at compilation) of
        every bound static input of every segment."""
        positions = {node: index for index, node in enumerate(self.plan.placeholders)}
        return sorted({(positions[node], address) for compiled in self.segments
                       for node, address in compiled["bound"]})

    def bound_positions(self):
        """(position among the graph's inputs, address at compilation) of
        every bound static input."""
        return list(self._bound)

    def leave_checks_to_guards(self, positions):
        """The bound inputs at `positions` are checked by dynamo's guards
        (Note [Parameters checked by dynamo's guards], dynamo_backend.py):
        the fast plan's own check leaves them out."""
        fast = self._fast
        if fast is None or not positions:
            return
        fast["checks"] = [(position, address) for position, address in fast["checks"]
                          if position not in positions]
        fast.pop("static_check", None)

    def moved_static_positions(self, args):
        """Positions, among the graph's inputs, of the bound static inputs
        that `args` hold at another address than at compilation."""
        return sorted({position for position, address in self._bound
                       if args[position].data_ptr() != address})

    def models(self):
        return [compiled["model"] for compiled in self.segments]

    def mark_step_begin(self):
        for model in self.models():
            model.mark_step_begin()

    # Note [Warm-up outputs leave the pool]
    # A module that builds state lazily inside compiled code (a rotary table
    # or mask cached on its first call, Wav2Vec2-Conformer's rotary
    # embedding) keeps an output of that graph's first call, its warm-up,
    # and reads it at later calls, often as an input of another graph. Left
    # in the tree's pool it is reclaimed when the generation ends: reading it
    # raised StaleOutputError (as PyTorch's trees refuse it), and before the
    # hand-out check a graph read memory a later output owned. Issue 33 asks
    # for such state to leave the pool when the warm-up ends: an inference
    # graph's first call under a graph backend hands out copies in memory of
    # their own (outputs sharing a storage share the copy), once per graph,
    # so nothing made on a warm-up is ever reclaimed under its holder (an info
    # line of the "grove" logger names the graph and the shapes). Later
    # calls hand out pool memory, as reduce-overhead does: a kept replay
    # output is the caller's to clone. Outputs that are the call's inputs
    # pass through, and state outputs keep their own copies (Note [Reused
    # state copies]: InputWritesTest.test_reused_state_keeps_its_address saw
    # a second address on PyTorch 2.11 when the warm-up copied them). Tests:
    # WarmUpOutputsTest.test_a_kept_warm_up_output_outlives_later_generations
    # (sim) and DoorWarmUpOutputsTest (torch.compile, inference and training;
    # tests/python/warm_up_outputs_test.py); Wav2Vec2-Conformer trains equal to
    # eager on an H200 (session 31 call A).
    def __call__(self, *args):
        if self._warm_up_copies:
            self._warm_up_copies = False
            result = _in_memory_of_their_own(self._call(args), args, self._state_positions or ())
            _log.info("grove: graph '%s': its warm-up's outputs %s were copied out of the graph "
                      "tree's pool (Note [Warm-up outputs leave the pool])", self.plan.name,
                      _shapes(result))
            return result
        return self._call(args)

    def _outputs_in_pool(self):
        return self.backend != "eager" and any(
            not all(compiled["model"]._copy_flags) for compiled in self.segments)

    def _call(self, args):
        if self.verified_calls < self.calls_to_verify:
            call = self.verified_calls
            self.verified_calls += 1
            return self._state_left_pool(
                self._run_as_one_invocation(args, verify_mode.StepChecker(self, call)))
        fast = self._fast
        if fast is not None:
            if fast["checks"] and not _static_inputs_in_place(args, fast):
                self.raise_moved(args)
            inputs = [args[position] for position in fast["inputs"]]
            stream = _stream_of(inputs[0]) if inputs and inputs[0].is_cuda else None
            result = fast["pick"](fast["model"].call_torch(inputs, stream), args)
            return result if self._state_positions is None else self._state_left_pool(result)
        return self.slow_call(*args)

    # Note [One Python call per door call]
    # A graph that is one grove segment fed by its inputs, with no state
    # outputs and no verified calls left (the common case: every inference
    # graph grove takes whole), is called through one closure made once: it checks the bound static
    # inputs (one C++ call), takes the segment's inputs by position, asks
    # PyTorch for the device's current stream (no device query of a tensor),
    # runs the model inside dynamo's invocation with one C call (Note [One C
    # call per door call], capi/grove.cc) and picks the outputs (OutputPicker).
    # The same steps as GraphRunner.__call__'s fast plan, without its layers
    # of Python; a moved static input raises StaticInputMovedError before
    # anything runs, as there. Tests: DoorCallTest (tests/python/door_call_test.py).
    def door_call(self, one_frame=None):
        """fn(args, invocation key or None) -> the graph's outputs, where Note
        [One Python call per door call] holds; else None. one_frame: whether
        the model is called through Model.door_caller (Note [The door's model
        call in one frame], model.py); None follows GROVE_DOOR_CALL."""
        fast = self._fast
        if (fast is None or self._state_positions is not None
                or self.verified_calls < self.calls_to_verify):
            return None
        model = fast["model"]
        pick = fast["pick"]
        checks = fast["checks"]
        positions = tuple(fast["inputs"])
        stream_of = _current_stream_of(model.device)
        runner = self
        # Note [The door's model call in one frame] (model.py)
        if one_frame is None:
            one_frame = os.environ.get("GROVE_DOOR_CALL", "one_frame") != "layers"
        model_call = model.door_caller(positions) if one_frame else None
        # Note [Static input check by one map]: the check itself, bound here.
        static_check = _static_check(checks) if checks else None
        if model_call is not None:
            def call(args, invocation):
                if static_check is not None and not static_check(args):
                    runner.raise_moved(args)
                return pick(model_call(args, stream_of() if stream_of else None, invocation),
                            args)

            return call
        call_torch = model.call_torch

        def call(args, invocation):
            if static_check is not None and not static_check(args):
                runner.raise_moved(args)
            inputs = [args[position] for position in positions]
            return pick(call_torch(inputs, stream_of() if stream_of else None, invocation),
                        args)

        return call

    def raise_moved(self, args):
        """Raises StaticInputMovedError for the first bound static input of
        the fast plan that `args` hold at another address."""
        for position, address in self._fast["checks"]:
            if args[position].data_ptr() != address:
                raise StaticInputMovedError(
                    position, "grove: static input %d moved (its data pointer changed since "
                    "compilation); params are bound, never copied: recompile" % position)

    def slow_call(self, *args):
        return self._state_left_pool(self._run_as_one_invocation(args))

    def _run_as_one_invocation(self, args, checker=None):
        if self.backend == "eager" or len(self.segments) < 2:
            return self._run_steps(args, checker)
        # Note [Invocations of several models]: the segments of one call are
        # one generation, so a later segment never reclaims the pool memory of
        # an earlier segment's output that it reads.
        with grove.invocation():
            return self._run_steps(args, checker)

    def _run_steps(self, args, checker=None):
        # Every bound input is checked before any step runs, so a call that
        # raises has written nothing (a caller may compile again and rerun it).
        for position, address in self._bound:
            if args[position].data_ptr() != address:
                raise StaticInputMovedError(
                    position, "grove: static input '%s' moved (its data pointer changed since "
                    "compilation); params are bound, never copied: recompile"
                    % self.plan.placeholders[position].name)
        env = dict(self.constants)
        for node, value in zip(self.plan.placeholders, args):
            env[node] = value
        for node in self._bound_bases:  # Note [Bound bases read as bases]
            if node in env:
                env[node] = parameter_views.as_base(node, env[node])
        stream = None
        for kind, step in self.steps:
            if kind == "grove":
                inputs = []
                for node in step["inputs"]:
                    inputs.append(env[node] if node in env else self._constant(node))
                if stream is None and inputs and inputs[0].is_cuda:
                    stream = _stream_of(inputs[0])
                if checker is not None:
                    reference = checker.reference(step["segment"], env, self._read)
                    copies = [verify_mode.snapshot(value) for value in inputs]
                outputs = step["model"](*inputs, stream=stream) if inputs else step["model"]()
                for (node, _), value in zip(step["segment"].outputs, outputs):
                    env[node] = value
                if checker is not None:
                    segment = step["segment"]
                    checker.check_segment(segment, inputs, copies, outputs, reference)
                    checker.check_held_values("segment %d" % segment.index)
                    for (node, _), value in zip(segment.outputs, outputs):
                        checker.produced(node, value, "segment %d" % segment.index)
            else:
                node = step
                read = self._read
                if "grove_layouts_read" in node.meta:  # Note [Layouts a PyTorch step reads]
                    read = functools.partial(_in_layout, self._read, node.meta["grove_layouts_read"])
                node_args = torch.fx.node.map_arg(node.args, lambda n: read(env, n))
                node_kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: read(env, n))
                if node.op == "call_function":
                    env[node] = node.target(*node_args, **node_kwargs)
                elif node.op == "call_method":
                    target, *rest = node_args
                    env[node] = getattr(target, node.target)(*rest, **node_kwargs)
                else:
                    env[node] = self.plan.module.get_submodule(node.target)(*node_args,
                                                                           **node_kwargs)
                if checker is not None:
                    if mutates_first_argument(node):
                        checker.refresh()
                    checker.produced(node, env[node], "PyTorch")
        if checker is not None:
            checker.check_held_values("the end of the call")
        result = torch.fx.node.map_arg(self.plan.output_arg, lambda n: self._output(env, n))
        return self._with_aliases(result, env) if self._aliases else result

    def _with_aliases(self, result, env):
        """`result` with each output that aliases an input made from the
        caller's tensor (Note [Outputs that alias inputs])."""
        values = list(result) if isinstance(result, (tuple, list)) else [result]
        placeholders = self.plan.placeholders
        for index, position, chain in self._aliases:
            values[index] = aliases_of_inputs.replay(chain, env[placeholders[position]],
                                                 lambda node: self._read(env, node))
        if isinstance(result, (tuple, list)):
            return type(result)(values)
        return values[0]

    # Note [Constant outputs are handed out fresh]: a graph output that depends
    # on no input is folded at import (Note [Splitting a graph]) and was
    # handed out as that one tensor at every call, so a caller that wrote
    # the tensor it got (out[1].add_(1)) changed what every later call
    # returned, and what the graph's other runners read. PyTorch makes a new
    # tensor at each call: so does grove now, copying such an output per
    # call (a constant output is rare: an initial state, a mask). Constants
    # a training forward saves for its backward are not outputs the caller
    # holds (output_copies says False for them) and stay shared, and an
    # attribute the graph returns is the attribute itself. Test:
    # ImporterTest.test_a_constant_output_is_a_new_tensor_at_every_call
    # (tests/python/importer_test.py).
    def _hands_out_fresh(self, node):
        # A folded value only: an attribute the graph returns (get_attr, also
        # among self.constants) is the attribute itself, as in PyTorch.
        return isinstance(node, torch.fx.Node) and \
            isinstance(self.plan.constants.get(node), torch.Tensor) and \
            (self.output_copies is None or self.output_copies(node) is not False)

    def _output(self, env, node):
        value = self._read(env, node)
        return value.clone() if node in self._fresh else value

    def _constant(self, node):
        raise RuntimeError("grove: value '%s' was never computed" % node.name)

    def _read(self, env, node):
        if node in env:
            return env[node]
        return self._constant(node)


def _in_layout(read, layouts, env, node):
    """env's value of `node`, copied into the strides and storage offset
    `layouts` names for it where its own differ (Note [Layouts a PyTorch step
    reads], importer.py)."""
    value = read(env, node)
    layout = layouts.get(node)
    if layout is None or not isinstance(value, torch.Tensor):
        return value
    strides, offset = layout
    if tuple(value.stride()) == strides and value.storage_offset() == offset:
        return value
    return laid_out(value, strides, offset)


_MARK_STATIC = []  # [torch._dynamo.mark_static_address or None], found on first use


def _in_memory_of_their_own(result, args, left=()):
    """`result` with each tensor that is not one of `args`' storages copied,
    but for the outputs at positions `left` (state outputs, which have left
    the pool already); tensors sharing a storage share its copy (Note
    [Warm-up outputs leave the pool])."""
    inputs = {untyped_storage(value).data_ptr() for value in args
              if isinstance(value, torch.Tensor)}
    copies = {}

    def own(value):
        if not isinstance(value, torch.Tensor):
            return value
        storage = untyped_storage(value)
        key = (storage.data_ptr(), value.device)
        if key[0] in inputs:
            return value
        copy = copies.get(key)
        if copy is None:  # the storage's bytes, once
            whole = torch.empty(0, dtype=torch.uint8, device=value.device).set_(storage)
            copy = copies[key] = whole.clone()
        return copy.view(value.dtype).as_strided(value.shape, value.stride(),
                                                 value.storage_offset())

    if isinstance(result, (tuple, list)):
        return type(result)(value if index in left else own(value)
                            for index, value in enumerate(result))
    return result if 0 in left else own(result)


def _shapes(result):
    values = result if isinstance(result, (tuple, list)) else [result]
    return [list(value.shape) for value in values if isinstance(value, torch.Tensor)]


def _state_copy(tensor):
    """A state output's own copy (Note [State outputs leave the pool])."""
    copy = tensor.clone()
    if not _MARK_STATIC:
        try:
            from torch._dynamo import mark_static_address
        except ImportError:  # PyTorch without dynamo
            mark_static_address = None
        _MARK_STATIC.append(mark_static_address)
    if _MARK_STATIC[0] is not None:
        _MARK_STATIC[0](copy)
    return copy


_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)
# PyTorch's own check of static inputs (its cudagraph trees use it), one C++
# call for every bound parameter: the default where this PyTorch has it
# (Note [Static input check by one map]).
_POINTERS_EQUAL = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)
_DATA_POINTER = torch.Tensor.data_ptr


# Note [Static input check by one map]
# Every call checks that each bound static input (a parameter: bound, never
# copied) is still at its compiled address (Note [Static inputs that move],
# dynamo_backend.py). The check is made once per graph as a closure, read
# when a graph's check is made. By default it is PyTorch's
# _tensors_data_ptrs_at_indices_equal (its cudagraph trees' check: one C++
# call, a tensor cast per bound input). GROVE_DOOR_STATIC_CHECK=map (the
# default before session 23, and the fallback where PyTorch lacks that
# function) takes the bound inputs by one itemgetter, their data pointers by
# one map of Tensor.data_ptr and compares one tuple: no Python frame per
# input, but a Python method call per input. Inside a door call PyTorch's
# check costs less: session 23 r1 (H200, PyTorch 2.11, door_split, the two
# swapped into the same compiled door, paired per turn) 6.3, 9.0 and 4.4 us
# less per call for BERT's 39, LLaMA's 22 and GPT-2's 28 bound inputs
# (session 20 on an H100: 10-15 us less), although session 17 had timed
# PyTorch's as the slower one called alone (about 100 ns per input). Both
# answer the same question. Test: DoorCallTest.
# test_static_input_check_sees_a_moved_parameter_either_way
# (tests/python/door_call_test.py).
def _static_check(checks):
    """args -> whether every (position, address) of `checks` still holds."""
    positions = [position for position, _ in checks]
    expected = tuple(address for _, address in checks)
    if os.environ.get("GROVE_DOOR_STATIC_CHECK", "torch") != "map" and _POINTERS_EQUAL is not None:
        addresses = [None] * (max(positions) + 1)
        for position, address in checks:
            addresses[position] = address

        def pytorch_check(args):
            return _POINTERS_EQUAL(list(args), addresses, positions)

        return pytorch_check
    if len(positions) == 1:
        position = positions[0]
        return lambda args: (args[position].data_ptr(),) == expected
    bound = operator.itemgetter(*positions)
    return lambda args: tuple(map(_DATA_POINTER, bound(args))) == expected


def _static_inputs_in_place(args, fast):
    """Whether every bound static input is still at its recorded address
    (Note [Static input check by one map])."""
    check = fast.get("static_check")
    if check is None:
        check = fast["static_check"] = _static_check(fast["checks"])
    return check(args)


def _stream_of(tensor):
    """The caller's current CUDA stream on the tensor's device (None: legacy default)."""
    index = tensor.get_device()
    if _RAW_STREAM is not None:
        return _RAW_STREAM(index) or None
    return torch.cuda.current_stream(index).cuda_stream or None


def _current_stream_of(device):
    """A function returning the caller's current CUDA stream on `device` (a
    grove device name; None for the legacy default stream), or None where the
    device is not CUDA."""
    kind, _, index = str(device).partition(":")
    if kind != "cuda":
        return None
    index = int(index or 0)
    if _RAW_STREAM is not None:
        return lambda: _RAW_STREAM(index) or None
    return lambda: torch.cuda.current_stream(index).cuda_stream or None


def _attribute(module, target):
    value = module
    for part in target.split("."):
        value = getattr(value, part)
    return value
