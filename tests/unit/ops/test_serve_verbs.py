"""The serve verbs' decisions before anything is deployed: what goes into Serve's config, ECS refusals."""

from __future__ import annotations

import json

import pytest

from rayfleet.core.config import ConfigError, load_config
from rayfleet.ecs.outputs import Outputs
from rayfleet.node.serve import control
from rayfleet.ops import serve
from rayfleet.serve.app import ServeArgs
from rayfleet.serve.config import GATED_PROXY_PORT, ServeConfig
from rayfleet.serve.served_run import ServedRun
from rayfleet.serve.summary import lines, summarize
from rayfleet.serve.vllm_app import serving_args

OUTPUTS = {
    "region": "us-east-1",
    "cluster_name": "rayfleet",
    "private_subnet_ids": ["subnet-1"],
    "task_security_group_id": "sg-1",
    "trainer_task_definition": "td",
    "head_service_name": "h",
    "worker_service_name": "w",
    "results_bucket": "bucket",
    "trainer_log_group": "lg",
    "worker_instance_type": "g5.xlarge",
}


def test_serve_config_has_one_application_no_key_and_the_proxy_on_the_head():
    args = ServeArgs(storage="/runs", run_name="lm", kind="llm", folder="export", api_key_file="/k").model_dump(
        mode="json"
    )
    config = control.serve_config(args, 8123)
    assert config["proxy_location"] == "HeadOnly" and config["http_options"] == {"host": "127.0.0.1", "port": 8123}
    (app,) = config["applications"]
    assert app["import_path"] == "rayfleet.serve.app:build" and app["args"]["folder"] == "export"
    assert ServeArgs.model_validate(app["args"]).run_dir().url == "/runs/lm"  # what the builder reads back


def test_vllm_gets_the_same_replicas_parallelism_and_key(tmp_path):
    cfg = load_config(ServeConfig, None, ["gpus_per_replica=2", "tensor_parallel_size=2", "autoscaling.max_replicas=3"])
    spec = ServeArgs(storage="s3://b/runs", run_name="lm", kind="llm", folder="export", api_key_file=None, config=cfg)
    args = serving_args(spec)
    (llm,) = args["llm_configs"]
    assert llm["model_loading_config"] == {"model_id": "lm", "model_source": {"bucket_uri": "s3://b/runs/lm/export"}}
    assert llm["engine_kwargs"]["tensor_parallel_size"] == 2
    assert llm["deployment_config"]["autoscaling_config"]["max_replicas"] == 3
    assert args["ingress_cls_config"] == {
        "ingress_cls": "rayfleet.serve.vllm_ingress:KeyedOpenAiIngress",
        "ingress_extra_kwargs": {"api_key_file": None, "gated": False},
    }


@pytest.mark.parametrize(
    ("outputs", "sets", "words"),
    [
        ({}, [], "serving is off in this deployment"),
        ({"serve_endpoint": "http://head.x.internal:8000"}, ["port=8001"], "serve_port"),
        ({"serve_endpoint": "http://head.x.internal:18000"}, ["port=18000"], "behind the gate"),
    ],
)
def test_ecs_refusals_before_anything_starts(tmp_path, monkeypatch, outputs, sets, words):
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({**OUTPUTS, **outputs}))
    cfg = load_config(ServeConfig, None, sets)
    with pytest.raises(ConfigError, match=words):
        serve.up_ecs("lm", cfg, str(path), 60)


def test_on_ecs_the_proxy_is_on_loopback_behind_the_gate_and_the_replicas_hold_no_key(tmp_path, monkeypatch):
    """Finding 8: what the trainer task deploys on ECS. Serve's proxy, which authenticates nothing, listens on
    127.0.0.1 only (the gate beside it in the head's task holds the Serve port); the replicas are told the gate
    checks, and get no key file."""
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({**OUTPUTS, "serve_endpoint": "http://head.x.internal:8000"}))
    launched = {}
    monkeypatch.setattr(serve, "find", lambda run_dir: ServedRun("classifier", "checkpoint_000002"))
    monkeypatch.setattr(
        serve,
        "launch",
        lambda aws, out, job, args, run_name, command: (
            launched.update(command=command) or {"task_arn": "arn:aws:ecs:us-east-1:1:task/c/t", "log_stream": "s"}
        ),
    )
    monkeypatch.setattr(serve, "follow_task", lambda *a: 0)
    started = []
    monkeypatch.setattr(serve, "bring_up", lambda aws, out, starts: started.append(starts))
    kept = []  # what a restarted head gets back (rayfleet/core/serve_kept.py; on moto: test_serve_on_local_cluster.py)
    monkeypatch.setattr(serve.kept, "keep", lambda s3, bucket, run, config: kept.append((bucket, run, config)))
    assert serve.up_ecs("clf", load_config(ServeConfig, None, []), str(path), 60) == 0
    command = launched["command"]
    config = json.loads(command[command.index("--config-json") + 1])
    assert kept == [(OUTPUTS["results_bucket"], "clf", config)]
    assert started == [{"default": 1}]  # the group's node for the replica, before the trainer deploys it
    assert config["http_options"] == {"host": "127.0.0.1", "port": GATED_PROXY_PORT}
    args = ServeArgs.model_validate(config["applications"][0]["args"])
    assert args.gated and args.api_key_file is None and args.config.port == 8000


def test_the_replicas_go_to_the_cheapest_group_whose_node_holds_one():
    groups = {
        "ddp": {"service_name": "w-ddp", "instance_types": ["g5.xlarge"], "max_nodes": 2},
        "fsdp": {"service_name": "w-fsdp", "instance_types": ["g5.12xlarge"], "max_nodes": 2},
    }
    out = Outputs.from_flat(**{k: v for k, v in OUTPUTS.items() if not k.startswith("worker_")}, worker_groups=groups)
    assert serve.serving_group(load_config(ServeConfig, None, []), out) == ("ddp", 1)
    assert serve.serving_group(load_config(ServeConfig, None, ["replicas=3", "gpus_per_replica=1"]), out) == ("ddp", 2)
    assert serve.serving_group(load_config(ServeConfig, None, ["gpus_per_replica=2", "replicas=3"]), out) == ("fsdp", 2)
    with pytest.raises(ConfigError, match="gpus_per_replica=8, but worker group fsdp's nodes"):
        serve.serving_group(
            load_config(ServeConfig, None, ["gpus_per_replica=8", "tensor_parallel_size=8", "engine=vllm"]), out
        )


def test_a_replica_needs_what_a_worker_has():
    with pytest.raises(ConfigError, match="gpus_per_replica=2, but the ECS workers"):
        serve.check_fits(load_config(ServeConfig, None, ["gpus_per_replica=2"]), 4, 1, "the ECS workers (g5.xlarge)")
    with pytest.raises(ConfigError, match="cpus_per_replica=3"):
        serve.check_fits(load_config(ServeConfig, None, ["cpus_per_replica=3"]), 2, 0, "the local workers")
    serve.check_fits(load_config(ServeConfig, None, ["gpus_per_replica=1"]), 4, 1, "the ECS workers")


def test_status_rows_name_each_replica_state_and_the_failure():
    details = {
        "applications": {
            "rayfleet": {
                "status": "DEPLOY_FAILED",
                "route_prefix": "/",
                "message": "Traceback...\nOSError: export/config.json is not valid JSON",
                "deployments": {
                    "model": {"status": "UNHEALTHY", "replicas": [{"state": "RUNNING"}, {"state": "STARTING"}]}
                },
            }
        }
    }
    shown = lines(summarize(details))
    assert shown[0] == "rayfleet  DEPLOY_FAILED  route /"
    assert shown[1] == "  model: UNHEALTHY (1 RUNNING, 1 STARTING)"
    assert shown[2] == "  OSError: export/config.json is not valid JSON"
    assert lines(summarize({})) == ["no Serve applications"]


def test_the_deploying_trainers_run_name_keeps_the_run_name_rule_for_the_longest_run_name():
    from datetime import UTC, datetime

    from rayfleet.core.run_name import valid
    from rayfleet.ops.serve import serve_run_name

    name = serve_run_name("r" * 100, datetime(2026, 12, 4, 22, 40, 1, tzinfo=UTC))
    assert valid(name) and name.startswith("serve-rrr") and name.endswith("-224001")
