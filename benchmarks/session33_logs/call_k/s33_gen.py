# Session 33: generate() shapes users bring, static cache, compiled forward, grove against eager:
# a left-padded batch of prompts of different lengths (greedy), beam search (4 beams), sampling
# with top-k and a repetition penalty (seeded), for LLaMA and Qwen2.
import time, torch, transformers, grove.torch  # noqa: F401
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
torch.backends.cuda.matmul.allow_tf32 = False
def no_hf_compile():
    return ({"disable_compile": True}
            if hasattr(transformers.GenerationConfig(), "disable_compile") else {})
def build(kind):
    torch.manual_seed(0)
    sizes = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512, max_position_embeddings=256, pad_token_id=0,
                 eos_token_id=1, bos_token_id=2)
    cfg, cls = (LlamaConfig, LlamaForCausalLM) if kind == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    return cls(cfg(**sizes)).cuda().eval()
ids = [[5, 17, 3, 88, 41, 9, 60, 7], [11, 12], [300, 301, 302, 303, 304]]
def batch(tokenizer_pad=0):
    longest = max(map(len, ids))
    input_ids = torch.tensor([[tokenizer_pad] * (longest - len(r)) + r for r in ids], device="cuda")
    mask = torch.tensor([[0] * (longest - len(r)) + [1] * len(r) for r in ids], device="cuda")
    return input_ids, mask
cases = {
    "left-padded batch, greedy": dict(do_sample=False),
    "beam search 4": dict(do_sample=False, num_beams=4),
    "sampling top-k + repetition penalty": dict(do_sample=True, top_k=20, repetition_penalty=1.3),
}
for kind in ("llama", "qwen2"):
    model = build(kind)
    eager_forward = model.forward
    compiled_forward = torch.compile(model.forward, backend="grove")
    for name, options in cases.items():
        input_ids, mask = batch()
        results = {}
        for side, forward in (("eager", eager_forward), ("grove", compiled_forward)):
            model.forward = forward
            outs = []
            for call in range(3):
                torch.manual_seed(1234 + call)
                start = time.perf_counter()
                try:
                    out = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=24,
                                         cache_implementation="static", **options, **no_hf_compile())
                    outs.append(out.tolist())
                except Exception as e:
                    outs.append("%s: %s" % (type(e).__name__, str(e)[:200]))
            results[side] = outs
        same = results["eager"] == results["grove"]
        print(kind, name, "grove == eager" if same else "DIFFER", "" if same else
              [(e if isinstance(e, str) else "...") for e in results["grove"]][:1])
        if not same and not any(isinstance(o, str) for o in results["grove"]):
            for a, b in zip(results["eager"][0], results["grove"][0]):
                print("   eager", a[-24:]); print("   grove", b[-24:])
    model.forward = eager_forward
