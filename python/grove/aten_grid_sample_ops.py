"""Converters of ATen's grid_sampler_2d (F.grid_sample: spatial transformers,
deformable and flow-warped sampling) and grid_sampler_2d_backward, for
bilinear and nearest sampling, every padding mode (zeros, border,
reflection) and both align_corners (bicubic sampling stays in PyTorch), and
affine_grid_generator (F.affine_grid, the grids of spatial transformers)
with its backward (Note [Sampling at computed positions]). Importing this
module adds them to aten_ops.CONVERTERS."""

import torch

from grove.aten_ops import CONVERTERS
from grove.fx_common import Unsupported

# Note [Sampling at computed positions]: the positions come from a tensor, so
# no constant ids are built on the host (Note [Windows as gathers] does that
# for fixed windows): grove computes each sample's source position as PyTorch's
# kernels do (unnormalize, then clip or reflect, in f32), its corner pixels'
# flat ids n*H*W + y*W + x (y*W + x in f32, exact below 2^24 pixels an image,
# larger images refused), and their weights, and gathers rows of the input as
# a [N*H*W + 1, C] table by those ids with grove's embedding; a corner outside
# the image reads the last row, zeros (so an infinity in the input never meets
# a zero weight). The input gradient is a scatter-add, which grove's IR lacks:
# each image's pixels compare themselves with every sample's corners, and the
# weighted matches [N, H*W, OH*OW] multiply the output gradient in one batched
# GEMM (as accumulating index_put does), so it is refused beyond
# MAX_GRADIENT_MATCHES. Tests: sampling_ops_test's GridSampleTest.

MODES = ("bilinear", "nearest", "bicubic")
PADDINGS = ("zeros", "border", "reflection")
# The input gradient's matches, N x H*W x OH*OW values: beyond this (64 Mi,
# 256 MiB in f32) the backward runs in PyTorch.
MAX_GRADIENT_MATCHES = 1 << 26


class _Sampling:
    """One grid_sampler_2d call: its options, sizes and grove helpers."""

    def __init__(self, c, a, what):
        self.c = c
        x, grid = a["input"], a["grid"]
        self.x, self.grid = x, grid
        if len(c.shape(x)) != 4 or len(c.shape(grid)) != 4:
            raise Unsupported("%s of a rank-%d input (grove takes 2-d images)"
                              % (what, len(c.shape(x))))
        for value in (x, grid):
            if c.dtype(value) != torch.float32:
                raise Unsupported("%s of %s tensors (grove takes float32)" % (what, c.dtype(value)))
        self.mode = MODES[a["interpolation_mode"]]
        self.padding = PADDINGS[a["padding_mode"]]
        if self.mode == "bicubic":
            raise Unsupported("%s with mode 'bicubic' (grove takes bilinear and nearest)" % what)
        self.align = bool(a["align_corners"])
        self.n, self.channels, self.height, self.width = c.shape(x)
        if self.height * self.width >= 1 << 24:
            raise Unsupported("%s of %dx%d images (pixel ids exact in f32 below 2^24 pixels)"
                              % (what, self.height, self.width))
        self.out_h, self.out_w = c.shape(grid)[1:3]
        self.samples = self.out_h * self.out_w

    # Grove arithmetic on [N, OH, OW, 1] f32 values and numbers.
    def f(self, value):
        return self.c.scalar(float(value), torch.float32)

    def op(self, name, *operands):
        return self.c.emit(name, [self.f(o) if isinstance(o, (int, float)) else o
                                  for o in operands])

    def as_float(self, condition):
        return self.c.emit("cast", [condition], {"dtype": "f32"})

    def coordinate(self, axis):
        """The grid's x (axis 0) or y (axis 1) as [N, OH, OW, 1]."""
        return self.c.emit("slice", [self.c.tensor(self.grid)],
                           {"dim": 3, "start": axis, "end": axis + 1})

    def source(self, axis):
        """(position, d position / d grid) along one axis, as PyTorch's
        grid_sampler_compute_source_index(_set_grad)."""
        size = self.width if axis == 0 else self.height
        coord = self.coordinate(axis)
        if self.align:
            position = self.op("mul", self.op("mul", self.op("add", coord, 1), 0.5), size - 1)
            gradient = self.f((size - 1) / 2)
        else:
            position = self.op("mul", self.op("sub", self.op("mul", self.op("add", coord, 1),
                                                             size), 1), 0.5)
            gradient = self.f(size / 2)
        if self.padding == "zeros":
            return position, gradient
        if self.padding == "reflection":
            twice_low, twice_high = (0, 2 * (size - 1)) if self.align else (-1, 2 * size - 1)
            position, reflected = self.reflect(position, twice_low, twice_high)
            gradient = self.op("mul", gradient, reflected)
        position, clipped = self.clip(position, size)
        return position, self.op("mul", gradient, clipped)

    def clip(self, position, size):
        """(position clamped to [0, size - 1], 1 strictly inside else 0)."""
        inside = self.op("mul", self.as_float(self.op("gt", position, 0)),
                         self.as_float(self.op("lt", position, size - 1)))
        return self.op("minimum", self.op("maximum", position, 0), size - 1), inside

    def reflect(self, position, twice_low, twice_high):
        """PyTorch's reflect_coordinates(_set_grad): position mirrored into
        [twice_low / 2, twice_high / 2], and +1 or -1 as its derivative."""
        if twice_low == twice_high:
            return self.op("mul", position, 0), self.f(0)
        low, span = twice_low / 2, (twice_high - twice_low) / 2
        shifted = self.op("sub", position, low)
        negative = self.op("lt", shifted, 0)
        distance = self.c.emit("where", [negative, self.c.emit("neg", [shifted]), shifted])
        flips = self.c.emit("floor", [self.op("div", distance, span)])
        extra = self.op("sub", distance, self.op("mul", flips, span))
        odd = self.op("sub", flips, self.op("mul", self.c.emit(
            "floor", [self.op("mul", flips, 0.5)]), 2))
        even = self.op("eq", odd, 0)
        position = self.c.emit("where", [even, self.op("add", extra, low),
                                         self.op("add", self.op("sub", span, extra), low)])
        sign = self.c.emit("where", [negative, self.f(-1), self.f(1)])
        return position, self.c.emit("where", [even, sign, self.c.emit("neg", [sign])])

    def corner(self, xs, ys):
        """(flat ids [N, OH, OW] into the [N*H*W + 1, C] table, the last row
        where (xs, ys) is outside the image; the pixel id y*W + x, -1 there)."""
        inside = self.c.emit("bitwise_and", [
            self.c.emit("bitwise_and", [self.op("ge", xs, 0), self.op("le", xs, self.width - 1)]),
            self.c.emit("bitwise_and", [self.op("ge", ys, 0),
                                        self.op("le", ys, self.height - 1)])])
        pixel = self.op("add", self.op("mul", ys, self.width), xs)
        pixel = self.c.emit("where", [inside, pixel, self.f(-1)])
        pixel = self.c.emit("cast", [pixel], {"dtype": "i64"})
        offsets = torch.arange(self.n, dtype=torch.int64).view(-1, 1, 1, 1) * (
            self.height * self.width)
        offsets = self.c.importer.constant(self.c.segment, offsets.to(self.c.importer.device))
        flat = self.c.emit("where", [inside, self.c.emit("add", [pixel, offsets]),
                                     self.c.scalar(self.n * self.height * self.width,
                                                   torch.int64)])
        shape = {"shape": [self.n, self.out_h, self.out_w]}
        return self.c.emit("reshape", [flat], shape), self.c.emit("reshape", [pixel], shape)

    def table(self):
        """The input as rows [N*H*W + 1 zero row, C]."""
        rows = self.c.emit("permute", [self.c.tensor(self.x)], {"order": [0, 2, 3, 1]})
        rows = self.c.emit("reshape", [rows], {"shape": [self.n * self.height * self.width,
                                                         self.channels]})
        zeros = self.c.emit("full", [], {"value": 0.0, "shape": [1, self.channels],
                                         "dtype": "f32"})
        return self.c.emit("concat", [rows, zeros], {"dim": 0})

    def corners(self):
        """[(flat ids, pixel ids, weight [N, OH, OW, 1])] of the taps of each
        sample, with the bilinear fractions (w, e, n, s) for the grid's
        gradient (None for nearest), and the chain factors d x / d grid."""
        (x, x_grad), (y, y_grad) = self.source(0), self.source(1)
        if self.mode == "nearest":
            xs, ys = self.c.emit("round", [x]), self.c.emit("round", [y])
            return [self.corner(xs, ys) + (None,)], None, (x_grad, y_grad)
        west, north = self.c.emit("floor", [x]), self.c.emit("floor", [y])
        east, south = self.op("add", west, 1), self.op("add", north, 1)
        w = self.op("sub", x, west)
        e = self.op("sub", 1, w)
        n = self.op("sub", y, north)
        s = self.op("sub", 1, n)
        taps = [(west, north, self.op("mul", s, e)), (east, north, self.op("mul", s, w)),
                (west, south, self.op("mul", n, e)), (east, south, self.op("mul", n, w))]
        return ([self.corner(xs, ys) + (weight,) for xs, ys, weight in taps], (w, e, n, s),
                (x_grad, y_grad))

    def gather(self, table, flat):
        """Rows of `table` by ids [N, OH, OW] -> [N, OH, OW, C]."""
        return self.c.emit("embedding", [table, flat])


def _grid_sampler(c, a):
    """Each sample the weighted sum of its corner pixels (one for nearest),
    gathered by computed ids (Note [Sampling at computed positions])."""
    sampling = _Sampling(c, a, "grid_sampler_2d")
    table = sampling.table()
    taps, _, _ = sampling.corners()
    total = None
    for flat, _, weight in taps:
        value = sampling.gather(table, flat)
        if weight is not None:
            value = c.emit("mul", [value, weight])
        total = value if total is None else c.emit("add", [total, value])
    return c.emit("permute", [total], {"order": [0, 3, 1, 2]})


def _grid_sampler_backward(c, a):
    """(the input's gradient: each pixel sums the output gradient of the
    samples whose corners it is, times their weights, through a GEMM of
    matches; the grid's: the bilinear weights' derivatives dotted with the
    corner values over the channels, times d position / d grid; zero for
    nearest sampling), as PyTorch's backward kernel computes them."""
    sampling = _Sampling(c, a, "grid_sampler_2d_backward")
    s = sampling
    mask = list(a.get("output_mask") or [True, True])
    matches = s.n * s.height * s.width * s.samples
    if mask[0] and matches > MAX_GRADIENT_MATCHES:
        raise Unsupported("grid_sampler_2d_backward's input gradient over %d x %d pixels x %d "
                          "samples: %d matches, beyond grove's %d (no scatter-add in its IR)"
                          % (s.n, s.height * s.width, s.samples, matches, MAX_GRADIENT_MATCHES))
    taps, fractions, (x_grad, y_grad) = s.corners()
    grad = c.emit("permute", [c.tensor(a["grad_output"])], {"order": [0, 2, 3, 1]})
    grad_input = grad_grid = None
    if mask[0]:
        pixels = c.importer.constant(c.segment, torch.arange(
            s.height * s.width, dtype=torch.int64).view(1, -1, 1).to(c.importer.device))
        weights = None
        for _, pixel, weight in taps:
            hits = c.emit("eq", [pixels, c.emit("reshape", [pixel],
                                                {"shape": [s.n, 1, s.samples]})])
            if weight is None:
                term = c.emit("cast", [hits], {"dtype": "f32"})
            else:
                weight = c.emit("reshape", [weight], {"shape": [s.n, 1, s.samples]})
                term = c.emit("where", [hits, weight, s.f(0)])
            weights = term if weights is None else c.emit("add", [weights, term])
        rows = c.emit("reshape", [grad], {"shape": [s.n, s.samples, s.channels]})
        summed = c.emit("matmul", [weights, rows])  # [N, H*W, C]
        summed = c.emit("reshape", [summed], {"shape": [s.n, s.height, s.width, s.channels]})
        grad_input = c.emit("permute", [summed], {"order": [0, 3, 1, 2]})
    if mask[1]:
        if fractions is None:
            grad_grid = c.emit("full", [], {"value": 0.0, "dtype": "f32",
                                            "shape": [s.n, s.out_h, s.out_w, 2]})
        else:
            table = s.table()
            nw, ne, sw, se = (s.gather(table, flat) for flat, _, _ in taps)
            w, e, n, south = fractions
            along_x = c.emit("add", [c.emit("mul", [c.emit("sub", [ne, nw]), south]),
                                     c.emit("mul", [c.emit("sub", [se, sw]), n])])
            along_y = c.emit("add", [c.emit("mul", [c.emit("sub", [sw, nw]), e]),
                                     c.emit("mul", [c.emit("sub", [se, ne]), w])])
            parts = []
            for along, chain in ((along_x, x_grad), (along_y, y_grad)):
                dot = c.emit("sum", [c.emit("mul", [along, grad])], {"dims": [3], "keepdim": 1})
                parts.append(c.emit("mul", [dot, chain]))
            grad_grid = c.emit("concat", parts, {"dim": 3})
    return (grad_input, grad_grid)


def _steps(count, align, dtype):
    """PyTorch's affine-grid axis: -1 to 1 in `count` steps, scaled by
    (count - 1) / count without align_corners; 0 for one step."""
    if count <= 1:
        return torch.zeros(1, dtype=dtype)
    steps = torch.linspace(-1, 1, count, dtype=dtype)
    return steps if align else steps * (count - 1) / count


def _base_grid(size, align, dtype):
    """[H*W, 3] rows (x, y, 1) of every output pixel, as affine_grid's."""
    _, _, height, width = size
    xs, ys = _steps(width, align, dtype), _steps(height, align, dtype)
    base = torch.stack([xs.view(1, -1).expand(height, width), ys.view(-1, 1).expand(height, width),
                        torch.ones(height, width, dtype=dtype)], dim=2)
    return base.reshape(height * width, 3)


def _affine_grid(c, a):
    """F.affine_grid (spatial transformers): theta [N, 2, 3] applied to the
    constant (x, y, 1) of every output pixel, one batched GEMM."""
    theta, size = a["theta"], [int(s) for s in a["size"]]
    if len(size) != 4:
        raise Unsupported("affine_grid_generator of size %s (grove takes 2-d grids)" % size)
    n, _, height, width = size
    dtype = c.dtype(theta)
    base = _base_grid(size, bool(a["align_corners"]), dtype)
    base = base.unsqueeze(0).expand(n, -1, -1).contiguous().to(c.importer.device)
    transposed = c.emit("transpose", [c.tensor(theta)], {"dim0": 1, "dim1": 2})
    grid = c.emit("matmul", [c.importer.constant(c.segment, base), transposed])  # [N, H*W, 2]
    return c.emit("reshape", [grid], {"shape": [n, height, width, 2]})


def _affine_grid_backward(c, a):
    """theta's gradient: the grid's gradient [N, H*W, 2] transposed, times
    the constant (x, y, 1) rows."""
    grad, size = a["grad"], [int(s) for s in a["size"]]
    if len(size) != 4:
        raise Unsupported("affine_grid_generator_backward of size %s (grove takes 2-d grids)"
                          % size)
    n, _, height, width = size
    base = _base_grid(size, bool(a["align_corners"]), c.dtype(grad))
    base = base.unsqueeze(0).expand(n, -1, -1).contiguous().to(c.importer.device)
    rows = c.emit("reshape", [c.tensor(grad)], {"shape": [n, height * width, 2]})
    rows = c.emit("transpose", [rows], {"dim0": 1, "dim1": 2})
    return c.emit("matmul", [rows, c.importer.constant(c.segment, base)])


# On CUDA, F.grid_sample's bilinear sampling with zero padding and aligned
# corners traces to cuDNN's sampler (PyTorch's cond_cudnn_grid_sampler): the
# same op with those options fixed.
_CUDNN_OPTIONS = {"interpolation_mode": 0, "padding_mode": 0, "align_corners": True}


def _cudnn_grid_sampler(c, a):
    return _grid_sampler(c, dict(_CUDNN_OPTIONS, input=a["self"], grid=a["grid"]))


def _cudnn_grid_sampler_backward(c, a):
    return _grid_sampler_backward(c, dict(_CUDNN_OPTIONS, input=a["self"], grid=a["grid"],
                                          grad_output=a["grad_output"]))


CONVERTERS.update({
    "aten.cudnn_grid_sampler": _cudnn_grid_sampler,
    "aten.cudnn_grid_sampler_backward": _cudnn_grid_sampler_backward,
    "aten.affine_grid_generator": _affine_grid,
    "aten.affine_grid_generator_backward": _affine_grid_backward,
    "aten.grid_sampler_2d": _grid_sampler,
    "aten.grid_sampler_2d_backward": _grid_sampler_backward,
})
