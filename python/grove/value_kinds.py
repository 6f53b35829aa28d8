"""Values the importer leaves to PyTorch by their kind, whatever their op:
float64 (grove computes in f32), elements made out of none (a reduction over
an empty dimension), and GEMMs giving integers. Each check raises
Unsupported, so the node runs in PyTorch between grove's segments."""

import torch

from grove.fx_common import Unsupported, op_name

# Ops that make elements out of their operands' by reducing over them
# (Note [Values with no elements]).
_REDUCING_OPS = {"aten." + name for name in (
    "sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean", "std_mean",
    "any", "all", "argmax", "argmin", "logsumexp", "linalg_vector_norm", "norm", "nansum",
    "count_nonzero", "mm", "bmm", "addmm", "baddbmm", "matmul", "dot", "mv", "einsum")}
# grove ops computed by a GEMM (Note [GEMMs of integers run in PyTorch]).
_GEMM_OPS = {"matmul", "linear", "attention"}
_GEMM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


# Note [Values with no elements]: a value with no elements (an empty batch,
# a mixture-of-experts expert no token chose, an empty index) holds nothing a
# kernel could compute, and its shape is fixed per compilation: the importer
# folds it into a constant like a node that depends on no input. A node that
# makes elements out of empty operands by reducing over them (a sum over an
# empty dimension is 0, a mean NaN, an amax an error; a product over an
# empty inner dimension is 0) runs in PyTorch, which has those rules; other
# ops take an empty operand along (concat's empty pieces, a batch norm
# backward's empty saved statistics in eval mode). grove's compiler refused
# both before ("cannot reduce over the empty dimension"), and torch.compile
# failed. Test: EdgeValuesTest.test_values_with_no_elements
# (tests/python/importer_edge_values_test.py).
def no_elements(value):
    return isinstance(value, torch.Tensor) and value.numel() == 0


# Note [Float64 runs in PyTorch]: grove's kernels compute in f32 registers
# (Note [Kernel spec types]); an f64 value was loaded, computed and stored
# back through f32, so a model in double precision got single precision
# without a word (x.double() * 1e-300 gave 0). A node that gives f64, or
# reads an f64 tensor of rank 1 or more, runs in PyTorch; a 0-d f64 operand
# (a Python float dynamo passes as a tensor) does not make an f32 op f64, as
# in PyTorch, and stays. Values of dtypes grove holds no register for at all
# (uint8, int8, int16) likewise reach grove only through a PyTorch node: Note
# [Values of dtypes grove does not hold] (importer.py). Test:
# EdgeValuesTest.test_float64_and_narrow_integers_run_in_pytorch
# (tests/python/importer_edge_values_test.py).
def check_operands(values, node):
    """Raises Unsupported where `node` (whose result has elements) reduces
    over an operand with none, gives float64 or reads a float64 tensor;
    `values` maps fx nodes to the import run's values."""
    if op_name(node.target) in _REDUCING_OPS and any(
            no_elements(values.get(arg)) for arg in node.all_input_nodes):
        raise Unsupported("an operand has no elements")
    result = values.get(node)
    results = result if isinstance(result, (tuple, list)) else [result]
    if any(isinstance(item, torch.Tensor) and item.dtype == torch.float64 for item in results):
        raise Unsupported("torch.float64 (grove computes in f32)")
    for arg in node.all_input_nodes:
        value = values.get(arg)
        if isinstance(value, torch.Tensor) and value.dtype == torch.float64 and value.dim():
            raise Unsupported("a torch.float64 operand (grove computes in f32)")


# Note [GEMMs of integers run in PyTorch]: grove's GEMMs and attention take
# f32, bf16 and f16; a node whose conversion uses one to give integers (an
# integer mm on the host) runs in PyTorch, where grove's compiler refused the
# program whole and torch.compile failed. A tuple's other elements may be
# integers by design (the efficient attention's random seed and offset): only
# a lone result counts (the attention of every HF decoder went to PyTorch on
# the H200 while they did, session 32 call B). float64 is Note [Float64 runs
# in PyTorch]'s. Tests: EdgeValuesTest.test_products_of_other_dtypes_run_in_pytorch,
# test_a_gemm_giving_integers_beside_its_float_result_is_taken
# (tests/python/importer_edge_values_test.py).
def check_gemm_dtypes(values, node, emitted):
    """Raises Unsupported where `node`'s conversion (its `emitted` program
    nodes) computes a GEMM giving a dtype grove's GEMMs do not take."""
    if not any(entry["op"] in _GEMM_OPS for entry in emitted):
        return
    result = values[node]
    if isinstance(result, torch.Tensor) and result.dtype not in _GEMM_DTYPES:
        raise Unsupported("grove's GEMMs give f32, bf16 or f16, not %s" % result.dtype)
