"""grove's dtypes, in one table: the name grove's programs use, the C API's
code (capi/grove.h's grove_dtype; tests/python/capi_binding_test.py checks
them against the header), PyTorch's dtype and NumPy's dtype name. Every
other dtype mapping of the package is derived from it. PyTorch is imported
only when a torch mapping is asked for (NumPy users need no torch)."""

# (grove name, C API code, torch dtype attribute, numpy dtype name or None)
TABLE = (
    ("f32", 0, "float32", "float32"),
    ("f16", 1, "float16", "float16"),
    ("bf16", 2, "bfloat16", None),
    ("i32", 3, "int32", "int32"),
    ("i64", 4, "int64", "int64"),
    ("bool", 5, "bool", "bool"),
    ("f64", 6, "float64", "float64"),
)

NAMES = [name for name, _, _, _ in sorted(TABLE, key=lambda row: row[1])]  # by C API code
CODES = {name: code for name, code, _, _ in TABLE}
NUMPY_CODES = {numpy: code for _, code, _, numpy in TABLE if numpy is not None}

_torch_codes = None
_torch_names = None


def torch_codes():
    """{torch dtype: C API code}."""
    global _torch_codes
    if _torch_codes is None:
        import torch

        _torch_codes = {getattr(torch, attribute): code for _, code, attribute, _ in TABLE}
    return _torch_codes


def torch_names():
    """{torch dtype: grove name}."""
    global _torch_names
    if _torch_names is None:
        import torch

        _torch_names = {getattr(torch, attribute): name for name, _, attribute, _ in TABLE}
    return _torch_names
