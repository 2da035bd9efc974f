"""Text data for the FSDP job: packing into blocks, step-addressed micro-batches."""

from __future__ import annotations

import pytest
import torch

from rayfleet.train.data.text import PackedBlocks, pack


def test_packing_has_no_padding_and_the_right_block_count():
    ids = list(range(1, 1001))
    blocks = pack(ids, 64)
    assert blocks.shape == (1000 // 64, 64)
    assert torch.equal(blocks.flatten(), torch.tensor(ids[: 15 * 64]))  # every position a real token, in order
    with pytest.raises(ValueError, match="fewer than one block"):
        pack(ids[:10], 64)


def test_micro_batches_are_a_pure_function_of_the_step_and_disjoint_across_ranks():
    data = PackedBlocks(pack(list(range(40 * 8)), 8))  # 40 blocks
    args = {"seed": 0, "micro_batch": 2, "grad_accum": 2}

    def batch(step, micro, rank):
        return data.micro_batch(step, micro, rank, 2, args["seed"], args["micro_batch"], args["grad_accum"])

    assert data.steps_per_epoch(2, 2, 2) == 5
    epoch0 = torch.cat([batch(s, m, r)[:, 0] for s in range(5) for m in range(2) for r in range(2)])
    assert epoch0.unique().numel() == 40  # one epoch touches every block exactly once
    assert torch.equal(batch(3, 1, 0), batch(3, 1, 0))  # a resumed run sees the same batch
    assert not torch.equal(batch(0, 0, 0), batch(5, 0, 0))  # the next epoch is reshuffled
