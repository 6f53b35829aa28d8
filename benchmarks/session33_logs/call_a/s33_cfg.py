# Session 33 probe: what transformers 5.17 writes into config.json / generation_config.json.
import json, os, tempfile, torch, transformers
from transformers import LlamaConfig, LlamaForCausalLM, GPT2Config, GPT2LMHeadModel
print("transformers", transformers.__version__)
def show(cfg, model_cls, label):
    with tempfile.TemporaryDirectory() as d:
        torch.manual_seed(0)
        m = model_cls(cfg)
        m.save_pretrained(d)
        print("==", label, sorted(os.listdir(d)))
        for f in ("config.json", "generation_config.json"):
            p = os.path.join(d, f)
            if os.path.exists(p):
                print(f, json.dumps(json.load(open(p)), sort_keys=True))
        try:
            m2 = model_cls.from_pretrained(d)
            rot = getattr(getattr(m2, "model", None), "rotary_emb", None)
            if rot is not None:
                print("inv_freq", rot.inv_freq.tolist(), "attention_scaling", rot.attention_scaling)
        except Exception as e:
            print("reload failed", type(e).__name__, e)
small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=100, max_position_embeddings=256)
show(LlamaConfig(**small), LlamaForCausalLM, "llama default")
show(LlamaConfig(**small, rope_theta=500000.0, dtype=torch.bfloat16), LlamaForCausalLM, "llama theta kw")
show(LlamaConfig(**small, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
     "high_freq_factor": 4.0, "original_max_position_embeddings": 64}, rope_theta=500000.0,
     eos_token_id=[1, 2, 3]), LlamaForCausalLM, "llama llama3 via rope_scaling")
show(LlamaConfig(**small, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
     LlamaForCausalLM, "llama linear via rope_parameters")
show(LlamaConfig(**small, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}),
     LlamaForCausalLM, "llama dynamic")
show(GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=100, n_positions=64), GPT2LMHeadModel, "gpt2")
# An old-style config.json read by transformers 5: what does it keep?
with tempfile.TemporaryDirectory() as d:
    cfg = dict(small, model_type="llama", rope_theta=500000.0, torch_dtype="bfloat16",
               rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    c = LlamaConfig.from_pretrained(d)
    print("old-style read as", c.rope_parameters, c.dtype if hasattr(c, "dtype") else None)
# sharding: what save_pretrained writes with a small max_shard_size
with tempfile.TemporaryDirectory() as d:
    LlamaForCausalLM(LlamaConfig(**small)).save_pretrained(d, max_shard_size="100KB")
    print("sharded files", sorted(os.listdir(d)))
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    print("index keys", sorted(idx), list(idx["weight_map"].items())[:3])
