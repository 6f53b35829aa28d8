#!/usr/bin/env python3
"""PyTorch side by side with grove: the benchmark models of benchmarks/models/
rebuilt in PyTorch, written the way PyTorch users write them (nn.Linear,
F.gelu(approximate="tanh"), F.scaled_dot_product_attention(is_causal=True)),
timed in eager mode, with torch.compile (default), with
torch.compile(mode="reduce-overhead") (PyTorch's CUDA Graph Trees), and, as a
reference that no goal compares with, the eager call captured by hand into one
CUDA graph (torch.cuda.graph: PyTorch's own kernels with no launch overhead).

Cases (the ones grove's benchmarks measure):
  inference  mlp16x512 batch 1 and 256; gpt4x256 batch 1, T=32
  training   mlp16x512 batch 32 (MSE); gpt4x256 batch 8, T=32 (next-token
             cross entropy), each with every optimizer of --optimizers:
               sgd          SGD, momentum 0.9 (grove's train_step optimizer)
               sgd-fused    the same with fused=True
               adamw-fused  AdamW with fused=True (other math: not compared
                            with grove's SGD step)
             The reduce-overhead configurations call
             torch.compiler.cudagraph_mark_step_begin() before every step; the
             whole step (forward, backward, optimizer) is also compiled as one
             function (Note [Whole step under CUDA Graph Trees]).
Every row is run in each dtype of --dtype (f32, the default: the models' own;
bf16: the parameters and float inputs cast to bfloat16, tensor-core GEMMs);
the JSON says each row's dtype and optimizer.

Latency is host time from the call until torch.cuda.synchronize() returns,
median and p90 over --iters calls after --warmup calls, as grove measures it.
A configuration that fails (torch.compile errors included) is recorded with its
error and the run goes on. The JSON is rewritten after every row, so a run
stopped from outside keeps what it measured; rows are run in order of
importance (f32 and SGD momentum first, the configurations grove's goals
compare with), and with --budget-s the rows left when the budget is spent are
recorded as skipped.

  python3 benchmarks/compare_torch.py --json compare_torch.json [--iters 200]
      [--dtype f32,bf16] [--optimizers sgd,sgd-fused,adamw-fused]
      [--only inference|training] [--budget-s SECONDS]
"""
import argparse
import datetime
import json
import os
import signal
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

INFERENCE_CONFIGS = ["eager", "compile default", "compile reduce-overhead",
                     "hand-captured CUDA graph"]
WHOLE_STEP = "compile reduce-overhead, whole step"
# A reference row: the eager step captured by hand (Bench.hand_captured_step).
HAND_CAPTURED = "hand-captured CUDA graph, whole step"
TRAINING_CONFIGS = ["eager", "compile default", "compile reduce-overhead", WHOLE_STEP,
                    HAND_CAPTURED]

# name -> (label, optimizer class, keyword arguments). lr does not change the latency.
OPTIMIZERS = {
    "sgd": ("SGD momentum 0.9", "SGD", {"lr": 1e-2, "momentum": 0.9}),
    "sgd-fused": ("SGD momentum 0.9, fused", "SGD", {"lr": 1e-2, "momentum": 0.9,
                                                    "fused": True}),
    "adamw-fused": ("AdamW, fused", "AdamW", {"lr": 1e-3, "fused": True}),
}
DTYPES = ["f32", "bf16"]


def load_model_json(models_dir, name):
    with open(os.path.join(models_dir, name + ".json")) as handle:
        return json.load(handle)


def torch_dtype(torch, name):
    table = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
             "i64": torch.int64, "i32": torch.int32, "bool": torch.bool}
    if name not in table:
        raise ValueError("unsupported dtype %r in the model file" % name)
    return table[name]


def params_by_name(doc):
    return {p["name"]: p for p in doc.get("params", [])}


def describe_mlp(doc):
    """Layer widths of an MLP of linear + gelu nodes, read from the JSON."""
    params = params_by_name(doc)
    layers = []
    for node in doc["nodes"]:
        if node["op"] == "linear":
            weight = params[node["inputs"][1]]
            out_features, in_features = weight["shape"]
            layers.append({"in": in_features, "out": out_features,
                           "bias": len(node["inputs"]) > 2, "gelu": False})
        elif node["op"] == "gelu":
            if not layers:
                raise ValueError("gelu before any linear in %s" % doc["name"])
            layers[-1]["gelu"] = True
        else:
            raise ValueError("op %r is not part of an MLP (node %s)" % (node["op"], node["name"]))
    return {"layers": layers, "dtype": doc["inputs"][0]["dtype"]}


def describe_gpt(doc):
    """Sizes of a GPT (embeddings, pre-LN blocks, final norm, LM head) from the JSON."""
    params = params_by_name(doc)
    nodes = {n["name"]: n for n in doc["nodes"]}
    vocab, d_model = params["tok_emb"]["shape"]
    max_seq = params["pos_emb"]["shape"][0]
    blocks = sorted({n["name"].split(".")[0] for n in doc["nodes"]
                     if n["name"].startswith("h") and n["name"].endswith(".ln1")})
    heads = nodes["h0.attn.q_heads"]["attrs"]["shape"][2]
    hidden = params["h0.mlp.fc.weight"]["shape"][0]
    eps = nodes["h0.ln1"].get("attrs", {}).get("eps", 1e-5)
    lm_head = nodes["lm_head"]
    masked = [n for n in doc["nodes"] if n["op"] == "where" and "causal_mask" in n["inputs"]]
    if not masked:
        raise ValueError("%s has no causal mask; compare_torch models causal attention"
                         % doc["name"])
    return {"vocab": vocab, "d_model": d_model, "max_seq": max_seq, "blocks": len(blocks),
            "heads": heads, "hidden": hidden, "eps": eps, "lm_head_bias": len(lm_head["inputs"]) > 2,
            "dtype": params["tok_emb"]["dtype"]}


def build_modules(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Mlp(nn.Module):
        def __init__(self, spec):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(l["in"], l["out"], bias=l["bias"])
                                        for l in spec["layers"])
            self.gelu = [l["gelu"] for l in spec["layers"]]

        def forward(self, x):
            for layer, gelu in zip(self.layers, self.gelu):
                x = layer(x)
                if gelu:
                    x = F.gelu(x, approximate="tanh")
            return x

    class Block(nn.Module):
        def __init__(self, spec):
            super().__init__()
            d = spec["d_model"]
            self.heads = spec["heads"]
            self.ln1 = nn.LayerNorm(d, eps=spec["eps"])
            self.q = nn.Linear(d, d)
            self.k = nn.Linear(d, d)
            self.v = nn.Linear(d, d)
            self.out = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d, eps=spec["eps"])
            self.fc = nn.Linear(d, spec["hidden"])
            self.proj = nn.Linear(spec["hidden"], d)

        def forward(self, x):
            batch, seq, d = x.shape
            h = self.ln1(x)
            split = lambda t: t.view(batch, seq, self.heads, d // self.heads).transpose(1, 2)
            q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
            context = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(context.transpose(1, 2).reshape(batch, seq, d))
            return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self, spec):
            super().__init__()
            self.tok_emb = nn.Embedding(spec["vocab"], spec["d_model"])
            self.pos_emb = nn.Embedding(spec["max_seq"], spec["d_model"])
            self.blocks = nn.ModuleList(Block(spec) for _ in range(spec["blocks"]))
            self.ln_f = nn.LayerNorm(spec["d_model"], eps=spec["eps"])
            self.lm_head = nn.Linear(spec["d_model"], spec["vocab"], bias=spec["lm_head_bias"])

        def forward(self, tokens):
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.tok_emb(tokens) + self.pos_emb(positions)
            for block in self.blocks:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return Mlp, Gpt


def summarize(samples_us):
    ordered = sorted(samples_us)

    def at(fraction):
        return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]

    median = at(0.5)
    p90 = at(0.9)
    return {"count": len(ordered), "min_us": ordered[0], "median_us": median, "p90_us": p90,
            "max_us": ordered[-1], "spread": (p90 - median) / median if median > 0 else 0.0}


def synchronize(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(torch, device, call, warmup, iters):
    """Times `call`; what it returns is dropped before the next call (a graph's
    output is overwritten by its next replay)."""
    for _ in range(warmup):
        call()
    synchronize(torch, device)
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        call()
        synchronize(torch, device)
        samples.append((time.perf_counter() - start) * 1e6)
    return summarize(samples)


def mark_step_begin(torch):
    """torch.compiler.cudagraph_mark_step_begin() where this PyTorch has it."""
    compiler = getattr(torch, "compiler", None)
    mark = getattr(compiler, "cudagraph_mark_step_begin", None)
    if mark is not None:
        mark()


def reset_compiled_state(torch):
    """Forgets what torch.compile compiled and recorded, so rows do not share it."""
    dynamo = getattr(torch, "_dynamo", None)
    if dynamo is not None:
        dynamo.reset()
    try:
        from torch._inductor import cudagraph_trees
        cudagraph_trees.reset_cudagraph_trees()
    except (ImportError, AttributeError):
        pass


def capture_graph(torch, warm_up, body):
    """PyTorch's documented whole-network capture: `warm_up` three times on a
    side stream, then `body` captured into one CUDAGraph; returns (graph, what
    body returned)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            warm_up()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = body()
    return graph, static


class Bench:
    def __init__(self, torch, args):
        self.torch = torch
        self.args = args
        self.device = torch.device(args.device)
        self.Mlp, self.Gpt = build_modules(torch)
        self.results = []
        self.started = time.perf_counter()
        self.on_row = lambda: None  # called after every row (rewrites the JSON)

    def model(self, name, dtype_name):
        doc = load_model_json(self.args.models, name)
        torch = self.torch
        if name.startswith("mlp"):
            spec = describe_mlp(doc)
            module = self.Mlp(spec)
        else:
            spec = describe_gpt(doc)
            module = self.Gpt(spec)
        dtype = torch_dtype(torch, dtype_name or spec["dtype"])
        return module.to(self.device, dtype=dtype), spec, dtype

    def inputs(self, name, spec, dtype, batch, seq):
        torch = self.torch
        generator = torch.Generator(device=self.device).manual_seed(1)
        if name.startswith("mlp"):
            width = spec["layers"][0]["in"]
            return torch.rand(batch, width, device=self.device, generator=generator,
                              dtype=dtype) * 2 - 1
        return torch.randint(0, spec["vocab"], (batch, seq), device=self.device,
                             generator=generator)

    def record(self, entry, run):
        label = "%-9s %-18s %-4s %-23s %s" % (entry["mode"], entry["case"], entry["dtype"],
                                             entry.get("optimizer", "-"), entry["config"])
        budget = self.args.budget_s
        if budget and time.perf_counter() - self.started > budget:
            entry["skipped"] = "the run's time budget (--budget-s %g) was spent" % budget
            self.results.append(entry)
            print("  %s ... skipped (time budget)" % label, flush=True)
            self.on_row()
            return
        print("  %s ..." % label, end="", flush=True)
        started = time.perf_counter()
        try:
            entry.update(run())
            print(" %.1f us" % entry["median_us"], flush=True)
        except Exception as error:  # torch.compile failures are results too
            entry["error"] = "%s: %s" % (type(error).__name__, str(error).splitlines()[0]
                                         if str(error) else "")
            entry["traceback"] = traceback.format_exc(limit=4)
            print(" FAILED (%s)" % entry["error"], flush=True)
        entry["wall_s"] = time.perf_counter() - started
        self.results.append(entry)
        try:
            reset_compiled_state(self.torch)
            if self.device.type == "cuda":
                self.torch.cuda.empty_cache()
        except Exception as error:  # a failed row must not stop the others
            print("  (resetting after the row failed: %s)" % error, flush=True)
        self.on_row()

    def configs(self, all_configs):
        return [c for c in all_configs if self.args.configs is None or c in self.args.configs]

    def entry(self, mode, case, dtype, config, optimizer=None):
        entry = {"mode": mode, "case": case, "config": config, "dtype": dtype}
        if optimizer is not None:
            label, cls, kwargs = OPTIMIZERS[optimizer]
            entry.update({"optimizer": optimizer, "optimizer_label": label,
                          "optimizer_class": cls, "optimizer_kwargs": dict(kwargs)})
        return entry

    # ------------------------------------------------------------ inference

    def inference(self, name, batch, seq, dtype):
        case = case_label(name, batch, seq)
        for config in self.configs(INFERENCE_CONFIGS):
            run = (lambda: self.hand_captured_forward(name, batch, seq, dtype)) \
                if config.startswith("hand-captured") else \
                (lambda config=config: self.compiled_forward(name, batch, seq, dtype, config))
            self.record(self.entry("inference", case, dtype, config), run)

    def compiled_forward(self, name, batch, seq, dtype, config):
        torch = self.torch
        module, spec, torch_type = self.model(name, dtype)
        module.eval()
        x = self.inputs(name, spec, torch_type, batch, seq)
        graphs = config == "compile reduce-overhead"
        if config == "eager":
            forward = module
        else:
            forward = torch.compile(module, **({"mode": "reduce-overhead"} if graphs else {}))

        def call():
            if graphs:
                mark_step_begin(torch)
            with torch.no_grad():
                return forward(x)

        return time_calls(torch, self.device, call, self.args.warmup, self.args.iters)

    def hand_captured_forward(self, name, batch, seq, dtype):
        """The eager forward captured by hand into one torch.cuda.CUDAGraph and
        replayed: PyTorch's own kernels with no launch overhead. A reference,
        not something torch.compile gives its users."""
        torch = self.torch
        module, spec, torch_type = self.model(name, dtype)
        module.eval()
        x = self.inputs(name, spec, torch_type, batch, seq)

        def forward():
            with torch.no_grad():
                return module(x)

        graph, _ = capture_graph(torch, forward, forward)
        return time_calls(torch, self.device, graph.replay, self.args.warmup, self.args.iters)

    # ------------------------------------------------------------- training

    def training_setup(self, name, batch, seq, dtype, optimizer, capturable=False):
        """A fresh model in training mode, its input, its loss (MSE against a
        random target for mlp, next-token cross entropy for gpt) and the
        optimizer: the same for every training configuration."""
        torch = self.torch
        F = torch.nn.functional
        module, spec, torch_type = self.model(name, dtype)
        module.train()
        x = self.inputs(name, spec, torch_type, batch, seq)
        if name.startswith("mlp"):
            target = torch.rand_like(x) * 2 - 1
            loss_of = lambda out: F.mse_loss(out, target)
        else:
            loss_of = lambda out: F.cross_entropy(
                out[:, :-1].reshape(-1, out.shape[-1]), x[:, 1:].reshape(-1))
        _, cls, kwargs = OPTIMIZERS[optimizer]
        kwargs = dict(kwargs)
        if capturable and cls == "AdamW":
            kwargs["capturable"] = True  # step() refuses graph capture without it
        return module, x, loss_of, getattr(torch.optim, cls)(module.parameters(), **kwargs)

    def training(self, name, batch, seq, dtype, optimizer):
        case = case_label(name, batch, seq)
        for config in self.configs(TRAINING_CONFIGS):
            if config == HAND_CAPTURED:
                run = lambda: self.hand_captured_step(name, batch, seq, dtype, optimizer)
            elif config == WHOLE_STEP:
                run = lambda: self.whole_step(name, batch, seq, dtype, optimizer)
            else:
                run = lambda config=config: self.compiled_model_step(name, batch, seq, dtype,
                                                                     optimizer, config)
            entry = self.entry("training", case, dtype, config, optimizer)
            if config == HAND_CAPTURED and OPTIMIZERS[optimizer][1] == "AdamW":
                entry["optimizer_kwargs"]["capturable"] = True
            self.record(entry, run)

    def compiled_model_step(self, name, batch, seq, dtype, optimizer, config):
        """eager, or the module compiled and the optimizer run eagerly."""
        torch = self.torch
        module, x, loss_of, opt = self.training_setup(name, batch, seq, dtype, optimizer)
        graphs = config == "compile reduce-overhead"
        forward = module
        if config != "eager":
            forward = torch.compile(module, **({"mode": "reduce-overhead"} if graphs else {}))

        def call():
            if graphs:
                mark_step_begin(torch)
            opt.zero_grad(set_to_none=True)
            loss = loss_of(forward(x))
            loss.backward()
            opt.step()
            return loss.detach()

        summary = time_calls(torch, self.device, call, self.args.warmup, self.args.iters)
        summary["final_loss"] = float(call())  # read before any later step overwrites it
        return summary

    # Note [Whole step under CUDA Graph Trees]
    # Compiled with mode="reduce-overhead", a step's outputs live in the graph
    # trees' pool and are overwritten by the next step: reading one after the
    # next step began fails with "accessing tensor output of CUDAGraphs that
    # has been overwritten by a subsequent run" (the 2.11 session's error). So
    # nothing of a step may outlive it: the loss is read at once (and dropped
    # in the timing loop); the gradients are set to None before the compiled
    # function is entered (outside it: host work only), so that the next
    # step's compiled code never sees the last step's; and the optimizer's
    # state (momentum buffers, AdamW's moments and step) is made by one eager
    # step before compiling, so that it is ordinary memory updated in place,
    # not an output of a recorded graph. Every step begins with
    # cudagraph_mark_step_begin().
    def whole_step(self, name, batch, seq, dtype, optimizer):
        torch = self.torch
        module, x, loss_of, opt = self.training_setup(name, batch, seq, dtype, optimizer)

        def step():
            loss = loss_of(module(x))
            loss.backward()
            opt.step()
            return loss.detach()

        opt.zero_grad(set_to_none=True)
        step()  # eager: the optimizer's state is ordinary memory from here on
        synchronize(torch, self.device)
        compiled = torch.compile(step, mode="reduce-overhead")

        def call():
            mark_step_begin(torch)
            opt.zero_grad(set_to_none=True)
            return compiled()

        summary = time_calls(torch, self.device, call, self.args.warmup, self.args.iters)
        summary["final_loss"] = float(call())  # consumed before the next step
        return summary

    def hand_captured_step(self, name, batch, seq, dtype, optimizer):
        """The eager step (forward, backward, optimizer) captured by hand into
        one torch.cuda.CUDAGraph and replayed: what PyTorch's own kernels take
        with no launch overhead at all. A reference, not a configuration
        PyTorch users get from torch.compile, so the goals do not compare with
        it."""
        torch = self.torch
        module, x, loss_of, opt = self.training_setup(name, batch, seq, dtype, optimizer,
                                                      capturable=True)

        def step():
            loss = loss_of(module(x))
            loss.backward()
            opt.step()
            return loss

        def warm_up():
            opt.zero_grad(set_to_none=True)
            step()

        # The gradients are made inside the capture, in the graph's pool.
        graph, static_loss = capture_graph(
            torch, warm_up, lambda: (opt.zero_grad(set_to_none=True), step())[1])
        summary = time_calls(torch, self.device, graph.replay, self.args.warmup,
                             self.args.iters)
        graph.replay()
        summary["final_loss"] = float(static_loss.detach())
        return summary


def case_label(name, batch, seq):
    return "%s b=%d%s" % (name, batch, " T=%d" % seq if seq else "")


def plan(args):
    """The rows to run, most important first: (kind, model, batch, seq, dtype, optimizer).
    f32 with SGD momentum (what grove's goals compare with) comes first, then the
    fused optimizers, then bf16."""
    inference = [("mlp16x512", 1, None), ("mlp16x512", 256, None), ("gpt4x256", 1, 32)]
    training = [("mlp16x512", 32, None), ("gpt4x256", 8, 32)]
    if args.cases is not None:
        inference = [row for row in inference if row[0] in args.cases]
        training = [row for row in training if row[0] in args.cases]
    jobs = []
    for dtype in args.dtypes:
        if args.only in (None, "inference"):
            jobs += [("inference", name, batch, seq, dtype, None)
                     for name, batch, seq in inference]
        if args.only in (None, "training"):
            for optimizer in args.optimizers:
                jobs += [("training", name, batch, seq, dtype, optimizer)
                         for name, batch, seq in training]
    return jobs


def print_table(results):
    rows = [("mode", "case", "dtype", "optimizer", "config", "median us", "p90 us", "vs eager")]
    eager = {(r["mode"], r["case"], r["dtype"], r.get("optimizer")): r.get("median_us")
             for r in results if r["config"] == "eager"}
    for r in results:
        key = (r["mode"], r["case"], r["dtype"], r.get("optimizer"))
        head = (r["mode"], r["case"], r["dtype"], r.get("optimizer") or "-", r["config"])
        if "error" in r:
            rows.append(head + ("failed", "", r["error"][:60]))
            continue
        if "skipped" in r:
            rows.append(head + ("skipped", "", ""))
            continue
        base = eager.get(key)
        ratio = "%.2fx" % (base / r["median_us"]) if base else "-"
        rows.append(head + ("%.1f" % r["median_us"], "%.1f" % r["p90_us"], ratio))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(widths[i]) if i < 5 else cell.rjust(widths[i])
                        for i, cell in enumerate(row)).rstrip())
        if index == 0:
            print("  ".join("-" * w for w in widths))


def write_report(path, report):
    """Rewrites the JSON whole (a run stopped from outside keeps the rows so far)."""
    temporary = path + ".tmp"
    with open(temporary, "w") as handle:
        json.dump(report, handle, indent=2)
        handle.write("\n")
    os.replace(temporary, path)


def item_list(allowed, separator):
    def parse(text):
        items = [item.strip() for item in text.split(separator) if item.strip()]
        unknown = [item for item in items if item not in allowed]
        if not items or unknown:
            raise argparse.ArgumentTypeError("expected a list separated by '%s' of %s, found %r"
                                             % (separator, "; ".join(allowed), text))
        return items
    return parse


def comma_list(allowed):
    return item_list(allowed, ",")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=os.path.join(ROOT, "benchmarks", "models"))
    parser.add_argument("--json", help="write the results here (rewritten after every row)")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", dest="dtypes", type=comma_list(DTYPES), default=["f32"],
                        help="dtypes to run, in this order: f32 (the models' own, the "
                             "default), bf16, or f32,bf16")
    parser.add_argument("--optimizers", type=comma_list(list(OPTIMIZERS)),
                        default=list(OPTIMIZERS),
                        help="training optimizers, in this order (default %s)"
                             % ",".join(OPTIMIZERS))
    parser.add_argument("--only", choices=["inference", "training"], default=None)
    parser.add_argument("--cases", type=comma_list(["mlp16x512", "gpt4x256"]), default=None,
                        help="models to run (comma-separated; default both)")
    parser.add_argument("--configs", type=item_list(sorted(set(INFERENCE_CONFIGS +
                                                              TRAINING_CONFIGS)), ";"),
                        default=None,
                        help="run only these configurations (separated by ';', as the table "
                             "names them; default all), e.g. for a profile of one of them")
    parser.add_argument("--budget-s", type=float,
                        default=float(os.environ.get("GROVE_TORCH_BUDGET_S", "0")),
                        help="start no row after this many seconds; the rest are recorded as "
                             "skipped (default $GROVE_TORCH_BUDGET_S, else no limit)")
    args = parser.parse_args(argv)
    if args.iters < 1 or args.warmup < 3:
        parser.error("--iters must be >= 1 and --warmup >= 3 (reduce-overhead records on call 2)")

    import torch  # imported here so that --help works without PyTorch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("compare_torch: no CUDA device; this script runs on the GPU machine", file=sys.stderr)
        return 1
    bench = Bench(torch, args)
    device_name = torch.cuda.get_device_name(bench.device) if args.device.startswith("cuda") \
        else args.device
    print("compare_torch: PyTorch %s on %s, %d iters after %d warm-up; dtypes %s; optimizers %s"
          % (torch.__version__, device_name, args.iters, args.warmup, ",".join(args.dtypes),
             ",".join(args.optimizers)))
    report = {
        "benchmark": "compare_torch",
        "device": device_name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "iters": args.iters,
        "warmup": args.warmup,
        "dtypes": args.dtypes,
        "optimizers": {name: {"label": label, "class": cls, "kwargs": kwargs}
                       for name, (label, cls, kwargs) in OPTIMIZERS.items()
                       if name in args.optimizers},
        "dtype": "each row's dtype field: f32 (the models' own) or bf16 (parameters and float "
                 "inputs cast to bfloat16)",
        "complete": False,
        "results": bench.results,
    }
    if args.json:
        bench.on_row = lambda: write_report(args.json, report)

    def stopped(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)

    signal.signal(signal.SIGTERM, stopped)
    status = 0
    try:
        for kind, name, batch, seq, dtype, optimizer in plan(args):
            if kind == "inference":
                bench.inference(name, batch, seq, dtype)
            else:
                bench.training(name, batch, seq, dtype, optimizer)
        report["complete"] = True
    except KeyboardInterrupt as stop:
        report["stopped"] = "stopped from outside (%s) after %d rows" % (stop or "interrupt",
                                                                       len(bench.results))
        print("\ncompare_torch: %s" % report["stopped"], file=sys.stderr)
        status = 1
    print()
    print_table(bench.results)
    if args.json:
        write_report(args.json, report)
        print("wrote %s" % args.json)
    return status


if __name__ == "__main__":
    sys.exit(main())
