"""RESULTS.md's floors: per inference and training case, the two lower bounds
a call or step cannot beat, and how far grove (and PyTorch) are above the
larger one.

Note [Node floor and memory floor]
- Node floor: the nodes of the graphs grove launched for the call or step (as
  backend_latency and train_step count them: cudaGraphGetNodes over the graphs
  of one call) times the GPU time per graph node that launch_overhead measured
  for a graph of N tiny kernels (N = 1000, else 100): what the device spends
  per node even when the node does no work.
- Memory floor: the bytes the call must move between HBM and the chip, over
  the device's HBM bandwidth. The bytes come from the model's JSON
  (benchmarks/models/<model>.json) with its dims bound as the run bound them,
  every tensor counted once (Note [Bytes that must move]).
A floor of a case whose inputs are missing is "not measured", never a guess.
"""
import json
import os
import re

import write_results_sections as sections  # noqa: E402  (lives next to this file)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "benchmarks", "models")

# HBM bandwidth, TB/s, by the device's name (nvidia-smi / the reports' "device").
# The H100 SXM reports itself as "NVIDIA H100 80GB HBM3"; PCIe and NVL parts
# have other bandwidths and are not listed: pass --hbm-tbs for them.
BANDWIDTH_TBS = [(re.compile(r"H200"), 4.8, "H200"),
                 (re.compile(r"H100.*(SXM|HBM3)"), 3.35, "H100 SXM")]

DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "bool": 1, "u8": 1, "i8": 1}
# Ops whose output is a view or a constant: no bytes move for them.
NO_BYTES = {"reshape", "permute", "full", "slice", "transpose", "view", "expand"}


class ModelError(Exception):
    """A model file this module cannot size (unknown op or dim)."""


def bandwidth_for(device, override=None):
    """(TB/s, where the number comes from) or (None, why not)."""
    if override:
        return override, "--hbm-tbs %g" % override
    for pattern, tbs, label in BANDWIDTH_TBS:
        if device and pattern.search(device):
            return tbs, "%s HBM, %g TB/s" % (label, tbs)
    return None, "no HBM bandwidth known for device %r (pass --hbm-tbs)" % (device or "unknown")


# ----------------------------------------------------------- bytes that move
#
# Note [Bytes that must move]
# Inference: every parameter and buffer read once (a table read through an
# embedding or a slice only for the rows it reads), every model input read
# once, every activation (the output of each op that computes: not reshape,
# permute, slice or full) written once. Training adds the gradient of every
# activation, the gradient of every parameter, the optimizer's state
# (SGD momentum: one buffer per parameter), the loss's own activation (the
# difference for MSE, the probabilities for next-token cross entropy) and
# its target; parameters count whole, since the optimizer reads and writes
# all of them. Counted once each: a floor, not an estimate of what any
# implementation moves (reading an activation back, or a parameter in both
# forward and backward, comes on top).


def resolve(dim, dims):
    if isinstance(dim, int):
        return dim
    if dim in dims:
        return int(dims[dim])
    raise ModelError("dim %r is not bound (bound: %s)" % (dim, ", ".join(sorted(dims)) or "none"))


def numel(shape):
    count = 1
    for extent in shape:
        count *= extent
    return count


def broadcast(*shapes):
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        extents = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        extents.discard(1)
        if len(extents) > 1:
            raise ModelError("shapes %s do not broadcast" % (shapes,))
        out.append(extents.pop() if extents else 1)
    return out


def infer_shape(node, shapes, dims):
    op, inputs, attrs = node["op"], node.get("inputs", []), node.get("attrs", {})
    args = [shapes[name] for name in inputs]
    if op == "full":
        return [resolve(d, dims) for d in attrs.get("shape", [])]
    if op == "embedding":
        return args[1] + [args[0][-1]]
    if op == "slice":
        out = list(args[0])
        axis = attrs.get("dim", 0)
        start = resolve(attrs.get("start", 0), dims)
        end = resolve(attrs.get("end", out[axis]), dims)
        out[axis] = min(end, out[axis]) - start
        return out
    if op in ("add", "mul", "sub", "div", "where"):
        return broadcast(*args)
    if op in ("layer_norm", "gelu", "softmax", "relu", "silu", "tanh", "rms_norm"):
        return list(args[0])
    if op == "linear":
        return args[0][:-1] + [args[1][0]]
    if op == "reshape":
        out = [resolve(d, dims) for d in attrs["shape"]]
        if -1 in out:
            known = numel([d for d in out if d != -1])
            out[out.index(-1)] = numel(args[0]) // known
        return out
    if op == "permute":
        return [args[0][axis] for axis in attrs["order"]]
    if op == "matmul":
        a, b = args
        return broadcast(a[:-2], b[:-2]) + [a[-2], b[-1]]
    raise ModelError("op %r of node %s is not sized by this script" % (op, node["name"]))


def model_bytes(doc, dims, training=False, loss=None):
    """{"params", "inputs", "activations", ... , "total"} in bytes (Note [Bytes that must move])."""
    dims = dict(doc.get("dims", {}), **dims)
    shapes, sizes, floating = {}, {}, set()
    for section in ("inputs", "params", "buffers"):
        for value in doc.get(section, []):
            shapes[value["name"]] = [resolve(d, dims) for d in value["shape"]]
            if value["dtype"] not in DTYPE_BYTES:
                raise ModelError("dtype %r of %s" % (value["dtype"], value["name"]))
            sizes[value["name"]] = DTYPE_BYTES[value["dtype"]]
            if value["dtype"] in ("f32", "f16", "bf16"):
                floating.add(value["name"])
    state = {v["name"] for v in doc.get("params", []) + doc.get("buffers", [])}
    params = {v["name"] for v in doc.get("params", [])}
    gathered = {}  # table -> bytes read through embeddings and slices
    read_whole = set()
    activations = 0
    last = None
    for node in doc["nodes"]:
        shape = infer_shape(node, shapes, dims)
        shapes[node["name"]] = shape
        # The output's element size: the table's for an embedding, else the
        # widest floating-point input's (masks and token ids do not count).
        floats = [sizes[name] for name in node.get("inputs", []) if name in floating]
        element = sizes[node["inputs"][0]] if node["op"] == "embedding" else max(floats or [4])
        sizes[node["name"]] = element
        floating.add(node["name"])
        for position, name in enumerate(node.get("inputs", [])):
            if name not in state:
                continue
            through_rows = (node["op"] == "embedding" and position == 0) or node["op"] == "slice"
            if through_rows:
                gathered[name] = gathered.get(name, 0) + numel(shape) * element
            else:
                read_whole.add(name)
        if node["op"] not in NO_BYTES:
            activations += numel(shape) * element
            last = node["name"]
    whole = {name: numel(shapes[name]) * sizes[name] for name in state}
    param_bytes = sum(whole[name] for name in params)
    result = {"inputs": sum(numel(shapes[v["name"]]) * sizes[v["name"]]
                            for v in doc.get("inputs", [])),
              "activations": activations}
    if not training:
        result["params"] = sum(whole[name] if name in read_whole
                               else min(whole[name], gathered.get(name, 0)) for name in state)
    else:
        output = doc["outputs"][0] if doc.get("outputs") else last
        out_bytes = numel(shapes[output]) * sizes[output]
        result["params"] = param_bytes + sum(whole[name] for name in state - params)
        result["gradients"] = param_bytes + activations
        result["optimizer_state"] = param_bytes  # SGD momentum: one buffer per parameter
        result["loss"] = out_bytes + (out_bytes if loss == "mse" else 0)  # MSE: its target too
    result["total"] = sum(result.values())
    return result


def load_model(name, models_dir):
    with open(os.path.join(models_dir, name + ".json"), encoding="utf-8") as handle:
        return json.load(handle)


def dims_of(row):
    """The dims a benchmark row bound: its "dims" field, else read from the case label."""
    dims = row.get("dims")
    if isinstance(dims, dict) and dims:
        return {key: int(value) for key, value in dims.items()}
    case = str(row.get("case", ""))
    found = {}
    for key, name in (("b", "batch"), ("T", "seq")):
        match = re.search(r"\b%s=(\d+)" % key, case)
        if match:
            found[name] = int(match.group(1))
    return found


# ------------------------------------------------------------------ floors


def us_per_node(reports):
    """(µs per graph node, N) from launch_overhead at N = 1000, else 100; or None."""
    rows = {r.get("n"): r for r in sections.rows_of(reports.get("launch_overhead", {}))}
    for n in (1000, 100):
        value = (rows.get(n, {}).get("graph_gpu_us_per_node") or {}).get("median")
        if isinstance(value, (int, float)) and value > 0:
            return value, n
    return None


def case_floor(mode, row, per_node, tbs, models_dir):
    """The floors of one grove cudagraphs row: a dict of what was found, with
    None (and a reason under *_why) for what was not."""
    key = "graph_nodes_per_call" if mode == "inference" else "graph_nodes_per_step"
    floor = {"nodes": row.get(key), "kernel_nodes": row.get(key.replace("nodes", "kernel_nodes"))}
    floor["node_us"] = None
    if not isinstance(floor["nodes"], int):
        floor["node_why"] = "no node count in the run (older benchmark)"
    elif per_node is None:
        floor["node_why"] = "no launch_overhead GPU time per node"
    else:
        floor["node_us"] = floor["nodes"] * per_node[0]
    floor["bytes"] = floor["memory_us"] = None
    model = row.get("model") or str(row.get("case", "")).split(" ")[0]
    try:
        doc = load_model(model, models_dir)
        loss = row.get("loss") or ("mse" if model.startswith("mlp") else "next_token")
        floor["bytes"] = model_bytes(doc, dims_of(row), training=mode == "training", loss=loss)
    except (OSError, ValueError, KeyError, IndexError, TypeError, ModelError) as error:
        floor["memory_why"] = "model %s not sized (%s)" % (model, error)
    if floor["bytes"] is not None:
        if tbs:
            floor["memory_us"] = floor["bytes"]["total"] / (tbs * 1e6)
        else:
            floor["memory_why"] = "no HBM bandwidth"
    measured = [v for v in (floor["node_us"], floor["memory_us"]) if v is not None]
    floor["floor_us"] = max(measured) if measured else None
    # Which bound sets the floor; "... only" when the other was not measured.
    floor["bound"] = None
    if floor["node_us"] is not None and floor["memory_us"] is not None:
        floor["bound"] = "nodes" if floor["node_us"] >= floor["memory_us"] else "memory"
    elif measured:
        floor["bound"] = "nodes only" if floor["node_us"] is not None else "memory only"
    return floor


def floors(context, models_dir=MODELS):
    """{(mode, case): floor} for every grove cudagraphs row of backend_latency and train_step."""
    reports = context.reports
    per_node = us_per_node(reports)
    tbs, _ = bandwidth_for(getattr(context, "device", None), getattr(context, "hbm_tbs", None))
    found = {}
    for mode, name in (("inference", "backend_latency"), ("training", "train_step")):
        for row in sections.rows_of(reports.get(name, {})):
            if row.get("backend") == "cudagraphs":
                found[(mode, row.get("case"))] = case_floor(mode, row, per_node, tbs, models_dir)
    return found


def mib(count):
    return "-" if count is None else "%.2f MiB" % (count / 2.0 ** 20)


def floor_cell(floor):
    if not floor or floor.get("floor_us") is None:
        return "not measured"
    return "%s (%s)" % (sections.us(floor["floor_us"]), floor["bound"])


def section(context, models_dir=MODELS):
    """## Floors: one row per inference and training case."""
    reports = context.reports
    found = floors(context, models_dir)
    per_node = us_per_node(reports)
    device = getattr(context, "device", None)
    tbs, source = bandwidth_for(device, getattr(context, "hbm_tbs", None))
    lines = ["## Floors: graph nodes and bytes that must move", ""]
    if not found:
        return lines + ["Not measured: no cudagraphs row in backend_latency.json or "
                        "train_step.json.", ""]
    node_text = ("%s µs of GPU time per graph node (launch_overhead, N = %d)" % (
        sections.us(per_node[0]), per_node[1])) if per_node else \
        "not measured (no launch_overhead.json with N = 100 or 1000)"
    lines += ["Two lower bounds per case (Note [Node floor and memory floor] in "
              "tools/write_results_floors.py). Node floor: the nodes of the graphs grove's "
              "cudagraphs backend launched per call or step, as the run counted them, × %s. "
              "Memory floor: the bytes the call must move ÷ the HBM bandwidth (%s; device: %s). "
              "Bytes, from the model's JSON with the run's dims: inference reads every parameter "
              "(embedding tables only for the rows looked up) and input once and writes every "
              "activation once (views and constants move nothing); a training step adds a "
              "gradient per activation and per parameter, one SGD momentum buffer per "
              "parameter and the loss's activation and target; every tensor counted once, so "
              "both floors are bounds, not estimates. Floor: the larger of the two. grove and "
              "PyTorch over the floor: their median ÷ the floor (PyTorch: its fastest "
              "configuration of the side-by-side table)." % (
                  node_text, source, device or "unknown"), ""]
    torch = {}
    for mode, cases in sections.latency_matrix(reports):
        for case, values in cases:
            torch[(mode, case)] = values
    rows = []
    for (mode, case), floor in found.items():
        values = torch.get((mode, case), {})
        graphs = values.get("grove cudagraphs")
        best = sections.best_torch(values)
        total = floor["bytes"]["total"] if floor["bytes"] else None
        nodes = "-" if floor["nodes"] is None else (
            "%d (%s kernels)" % (floor["nodes"], floor["kernel_nodes"])
            if floor["kernel_nodes"] is not None else str(floor["nodes"]))
        base = floor["floor_us"]
        rows.append([mode, case, nodes,
                     sections.us(floor["node_us"]) if floor["node_us"] is not None
                     else "not measured",
                     mib(total), sections.us(floor["memory_us"])
                     if floor["memory_us"] is not None else "not measured",
                     floor_cell(floor), sections.us(graphs),
                     sections.ratio(graphs / base) if graphs and base else "-",
                     sections.us(graphs - base) if graphs and base else "-",
                     sections.ratio(best[1] / base) if best and base else "-"])
    lines += sections.table(["mode", "case", "graph nodes", "node floor", "bytes moved",
                             "memory floor", "floor (bound)", "grove cudagraphs",
                             "grove / floor", "grove − floor", "PyTorch best / floor"],
                            rows, ["l", "l", "r", "r", "r", "r", "r", "r", "r", "r", "r"])
    why = {}
    for (mode, case), floor in found.items():
        for reason in (floor.get("node_why"), floor.get("memory_why")):
            if reason:
                why.setdefault(reason, []).append("%s %s" % (mode, case))
    if why:
        lines += ["", "Not measured: %s." % "; ".join(
            "%s (%s)" % (reason, ", ".join(cases)) for reason, cases in why.items())]
    return lines + [""]
