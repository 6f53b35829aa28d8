"""What the PyTorch under test offers, for the GPU tests' skip conditions: a
CUDA device (HAS_CUDA), and torch._dynamo, which torch.compile needs
(HAS_DYNAMO; CI's torch 1.13 has none). A GPU test skips only where these say
the host lacks what it needs."""
import torch

HAS_CUDA = torch.cuda.is_available()
try:
    import torch._dynamo  # noqa: F401

    HAS_DYNAMO = True
except ImportError:
    HAS_DYNAMO = False
