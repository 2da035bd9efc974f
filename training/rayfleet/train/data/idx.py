"""The IDX file format of (Fashion-)MNIST: big-endian header, then raw uint8 data."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

_UBYTE = 0x08


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array as IDX (magic 0x0000 08 <ndim>, one uint32 per dimension)."""
    if array.dtype != np.uint8:
        raise TypeError(f"IDX writer takes uint8 data, got {array.dtype}")
    header = struct.pack(">BBBB", 0, 0, _UBYTE, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(np.ascontiguousarray(array).tobytes())
    tmp.replace(path)  # never leave a half-written file under the real name


def read_idx(path: Path) -> np.ndarray:
    data = Path(path).read_bytes()
    zero, dtype, ndim = data[0:2], data[2], data[3]
    if zero != b"\0\0" or dtype != _UBYTE:
        raise ValueError(f"{path} is not a uint8 IDX file")
    shape = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape} but holds {body.size} bytes")
    return body.reshape(shape)
