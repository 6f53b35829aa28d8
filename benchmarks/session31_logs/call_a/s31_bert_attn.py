"""Session 31: why HF BERT at its default dropout trains 3e-3 apart from eager through the door.
(1) which sdpa kernel eager picks for BERT's attention shapes, and which one dynamo/AOT traces;
(2) loss differences against eager per backend (grove, aot_eager) and attn_implementation."""
import copy, sys
import torch
torch.backends.cuda.matmul.allow_tf32 = False
import grove.torch  # noqa: F401
from transformers import BertConfig, BertForMaskedLM

q = torch.randn(8, 4, 64, 64, device="cuda", requires_grad=True)
mask = torch.zeros(8, 1, 64, 64, device="cuda")
for m in (None, mask):
    print("eager _fused_sdp_choice (0 math, 1 flash, 2 efficient, 3 cudnn...): mask", m is not None,
          torch._fused_sdp_choice(q, q, q, m, 0.1, False), flush=True)

from torch._dynamo.backends.common import aot_autograd
def printer(tag):
    def compiler(gm, example_inputs):
        ops = sorted({str(n.target) for n in gm.graph.nodes if n.op == "call_function"
                      and ("attention" in str(n.target) or "dropout" in str(n.target) or "philox" in str(n.target)
                           or "rand" in str(n.target) or "bernoulli" in str(n.target))})
        print("  %s graph ops: %s" % (tag, ops), flush=True)
        return gm.forward
    return compiler
spy = aot_autograd(fw_compiler=printer("forward"), bw_compiler=printer("backward"))

def bert(impl):
    return BertForMaskedLM(BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                      intermediate_size=1024, vocab_size=1000, max_position_embeddings=128,
                                      attn_implementation=impl))

ids = torch.randint(0, 1000, (8, 64), device="cuda")
for impl in ("sdpa", "eager"):
    for backend in ("spy", "aot_eager", "grove"):
        torch.manual_seed(0)
        model = bert(impl).cuda().train()
        reference = copy.deepcopy(model)
        torch._dynamo.reset()
        run = torch.compile(model, backend=spy if backend == "spy" else backend, dynamic=False)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.01)
        worst = 0.0
        for step in range(4):
            losses = []
            for call, sgd in ((run, opt), (reference, ref_opt)):
                sgd.zero_grad(set_to_none=True)
                torch.manual_seed(100 + step)
                loss = call(input_ids=ids, labels=ids).loss
                loss.backward(); sgd.step(); losses.append(loss.item())
            worst = max(worst, abs(losses[0] - losses[1]))
        print("%s attention, backend %s: largest loss difference from eager over 4 steps %.3g"
              % (impl, backend, worst), flush=True)
