#!/usr/bin/env python3
"""PyTorch side by side with grove: the benchmark models of benchmarks/models/
rebuilt in PyTorch, written the way PyTorch users write them (nn.Linear,
F.gelu(approximate="tanh"), F.scaled_dot_product_attention(is_causal=True)),
timed in eager mode, with torch.compile (default), and with
torch.compile(mode="reduce-overhead") (PyTorch's CUDA Graph Trees).

Cases (the ones grove's benchmarks measure):
  inference  mlp16x512 batch 1 and 256; gpt4x256 batch 1, T=32
  training   mlp16x512 batch 32 (MSE); gpt4x256 batch 8, T=32 (next-token
             cross entropy); SGD with momentum 0.9; the reduce-overhead
             configurations call torch.compiler.cudagraph_mark_step_begin()
             before every step, and the whole step (forward, backward and
             optimizer) is also compiled as one function. As a reference (not a
             goal), the eager step captured by hand into one CUDA graph.

Latency is host time from the call until torch.cuda.synchronize() returns,
median and p90 over --iters calls after --warmup calls, as grove measures it.
A configuration that fails (torch.compile errors included) is recorded with its
error and the run goes on.

  python3 benchmarks/compare_torch.py --json compare_torch.json [--iters 200]
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# A reference row: the eager step captured by hand (Bench.hand_captured_step).
HAND_CAPTURED = "hand-captured CUDA graph, whole step"


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


def time_calls(torch, call, warmup, iters):
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e6)
    return summarize(samples)


class Bench:
    def __init__(self, torch, args):
        self.torch = torch
        self.args = args
        self.device = torch.device(args.device)
        self.Mlp, self.Gpt = build_modules(torch)
        self.results = []

    def model(self, name, dtype_override):
        doc = load_model_json(self.args.models, name)
        torch = self.torch
        if name.startswith("mlp"):
            spec = describe_mlp(doc)
            module = self.Mlp(spec)
        else:
            spec = describe_gpt(doc)
            module = self.Gpt(spec)
        dtype = torch_dtype(torch, dtype_override or spec["dtype"])
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
        label = "%-9s %-22s %s" % (entry["mode"], entry["case"], entry["config"])
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
        torch = self.torch
        torch._dynamo.reset()
        torch.cuda.empty_cache()

    def inference(self, name, batch, seq=None):
        torch = self.torch
        case = "%s b=%d%s" % (name, batch, " T=%d" % seq if seq else "")
        configs = [("eager", None), ("compile default", {}),
                   ("compile reduce-overhead", {"mode": "reduce-overhead"})]
        for config, compile_kwargs in configs:
            def run(compile_kwargs=compile_kwargs):
                module, spec, dtype = self.model(name, self.args.dtype)
                module.eval()
                x = self.inputs(name, spec, dtype, batch, seq)
                forward = module if compile_kwargs is None else torch.compile(module,
                                                                              **compile_kwargs)
                graphs = compile_kwargs is not None and compile_kwargs.get("mode") == "reduce-overhead"

                def call():
                    if graphs:
                        torch.compiler.cudagraph_mark_step_begin()
                    with torch.no_grad():
                        return forward(x)

                return time_calls(torch, call, self.args.warmup, self.args.iters)

            self.record({"mode": "inference", "case": case, "config": config}, run)

    def training_setup(self, name, batch, seq):
        """A fresh model in training mode, its input, its loss (MSE against a
        random target for mlp, next-token cross entropy for gpt) and SGD with
        momentum 0.9: the same for every training configuration."""
        torch = self.torch
        F = torch.nn.functional
        module, spec, dtype = self.model(name, self.args.dtype)
        module.train()
        x = self.inputs(name, spec, dtype, batch, seq)
        if name.startswith("mlp"):
            target = torch.rand_like(x) * 2 - 1
            loss_of = lambda out: F.mse_loss(out, target)
        else:
            loss_of = lambda out: F.cross_entropy(
                out[:, :-1].reshape(-1, out.shape[-1]), x[:, 1:].reshape(-1))
        optimizer = torch.optim.SGD(module.parameters(), lr=1e-2, momentum=0.9)
        return module, x, loss_of, optimizer

    def training(self, name, batch, seq=None):
        torch = self.torch
        case = "%s b=%d%s" % (name, batch, " T=%d" % seq if seq else "")
        configs = [("eager", None, False), ("compile default", {}, False),
                   ("compile reduce-overhead", {"mode": "reduce-overhead"}, False),
                   ("compile reduce-overhead, whole step", {"mode": "reduce-overhead"}, True)]
        for config, compile_kwargs, whole_step in configs:
            def run(compile_kwargs=compile_kwargs, whole_step=whole_step):
                module, x, loss_of, optimizer = self.training_setup(name, batch, seq)
                graphs = compile_kwargs is not None and compile_kwargs.get("mode") == "reduce-overhead"
                forward = module
                if compile_kwargs is not None and not whole_step:
                    forward = torch.compile(module, **compile_kwargs)

                def step():
                    optimizer.zero_grad(set_to_none=True)
                    loss = loss_of(forward(x))
                    loss.backward()
                    optimizer.step()
                    return loss.detach()

                body = torch.compile(step, **compile_kwargs) if whole_step else step

                def call():
                    if graphs:
                        torch.compiler.cudagraph_mark_step_begin()
                    return body()

                summary = time_calls(torch, call, self.args.warmup, self.args.iters)
                summary["final_loss"] = float(call())
                return summary

            self.record({"mode": "training", "case": case, "config": config}, run)
        self.record({"mode": "training", "case": case, "config": HAND_CAPTURED},
                    lambda: self.hand_captured_step(name, batch, seq))

    def hand_captured_step(self, name, batch, seq):
        """The eager step (forward, backward, SGD) captured by hand into one
        torch.cuda.CUDAGraph and replayed: what PyTorch's own kernels take with
        no launch overhead at all. A reference, not a configuration PyTorch
        users get from torch.compile, so the goals do not compare with it."""
        torch = self.torch
        module, x, loss_of, optimizer = self.training_setup(name, batch, seq)

        def step():
            loss = loss_of(module(x))
            loss.backward()
            optimizer.step()
            return loss

        # Warm up on a side stream (PyTorch's documented whole-network capture).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                optimizer.zero_grad(set_to_none=True)
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = step()

        def call():
            graph.replay()
            return static_loss

        summary = time_calls(torch, call, self.args.warmup, self.args.iters)
        summary["final_loss"] = float(call().detach())
        return summary


def print_table(results):
    rows = [("mode", "case", "config", "median us", "p90 us", "vs eager")]
    eager = {(r["mode"], r["case"]): r.get("median_us") for r in results if r["config"] == "eager"}
    for r in results:
        if "error" in r:
            rows.append((r["mode"], r["case"], r["config"], "failed", "", r["error"][:60]))
            continue
        base = eager.get((r["mode"], r["case"]))
        ratio = "%.2fx" % (base / r["median_us"]) if base else "-"
        rows.append((r["mode"], r["case"], r["config"], "%.1f" % r["median_us"],
                     "%.1f" % r["p90_us"], ratio))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(widths[i]) if i < 3 else cell.rjust(widths[i])
                        for i, cell in enumerate(row)).rstrip())
        if index == 0:
            print("  ".join("-" * w for w in widths))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=os.path.join(ROOT, "benchmarks", "models"))
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default=None,
                        help="override the models' dtype (default: as in the JSON)")
    parser.add_argument("--only", choices=["inference", "training"], default=None)
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
    print("compare_torch: PyTorch %s on %s, %d iters after %d warm-up" %
          (torch.__version__, device_name, args.iters, args.warmup))
    if args.only in (None, "inference"):
        bench.inference("mlp16x512", 1)
        bench.inference("mlp16x512", 256)
        bench.inference("gpt4x256", 1, 32)
    if args.only in (None, "training"):
        bench.training("mlp16x512", 32)
        bench.training("gpt4x256", 8, 32)
    print()
    print_table(bench.results)
    if args.json:
        report = {
            "benchmark": "compare_torch",
            "device": device_name,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "iters": args.iters,
            "warmup": args.warmup,
            "results": bench.results,
        }
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
            handle.write("\n")
        print("wrote %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
