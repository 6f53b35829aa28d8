"""grove from Python: compile a grove JSON program and run it on NumPy arrays
or PyTorch tensors, through libgrove.so's C API (ctypes; no compiled module,
so one package serves any Python 3 and any PyTorch build).

    import grove
    model = grove.compile(program_json, backend="cudagraphs", device="sim")
    (y,) = model(x)            # x: a torch tensor or numpy array; y: the same kind

Inputs and bound params are viewed, never copied (Model.state(name).data_ptr()
is the caller's pointer). Outputs come back through DLPack without a copy
(Note [Kept outputs through DLPack], outputs.py).

The package's modules, one concept each: model (Model, compile), outputs
(DLPack hand-off, Output, check_not_overwritten), _descs (tensors described
for the C API), gradients (Note [Gradients handed out of the pool]), trees
(ThreadTrees, thread_trees, invocation), _calls (Note [One model, many
threads]), _capi (the C API), dtypes (the one dtype table).
"""

from grove._capi import GroveError, OutOfMemoryError, StaleOutputError
from grove._descs import describe  # noqa: F401 (re-exported)
from grove.gradients import (  # noqa: F401
    hand_out_gradient,
    hand_out_gradients,
    keep_handed_gradients,
)
from grove.model import Model, compile
from grove.outputs import Output, check_not_overwritten
from grove.trees import ThreadTrees, invocation, thread_trees
from grove.version import __version__  # noqa: F401 (the wheel's version)

__all__ = ["compile", "Model", "GroveError", "OutOfMemoryError", "StaleOutputError", "Output",
           "check_not_overwritten", "ThreadTrees", "thread_trees", "invocation"]
