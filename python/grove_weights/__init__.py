"""Safetensors files for grove, written from a PyTorch state_dict or numpy arrays.

grove reads a model's params and buffers from a safetensors file whose tensor
names are the names in the model's JSON (`grove run MODEL.json --weights W`,
`grove serve MODEL.json --weights W`). Name a PyTorch module's submodules as
the JSON names its params ("fc0.weight" is `self.fc0 = nn.Linear(...)`) and
its state_dict is already in grove's layout:

    import grove_weights
    grove_weights.save_state_dict(model.state_dict(), "mlp.safetensors")
    grove_weights.check_against_model(model.state_dict(), "mlp16x512.json")

    python3 -m grove_weights convert model.pt mlp.safetensors [--model mlp.json]

Pure Python plus numpy (torch only for torch tensors); the file is the format
PyTorch and Hugging Face users already have (an 8-byte little-endian header
length, a JSON header, the raw little-endian bytes), so files written by the
`safetensors` package load in grove too.
"""
import json
import struct

import numpy as np

# numpy dtype -> safetensors dtype name. bfloat16 has no numpy dtype: torch
# bf16 tensors are written from their raw 16-bit patterns.
_NUMPY_TO_SAFETENSORS = {
    np.dtype(np.float32): "F32",
    np.dtype(np.float16): "F16",
    np.dtype(np.float64): "F64",
    np.dtype(np.int32): "I32",
    np.dtype(np.int64): "I64",
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "U8",
    np.dtype(np.int8): "I8",
    np.dtype(np.int16): "I16",
}
_SAFETENSORS_TO_NUMPY = {name: dtype for dtype, name in _NUMPY_TO_SAFETENSORS.items()}
# grove's JSON dtype names -> safetensors names.
_GROVE_TO_SAFETENSORS = {"f32": "F32", "f16": "F16", "bf16": "BF16", "f64": "F64",
                         "i32": "I32", "i64": "I64", "bool": "BOOL"}


def _as_array(value):
    """(safetensors dtype name, shape, little-endian bytes) of a tensor or array."""
    if hasattr(value, "detach"):  # a torch.Tensor; torch is imported only by its owner
        import torch
        tensor = value.detach().cpu().contiguous()
        if tensor.dtype == torch.bfloat16:
            raw = tensor.view(torch.int16).numpy().astype("<i2", copy=False)
            return "BF16", list(tensor.shape), raw.tobytes()
        value = tensor.numpy()
    # Not np.ascontiguousarray: it makes a 0-d array 1-d, and the file then
    # held shape [1] for a scalar the model declares as [] (Swin's exported
    # constants; grove serve refused the file).
    array = np.asarray(value)
    if not array.flags.c_contiguous:
        array = array.copy(order="C")
    name = _NUMPY_TO_SAFETENSORS.get(array.dtype.newbyteorder("="))
    if name is None:
        raise TypeError(f"dtype {array.dtype} has no safetensors name grove reads; "
                        f"use one of {sorted(set(_NUMPY_TO_SAFETENSORS.values()))}")
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return name, list(array.shape), little.tobytes()


def encode(tensors, metadata=None):
    """The bytes of a safetensors file holding `tensors` (name -> tensor or array)."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks, offset = [], 0
    for name in sorted(tensors):
        if not name or name == "__metadata__":
            raise ValueError(f"tensor name {name!r} is reserved or empty")
        dtype, shape, data = _as_array(tensors[name])
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # tensors start 8-byte aligned
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def save_file(tensors, path, metadata=None):
    """Writes `tensors` (name -> torch.Tensor or numpy array) to `path`."""
    with open(path, "wb") as f:
        f.write(encode(tensors, metadata))


def save_state_dict(state_dict, path, metadata=None):
    """Writes a PyTorch state_dict (or a module's) in grove's layout."""
    if hasattr(state_dict, "state_dict"):
        state_dict = state_dict.state_dict()
    meta = {"format": "pt", "producer": "grove_weights"}
    meta.update(metadata or {})
    save_file(dict(state_dict), path, meta)


def load_file(path):
    """name -> numpy array of a safetensors file (BF16 widened to float32)."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    header.pop("__metadata__", None)
    base = 8 + length
    result = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw = data[base + begin:base + end]
        if entry["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        else:
            array = np.frombuffer(raw, dtype=_SAFETENSORS_TO_NUMPY[entry["dtype"]].newbyteorder("<"))
        result[name] = array.reshape(entry["shape"]).copy()
    return result


def model_weights(model_json_path, dims=None):
    """name -> (shape, safetensors dtype) of the params and buffers a grove model expects.

    Shapes that name a dimension ("batch") take the value from `dims` or the
    model's "dims" defaults.
    """
    with open(model_json_path) as f:
        model = json.load(f)
    bound = dict(model.get("dims", {}))
    bound.update(dims or {})
    expected = {}
    for section in ("params", "buffers"):
        for entry in model.get(section, []):
            shape = [bound[s] if isinstance(s, str) else s for s in entry["shape"]]
            expected[entry["name"]] = (shape, _GROVE_TO_SAFETENSORS[entry.get("dtype", "f32")])
    return expected


def check_against_model(state_dict, model_json_path, dims=None):
    """Raises ValueError naming the first tensor grove would refuse, in name order."""
    if hasattr(state_dict, "state_dict"):
        state_dict = state_dict.state_dict()
    expected = model_weights(model_json_path, dims)
    for name in sorted(expected):
        if name not in state_dict:
            raise ValueError(f"state_dict lacks {name!r}, which {model_json_path} needs")
        dtype, shape, _ = _as_array(state_dict[name])
        want_shape, want_dtype = expected[name]
        if shape != want_shape or dtype != want_dtype:
            raise ValueError(f"{name!r}: {dtype}{shape} but {model_json_path} has "
                             f"{want_dtype}{want_shape}")
    for name in sorted(state_dict):
        if name not in expected:
            raise ValueError(f"state_dict holds {name!r}, which {model_json_path} has no "
                             f"param or buffer for")
