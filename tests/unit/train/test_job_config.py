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
    "nccl_over_tcp",
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


def test_a_run_on_a_group_counts_only_that_groups_nodes(monkeypatch):
    """Whether the job uses GPUs, and how many workers fit, follow from the nodes of its worker group, not the
    whole cluster: a run on a CPU group of a cluster with a GPU group trains on CPU."""
    from rayfleet.train import ray_connect

    def node(group, cpus, gpus, alive=True):
        labels = {"rayfleet.io/group": group} if group else {}
        return {"Alive": alive, "Labels": labels, "Resources": {"CPU": cpus, **({"GPU": gpus} if gpus else {})}}

    nodes = [
        node(None, 0, 0),
        node("small", 4, 0),
        node("small", 4, 0),
        node("large", 8, 4),
        node("large", 8, 4, False),
    ]
    monkeypatch.setattr(ray_connect.ray, "nodes", lambda: nodes)
    assert ray_connect.cluster_gpus() == 4 and ray_connect.cluster_gpus("large") == 4
    assert ray_connect.cluster_gpus("small") == 0 and ray_connect.cluster_gpus("none") == 0
    assert ray_connect.placeable_workers(2, 0) == 8 and ray_connect.placeable_workers(2, 0, "small") == 4
    assert ray_connect.placeable_workers(1, 1, "large") == 4 and ray_connect.placeable_workers(1, 1, "small") == 0
