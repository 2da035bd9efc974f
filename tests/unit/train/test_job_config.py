"""The shared job keys live once, in JobConfig: every job gets the same keys and the same checks."""

from __future__ import annotations

import pytest

from rayfleet.core.config import ConfigError, load_config
from rayfleet.train.ddp.config import DDPConfig
from rayfleet.train.fsdp.config import FSDPConfig
from rayfleet.train.job_config import JobConfig

SHARED = {
    "num_workers",
    "min_workers",
    "elastic_resize_s",
    "cpus_per_worker",
    "device",
    "precision",
    "seed",
    "storage",
    "s3_endpoint_url",
    "run_name",
    "max_preemptions",
    "preemption_check_steps",
    "max_failures",
    "keep_checkpoints",
    "hang_floor_s",
    "hang_factor",
    "max_heals",
    "progress_every_s",
    "tensorboard",
    "mlflow_tracking_uri",
    "mlflow_experiment",
}


def test_the_shared_keys_are_declared_once_on_the_base():
    assert set(JobConfig.model_fields) == SHARED
    for job in (DDPConfig, FSDPConfig):
        own = set(job.__annotations__)  # what the job class itself declares
        assert not own & SHARED, f"{job.__name__} redeclares {own & SHARED}"
        assert set(job.model_fields) >= SHARED


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["storage=/tmp/x", "s3_endpoint_url=http://h:1"], "s3_endpoint_url: only meaningful with an s3:// storage"),
        (["storage=s3://b/p", "s3_endpoint_url=h:1"], "s3_endpoint_url: must start with http"),
        (["storage=s3://"], "storage: s3:// needs a bucket"),
        (["storage=gs://b/p"], "only local paths and s3:// are supported"),
        (["run_name=../x"], "run_name"),
        (["precision=fp16"], "precision"),
        (["num_workers=2", "min_workers=3"], "min_workers: 3 is more than num_workers"),
    ],
)
def test_every_job_gets_the_same_storage_and_name_checks(small_dataset, overrides, message):
    for job, extra in ((DDPConfig, [f"data_dir={small_dataset}"]), (FSDPConfig, [])):
        with pytest.raises(ConfigError, match=message):
            load_config(job, None, [*extra, *overrides])


def test_local_storage_becomes_absolute(small_dataset, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(FSDPConfig, None, ["storage=runs"])
    assert cfg.storage == str(tmp_path / "runs")
    assert load_config(DDPConfig, None, [f"data_dir={small_dataset}", "storage=s3://b/p/"]).storage == "s3://b/p"


def test_elastic_workers_reach_ray_trains_scaling_config_and_a_fixed_range_stays_fixed(small_dataset, tmp_path):
    """`min_workers` below `num_workers` is Ray Train's (min, max) tuple; equal (what a fixed recipe passes as
    RAYFLEET_MIN_WORKERS) is a plain count; FSDP's fixed global batch cannot follow a changing world size."""
    from rayfleet.train.fit import build_trainer

    base = [f"data_dir={small_dataset}", f"storage={tmp_path}", "elastic_resize_s=5"]
    elastic = load_config(DDPConfig, None, [*base, "num_workers=4", "min_workers=2"])
    scaling = build_trainer(lambda config: None, elastic, "r", False).scaling_config
    assert scaling.num_workers == (2, 4) and scaling.elastic_resize_monitor_interval_s == 5
    fixed = load_config(DDPConfig, None, [*base, "num_workers=2", "min_workers=2"])
    assert build_trainer(lambda config: None, fixed, "r", False).scaling_config.num_workers == 2
    with pytest.raises(ConfigError, match="global_batch_size: with elastic workers"):
        load_config(FSDPConfig, None, ["num_workers=4", "min_workers=2", "global_batch_size=32"])
    with pytest.raises(ConfigError, match="elastic workers are for strategy=fsdp"):
        load_config(FSDPConfig, None, ["num_workers=4", "min_workers=2", "strategy=deepspeed"])
    assert load_config(FSDPConfig, None, ["num_workers=2", "min_workers=2", "strategy=deepspeed"]).strategy


def test_a_recipes_worker_group_reaches_ray_trains_label_selector(small_dataset, tmp_path, monkeypatch):
    """RAYFLEET_WORKER_GROUP (a recipe's resources.group) becomes the Ray Train workers' label selector: Ray
    places them on that group's nodes only; without it they go anywhere, as before."""
    from rayfleet.core import worker_groups
    from rayfleet.train.fit import build_trainer

    cfg = load_config(DDPConfig, None, [f"data_dir={small_dataset}", f"storage={tmp_path}", "num_workers=2"])
    monkeypatch.delenv(worker_groups.GROUP_VAR, raising=False)
    assert build_trainer(lambda config: None, cfg, "r", False).scaling_config.label_selector is None
    monkeypatch.setenv(worker_groups.GROUP_VAR, "large")
    scaling = build_trainer(lambda config: None, cfg, "r", False).scaling_config
    assert scaling.label_selector == {"rayfleet.io/group": "large"}
    monkeypatch.setenv(worker_groups.GROUP_VAR, "Not A Name")
    with pytest.raises(ConfigError, match="worker group 'Not A Name'"):
        build_trainer(lambda config: None, cfg, "r", False)
