"""The serve verbs' decisions before anything is deployed: what goes into Serve's config, ECS refusals."""

from __future__ import annotations

import json

import pytest

from scripts.serving import control, serve
from scripts.serving.summary import lines, summarize
from training.core.config import ConfigError, load_config
from training.serving.app import ServeArgs
from training.serving.config import ServeConfig
from training.serving.vllm_app import serving_args

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
    config = control.serve_config(args, 8123, "127.0.0.1")
    assert config["proxy_location"] == "HeadOnly" and config["http_options"] == {"host": "127.0.0.1", "port": 8123}
    (app,) = config["applications"]
    assert app["import_path"] == "training.serving.app:build" and app["args"]["folder"] == "export"
    assert ServeArgs.model_validate(app["args"]).run_dir().url == "/runs/lm"  # what the builder reads back


def test_vllm_gets_the_same_replicas_parallelism_and_key(tmp_path):
    cfg = load_config(ServeConfig, None, ["gpus_per_replica=2", "tensor_parallel_size=2", "autoscaling.max_replicas=3"])
    spec = ServeArgs(storage="s3://b/runs", run_name="lm", kind="llm", folder="export", api_key_file=None, config=cfg)
    args = serving_args(spec)
    (llm,) = args["llm_configs"]
    assert llm["model_loading_config"] == {"model_id": "lm", "model_source": {"bucket_uri": "s3://b/runs/lm/export"}}
    assert llm["engine_kwargs"]["tensor_parallel_size"] == 2
    assert llm["deployment_config"]["autoscaling_config"]["max_replicas"] == 3
    assert args["ingress_cls_config"]["ingress_cls"] == "training.serving.vllm_ingress:KeyedOpenAiIngress"


@pytest.mark.parametrize(
    ("outputs", "sets", "words"),
    [
        ({}, [], "serving is off in this deployment"),
        ({"serve_endpoint": "http://head.x.internal:8000"}, ["port=8001"], "serve_port"),
    ],
)
def test_ecs_refusals_before_anything_starts(tmp_path, monkeypatch, outputs, sets, words):
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({**OUTPUTS, **outputs}))
    cfg = load_config(ServeConfig, None, sets)
    with pytest.raises(ConfigError, match=words):
        serve.up_ecs("lm", cfg, str(path), 60)


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
