"""RESULTS.md's goals of issue 22 (grove's kernels past PyTorch's own), each
recomputed from one session's medians (Note [Goals are judged from the
numbers] in write_results.py):

- batch-1 inference, grove cudagraphs over PyTorch's hand-captured graph of
  the same model: mlp16x512 ≤ 0.5×, gpt4x256 ≤ 0.7×;
- every training step, grove cudagraphs ≤ 0.7× PyTorch's hand-captured whole
  step (f32, SGD momentum 0.9: the faster of foreach and fused);
- every batch-1 inference row within 3× of its floor (the larger of the node
  and memory floors: write_results_floors.py);
- grove eager ≥ 2× faster than PyTorch eager at batch 1 in both the
  backend_latency and the eager_latency run.
"""
import write_results_floors as floors_module  # noqa: E402  (lives next to this file)
import write_results_sections as sections  # noqa: E402  (lives next to this file)

us, ratio, verdict, needs = sections.us, sections.ratio, sections.verdict, sections.needs
UNMEASURED = sections.UNMEASURED
HAND_INFERENCE, HAND_STEP = sections.HAND_CAPTURED_CONFIGS
INFERENCE_LIMITS = (("mlp16x512", 0.5), ("gpt4x256", 0.7))


def torch_rows(context, mode):
    return [r for r in sections.comparable_torch_rows(context.reports.get("torch"))
            if r.get("mode") == mode]


def hand_captured_inference(context):
    backend = sections.rows_of(context.reports.get("backend_latency", {}))
    torch = torch_rows(context, "inference")
    goals = []
    for model, limit in INFERENCE_LIMITS:
        case = sections.batch1_case(backend, model) or sections.batch1_case(torch, model) or \
            model + " b=1"
        graphs = sections.median_of(sections.find(backend, case=case, backend="cudagraphs"))
        hand = sections.median_of(sections.find(torch, case=case, config=HAND_INFERENCE))
        goal = "grove cudagraphs ≤ %.1f× PyTorch's hand-captured graph, %s" % (limit, case)
        if graphs and hand:
            goals.append([goal, "%s / %s = %s" % (us(graphs), us(hand), ratio(graphs / hand)),
                          verdict(graphs / hand <= limit)])
        else:
            goals.append([goal, needs(graphs, "backend_latency cudagraphs", hand,
                                      "PyTorch hand-captured graph"), UNMEASURED])
    return goals


def hand_captured_training(context):
    steps = sections.rows_of(context.reports.get("train_step", {}))
    torch = torch_rows(context, "training")
    goals = []
    for case in sections.cases_in_order(steps) or ["mlp16x512 b=32", "gpt4x256 b=8 T=32"]:
        graphs = sections.median_of(sections.find(steps, case=case, backend="cudagraphs"))
        row = sections.find(torch, case=case, config=HAND_STEP)
        hand = sections.median_of(row)
        goal = "training step ≤ 0.7× PyTorch's hand-captured whole step, %s" % case
        if graphs and hand:
            label = " (%s)" % row["optimizer_label"] if row.get("optimizer_label") else ""
            goals.append([goal, "%s / %s%s = %s" % (us(graphs), us(hand), label,
                                                    ratio(graphs / hand)),
                          verdict(graphs / hand <= 0.7)])
        else:
            goals.append([goal, needs(graphs, "train_step cudagraphs", hand,
                                      "PyTorch hand-captured whole step"), UNMEASURED])
    return goals


def batch1_floors(context):
    backend = sections.rows_of(context.reports.get("backend_latency", {}))
    floors = floors_module.floors(context)
    goals = []
    for model, _ in INFERENCE_LIMITS:
        case = sections.batch1_case(backend, model) or model + " b=1"
        graphs = sections.median_of(sections.find(backend, case=case, backend="cudagraphs"))
        floor = floors.get(("inference", case)) or {}
        goal = "batch-1 inference within 3× of its floor, %s" % case
        if graphs and floor.get("floor_us"):
            goals.append([goal, "%s / %s = %s" % (us(graphs), floors_module.floor_cell(floor),
                                                  ratio(graphs / floor["floor_us"])),
                          verdict(graphs / floor["floor_us"] <= 3)])
        else:
            goals.append([goal, needs(graphs, "backend_latency cudagraphs",
                                      floor.get("floor_us"), "floor"), UNMEASURED])
    return goals


def eager_in_both_runs(context):
    backend = sections.rows_of(context.reports.get("backend_latency", {}))
    eager_rows = sections.rows_of(context.reports.get("eager_latency", {}))
    torch = torch_rows(context, "inference")
    goals = []
    for model, _ in INFERENCE_LIMITS:
        case = sections.batch1_case(backend, model) or model + " b=1"
        torch_eager = sections.median_of(sections.find(torch, case=case, config="eager"))
        in_backend = sections.median_of(sections.find(backend, case=case, backend="eager"))
        other = sections.find(eager_rows, case=case) or {}
        in_eager = other.get("latency_median_us")
        goal = "grove eager ≥ 2× faster than PyTorch eager in both eager runs, %s" % case
        if torch_eager and in_backend and in_eager:
            speedups = (torch_eager / in_backend, torch_eager / in_eager)
            goals.append([goal, "backend_latency %s / %s = %s; eager_latency %s / %s = %s"
                          % (us(torch_eager), us(in_backend), ratio(speedups[0]),
                             us(torch_eager), us(in_eager), ratio(speedups[1])),
                          verdict(min(speedups) >= 2)])
        else:
            goals.append([goal, needs(torch_eager, "PyTorch eager", in_backend,
                                      "backend_latency eager", in_eager, "eager_latency"),
                          UNMEASURED])
    return goals


JUDGES = (hand_captured_inference, hand_captured_training, batch1_floors, eager_in_both_runs)
