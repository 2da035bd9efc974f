"""The DDP job with its storage in S3, served by a real moto_server process on 127.0.0.1: refused in one line
when the bucket is missing. Checkpoints and metrics landing in S3 (and the old ones deleted there): the
rehearsal's DDP run (tests/integration/test_rehearsal.py) and the FSDP twin
(tests/integration/test_fsdp_on_local_cluster.py)."""

from __future__ import annotations

import pytest

from tests.integration.helpers import run_ddp

pytestmark = pytest.mark.integration


def test_missing_bucket_fails_with_one_clear_error(cluster_env, moto_endpoint, small_dataset):
    result = run_ddp(
        cluster_env,
        f"data_dir={small_dataset}",
        "storage=s3://no-such-bucket/runs",
        f"s3_endpoint_url={moto_endpoint}",
        "epochs=1",
        "run_name=nobucket",
        timeout=180,
    )
    assert result.returncode == 2  # refused before anything ran (rayfleet.core.errors.EXIT_BAD_INPUT)
    assert "error: storage: cannot write to s3://no-such-bucket/runs/nobucket" in result.stderr
    assert "Traceback" not in result.stderr
