"""Real models through torch.compile on one GPU, in one process (ratios, not
lone absolute times): per model of the zoo (tests/python/gpu_zoo_test.py's
GPT-2, LLaMA, BERT, BART, ViT and ResNet-18, plus an MLP-Mixer and PyTorch's
nn.TransformerDecoder) at batch 1 and 16, the ops grove left to PyTorch,
grove's graph replays per call, and the latency of PyTorch eager,
mode="reduce-overhead" and backend="grove"; then decode tokens/s of
Hugging Face's static-cache generate (LLaMA) and of a gpt-fast-style decoder
(tests/python/static_cache_decoder.py) under the same three, with whether
each one's tokens equal eager's (--decode-tokens new tokens per generate
call, 32 by default).

    python3 benchmarks/torch_zoo.py [--json torch_zoo.json] [--repeats 40]
        [--budget-s 230] [--models gpt2,resnet18] [--batches 16,1] [--batch-major]
        [--cases vit:16,gpt2:1]
        [--decode] [--no-zoo] [--merge] [--decode-child-s 60]
        [--no-kernels] [--attention-ab] [--decode-models hf_llama_static_cache]
    python3 benchmarks/torch_zoo.py --train [--json torch_zoo_train.json] [--repeats 100]
        [--budget-s 200] [--models gpt2,llama,vit_tiny] [--optimizers adamw,sgd]

--train times training steps instead (benchmarks/zoo_training.py: GPT-2,
LLaMA and ViT-tiny at batch 8, AdamW and SGD, eager, reduce-overhead, the
grove door and grove.training.compile_step, losses against eager's).

--merge keeps the cases of an existing --json that this run does not
measure, so the table can be filled by several runs of a few minutes each
(reduce-overhead's compilations take most of the time).

A row's variants are compiled side by side, warm up, then take turns of
one block of 20 calls each, at least five turns (median and p10-p90 over
blocks; Note [A row's variants timed in turns]). By default only the zoo
runs, so that every model fits one lease's call (reduce-overhead's
compilations take most of the time; each row records every variant's
compile_s); --decode adds the decode rows (--decode --no-zoo --merge adds
them to an earlier run's JSON), --attention-ab the written-out-attention variant.
The decode rows run first:
per variant a first generate call (compilation included, reported as
first_call_tokens_per_s) and the median of STEADY_CALLS later ones
(tokens_per_s), each case in a child process of its own (Note [Decode cases
in child processes]; the children prepare side by side, then take turns:
Note [Children that take turns], tools/child_turns.py) stopped after
--decode-child-s seconds of its turn (and never past
the budget's end by more than MIN_CHILD_S) and then reported as did not
finish; every model's eager and grove cases run before any reduce-overhead
case, and the JSON is written after each case (Note [Bounded decode step]).
Zoo cases left when --budget-s seconds have passed are reported as not run
(a case started before then finishes), so a run stays within its lease. f32, TF32 off. Skips (exit 0, says so) without CUDA or dynamo;
a model whose library is missing is reported as such. Rendered into
RESULTS.md by tools/write_results_torch_zoo.py. Each zoo row also has, for
reduce-overhead and grove, the kernels per call and their GPU time from
torch.profiler (Note [Kernels per call in the zoo]; --no-kernels skips it),
and grove's max |grove - eager| / max |eager| over a replay (grove_vs_eager,
zoo_check.py's measure).
"""
import argparse
import copy
import gc
import importlib
import json
import os
import statistics
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "python"))
sys.path.insert(0, os.path.join(here, "..", "python"))
sys.path.insert(0, os.path.join(here, "..", "tools"))
sys.path.insert(0, here)

NEW_TOKENS = 32
STEADY_CALLS = 5  # generate calls after the first; their median is the steady rate
VARIANTS = ("torch_eager", "torch_reduce_overhead", "grove")


class Picked(torch.nn.Module):
    """A model called as fn(*tensors) -> one tensor."""

    def __init__(self, model, pick):
        super().__init__()
        self.model = model
        self.pick = pick

    def forward(self, *args):
        return self.pick(self.model, *args)


def gpt2(batch):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_embd=256, n_layer=2, n_head=4, vocab_size=1000,
                                       n_positions=128, resid_pdrop=0, embd_pdrop=0,
                                       attn_pdrop=0))
    return (Picked(model, lambda m, x: m(input_ids=x, use_cache=False).logits),
            (torch.randint(0, 1000, (batch, 32)),))


def llama(batch):
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(hidden_size=256, intermediate_size=688,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, vocab_size=1000,
                                         max_position_embeddings=128))
    return (Picked(model, lambda m, x: m(input_ids=x, use_cache=False).logits),
            (torch.randint(0, 1000, (batch, 32)),))


def bert(batch):
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=1024, vocab_size=1000, hidden_dropout_prob=0,
                                 attention_probs_dropout_prob=0), add_pooling_layer=False)
    mask = torch.ones(batch, 24, dtype=torch.long)
    mask[-1, 17:] = 0
    return (Picked(model, lambda m, x, a: m(input_ids=x, attention_mask=a).last_hidden_state),
            (torch.randint(0, 1000, (batch, 24)), mask))


def bart(batch):
    from transformers import BartConfig, BartModel

    model = BartModel(BartConfig(d_model=128, encoder_layers=2, decoder_layers=2,
                                 encoder_attention_heads=4, decoder_attention_heads=4,
                                 encoder_ffn_dim=256, decoder_ffn_dim=256, vocab_size=1000,
                                 max_position_embeddings=128, dropout=0, attention_dropout=0,
                                 activation_dropout=0))
    return (Picked(model, lambda m, x, d: m(input_ids=x, decoder_input_ids=d,
                                            use_cache=False).last_hidden_state),
            (torch.randint(3, 1000, (batch, 20)), torch.randint(3, 1000, (batch, 12))))


def vit(batch):
    import timm

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64,
                              num_classes=10)
    return Picked(model, lambda m, x: m(x)), (torch.randn(batch, 3, 64, 64),)


def resnet18(batch):
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    return Picked(model, lambda m, x: m(x)), (torch.randn(batch, 3, 64, 64),)


def mlp_mixer(batch):
    import timm

    model = timm.create_model("mixer_s16_224", pretrained=False, img_size=64, num_classes=10)
    # timm starts the Mixer's classifier at zero (weight and bias), so every
    # output would be 0 and a comparison with eager would prove nothing
    # (zoo_check once reported an exact 0.00e+00); random weights there.
    torch.nn.init.normal_(model.head.weight, std=0.02)
    torch.nn.init.normal_(model.head.bias, std=0.02)
    return Picked(model, lambda m, x: m(x)), (torch.randn(batch, 3, 64, 64),)


def transformer_decoder(batch):
    layer = torch.nn.TransformerDecoderLayer(d_model=256, nhead=4, dim_feedforward=1024,
                                             dropout=0.0, batch_first=True)
    model = torch.nn.TransformerDecoder(layer, num_layers=2)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(32)
    # tgt_is_causal=True states what the mask is: without it PyTorch checks the
    # mask with a .item() on every call, which breaks dynamo's graph (for
    # reduce-overhead and grove alike: both ran slower than eager that way).
    return (Picked(model, lambda m, t, s, k: m(t, s, tgt_mask=k, tgt_is_causal=True)),
            (torch.randn(batch, 32, 256), torch.randn(batch, 48, 256), mask))


MODELS = [("gpt2", gpt2, "transformers"), ("llama", llama, "transformers"),
          ("bert", bert, "transformers"), ("bart", bart, "transformers"),
          ("vit", vit, "timm"), ("resnet18", resnet18, "torchvision"),
          ("mlp_mixer", mlp_mixer, "timm"), ("transformer_decoder", transformer_decoder, "torch")]


# --attention-ab adds this variant: grove with GROVE_FUSED_ATTENTION=0, its
# attention written out as matmuls and softmax (the default, auto, makes the
# one `attention` op where the sequence attention kernel takes the sizes: Note
# [Fused attention in the importer]), for models with attention.
WRITTEN_OUT = "grove_written_out_attention"
ATTENTION_MODELS = {"gpt2", "llama", "bert", "bart", "vit", "transformer_decoder"}


# --grove-env LABEL:NAME=VALUE[+NAME=VALUE],... adds a grove variant per
# LABEL ("grove_LABEL") run with those environment variables set, so that one
# process times grove's switches against each other and reduce-overhead.
GROVE_ENV_VARIANTS = {WRITTEN_OUT: {"GROVE_FUSED_ATTENTION": "0"}}


def parse_env_variants(text, prefix, where):
    """{prefix + LABEL: {NAME: VALUE}} of a LABEL:NAME=VALUE[+NAME=VALUE],...
    argument; `where` (e.g. "torch_zoo: --grove-env") starts its error."""
    variants = {}
    for item in filter(None, text.split(",")):
        label, _, settings = item.partition(":")
        pairs = [setting.partition("=") for setting in settings.split("+")]
        if not label or not settings or any(not name or not sep for name, sep, _ in pairs):
            raise SystemExit("%s item %r is not LABEL:NAME=VALUE[+NAME=VALUE]" % (where, item))
        variants[prefix + label] = {name: value for name, _, value in pairs}
    return variants


def parse_grove_env(text):
    """{"grove_LABEL": {NAME: VALUE}} of a --grove-env argument."""
    return parse_env_variants(text, "grove_", "torch_zoo: --grove-env")


def variant_environment(variant):
    """The variant's environment variables (GROVE_ENV_VARIANTS) while it
    compiles and runs; the earlier values come back after."""
    from torch_backend import environment  # benchmarks/, this script's folder

    return environment(GROVE_ENV_VARIANTS.get(variant, {}))


def compiled(module, variant):
    """The variant's callable. Dynamo is not reset here: a row's variants
    stay compiled side by side (Note [A row's variants timed in turns]); each
    row starts from a reset (zoo_rows)."""
    if variant == "torch_eager":
        return module
    if variant == "torch_reduce_overhead":
        return torch.compile(module, mode="reduce-overhead", dynamic=False)
    grove_backend = torch._dynamo.lookup_backend("grove")

    def backend(graph, example_inputs):
        # A function of the variant's own: dynamo's cache entries are guarded
        # on the backend object, and the registered "grove" is one object, so
        # grove variants compiled by name shared one compilation (session 19's
        # test call: "no graph of its own").
        return grove_backend(graph, example_inputs)
    return torch.compile(module, backend=backend, dynamic=False)


def tree_counters():
    if "grove.torch" not in sys.modules:
        return {}  # a decode child of a PyTorch variant (Note [Decode cases in child processes])
    import grove.torch

    for graph in grove.torch.compiled_graphs():
        for model in getattr(getattr(graph, "runner", None), "models", lambda: [])():
            stats = model.stats()
            if "tree" in stats:  # (a model of the eager backend has no tree)
                return stats["tree"]
    return {}


def grove_shape(run, inputs):
    """(ops left to PyTorch, grove graph replays per call, eager runs per call,
    dynamo graphs) of a grove-compiled callable, over 10 calls after warming up."""
    import grove.torch

    earlier = grove.torch.compiled_graphs()  # held, so no new graph reuses an id
    with torch.no_grad():
        for _ in range(3):
            run(*inputs)
        before = tree_counters()
        for _ in range(10):
            run(*inputs)
        torch.cuda.synchronize()
    after = tree_counters()
    seen = {id(graph) for graph in earlier}
    graphs = [graph for graph in grove.torch.compiled_graphs() if id(graph) not in seen]
    ops = sorted({op for graph in graphs for _, op, _ in graph.unsupported})
    per_call = {key: (after.get(key, 0) - before.get(key, 0)) / 10.0
                for key in ("replays", "eager_calls")}
    return ops, per_call["replays"], per_call["eager_calls"], len(graphs)


def write_lowered(directory, file_name):
    """The lowered steps (the backend stats' "lowered" text, one line per
    kernel, GEMM and view) of the last graph grove compiled, to
    directory/file_name, for kernel-by-kernel diagnosis (zoo_check --lowered)."""
    import grove.torch

    graphs = grove.torch.compiled_graphs()
    models = getattr(getattr(graphs[-1], "runner", None), "models", lambda: [])() if graphs else []
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, file_name), "w") as out:
        out.write("\n".join(program["lowered"] for model in models
                            for program in model.stats()["programs"]))


def first_call_s(run, inputs):
    """Seconds of the first call: dynamo's trace and the backend's
    compilation (and, for the graph backends, the first warm-up)."""
    start = time.perf_counter()
    with torch.no_grad():
        run(*inputs)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def difference_from_eager(run, module, inputs):
    """max |run - eager| / max |eager| over the inputs (graph replays of
    `run`, already warm): the zoo's exactness check in the timing run itself
    (benchmarks/zoo_check.py's measure)."""
    with torch.no_grad():
        expected = module(*inputs)
        got = run(*inputs)
    scale = expected.abs().max().item() or 1.0
    return (got - expected).abs().max().item() / scale


def grove_graphs():
    """The graphs grove's backend compiled that are alive (none before grove
    is imported)."""
    if "grove.torch" not in sys.modules:
        return []
    import grove.torch

    return grove.torch.compiled_graphs()


# Note [A row's variants timed in turns]: one host's per-call time drifts by
# tens of microseconds within a run (session 19: two grove variants with the
# same 41 kernels timed 331.7 and 259.5 us on BERT b16, one right after the
# other), so variants timed one after the other carry the drift into their
# ratio. A row compiles every variant first and keeps them all alive; then
# the variants take turns, one block of BLOCK calls each per turn, with the
# order rotated every turn, and each variant's figure is the median of its
# blocks. Dynamo keeps one compilation per variant side by side: its cache
# entries are guarded on the backend object, so each grove variant compiles
# through a function of its own (compiled()); a grove variant that got no
# graph of its own is reported as an error, not timed as another variant's. Checked
# where it can run, on the GPU host (dynamo needs PyTorch 2): session 19's
# final call, whose zoo rows name their blocks (benchmarks/session19_logs).
MIN_TURNS = 5


def time_in_turns(runs, inputs, repeats):
    """{variant: {"median_us", "p10_us", "p90_us", "blocks"}} of the callables
    in `runs`, timed in turns (Note [A row's variants timed in turns])."""
    from torch_backend import BLOCK  # benchmarks/, this script's folder

    order = list(runs)
    blocks = {variant: [] for variant in order}
    with torch.no_grad():
        for variant in order:
            with variant_environment(variant):
                for _ in range(BLOCK):
                    runs[variant](*inputs)
        torch.cuda.synchronize()
        for turn in range(max(MIN_TURNS, repeats // BLOCK)):
            shift = turn % len(order) if order else 0
            for variant in order[shift:] + order[:shift]:
                with variant_environment(variant):
                    start = time.perf_counter()
                    for _ in range(BLOCK):
                        runs[variant](*inputs)
                    torch.cuda.synchronize()
                    blocks[variant].append((time.perf_counter() - start) / BLOCK * 1e6)
    timings = {}
    for variant, per_call in blocks.items():
        per_call.sort()
        timings[variant] = {"median_us": statistics.median(per_call),
                            "p10_us": per_call[int(0.1 * (len(per_call) - 1))],
                            "p90_us": per_call[int(0.9 * (len(per_call) - 1))],
                            "blocks": len(per_call)}
    return timings


# Note [Host time of a call in the zoo]: a call's latency is its host work
# (dynamo's guards, the backend's Python and C call) and its device work
# overlapping: BLOCK calls queue their graphs and the block ends at the device's
# synchronization. The host's own share is the time from a block's first call
# to its last call's return, before that synchronization (the launch queue
# holds a block's graphs, so the host does not wait for the device unless a
# call synchronizes): host_us per call, next to the kernels' GPU time and
# grove's C++ call (the replay alone), splits a row's latency between the host
# path and the device (issue 33, batch 1).
HOST_BLOCKS = 5


def host_time(run, inputs):
    """Median over HOST_BLOCKS blocks of BLOCK calls of the host time per
    call, to the last call's return (Note [Host time of a call in the zoo])."""
    from torch_backend import BLOCK  # benchmarks/, this script's folder

    per_call = []
    with torch.no_grad():
        for _ in range(HOST_BLOCKS):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(BLOCK):
                run(*inputs)
            per_call.append((time.perf_counter() - start) / BLOCK * 1e6)
            torch.cuda.synchronize()
    return statistics.median(per_call)


def zoo_rows(args, deadline, save=None):
    """The zoo's rows; save(rows), when given, after each finished row, so a
    run stopped from outside (a device call's limit) keeps the rows it
    finished (session 17's final lease lost ten rows that way)."""
    from torch_backend import grove_cxx_time  # benchmarks/, this script's folder

    # --models runs the models named, in the order named; --batch-major runs
    # every model at the first batch before any at the next.
    order = args.models.split(",") if args.models else [name for name, _, _ in MODELS]
    batches = [int(b) for b in args.batches.split(",")]
    models = sorted((m for m in MODELS if m[0] in order), key=lambda m: order.index(m[0]))
    cases = [(model, batch) for model in models for batch in batches]
    if args.batch_major:
        cases = [(model, batch) for batch in batches for model in models]
    if args.cases:  # MODEL:BATCH,... in the order given
        by_name = {model[0]: model for model in MODELS}
        cases = []
        for case in args.cases.split(","):
            name, _, batch = case.partition(":")
            if name not in by_name or not batch.isdigit():
                raise SystemExit("torch_zoo: --cases item %r is not MODEL:BATCH of a zoo model"
                                 % case)
            cases.append((by_name[name], int(batch)))
    rows = []
    for (name, make, library), batch in cases:
        row = {"model": name, "batch": batch}
        rows.append(row)
        if time.time() > deadline:
            row["error"] = "not run: the time budget (--budget-s) was spent"
            continue
        try:
            importlib.import_module(library)
        except ImportError:
            row["error"] = "%s is not installed" % library
            continue
        torch.manual_seed(0)
        try:
            module, inputs = make(batch)
        except Exception as error:  # a model this library version cannot build
            row["error"] = "%s: %s" % (type(error).__name__, error)
            continue
        module = module.cuda().eval()
        inputs = tuple(value.cuda() for value in inputs)
        variants = VARIANTS + ((WRITTEN_OUT,) if args.attention_ab and
                               name in ATTENTION_MODELS else ()) + tuple(
                                   v for v in GROVE_ENV_VARIANTS if v != WRITTEN_OUT)
        if args.variants:
            variants = tuple(v for v in variants if v in args.variants.split(","))
        torch._dynamo.reset()
        runs = {}
        for variant in variants:
            try:
                with variant_environment(variant):
                    # Held, so that no new graph can take a dead one's id.
                    graphs_before = grove_graphs()
                    known = {id(graph) for graph in graphs_before}
                    run = compiled(copy.deepcopy(module), variant)
                    compile_s = first_call_s(run, inputs)
                    if variant.startswith("grove") and not any(
                            id(graph) not in known for graph in grove_graphs()):
                        raise RuntimeError("no graph of its own: dynamo reused an earlier "
                                           "variant's compilation")
                    if variant == "grove":
                        (row["ops_in_pytorch"], row["graph_replays_per_call"],
                         row["eager_runs_per_call"], row["dynamo_graphs"]) = grove_shape(
                             run, inputs)
                        row["grove_vs_eager"] = difference_from_eager(run, module, inputs)
                        if args.lowered:
                            write_lowered(args.lowered, "%s_b%d.txt" % (name, batch))
                    # The garbage of the previous variant's compilation is
                    # collected before, not during, this one's timing.
                    gc.collect()
                    row[variant] = {}
                    if variant in GROVE_ENV_VARIANTS:
                        row[variant]["grove_vs_eager"] = difference_from_eager(run, module, inputs)
                    row[variant]["compile_s"] = compile_s
                    if variant == "grove" or variant in GROVE_ENV_VARIANTS:
                        # Note [grove's C++ time in the zoo]
                        try:
                            row[variant]["cxx_us"] = grove_cxx_time(args.repeats)
                        except Exception as error:  # a diagnostic: the timing stands
                            row[variant]["cxx_error"] = "%s: %s" % (type(error).__name__,
                                                                    error)
                    if variant != "torch_eager" and not args.no_kernels:
                        row[variant]["kernels"] = kernel_profile(run, inputs)
                runs[variant] = run
            except Exception as error:  # one variant failing leaves the others' numbers
                row[variant] = {"error": "%s: %s" % (type(error).__name__, error)}
        try:
            for variant, timing in time_in_turns(runs, inputs, args.repeats).items():
                row[variant].update(timing)
        except Exception as error:  # a failing call while timing: no figure for the row
            for variant in runs:
                row[variant]["error"] = "timing: %s: %s" % (type(error).__name__, error)
        for variant, run in runs.items():
            if variant == "torch_eager":
                continue
            try:
                with variant_environment(variant):
                    row[variant]["host_us"] = host_time(run, inputs)
            except Exception as error:  # a diagnostic: the timing stands
                row[variant]["host_error"] = "%s: %s" % (type(error).__name__, error)
        del runs
        base = row.get("torch_reduce_overhead", {}).get("median_us")
        grove_us = row.get("grove", {}).get("median_us")
        row["grove_over_reduce_overhead"] = grove_us / base if base and grove_us else None
        eager_us = row.get("torch_eager", {}).get("median_us")
        row["grove_over_eager"] = grove_us / eager_us if eager_us and grove_us else None
        print_row(row)
        if save is not None:
            save(rows)
    return rows


# Note [grove's C++ time in the zoo]: a grove row's latency is the door's
# host work (dynamo's guards, Python, the C API) and the graph's replay; the
# same compiled model called from C++ (torch_backend.grove_cxx_time: the last
# graph compiled, when it is one grove segment) leaves only the replay and
# grove's C++ call, so the two split a row's gap to reduce-overhead between the
# door's host path and what the graph runs on the GPU.

# Note [Kernels per call in the zoo]: at these sizes a replay is GPU-bound, so
# what separates grove from reduce-overhead is how many kernels a call runs and
# how long they take. torch.profiler (CUPTI: kernels launched inside a CUDA
# graph are reported one by one) counts both variants' kernels over
# PROFILED_CALLS calls the same way; the row keeps the count and GPU time per
# call and the kernels that take most of it.
PROFILED_CALLS = 5
TOP_PRINTED = 4  # kernels named per variant in the printed table (--top)


def kernel_profile(run, inputs):
    """{kernels_per_call, gpu_us_per_call, top: [[name, per call, us per call]]}
    of `run` (already warm), or {error} when the profiler cannot run."""
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        with torch.no_grad():
            run(*inputs)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(PROFILED_CALLS):
                    run(*inputs)
                torch.cuda.synchronize()
        by_name = {}
        for event in prof.events():
            if event.device_type != DeviceType.CUDA or event.name.startswith(("Memcpy",
                                                                              "Memset")):
                continue
            us = event.time_range.elapsed_us()
            count, total = by_name.get(event.name, (0, 0.0))
            by_name[event.name] = (count + 1, total + us)
        top = sorted(by_name.items(), key=lambda item: -item[1][1])
        return {"kernels_per_call": sum(c for c, _ in by_name.values()) / PROFILED_CALLS,
                "gpu_us_per_call": sum(t for _, t in by_name.values()) / PROFILED_CALLS,
                "top": [[name[:160], count / PROFILED_CALLS, total / PROFILED_CALLS]
                        for name, (count, total) in top]}
    except Exception as error:  # the profiler is a diagnostic: the timing stands without it
        return {"error": "%s: %s" % (type(error).__name__, error)}


def print_row(row):
    cells = []
    for variant in VARIANTS:
        entry = row.get(variant, {})
        cells.append("%12s" % ("%.1f us" % entry["median_us"] if "median_us" in entry
                               else "failed"))
    ratio = row.get("grove_over_reduce_overhead")
    print("%-20s b=%-3d" % (row["model"], row["batch"]) + "".join(cells) +
          "%8s" % ("-" if ratio is None else "%.2f" % ratio) +
          "  replays/call %s, PyTorch ops %s, |grove - eager| %s, compile s %s" % (
              row.get("graph_replays_per_call"), row.get("ops_in_pytorch") or "none",
              "%.1e" % row["grove_vs_eager"] if "grove_vs_eager" in row else "-",
              "/".join("%.1f" % row[v]["compile_s"] if "compile_s" in row.get(v, {}) else "-"
                       for v in VARIANTS)), flush=True)
    for variant in VARIANTS + tuple(GROVE_ENV_VARIANTS):
        if variant not in row:
            continue
        if variant in GROVE_ENV_VARIANTS and "median_us" in row[variant]:
            base = row.get("torch_reduce_overhead", {}).get("median_us")
            print("  %-22s %.1f us%s, |grove - eager| %.1e" % (
                variant, row[variant]["median_us"],
                "  (%.2f of reduce-overhead)" % (row[variant]["median_us"] / base) if base else "",
                row[variant].get("grove_vs_eager", float("nan"))))
        if row[variant].get("host_us") is not None:
            print("  %-22s host %.1f us per call (to the last call's return, before the "
                  "device's synchronization)" % (variant, row[variant]["host_us"]))
        if row[variant].get("cxx_us") is not None:
            print("  %-22s C++ call %.1f us (the same graph from C++: no dynamo, no Python)" % (
                variant, row[variant]["cxx_us"]))
        if "error" in row.get(variant, {}):
            print("  %s: %s" % (variant, row[variant]["error"][:300]))
        kernels = row.get(variant, {}).get("kernels")
        if kernels and "kernels_per_call" in kernels and TOP_PRINTED > 4:
            print("  %-22s %5.1f kernels, %7.1f us GPU per call:" % (
                variant, kernels["kernels_per_call"], kernels["gpu_us_per_call"]))
            for name, count, us in kernels["top"][:TOP_PRINTED]:
                print("      x%-4.0f %6.1f us  %s" % (count, us, name[:150]))
        elif kernels and "kernels_per_call" in kernels:
            print("  %-22s %5.1f kernels, %7.1f us GPU per call; top: %s" % (
                variant, kernels["kernels_per_call"], kernels["gpu_us_per_call"],
                "; ".join("%s x%.0f %.1fus" % (name[:40], count, us)
                          for name, count, us in kernels["top"][:TOP_PRINTED])))
        elif kernels:
            print("  %s kernels: %s" % (variant, kernels["error"][:200]))


def rate(function, profile=False):
    """{tokens (of every call), first_tokens_per_s (the first call,
    compilation and recording included), tokens_per_s (the median of
    STEADY_CALLS later calls), recordings (grove's, in those later calls: a
    graph per position would record once per token)}. HF's generate makes a
    new static cache per call (Note [Static inputs that move])."""
    timings = []
    tokens = []
    before = None
    for call in range(1 + STEADY_CALLS):
        if call == 1:
            before = tree_counters().get("recordings")
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            tokens.append(function())
        torch.cuda.synchronize()
        timings.append(time.perf_counter() - start)
    after = tree_counters().get("recordings")
    steady = sorted(timings[1:])[len(timings[1:]) // 2]
    return {"tokens": tokens, "first_tokens_per_s": NEW_TOKENS / timings[0],
            "tokens_per_s": NEW_TOKENS / steady,
            "recordings": after - before if before is not None and after is not None else None,
            "profile": decode_profile(function) if profile else None}


PROFILE_DECODE = ""  # --decode-profile: models, comma-separated (passed on to the children)


def decode_profile(function):
    """One more call of `function` under torch.profiler (after the timed
    ones): where a generated token's host time goes, as a table of the
    operations and CUDA runtime calls taking the most host time (their
    totals over the call's NEW_TOKENS tokens)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with torch.no_grad():
            function()
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14,
                                     max_name_column_width=48)


# Note [Hugging Face compiles its decode step]
# On CUDA with a compileable (static) cache, generate compiles the model's call
# itself (its "auto compile": torch.compile(model.__call__,
# mode="reduce-overhead") for the decode steps) unless the generation config
# says disable_compile. Left on, the "eager" row measured HF's own
# reduce-overhead compilation (its first call took seconds) and the grove row
# ran grove's compiled forward inside another compilation; so the eager and
# grove variants turn it off and measure exactly eager and grove (the
# reduce-overhead variant keeps it: see hf_decode).
# benchmarks/decode_breakdown.py measures HF's default (auto compile) apart.
# Test: GpuDecodeTest (tests/python/gpu_decode_test.py) compares tokens with it off.
def without_hf_compile():
    from transformers import GenerationConfig

    return {"disable_compile": True} if hasattr(GenerationConfig(), "disable_compile") else {}


def hf_decode(variant):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=256, intermediate_size=688,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, vocab_size=1000,
                                         max_position_embeddings=256)).cuda().eval()
    ids = torch.randint(0, 1000, (1, 12), device="cuda")
    torch._dynamo.reset()
    if variant == "torch_reduce_overhead":
        model.forward = torch.compile(model.forward, mode="reduce-overhead")
    elif variant == "grove":
        model.forward = torch.compile(model.forward, backend="grove")

    # PyTorch's reduce-overhead variant keeps generate's default: with HF's
    # compilation off, the process died (segmentation fault, PyTorch 2.11,
    # transformers 5.17) after that variant's compile warnings, before any row
    # was printed (not isolated further); with it on it raises, which the row
    # reports.
    options = without_hf_compile() if variant != "torch_reduce_overhead" else {}

    def generate():
        with torch.no_grad():
            return model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                  do_sample=False, cache_implementation="static", **options)

    return rate(generate, "hf_llama_static_cache" in PROFILE_DECODE.split(","))


def gpt_fast_decode(variant):
    from static_cache_decoder import StaticCacheDecoder, greedy

    torch.manual_seed(0)
    model = StaticCacheDecoder(vocab=2048, width=512, heads=8, layers=6,
                               max_length=256).cuda().eval()
    prompt = torch.randint(0, 2048, (1, 16), device="cuda")
    torch._dynamo.reset()
    run = compiled(model, variant)

    def generate():
        model.reset_cache()
        with torch.no_grad():
            return greedy(run, prompt, NEW_TOKENS)

    return rate(generate, "gpt_fast_decoder" in PROFILE_DECODE.split(","))


# The gpt-fast-style decoder first, so that its reduce-overhead case runs
# before HF's, which did not finish in two leases (Note [Bounded decode step]).
DECODES = (("gpt_fast_decoder", gpt_fast_decode, "torch"),
           ("hf_llama_static_cache", hf_decode, "transformers"))
CHILD_TIMEOUT_S = 60.0  # --decode-child-s: one decode case's limit


def decode_case(name, variant):
    """One decode case in this process: rate()'s numbers, the tokens as
    lists, and grove's tree counters for the grove variant."""
    function = dict((n, f) for n, f, _ in DECODES)[name]
    measured = function(variant)
    result = {"tokens": [t.tolist() for t in measured["tokens"]],
              "tokens_per_s": measured["tokens_per_s"],
              "first_call_tokens_per_s": measured["first_tokens_per_s"],
              "recordings": measured["recordings"], "profile": measured["profile"]}
    if variant == "grove":
        counters = tree_counters()
        for key in ("static_input_writes", "copy_back_inputs", "zero_copy_inputs",
                    "zero_copy_refusals", "input_patches", "input_copies", "input_copy_backs",
                    "demoted_inputs"):
            result[key] = counters.get(key)
    return result


# Note [Decode cases in child processes]: PyTorch's reduce-overhead on HF's
# static cache died with a segmentation fault in two leases (PyTorch 2.11,
# transformers 5.17), taking the rest of the benchmark with it. Each decode
# case therefore runs in a child process of this script (--decode-child): a
# crash is that case's error ("died with SIGSEGV"), and the others still run.
# A child imports grove only for the grove variant (or with
# GROVE_ZOO_LOAD_GROVE=1), so a crash of PyTorch's variant without grove in
# the process is PyTorch's own.
# Note [A child's time limit covers what it started]
# subprocess.run(..., capture_output=True, timeout=T) kills only the child on
# timeout and then reads its pipes to the end; a process the child started
# (PyTorch's compile workers) still holds the pipes, so that read waits for
# it, past T without bound. Here the child leads a process group of its own,
# writes to files rather than pipes, and on timeout the whole group is killed
# (SIGTERM, then SIGKILL after a grace), so nothing is left to wait for
# (tools/bounded_child.py). Session 16's decode step had a 150 s child limit
# and its reduce-overhead case ran until the lease's 120 s limit stopped
# everything, so no JSON was written: the limits are now set below the
# budget (Note [Bounded decode step]). Test: tests/tools/bounded_child_test.sh.
def _finished_case(done, variant, path, timeout_s):
    """A decode child's numbers from its JSON, or {error} (with
    did_not_finish where its limit stopped it)."""
    import signal

    tail = " | ".join(done.stderr_tail.splitlines())
    if done.timed_out:
        return {"error": "did not finish: stopped after %.0f s (its limit, --decode-child-s "
                         "or the budget left); its last words: %s" % (done.seconds, tail[-300:]),
                "did_not_finish": True, "limit_s": round(timeout_s, 1)}
    if done.returncode < 0:
        try:
            signal_name = signal.Signals(-done.returncode).name
        except ValueError:
            signal_name = "signal %d" % -done.returncode
        return {"error": "the child process died with %s%s; its last words: %s" % (
            signal_name, " (grove loaded)" if variant == "grove" or
            os.environ.get("GROVE_ZOO_LOAD_GROVE") == "1" else " (grove not loaded)",
            tail[-400:])}
    if done.returncode != 0 or not os.path.isfile(path):
        return {"error": "the child process exited with %d: %s" % (done.returncode, tail[-400:])}
    with open(path) as result:
        return json.load(result)


# Note [Children that take turns]
# A benchmark child (one torch_zoo decode case) spends most of its life
# importing (PyTorch, transformers, grove or Inductor) and starting CUDA, and
# only then compiles and times. So every case's child starts at once and
# prepares side by side on the host's cores; when all are ready (or gone, or
# child_turns.READY_LIMIT_S has passed), they run one at a time in the order
# given, each told to go by a file in a folder of its own and limited from
# then on (tools/bounded_child.py: the child's whole process group is stopped
# at the limit). While a case runs, every other child is either done or
# asleep waiting for its turn, so it has the GPU and the host to itself as if
# run alone; the step takes about one preparation plus the cases' own work,
# not one preparation per case in a row (tools/child_turns.py). A parent
# stopped from outside stops its children. Test:
# tests/tools/child_turns_test.sh (one at a time and in order, a child
# stopped at its limit, one that dies while preparing, one never ready, the
# parent stopped).
def _child_command(case, path, turn_folder):
    name, variant = case
    return [sys.executable, os.path.abspath(__file__), "--decode-child",
            "%s,%s" % (name, variant), "--json", path, "--decode-turn", turn_folder,
            "--decode-tokens", str(NEW_TOKENS), "--decode-profile", PROFILE_DECODE]


# Note [Bounded decode step]: the decode rows must fit a lease's call. Each
# case is a child process with a limit of its own (--decode-child-s, and never
# past the budget's end plus MIN_CHILD_S), recorded as "did not finish" when
# stopped; every model's eager and grove cases run before any
# reduce-overhead case (whose compilations and re-recordings take longest), so
# one slow reduce-overhead case costs no other row; the children prepare
# (imports, CUDA context) side by side and then take turns on the GPU, one
# case at a time (Note [Children that take turns], tools/child_turns.py); and
# the JSON is written after every case, so a run stopped from
# outside still leaves the cases done.
# Test: tests/tools/bounded_child_test.sh (the limit), the decode order by
# hand (torch_zoo --decode on a GPU).
DECODE_ORDER = ("torch_eager", "grove", "torch_reduce_overhead")
MIN_CHILD_S = 20.0  # a case started just before the budget's end still gets this long


def decode_schedule(names):
    """(model, variant) in the order they run: eager and grove of every
    model, then reduce-overhead of every model (Note [Bounded decode step])."""
    first = [(name, variant) for name in names for variant in DECODE_ORDER[:2]]
    return first + [(name, DECODE_ORDER[2]) for name in names]


def decode_rows(deadline, wanted=None, child_limit_s=CHILD_TIMEOUT_S, save=None, variants=None):
    """The decode rows; save(rows), when given, after every case."""
    import importlib.util

    rows = {}
    names = []
    for name, _, library in DECODES:
        if wanted and name not in wanted:
            continue
        row = rows[name] = {"model": name, "new_tokens": NEW_TOKENS,
                            "steady_calls": STEADY_CALLS}
        if importlib.util.find_spec(library) is None:
            row["error"] = "%s is not installed" % library
            continue
        names.append(name)
    ordered = [rows[name] for name, _, _ in DECODES if name in rows]
    expected = {}
    schedule = [(name, variant) for name, variant in decode_schedule(names)
                if not variants or variant in variants]

    def on_case(turn):
        name, variant = turn.case
        timing = {"ready_s": turn.ready_s, "run_s": turn.run_s}
        measured = ({"error": turn.stopped, "did_not_finish": turn.stopped.startswith("not ready")}
                    if turn.stopped else
                    _finished_case(turn.done, variant, turn.json_path, turn.limit_s))
        row = rows[name]
        if "error" in measured:
            row[variant] = dict(measured, **timing)
            print("%-24s %-22s failed: %s (ready %s s, ran %s s)" % (
                name, variant, measured["error"][:500], timing.get("ready_s"),
                timing.get("run_s")), flush=True)
        else:
            tokens = measured["tokens"]
            if variant == "torch_eager":
                expected[name] = tokens[0]
            row[variant] = {"tokens_per_s": measured["tokens_per_s"],
                            "first_call_tokens_per_s": measured["first_call_tokens_per_s"],
                            "tokens_match_eager": name in expected and
                            all(t == expected[name] for t in tokens), **timing}
            if measured.get("profile"):
                row[variant]["profile"] = measured["profile"]
            print("%-24s %-22s %.1f tok/s (first call %.1f), tokens %s eager's "
                  "(ready %s s, ran %s s)" % (
                      name, variant, measured["tokens_per_s"],
                      measured["first_call_tokens_per_s"],
                      "equal" if row[variant]["tokens_match_eager"] else "NOT equal to",
                      timing.get("ready_s"), timing.get("run_s")), flush=True)
            if variant == "grove":
                row["grove_recordings"] = measured["recordings"]
                row["grove_tree"] = {key: measured.get(key) for key in (
                    "static_input_writes", "copy_back_inputs", "zero_copy_inputs",
                    "zero_copy_refusals", "input_patches", "input_copies", "input_copy_backs",
                    "demoted_inputs")}
                print("  grove: recordings after the first call %s, tree %s" % (
                    row["grove_recordings"], row["grove_tree"]), flush=True)
            if measured.get("profile"):
                print("  profile of one call (%d tokens):\n%s" % (NEW_TOKENS,
                                                                 measured["profile"]), flush=True)
        base = row.get("torch_reduce_overhead", {}).get("tokens_per_s")
        eager = row.get("torch_eager", {}).get("tokens_per_s")
        grove_rate = row.get("grove", {}).get("tokens_per_s")
        row["grove_over_reduce_overhead"] = grove_rate / base if base and grove_rate else None
        row["grove_over_eager"] = grove_rate / eager if eager and grove_rate else None
        if save is not None:
            save(ordered)

    import child_turns  # tools/, on the path above

    child_turns.take_turns(schedule, deadline, child_limit_s, _child_command, on_case,
                           min_limit_s=MIN_CHILD_S)
    for row in ordered:
        print("%-24s" % row["model"] + "".join(
            "%30s" % ("%.1f tok/s (first %.1f)%s" % (
                row[v]["tokens_per_s"], row[v]["first_call_tokens_per_s"],
                "" if row[v]["tokens_match_eager"] else "!")
                if "tokens_per_s" in row.get(v, {}) else
                ("did not finish" if row.get(v, {}).get("did_not_finish") else "failed"))
            for v in VARIANTS))
        for variant in VARIANTS:
            if "error" in row.get(variant, {}):
                print("  %s: %s" % (variant, row[variant]["error"][:500]))
    return ordered


def prepare_decode_child(name, variant):
    """What a decode child loads before its turn: its model library, grove
    or Inductor, and a CUDA context (Note [Children that take turns],
    tools/child_turns.py)."""
    import importlib

    import torch._dynamo  # noqa: F401 (every variant resets dynamo first: compiled, hf_decode)

    if variant == "grove" or os.environ.get("GROVE_ZOO_LOAD_GROVE") == "1":
        import grove.torch  # noqa: F401 (registers the backend)
    if variant == "torch_reduce_overhead":
        try:
            importlib.import_module("torch._inductor.compile_fx")
        except ImportError:  # compiled on first use instead
            pass
    if name == "hf_llama_static_cache":
        from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM  # noqa: F401
    else:
        import static_cache_decoder  # noqa: F401 (tests/python, on the path above)
    torch.cuda.init()
    torch.empty(1, device="cuda")


def decode_child_main(args):
    """--decode-child MODEL,VARIANT: one decode case, written to --json;
    with --decode-turn, prepared first and run when told."""
    name, variant = args.decode_child.split(",")
    prepare_decode_child(name, variant)
    if args.decode_turn:
        import child_turns  # tools/, on the path above

        child_turns.wait_for_turn(args.decode_turn)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    result = decode_case(name, variant)
    with open(args.json, "w") as out:
        json.dump(result, out)
    if args.decode_turn:
        # The case is written: the child ends at once instead of tearing down
        # CUDA, dynamo and the model inside its turn (r1, session 18: the
        # eager gpt-fast turn took 6.2 s for about 1.2 s of generate calls).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def merged(earlier, latest, key):
    """earlier's rows with those `latest` measured replaced (a row this run
    left unmeasured, for the time budget, keeps the earlier one), in the
    earlier order, then the new cases."""
    def name(row):
        return tuple(row.get(field) for field in key)

    def measured(row):
        return not str(row.get("error", "")).startswith("not run")

    fresh = {name(row): row for row in latest if measured(row)}
    rows = [fresh.pop(name(row), row) for row in earlier]
    known = {name(row) for row in rows}
    return rows + [row for row in latest if name(row) not in known and
                   (name(row) in fresh or measured(row))]


def main():
    global TOP_PRINTED, NEW_TOKENS, PROFILE_DECODE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="torch_zoo.json")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--budget-s", type=float, default=230.0,
                        help="cases left after this many seconds are reported as not run")
    parser.add_argument("--models", default="",
                        help="comma-separated zoo models, run in this order (default: all)")
    parser.add_argument("--batches", default="1,16", help="comma-separated batch sizes")
    parser.add_argument("--cases", default="",
                        help="comma-separated MODEL:BATCH cases, run in this order (instead of "
                             "--models x --batches)")
    parser.add_argument("--batch-major", action="store_true",
                        help="every model at the first batch size before any at the next")
    parser.add_argument("--decode", action="store_true",
                        help="also the decode rows (tokens/s; each case in a child process)")
    parser.add_argument("--no-decode", action="store_true",
                        help="no decode rows (the default; kept for older command lines)")
    parser.add_argument("--no-zoo", action="store_true")
    parser.add_argument("--decode-child-s", type=float, default=CHILD_TIMEOUT_S,
                        help="seconds one decode case (a child process) may run before it is "
                             "stopped and recorded as did not finish (Note [Bounded decode "
                             "step])")
    parser.add_argument("--decode-models", default="",
                        help="comma-separated decode rows (default: all): hf_llama_static_cache, "
                             "gpt_fast_decoder")
    parser.add_argument("--attention-ab", action="store_true",
                        help="also time grove with attention written out "
                             "(GROVE_FUSED_ATTENTION=0; the default runs the attention op)")
    parser.add_argument("--grove-env", default="",
                        help="LABEL:NAME=VALUE[+NAME=VALUE],...: also time grove as variant "
                             "grove_LABEL with those environment variables set")
    parser.add_argument("--lowered", default="",
                        help="write grove's lowered steps of each row to this directory")
    parser.add_argument("--variants", default="",
                        help="comma-separated variants to run (default: all)")
    parser.add_argument("--top", type=int, default=TOP_PRINTED,
                        help="kernels named per variant in the printed table")
    parser.add_argument("--no-kernels", action="store_true",
                        help="skip the per-variant kernel profile (Note [Kernels per call in the zoo])")
    parser.add_argument("--decode-child", default="",
                        help=argparse.SUPPRESS)  # "MODEL,VARIANT": one decode case (decode_rows)
    parser.add_argument("--decode-turn", default="",
                        help=argparse.SUPPRESS)  # a folder: wait there for the turn
    parser.add_argument("--decode-tokens", type=int, default=NEW_TOKENS,
                        help="new tokens per generate call in the decode rows")
    parser.add_argument("--decode-profile", default="",
                        help="comma-separated decode models whose cases also profile one "
                             "generate call (torch.profiler: the operations and CUDA calls "
                             "taking the most host time)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the cases of an existing --json this run does not measure")
    parser.add_argument("--train", action="store_true",
                        help="the training table (benchmarks/zoo_training.py) instead")
    parser.add_argument("--optimizers", default="adamw,sgd", help="--train: adamw, sgd")
    parser.add_argument("--train-variants", default="",
                        help="--train: comma-separated variants (default: the four of "
                        "zoo_training.VARIANTS; also grove_optim, torch_reduce_overhead_opt)")
    args = parser.parse_args()
    NEW_TOKENS = args.decode_tokens
    PROFILE_DECODE = args.decode_profile
    from torch_backend import skipped_without_cuda_or_dynamo

    if skipped_without_cuda_or_dynamo("torch_zoo"):
        return 0
    if args.decode_child:
        return decode_child_main(args)
    TOP_PRINTED = args.top
    GROVE_ENV_VARIANTS.update(parse_grove_env(args.grove_env))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    start = time.time()
    if args.train or not args.no_zoo:
        # The decode rows' parent needs no grove: only the children load it.
        import grove.torch  # noqa: F401 (registers the backend)
    if args.train:
        return train_main(args, start)
    # Decode first (the workload reduce-overhead exists for), then the zoo
    # until the budget is spent. The JSON is written after every decode case
    # (Note [Bounded decode step]), after every zoo row, and at the end.
    earlier = None
    if args.merge and os.path.isfile(args.json):
        with open(args.json) as previous:
            earlier = json.load(previous)

    def write(zoo, decode):
        seconds = time.time() - start
        if earlier is not None:
            zoo = merged(earlier.get("rows", []), zoo, ("model", "batch"))
            decode = merged(earlier.get("decode", []), decode, ("model",))
            seconds += earlier.get("seconds") or 0
        result = {"benchmark": "torch_zoo", "torch": torch.__version__,
                  "device": torch.cuda.get_device_name(), "repeats": args.repeats,
                  "seconds": seconds, "rows": zoo, "decode": decode}
        with open(args.json + ".part", "w") as out:
            json.dump(result, out, indent=2)
        os.replace(args.json + ".part", args.json)

    if args.decode and not args.no_decode:
        # A limit from outside (timeout's SIGTERM) ends the parent through
        # SystemExit, so that take_turns stops the children it started.
        import signal

        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    decode = [] if args.no_decode or not args.decode else decode_rows(
        start + args.budget_s, set(args.decode_models.split(",")) if args.decode_models else None,
        args.decode_child_s, save=lambda rows: write([], rows),
        variants=args.variants.split(",") if args.variants else None)
    zoo = [] if args.no_zoo else zoo_rows(args, start + args.budget_s,
                                          save=lambda rows: write(rows, decode))
    write(zoo, decode)
    print("wrote %s (%.0f s)" % (args.json, time.time() - start))
    return 0


def train_main(args, start):
    import zoo_training  # benchmarks/, this script's folder

    variants = (tuple(args.train_variants.split(",")) if args.train_variants
                else zoo_training.VARIANTS)
    unknown = sorted(set(variants) - set(zoo_training.VARIANTS + zoo_training.EXTRA_VARIANTS))
    if unknown:
        raise SystemExit("torch_zoo: unknown --train-variants %s" % ",".join(unknown))
    zoo_training.print_header(variants)
    models = set(args.models.split(",")) if args.models else None
    rows = zoo_training.training_rows(args.repeats, start + args.budget_s, models,
                                      args.optimizers.split(","), variants)
    result = {"benchmark": "torch_zoo_train", "torch": torch.__version__,
              "device": torch.cuda.get_device_name(), "repeats": args.repeats,
              "seconds": time.time() - start, "rows": rows}
    with open(args.json, "w") as out:
        json.dump(result, out, indent=2)
    print("wrote %s (%.0f s)" % (args.json, time.time() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
