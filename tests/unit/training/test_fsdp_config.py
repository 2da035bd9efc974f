"""The FSDP job's config checks."""

from __future__ import annotations

import pytest

from training.core.config import ConfigError, load_config
from training.fsdp_config import FSDPConfig


def cfg(*overrides: str) -> FSDPConfig:
    return load_config(FSDPConfig, "training/configs/fsdp.yaml", list(overrides))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["global_batch_size=30"], "global_batch_size: 30 cannot be split across 8 workers"),
        (["warmup_steps=200", "max_steps=100"], "warmup_steps: 200 must be below max_steps"),
        (["strategy=zero"], "strategy: Input should be 'fsdp' or 'deepspeed'"),
        (["seq_len=4"], "seq_len: Input should be greater than or equal to 8"),
        (["s3_endpoint_url=http://x"], "s3_endpoint_url: only meaningful with an s3:// storage"),
    ],
)
def test_config_rejections(overrides, message):
    with pytest.raises(ConfigError, match=message):
        cfg(*overrides)
