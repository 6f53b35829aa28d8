"""Export a PyTorch module for `grove serve`: grove's program JSON with the
batch dimension dynamic, and a safetensors file of its parameters, buffers
and folded constants (Note [Export for serving]).

    import grove.export
    program, weights = grove.export.export(model, (example,), "out/")
    # grove serve out/model.json --weights out/model.safetensors
"""

import inspect
import json
import os
import re

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from grove import importer

# Note [Export for serving]: the module is traced (make_fx) and imported at two
# batch sizes (the first dimension of every input). The two programs must be
# the same but for integers that scale with the batch: an integer that is
# B1*k in the first and B2*k in the second becomes "batch" (k = 1) or
# "batch*k" (Note [Dimension products], model_json.cc); any other difference,
# or a graph that does not import whole (an op left to PyTorch), raises
# ExportError naming it. Parameters, buffers and constants the import folded
# become the program's params, their values written to a safetensors file
# (grove_weights) under the same names; `grove serve PROGRAM --weights FILE`
# then serves the module with the batch buckets it plans. Test:
# ExportTest (tests/python/export_test.py) exports a ViT-like and a
# BERT-like module, serves them over HTTP and compares with PyTorch.


class ExportError(ValueError):
    """The module cannot be exported as one grove program."""


def _program(module, inputs, name):
    with torch.no_grad():
        graph = make_fx(module)(*inputs)
    plan = importer.import_graph(graph, list(inputs), name=name)
    if plan.unsupported:
        raise ExportError("grove export: '%s' does not import whole; ops left to PyTorch: %s "
                          "(export needs every op in grove; GROVE_LOG=info names each node)"
                          % (name, ", ".join(sorted({op for _, op, _ in plan.unsupported}))))
    segments = [step for kind, step in plan.steps if kind == "grove"]
    if len(segments) != 1:
        raise ExportError("grove export: '%s' imports as %d programs, not one" % (
            name, len(segments)))
    segment = segments[0]
    outputs = plan.output_arg if isinstance(plan.output_arg, (tuple, list)) \
        else [plan.output_arg]
    produced = {node for node, _ in segment.outputs}
    for node in outputs:
        if node not in produced:
            raise ExportError("grove export: '%s' returns %s, which its program does not "
                              "compute (an input passed through or a constant)" % (name, node))
    program = importer.segment_program(name, segment)
    program["name"] = name
    # The program returns the module's outputs, in the module's order.
    names = {node: segment.names[(node, position)] for node, position in segment.outputs}
    program["outputs"] = [names[node] for node in outputs]
    params = {grove_name: tensor for grove_name, (tensor, _) in segment.params.items()}
    return program, params


def _generalize(first, second, batches, where="program"):
    """One JSON value from two traced at batch sizes `batches`."""
    small, large = batches
    if isinstance(first, dict) and isinstance(second, dict):
        if first.keys() != second.keys():
            raise ExportError("grove export: %s differs between batch sizes %d and %d" % (
                where, small, large))
        return {key: _generalize(first[key], second[key], batches, "%s.%s" % (where, key))
                for key in first}
    if isinstance(first, list) and isinstance(second, list):
        if len(first) != len(second):
            raise ExportError("grove export: %s has %d entries at batch %d and %d at %d" % (
                where, len(first), small, len(second), large))
        return [_generalize(a, b, batches, "%s[%d]" % (where, i))
                for i, (a, b) in enumerate(zip(first, second))]
    if first == second:
        return first
    if isinstance(first, int) and isinstance(second, int) and not isinstance(first, bool) \
            and first % small == 0 and second % large == 0 \
            and first // small == second // large:
        factor = first // small
        return "batch" if factor == 1 else "batch*%d" % factor
    raise ExportError("grove export: %s is %r at batch %d and %r at batch %d; grove's programs "
                      "only scale sizes with the batch" % (where, first, small, second, large))


# Note [Exported names]: a client of `grove serve` names each tensor of a
# KServe v2 request, and reads the model's metadata for them. The traced
# program's names are the importer's ("v2.arg0_1", "mul.4"), in the order the
# program first reads its inputs. So the exported program's inputs take the
# names of the module's forward parameters, in their order, and its outputs
# "output_0", "output_1", ... in the order the module returns them ("output"
# for a lone one); a name another value already holds, or an output returned
# twice, keeps the importer's name. Test:
# ExportTest.test_names_are_the_forward_parameters_and_outputs_in_order
# (tests/python/export_test.py).
def _name_for_clients(program, module):
    try:
        parameters = [parameter.name for parameter in
                      inspect.signature(module.forward).parameters.values()
                      if parameter.kind in (parameter.POSITIONAL_ONLY,
                                            parameter.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        parameters = []
    renames, order = {}, {}
    for entry in program["inputs"]:
        match = re.search(r"\.arg(\d+)_1$", entry["name"])
        if match is None:
            continue
        position = int(match.group(1))
        order[entry["name"]] = position
        renames[entry["name"]] = (parameters[position] if position < len(parameters)
                                  else "input_%d" % position)
    outputs = program["outputs"]
    if len(set(outputs)) == len(outputs):
        for index, name in enumerate(outputs):
            renames[name] = "output" if len(outputs) == 1 else "output_%d" % index
    held = ([entry["name"] for entry in program["inputs"] + program["params"]]
            + [node["name"] for node in program["nodes"]])
    new_names = list(renames.values())
    renames = {old: new for old, new in renames.items()
               if new_names.count(new) == 1 and (new == old or new not in held)}
    # The inputs in the forward's order (one without a position last).
    program["inputs"].sort(key=lambda entry: order.get(entry["name"], len(order) + len(parameters)))
    for entry in program["inputs"]:
        entry["name"] = renames.get(entry["name"], entry["name"])
    for node in program["nodes"]:
        node["name"] = renames.get(node["name"], node["name"])
        node["inputs"] = [renames.get(name, name) for name in node["inputs"]]
    program["outputs"] = [renames.get(name, name) for name in outputs]


def _traced(module, example_inputs, batch_sizes, name):
    """(program, params) of `module` traced at each of `batch_sizes`."""
    traced = []
    for batch in batch_sizes:
        inputs = []
        for value in example_inputs:
            if not isinstance(value, torch.Tensor) or value.dim() == 0:
                raise ExportError("grove export: every input must be a tensor whose first "
                                  "dimension is the batch")
            repeats = (batch + value.shape[0] - 1) // value.shape[0]
            inputs.append(value.repeat(repeats, *([1] * (value.dim() - 1)))[:batch].contiguous())
        traced.append(_program(module, inputs, name))
    return traced


def export(module, example_inputs, out_dir, name=None, batch_sizes=(2, 3)):
    """Writes `<out_dir>/<name>.json` and `<out_dir>/<name>.safetensors` for
    `module` (traced in eval mode; the module's own mode is given back)
    called on `example_inputs`, whose first dimension is the batch; returns
    the two paths."""
    import grove_weights

    name = name or type(module).__name__.lower()
    was_training = module.training
    module.eval()
    try:
        (first, params), (second, _) = _traced(module, example_inputs, batch_sizes, name)
    finally:
        module.train(was_training)
    program = _generalize(first, second, batch_sizes)
    program["dims"] = {"batch": batch_sizes[0]}
    _name_for_clients(program, module)
    for param in program["params"]:
        if not all(isinstance(size, int) for size in param["shape"]):
            raise ExportError("grove export: param '%s' (a constant the import folded, such as "
                              "zeros of an input's shape) has the batch's size; make it from "
                              "the input instead (x * 0, a broadcast)" % param["name"])
    os.makedirs(out_dir, exist_ok=True)
    program_path = os.path.join(out_dir, name + ".json")
    weights_path = os.path.join(out_dir, name + ".safetensors")
    with open(program_path, "w") as out:
        json.dump(program, out, indent=1)
    grove_weights.save_file({key: value.detach().contiguous().cpu()
                             for key, value in params.items()}, weights_path,
                            metadata={"exported_by": "grove.export", "module": name})
    return program_path, weights_path
