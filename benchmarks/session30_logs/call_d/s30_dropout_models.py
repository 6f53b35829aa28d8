"""Session 30: HF BERT and GPT-2 trained at their default dropout (hidden and attention 0.1)
through backend="grove" against eager under one seed per step: losses per step, the graphs'
grove programs and PyTorch steps, and the step time (GROVE_DRAWS_FIRST from the environment)."""
import copy, os, sys, time
import torch
torch.backends.cuda.matmul.allow_tf32 = False
import grove.torch  # noqa: F401
from grove import dynamo_backend
from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

def bert():
    return BertForMaskedLM(BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                      intermediate_size=1024, vocab_size=1000, max_position_embeddings=128))
def gpt2():
    return GPT2LMHeadModel(GPT2Config(n_embd=256, n_layer=4, n_head=4, vocab_size=1000, n_positions=128))

for name, make in (("bert", bert), ("gpt2", gpt2)):
    torch.manual_seed(0)
    model = make().cuda().train()
    reference = copy.deepcopy(model)
    torch._dynamo.reset()
    run = torch.compile(model, backend="grove", dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.01)
    ids = torch.randint(0, 1000, (8, 64), device="cuda")
    before = {id(r) for r in dynamo_backend._live_runners}
    worst = 0.0
    for step in range(6):
        losses = []
        for call, sgd in ((run, opt), (reference, ref_opt)):
            sgd.zero_grad(set_to_none=True)
            torch.manual_seed(100 + step)
            loss = call(input_ids=ids, labels=ids).loss
            loss.backward(); sgd.step(); losses.append(loss.item())
        worst = max(worst, abs(losses[0] - losses[1]))
        print(name, "step", step, "grove %.6f eager %.6f" % tuple(losses))
    made = [r for r in dynamo_backend._live_runners if id(r) not in before]
    for r in made:
        kinds = [k for k, _ in r.plan.steps]
        print("  graph %s: %d grove programs, %d PyTorch steps, ops left: %s" % (
            r.plan.name, kinds.count("grove"), kinds.count("torch"),
            sorted({op for _, op, _ in r.unsupported})[:8]))
    def timed(call, sgd, n=30):
        for _ in range(3):
            sgd.zero_grad(set_to_none=True); call(input_ids=ids, labels=ids).loss.backward(); sgd.step()
        torch.cuda.synchronize(); start = time.perf_counter()
        for _ in range(n):
            sgd.zero_grad(set_to_none=True); call(input_ids=ids, labels=ids).loss.backward(); sgd.step()
        torch.cuda.synchronize(); return (time.perf_counter() - start) / n * 1e6
    print("%s: largest loss difference %.3g; step grove %.1f us, eager %.1f us (GROVE_DRAWS_FIRST=%s)" % (
        name, worst, timed(run, opt), timed(reference, ref_opt), os.environ.get("GROVE_DRAWS_FIRST", "1")))
