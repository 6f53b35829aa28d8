"""Next session: why torchvision ViT-B/16's attention reaches AOTAutograd as efficient attention
(write_out_attention did not replace it). Prints, for each dynamo graph of one training call, the
attention-like nodes: target, its repr, args and kwargs; and whether write_out_attention's
targets contain it."""
import torch, torchvision
from grove import training_steps
targets = training_steps._attention_targets()
def backend(gm, example_inputs):
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method", "call_module") and "attention" in str(node.target).lower():
            print("NODE", node.op, repr(node.target), node.target in targets,
                  [str(a)[:60] for a in node.args], {k: str(v)[:60] for k, v in node.kwargs.items()})
    return gm.forward
model = torchvision.models.vit_b_16(num_classes=10).cuda().train()
run = torch.compile(model, backend=backend)
run(torch.randn(2, 3, 224, 224, device="cuda")).sum().backward()
print("targets", targets)
