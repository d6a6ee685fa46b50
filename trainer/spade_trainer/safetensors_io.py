"""Read and write the safetensors file format without the safetensors package.

Format (https://huggingface.co/docs/safetensors, "Format" section):

    [8 bytes]  N, unsigned 64-bit little-endian: length of the JSON header
    [N bytes]  UTF-8 JSON object. Each key is a tensor name mapping to
               {"dtype": "F32"|"BF16"|..., "shape": [d0, d1, ...],
                "data_offsets": [begin, end]}; the optional key
               "__metadata__" maps to a flat {str: str} object. The header
               may be padded at its end with ASCII spaces (0x20); we pad to
               a multiple of 8 bytes so the data that follows is aligned.
    [rest]     the byte buffer. data_offsets are relative to its start; each
               tensor is row-major (C order), little-endian, and the tensors
               tile the buffer exactly: no holes, no overlaps.

When the ``safetensors`` package is importable, :func:`save_file` and
:func:`load_file` delegate to it; :func:`write_safetensors` and
:func:`read_safetensors` are this module's own implementation, always
available and tested against each other and against the spec.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from typing import Dict, Optional, Tuple

import torch

# Spec dtype names <-> torch dtypes (the subset a checkpoint uses).
DTYPE_TO_NAME = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
NAME_TO_DTYPE = {v: k for k, v in DTYPE_TO_NAME.items()}

# The reference implementation refuses headers above 100 MB; so do we, so a
# corrupt length field cannot make us allocate gigabytes.
MAX_HEADER_BYTES = 100_000_000


class SafetensorsError(ValueError):
    """A file that does not follow the safetensors format."""


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _check_little_endian() -> None:
    if sys.byteorder != "little":
        raise SafetensorsError("safetensors I/O here assumes a little-endian host")


def write_safetensors(tensors: Dict[str, torch.Tensor], path: str, metadata: Optional[Dict[str, str]] = None) -> None:
    """Write ``tensors`` to ``path`` in safetensors format, names sorted.

    Tensors are copied to CPU and made contiguous. Metadata values must be
    strings (spec). The file is written to ``path + ".tmp"`` and renamed, so
    a crash never leaves a half-written checkpoint under the final name.
    """
    _check_little_endian()
    header: Dict[str, object] = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise SafetensorsError(f"metadata {k!r}: keys and values must be strings")
        header["__metadata__"] = dict(metadata)
    names = sorted(tensors)
    offset = 0
    prepared = []
    for name in names:
        t = tensors[name]
        if name == "__metadata__":
            raise SafetensorsError("tensor name __metadata__ is reserved")
        if t.dtype not in DTYPE_TO_NAME:
            raise SafetensorsError(f"tensor {name}: unsupported dtype {t.dtype}")
        t = t.detach().to("cpu").contiguous()
        nbytes = t.numel() * t.element_size()
        header[name] = {"dtype": DTYPE_TO_NAME[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        prepared.append(t)
        offset += nbytes
    hjson = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("utf-8")
    pad = (8 - (8 + len(hjson)) % 8) % 8
    hjson += b" " * pad
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for t in prepared:
            if t.numel() == 0:
                continue
            if t.dtype == torch.bool:
                f.write(t.to(torch.uint8).numpy().tobytes())
            else:
                f.write(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_header(path: str) -> Tuple[Dict[str, dict], Dict[str, str], int]:
    """Parse and validate the header of a safetensors file.

    Returns (tensor entries by name, metadata, absolute byte offset of the
    data buffer). Raises SafetensorsError naming the file and the field when
    the header violates the spec (bad length, unknown dtype, offsets that do
    not tile the buffer, size mismatch).
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise SafetensorsError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise SafetensorsError(f"{path}: header length {n} exceeds file size {size} or limit")
        hbytes = f.read(n)
    try:
        header = json.loads(hbytes.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise SafetensorsError(f"{path}: __metadata__ must map strings to strings")
    data_start = 8 + n
    spans = []
    for name, e in header.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(f"{path}: tensor {name}: want exactly dtype, shape, data_offsets")
        if e["dtype"] not in NAME_TO_DTYPE:
            raise SafetensorsError(f"{path}: tensor {name}: unsupported dtype {e['dtype']!r}")
        shape = e["shape"]
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise SafetensorsError(f"{path}: tensor {name}: bad shape {shape!r}")
        off = e["data_offsets"]
        if not (isinstance(off, list) and len(off) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in off) and 0 <= off[0] <= off[1]):
            raise SafetensorsError(f"{path}: tensor {name}: bad data_offsets {off!r}")
        numel = 1
        for d in shape:
            numel *= d
        if off[1] - off[0] != numel * _itemsize(NAME_TO_DTYPE[e["dtype"]]):
            raise SafetensorsError(f"{path}: tensor {name}: data_offsets span {off[1] - off[0]} bytes, shape needs {numel * _itemsize(NAME_TO_DTYPE[e['dtype']])}")
        spans.append((off[0], off[1], name))
    spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            raise SafetensorsError(f"{path}: tensor {name}: starts at {b}, expected {pos} (hole or overlap)")
        pos = e
    if data_start + pos != size:
        raise SafetensorsError(f"{path}: buffer is {size - data_start} bytes, tensors cover {pos}")
    return header, metadata, data_start


def read_safetensors(path: str, device: str = "cpu") -> Dict[str, torch.Tensor]:
    """Load every tensor of a safetensors file (validated by read_header)."""
    _check_little_endian()
    header, _, data_start = read_header(path)
    out: Dict[str, torch.Tensor] = {}
    with open(path, "rb") as f:
        for name, e in header.items():
            dtype = NAME_TO_DTYPE[e["dtype"]]
            b, end = e["data_offsets"]
            if end == b:
                t = torch.empty(e["shape"], dtype=dtype)
            else:
                f.seek(data_start + b)
                buf = bytearray(end - b)
                if f.readinto(buf) != len(buf):
                    raise SafetensorsError(f"{path}: tensor {name}: short read")
                if dtype == torch.bool:
                    t = torch.frombuffer(buf, dtype=torch.uint8).to(torch.bool)
                else:
                    t = torch.frombuffer(buf, dtype=dtype)
                t = t.reshape(e["shape"])
            out[name] = t.to(device) if device != "cpu" else t
    return out


def read_metadata(path: str) -> Dict[str, str]:
    """Return the __metadata__ object of a safetensors file ({} if absent)."""
    return read_header(path)[1]


def have_safetensors_package() -> bool:
    """True when the upstream ``safetensors`` package is importable."""
    try:
        import safetensors.torch  # noqa: F401
    except ImportError:
        return False
    return True


def save_file(tensors: Dict[str, torch.Tensor], path: str, metadata: Optional[Dict[str, str]] = None) -> None:
    """Save with the safetensors package when present, else our writer."""
    if have_safetensors_package():
        from safetensors.torch import save_file as _save

        tmp = path + ".tmp"
        _save({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, tmp, metadata=metadata)
        os.replace(tmp, path)
        return
    write_safetensors(tensors, path, metadata)


def load_file(path: str, device: str = "cpu") -> Dict[str, torch.Tensor]:
    """Load with the safetensors package when present, else our reader."""
    if have_safetensors_package():
        from safetensors.torch import load_file as _load

        return _load(path, device=device)
    return read_safetensors(path, device)
