"""The sequence attention kernel (runtime/sequence_attention_kernel.cu) on its
own, loaded from its PTX through the CUDA driver (ctypes), against PyTorch's
scaled_dot_product_attention at the zoo's attention shapes: the largest
difference and each one's time per call (20 calls captured in a CUDA graph, replayed; median
of 5 blocks), with q/k/v read in place from a fused projection's output.
With --variants, f32 also times the kernel's forms against each other:
register staging (the narrow or wide kernel, as the launch picks) and
cp.async staging (Note [Sequence attention staged by cp.async]) and the
float4/float2 form ("vector", the f32 default: Note [Sequence attention in
vectors]), each at the launch's query rows per block and at 4, 8 and 16.

    python3 benchmarks/sequence_attention_probe.py [--f32] [--variants] [--cases vit_b1,...]
        [--staging register|async|vector]

--staging picks the staging of the first (checked) launch and the timed
one, for profiling one form alone (ncu --launch-count 1).
"""
import ctypes
import os
import re
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))


def ptx_text():
    path = os.path.join(here, "..", "runtime", "sequence_attention_kernel_ptx.inc")
    text = open(path).read()
    return re.search(r'R"PTX\((.*)\)PTX"', text, re.S).group(1)


class Kernel:
    def __init__(self, name):
        self.cuda = ctypes.CDLL("libcuda.so.1")
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        module = ctypes.c_void_p()
        ptx = ptx_text().encode() + b"\0"
        check = self.check
        check(self.cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(ptx)), "load")
        self.module = module
        self.name = name
        self.functions = {}

    def function(self, name):
        if name not in self.functions:
            function = ctypes.c_void_p()
            self.check(self.cuda.cuModuleGetFunction(ctypes.byref(function), self.module,
                                                     name.encode()), "get " + name)
            self.functions[name] = function
        return self.functions[name]

    @staticmethod
    def check(rc, what):
        if rc != 0:
            raise RuntimeError("CUDA driver %s failed: %d" % (what, rc))

    def launch(self, function_name, grid, block, shared, args):
        values = []
        for kind, value in args:
            if kind == "p":
                values.append(ctypes.c_void_p(value))
            elif kind == "i":
                values.append(ctypes.c_int64(value))
            else:
                values.append(ctypes.c_float(value))
        params = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p)
                                                   for v in values])
        stream = torch.cuda.current_stream().cuda_stream
        self.check(self.cuda.cuLaunchKernel(self.function(function_name), grid[0], grid[1], grid[2],
                                            block, 1, 1, shared, ctypes.c_void_p(stream),
                                            params, None), "launch")


def strides4(t):
    return list(t.stride())


def launch_rows(b, h, tq, warps=4):
    """The launch's query rows per block (sequence_attention_kernel.cc): 16,
    fewer (down to one a warp) while the grid has under 264 blocks."""
    rows = 16
    while rows > warps and (tq + rows - 1) // rows * h * b < 264:
        rows //= 2
    return rows


def run_grove(kernel, q, k, v, out, mask, causal, scale, staging="default", rows=None):
    """staging: "default" (the launch's kernel: "vector" for f32), "register"
    (the narrow or wide register-staged kernel, as GROVE_SEQUENCE_ATTENTION_ASYNC=0
    picks) or "async"; rows: query rows per block (None: the launch's)."""
    b, h, tq, d = q.shape
    tk, dv = k.shape[2], v.shape[3]
    group = h // k.shape[1]
    if staging == "default" and "--staging" in sys.argv:
        staging = sys.argv[sys.argv.index("--staging") + 1]
    warps = 4
    rows = rows or launch_rows(b, h, tq, warps)
    if staging == "default":
        staging = "vector" if q.dtype == torch.float32 else "register"
    pad = 4 if staging == "vector" else 1
    shared = 4 * (tk * (d + pad) + tk * dv + rows * d + warps * tk)
    if mask is None:
        m_strides, kind, mask_ptr = [0, 0, 0, 0], 0, 0
    else:
        mask4 = mask.expand(b, h, tq, tk)
        m_strides = [s if n > 1 else 0 for s, n in zip(mask4.stride(), mask4.shape)]
        kind = 1 if mask.dtype == torch.bool else 2
        mask_ptr = mask.data_ptr()
    dtype = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}[q.dtype]
    suffix = {"async": "_async", "vector": "_vector"}.get(
        staging, "_wide" if max(tk, rows) > 32 else "")
    args = [("p", q.data_ptr()), ("p", k.data_ptr()), ("p", v.data_ptr()), ("p", mask_ptr),
            ("p", out.data_ptr())]
    for t in (q, k, v, out):
        args += [("i", s) for s in strides4(t)]
    args += [("i", s) for s in m_strides]
    args += [("i", tq), ("i", tk), ("i", d), ("i", dv), ("i", group), ("i", kind),
             ("i", 1 if causal else 0), ("i", rows), ("f", scale)]
    kernel.launch("%s_%s%s" % (kernel.name, dtype, suffix), ((tq + rows - 1) // rows, h, b),
                  32 * warps, shared, args)


def timed(fn, calls=20, replays=20, blocks=5):
    """GPU time per call: `calls` calls captured in one CUDA graph (no host
    launch cost), replayed; the median of `blocks` blocks of `replays`."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    times = []
    for _ in range(blocks):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / (calls * replays))
    return sorted(times)[len(times) // 2]


CASES = [  # name, batch, heads, kv heads, query len, key len, head dim, causal, mask
    ("gpt2", 16, 4, 4, 32, 32, 64, True, None),
    ("llama", 16, 4, 2, 32, 32, 64, True, None),
    ("bert", 16, 4, 4, 24, 24, 64, False, "float"),
    ("bart_enc", 16, 4, 4, 20, 20, 32, False, None),
    ("bart_cross", 16, 4, 4, 12, 20, 32, False, None),
    ("vit", 16, 3, 3, 17, 17, 64, False, None),
    ("decoder_self", 16, 4, 4, 32, 32, 64, True, None),
    ("decoder_cross", 16, 4, 4, 32, 48, 64, False, None),
    ("gpt2_b1", 1, 4, 4, 32, 32, 64, True, None),
    ("vit_b1", 1, 3, 3, 17, 17, 64, False, None),
    ("decoder_self_b1", 1, 4, 4, 32, 32, 64, True, None),
    ("decoder_cross_b1", 1, 4, 4, 32, 48, 64, False, None),
    ("long", 2, 8, 8, 64, 64, 64, True, None),
]


def main():
    if not torch.cuda.is_available():
        print("sequence_attention_probe: skipped, no CUDA device")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    kernel = Kernel("grove_sequence_attention")
    torch.manual_seed(0)
    failed = 0
    dtypes = (torch.float32,) if "--f32" in sys.argv else (torch.float32, torch.bfloat16)
    wanted = None
    if "--cases" in sys.argv:
        wanted = set(sys.argv[sys.argv.index("--cases") + 1].split(","))
    for dtype in dtypes:
        for name, b, h, hk, tq, tk, d, causal, mask_kind in CASES:
            if dtype != torch.float32 and name not in ("gpt2", "bert", "llama"):
                continue
            if wanted is not None and name not in wanted:
                continue
            # q/k/v as views of one fused projection [b, t, (h + 2 hk) d] (GPT-2, ViT).
            t = max(tq, tk)
            qkv = torch.randn(b, t, (h + 2 * hk) * d, device="cuda", dtype=dtype)
            q = qkv[:, :tq, :h * d].view(b, tq, h, d).transpose(1, 2)
            k = qkv[:, :tk, h * d:(h + hk) * d].view(b, tk, hk, d).transpose(1, 2)
            v = qkv[:, :tk, (h + hk) * d:].view(b, tk, hk, d).transpose(1, 2)
            mask = None
            if mask_kind == "float":
                keep = torch.ones(b, tk, device="cuda", dtype=torch.bool)
                keep[-1, tk - 5:] = False
                mask = torch.zeros(b, 1, 1, tk, device="cuda", dtype=dtype).masked_fill(
                    ~keep[:, None, None, :], torch.finfo(dtype).min)
            out = torch.empty(b, tq, h, d, device="cuda", dtype=dtype).transpose(1, 2)
            scale = 1.0 / d ** 0.5
            kr, vr = k, v
            if hk != h:
                kr = k.repeat_interleave(h // hk, dim=1)
                vr = v.repeat_interleave(h // hk, dim=1)
            expected = F.scaled_dot_product_attention(q.float(), kr.float(), vr.float(),
                                                      attn_mask=None if mask is None
                                                      else mask.float(), is_causal=causal)
            run_grove(kernel, q, k, v, out, mask, causal, scale)
            torch.cuda.synchronize()
            error = (out.float() - expected).abs().max().item() / expected.abs().max().item()
            ok = error < (1e-5 if dtype == torch.float32 else 1e-2)
            failed += not ok
            grove_us = timed(lambda: run_grove(kernel, q, k, v, out, mask, causal, scale))
            torch_us = timed(lambda: F.scaled_dot_product_attention(
                q, kr, vr, attn_mask=mask, is_causal=causal))
            print("%-14s %-9s b%-3d h%d/%d t%d/%d d%d  err %.2e %s  grove %6.2f us  torch sdpa "
                  "%6.2f us" % (name, str(dtype)[6:], b, h, hk, tq, tk, d, error,
                                "ok" if ok else "FAIL", grove_us, torch_us), flush=True)
            if "--variants" in sys.argv and dtype == torch.float32:
                default_rows = launch_rows(b, h, tq)
                cells = []
                for staging in ("register", "async", "vector"):
                    for rows in (None, 4, 8, 16):
                        if rows == default_rows:
                            continue
                        variant = lambda: run_grove(kernel, q, k, v, out, mask, causal, scale,
                                                    staging, rows)
                        variant()
                        torch.cuda.synchronize()
                        same = (out.float() - expected).abs().max().item() / \
                            expected.abs().max().item() < 1e-5
                        shown = rows or "r%d" % default_rows
                        cells.append("%s/%s %.2f%s" % (staging[:5], shown,
                                                      timed(variant), "" if same else " FAIL"))
                        failed += not same
                print("    " + "  ".join(cells), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
