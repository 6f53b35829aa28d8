"""Converters of tril and triu (triangular masks of a value that depends on
the inputs; a mask made of constants folds without them): the value where a
constant [rows, cols] mask of the triangle holds, zero elsewhere. The
gradient of each is the same op of the gradient, which AOTAutograd traces
as tril/triu too. Importing this module adds them to aten_ops.CONVERTERS."""

import torch

from grove.aten_ops import CONVERTERS
from grove.fx_common import Unsupported


def _triangle(upper):
    def convert(c, a):
        x = a["self"]
        shape = c.shape(x)
        if len(shape) < 2:
            raise Unsupported("%s of a rank-%d tensor" % ("triu" if upper else "tril", len(shape)))
        diagonal = int(a.get("diagonal", 0) or 0)
        ones = torch.ones(shape[-2], shape[-1], dtype=torch.bool)
        keep = ones.triu(diagonal) if upper else ones.tril(diagonal)
        mask = c.importer.constant(c.segment, keep.to(c.importer.device))
        dtype = c.dtype(x)
        zero = c.scalar(False if dtype == torch.bool else 0, dtype)
        return c.emit("where", [mask, c.tensor(x), zero])

    return convert


CONVERTERS.update({
    "aten.tril": _triangle(False),
    "aten.triu": _triangle(True),
})
