"""Writes README.md's table of the ATen ops the importer converts, from the
converter table itself (grove.aten_ops.CONVERTERS), between the markers
<!-- op-table: begin --> and <!-- op-table: end -->. One row per converter
module, ops sorted.

    PYTHONPATH=python /usr/bin/python3 tools/op_table.py [--check] [README.md]

--check exits 1 naming the difference instead of writing."""

import os
import sys

BEGIN, END = "<!-- op-table: begin -->", "<!-- op-table: end -->"

# What each converter module's ops become in grove, in the README's words.
MODULES = [
    ("grove.aten_ops", "elementwise, matmul / linear (addmm's bias in the GEMM), reductions, "
     "views and concat, attention (one kernel reading q/k/v in place where keys and values fit "
     "48 KiB of shared memory, else matmul + softmax), casts, constants (div: true division or "
     "floor/trunc rounding; layer norm: one normalized dim; attention and dropout: no "
     "dropout)"),
    ("grove.aten_pointwise_ops", "trigonometry, erf, log1p/expm1 and rounding ops, "
     "maximum/minimum "
     "(clamp), bitwise ops and integer division (remainder, fmod) on bool and integers; sign, "
     "tan, and remainder/fmod of floats written out"),
    ("grove.aten_index_ops", "embedding (rows picked by flat ids; negative ids wrap); "
     "embedding_bag: bags of one size, then sum / mean / max"),
    ("grove.aten_index_put_ops", "rows compared with the target rows: the last write wins, or "
     "accumulating writes add through one GEMM (floats); a boolean mask with one value for "
     "every position it picks: a where; masked_scatter: a gather at the mask's running count"),
    ("grove.aten_conv_ops", "2-d (and 1-d, as 2-d) convolution as im2col (a gather of windows, "
     "or views where the patches tile the image) + one GEMM; pooling as gathered windows + max / sum (Note [Windows "
     "as gathers]); unfold (im2col) as the same gathered windows"),
    ("grove.aten_conv_backward_ops", "each input pixel sums the window positions that read it "
     "(a gather), then one GEMM for the weight gradient; col2im (fold) the same sums of "
     "im2col's windows"),
    ("grove.aten_grid_sample_ops", "grid_sample (bilinear, nearest; every padding mode): "
     "positions computed as PyTorch's kernels compute them, corner pixels gathered by computed "
     "ids (Note [Sampling at computed positions]); its backward: the input's gradient through "
     "a GEMM of weighted pixel-sample matches (refused beyond 2^26 of them), the grid's "
     "written out"),
    ("grove.aten_batch_norm_ops", "a per-channel scale and shift; training: batch statistics, "
     "and running statistics that are graph inputs written inside the program"),
    ("grove.aten_group_norm_ops", "statistics per (sample, group), f32 for bf16 and f16 "
     "inputs, then a per-channel scale and shift"),
    ("grove.aten_norm_ops", "vector norms of any order (sum of squares then sqrt; sum or max of "
     "magnitudes; powers), logsumexp shifted by the finite max, std and var_mean from the "
     "two-pass variance; f32 for bf16 and f16"),
    ("grove.aten_weight_norm_ops", "the norm over every dim but one (sum of squares, sqrt), f32 "
     "for bf16 and f16; the backward written out"),
    ("grove.aten_argmax_ops", "max reductions; the index is the first position equal to the "
     "maximum; integers in f32-exact pieces (Note [Integer maxima in f32-exact pieces]); topk "
     "(floats) as k rounds of them"),
    ("grove.aten_math_ops", "hyperbolic and inverse trigonometric functions, log2/log10/"
     "exp2 and addcmul/addcdiv/lerp written out in forms that keep f32's accuracy (expm1, "
     "log1p); integer operands cast to the float result first"),
    ("grove.aten_unfold_ops", "Tensor.unfold as a gather of each window's taps; its backward "
     "sums the taps that read each position"),
    ("grove.aten_triangle_ops", "tril/triu of values the inputs reach: where over a constant "
     "triangle mask"),
    ("grove.aten_conv3d_ops", "3-d convolution and its backward as 2-d ones over depth "
     "slices, summed over the kernel's depth taps (Note [3-d convolutions as 2-d ones]); 3-d "
     "max (with indices), average and adaptive average pooling and their backwards as 2-d "
     "pooling of the volume viewed as a tall image (Note [Volumes as tall images])"),
    ("grove.aten_conv_transpose_ops", "transposed 3-d, 2-d and 1-d convolution as the input "
     "gradient of the convolution it transposes (Note [Transposed convolutions as input "
     "gradients]), and its backward as the transposed operation's transpose"),
    ("grove.aten_grouped_mm_ops", "histc (tokens per expert); grouped products of tokens "
     "sorted by expert (_grouped_mm, transformers' grouped_mm_fallback) computed for every "
     "expert and picked per row, checked against the op on a probe (Note [Grouped products "
     "computed densely])"),
    ("grove.aten_any_all_ops", "any/all as the maximum or minimum of the values' truth (int32), "
     "given back as bool"),
    ("grove.aten_resample_ops", "antialiased bilinear and bicubic resampling, their "
     "backwards and those of plain bilinear and bicubic upsampling as two GEMMs with "
     "constant per-axis weight matrices taken from PyTorch's kernel once per shape (Note "
     "[Resampling as two constant products])"),
    ("grove.aten_sort_ops", "stable sort by pairwise ranks: each element counts those "
     "before it, then a gather (Note [Sorting by pairwise ranks]; rows up to 2048)"),
    ("grove.aten_layout_ops", "slice: a view (step 1); concat with constants or slices "
     "(padding; slice_scatter and "
     "select_scatter: the base's slices around the source; roll), gathers (flip, nearest "
     "upsampling, slices with a step, reflection and replication padding; bilinear "
     "upsampling: four gathers weighed in f32; bicubic: four a dim), repeat and as_strided windows as broadcasts "
     "and reshapes, pixel shuffles as reshape-permute-reshape, "
     "cumsum: a GEMM with a triangle of ones (floats), log2(n) shifted adds (integers)"),
    ("grove.aten_fused_ops", "written out: attention (nn.MultiheadAttention's fast path: "
     "self- and cross-attention, the weights where read), layer norms, ReLU/GELU MLP"),
    ("grove.aten_nonfinite_ops", "tests for NaN and infinities (x != x, abs(x) against inf), "
     "nan_to_num and fmax/fmin as wheres"),
    ("grove.aten_special_ops", "written out in elementwise ops and max/sum reductions: "
     "signbit (-0.0 by 1/x), copysign, logit, xlogy, logaddexp, shrinkage, heaviside, sinc, "
     "amin (as -max(-x)), nansum; the backwards of logit and the shrinkages"),
    ("grove.aten_loss_ops", "mse, nll, smooth L1 and Huber losses and their backwards, and "
     "the logit BCE loss, written out in grove ops (nll_loss: no class weights, no "
     "reduction='none')"),
    ("grove.aten_backward_ops", "backward ops of training graphs, written out in grove ops"),
]

FOOTER = [
    "| in-place ops (`relu_`, `add_`, ...) on an intermediate nothing else aliases | their "
    "functional op (Note [In-place ops on intermediates]) |",
    "| in-place writes into graph inputs (a KV cache's `index_copy_`/`index_put_`, a counter's "
    "`add_`, buffers) | traced functionalized; each write-back (`copy_` of a whole input) is "
    "`copy_into`: in place for static inputs, copied back by the tree for others (Note [Writes "
    "into graph inputs]) |",
    "| nodes that depend on no input (ones, full, arange, a causal mask), and values with no "
    "elements (an empty batch) | computed once, bound as constants |",
    "| anything else (cumprod, sort of rows beyond 2048, topk beyond k = 64, scatter with a "
    "reduction, bicubic grid sampling, FFTs and complex values, a boolean mask's write of a "
    "value per picked position, integer sums of more than 65,793 values, float64 values "
    "(grove's kernels compute in f32), uint8/int8/int16 tensors until a cast, reductions and "
    "products over no elements, a graph grove's compiler refuses, ...) | runs in PyTorch "
    "between grove segments (a refused graph: whole, with a warning) |",
]


def table():
    from grove import importer  # noqa: F401 (fills CONVERTERS with every module's ops)
    from grove.aten_ops import CONVERTERS

    by_module = {}
    for name, converter in CONVERTERS.items():
        modules = getattr(converter, "grove_modules",
                          [getattr(converter, "__module__", "grove.aten_ops")])
        shown = name[len("aten."):] if name.startswith("aten.") else name  # other libraries' ops
        for module in modules:
            by_module.setdefault(module, []).append(shown)
    known = [module for module, _ in MODULES]
    unknown = sorted(set(by_module) - set(known))
    if unknown:
        raise SystemExit("op_table.py: describe converter module(s) %s in MODULES" % unknown)
    lines = [BEGIN, "| ATen ops | grove |", "| --- | --- |"]
    for module, description in MODULES:
        ops = sorted(by_module.get(module, []))
        if ops:
            lines.append("| %s | %s |" % (", ".join(ops), description))
    return "\n".join(lines + FOOTER + [END])


def updated(text):
    if BEGIN not in text or END not in text:
        raise SystemExit("op_table.py: README lacks the %s ... %s markers" % (BEGIN, END))
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + table() + tail


def main(argv):
    check = "--check" in argv
    paths = [a for a in argv if not a.startswith("--")]
    path = paths[0] if paths else os.path.join(os.path.dirname(__file__), "..", "README.md")
    with open(path) as handle:
        text = handle.read()
    new = updated(text)
    if check:
        if new != text:
            print("README.md's op table is not the converters' (run tools/op_table.py)")
            return 1
        return 0
    with open(path, "w") as handle:
        handle.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
