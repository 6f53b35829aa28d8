"""One grove program cut from an fx graph (Segment: its nodes, the inputs it
reads each call, its bound params and outputs) and its grove JSON program
(segment_program). The importer makes segments (Note [Splitting a graph],
importer.py); the runner and export compile them."""

from grove.fx_common import dtype_name


class Segment:
    """One grove program cut from the graph."""

    def __init__(self, index):
        self.index = index
        self.nodes = []  # the fx nodes computed here, in order
        self.program_nodes = []  # grove node dicts
        self.inputs = []  # (grove name, fx node) read per call
        self.params = {}  # grove name -> (tensor, fx node or None)
        self.outputs = []  # (fx node, position within a tuple value or None)
        self.names = {}  # (fx node, position) -> grove value name
        self.counter = 0


def segment_program(name, segment):
    program = {"name": "%s_%d" % (name, segment.index), "inputs": [], "params": [],
               "nodes": segment.program_nodes, "outputs": []}
    for grove_name, node in segment.inputs:
        value = node.meta["grove_value"]
        program["inputs"].append({"name": grove_name, "shape": list(value.shape),
                                  "dtype": dtype_name(value.dtype)})
    for grove_name, (tensor, _) in segment.params.items():
        program["params"].append({"name": grove_name, "shape": list(tensor.shape),
                                  "dtype": dtype_name(tensor.dtype), "init": {"kind": "zeros"}})
    for node, position in segment.outputs:
        program["outputs"].append(segment.names[(node, position)])
    return program
