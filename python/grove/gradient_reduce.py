"""Gradient all-reduce inside the door's backward graphs (data parallel,
grove.torch.DistributedDataParallel): Note [Gradient all-reduce in the
door's backward].
"""

import contextlib
import threading

import torch

# Note [Gradient all-reduce in the door's backward]: while `active(options)` is
# open, a StepCompiler made (grove.training) asks grove to compile each
# backward segment with the C API's "gradient_all_reduce" option over exactly
# the segment outputs that are gradients of parameters (the forward's inputs
# that are nn.Parameters needing gradients: AOTAutograd's backward returns one
# gradient per forward input, by position). The compiler's pass
# (compiler/distributed/gradient_all_reduce.h, Note [Gradient buckets]) puts
# bucketed mean all-reduces right after each bucket's last gradient, so on cuda
# they are captured inside the backward's CUDA graph, and every rank builds the
# same buckets from the same graph. Gradients of other inputs (an activation of
# an earlier graph across a graph break) are never reduced. A parameter
# gradient that no grove segment computes (an op run in PyTorch, a gradient
# passed through) is reduced afterwards with torch.distributed, so `.grad`
# always holds the mean over ranks. Test: tests/python/grove_ddp_test.py.
_state = threading.local()


@contextlib.contextmanager
def active(options):
    """StepCompilers made inside reduce their backward's parameter gradients:
    options is the "gradient_all_reduce" JSON object minus "outputs"
    ({"op": "mean", "bucket_bytes": ...})."""
    saved = getattr(_state, "options", None)
    _state.options = dict(options)
    try:
        yield
    finally:
        _state.options = saved


@contextlib.contextmanager
def made_compilers(into):
    """StepCompilers made inside are appended to the list `into`."""
    saved = getattr(_state, "made", None)
    _state.made = into
    try:
        yield
    finally:
        _state.made = saved


def note_compiler(compiler):
    """Called by each StepCompiler made while `active`."""
    made = getattr(_state, "made", None)
    if made is not None:
        made.append(compiler)


def current():
    """The options of the innermost `active`, or None."""
    return getattr(_state, "options", None)


def parameter_positions(example_inputs):
    """Forward input positions whose gradients are reduced: parameters that need one."""
    return frozenset(index for index, value in enumerate(example_inputs)
                     if isinstance(value, torch.nn.Parameter) and value.requires_grad)


class BackwardReduction:
    """The reduction of one backward graph: which outputs grove reduces in
    which segment, and which parameter gradients are left to torch.distributed."""

    def __init__(self, options, positions, output_items):
        """positions: forward input positions of the parameters; output_items:
        the backward graph's output, one item per forward input."""
        self.options = options
        # fx nodes of the graph's output that are parameter gradients
        self.gradients = {item for index, item in enumerate(output_items)
                          if index in positions and isinstance(item, torch.fx.Node)}
        self.reduced_in_grove = set()
        self.output_items = list(output_items)
        self.positions = positions

    def segment_option(self, segment_output_nodes):
        """The segment's "gradient_all_reduce" option, or None (runner.GraphRunner)."""
        picked = []
        for index, node in enumerate(segment_output_nodes):
            if node in self.gradients and node not in self.reduced_in_grove:
                picked.append(index)
                self.reduced_in_grove.add(node)
        if not picked:
            return None
        return dict(self.options, outputs=picked)

    def left_to_torch(self):
        """Output positions of parameter gradients no grove segment reduced."""
        return [index for index, item in enumerate(self.output_items)
                if index in self.positions and isinstance(item, torch.fx.Node)
                and item not in self.reduced_in_grove]


def reduce_in_torch(gradients, positions):
    """Mean over ranks of gradients[p] for p in positions (a new tensor each:
    the result may be grove's output memory, which is handed out as it is)."""
    import torch.distributed as dist

    world = dist.get_world_size()
    for position in positions:
        gradient = gradients[position]
        if isinstance(gradient, torch.Tensor):
            gradient = gradient.clone()
            dist.all_reduce(gradient)
            gradients[position] = gradient.div_(world)
    return gradients


def reduced_after(call, positions):
    """A boxed backward whose parameter gradients at `positions` are reduced
    with torch.distributed after it runs."""

    def reduced(args):
        return reduce_in_torch(call(args), positions)

    reduced._boxed_call = True
    reduced.runner = call.runner
    return reduced
