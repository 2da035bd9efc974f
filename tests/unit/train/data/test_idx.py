"""The IDX file format: round trip, truncated files refused."""

from __future__ import annotations

import numpy as np
import pytest

from rayfleet.train.data.idx import read_idx, write_idx


def test_idx_round_trip(tmp_path):
    array = np.random.default_rng(0).integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    write_idx(tmp_path / "x-idx3-ubyte", array)
    assert np.array_equal(read_idx(tmp_path / "x-idx3-ubyte"), array)
    raw = (tmp_path / "x-idx3-ubyte").read_bytes()
    assert raw[:4] == b"\x00\x00\x08\x03" and int.from_bytes(raw[4:8], "big") == 5


def test_idx_rejects_truncated_files(tmp_path):
    write_idx(tmp_path / "y", np.zeros((4, 2), dtype=np.uint8))
    (tmp_path / "y").write_bytes((tmp_path / "y").read_bytes()[:-1])
    with pytest.raises(ValueError, match="holds 7 bytes"):
        read_idx(tmp_path / "y")
