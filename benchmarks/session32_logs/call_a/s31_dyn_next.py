"""Session 31: which graph of HF LLaMA under dynamic=True grove leaves to PyTorch, and why."""
import warnings
import torch
warnings.filterwarnings("ignore")
import grove.torch  # noqa: F401
from grove import dynamo_backend
from transformers import LlamaConfig, LlamaForCausalLM
seen = []
original = dynamo_backend.GraphInPyTorch.__init__
def spy(self, gm, reason):
    code = getattr(gm, "code", None) or getattr(getattr(gm, "__self__", None), "code", "")
    seen.append((reason, code))
    original(self, gm, reason)
dynamo_backend.GraphInPyTorch.__init__ = spy
original_compile = dynamo_backend._compile_graph
def traced(gm, example_inputs, *args, **kwargs):
    try:
        return original_compile(gm, example_inputs, *args, **kwargs)
    except Exception as error:
        print("compile raised", type(error).__name__, str(error)[:400]); raise
dynamo_backend._compile_graph = traced
graphs = []
original_per_shape = dynamo_backend.PerShapeGraph.__init__
def keep(self, gm, *args, **kwargs):
    graphs.append(gm)
    original_per_shape(self, gm, *args, **kwargs)
dynamo_backend.PerShapeGraph.__init__ = keep
torch.manual_seed(0)
m = LlamaForCausalLM(LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=500, max_position_embeddings=256)).cuda().eval()
for dynamic in (True, None):
    torch._dynamo.reset(); seen.clear()
    c = torch.compile(m, backend="grove", dynamic=dynamic)
    with torch.no_grad():
        for n in (7, 16, 33, 70):
            c(torch.randint(0, 500, (2, n), device="cuda"))
    print("dynamic=%s: %d graphs in PyTorch" % (dynamic, len(seen)))
    for reason, code in seen:
        print("REASON", reason)
        lines = code.splitlines() if isinstance(code, str) else []
        hits = [i for i, line in enumerate(lines) if "item" in line or "local_scalar" in line or "sym_" in line or "_check" in line]
        print("  graph has %d lines; lines reading values:" % len(lines))
        for i in hits[:12]: print("   ", lines[i][:220])
    for gm in graphs:
        lines = gm.code.splitlines()
        print("dynamo graph with symbolic sizes, %d lines; placeholders and value reads:" % len(lines))
        for node in gm.graph.nodes:
            if node.op == "placeholder" or "item" in str(node.target) or "local_scalar" in str(node.target):
                print("   ", node.op, node.name, node.target, type(node.meta.get("example_value")).__name__,
                      getattr(node.meta.get("example_value"), "shape", ""))
    graphs.clear()
    # which specialized per-shape graphs did grove compile
    print("compiled runners:", len([r for r in dynamo_backend._live_runners]))
