"""`make serve` on a real local Ray cluster: a short FSDP run's export as OpenAI completions, a DDP run as a
classifier, the API key, clear refusals, and serve-down leaving nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from rayfleet.core import serve_kept as kept
from rayfleet.core.run_dir import RunDir
from rayfleet.serve.config import GATED_PROXY_PORT
from rayfleet.train.data import fashion_mnist
from rayfleet.train.metrics import read_rows
from tests.integration.helpers import DASHBOARD_PORT, REPO, Lines, free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def runs(fsdp_learned, ddp_basic) -> dict:
    """The session's FSDP run "learn" (with its export) and DDP run "basic": their storage roots."""
    fsdp = fsdp_learned("fsdp")
    assert fsdp["result"].returncode == 0, fsdp["result"].stderr[-3000:]
    assert ddp_basic["result"].returncode == 0, ddp_basic["result"].stderr[-3000:]
    return {"lm": fsdp["storage"], "clf": ddp_basic["storage"]}


@pytest.fixture(scope="module")
def port() -> int:
    return free_port()


def serve(env, *args, timeout=600, target="local") -> subprocess.CompletedProcess:
    """`rayfleet serve ARGS --on TARGET`."""
    return subprocess.run(
        [sys.executable, "-m", "rayfleet.cli.main", "serve", *args, "--on", target],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def key_of(env) -> str:
    return (Path(env["RAYFLEET_STATE_DIR"]) / "serve" / "api_key").read_text().strip()


def post(port: int, path: str, body: dict, key: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def greedy(model, tokenizer, prompt: str, tokens: int) -> list[int]:
    """What `from_pretrained(...).generate` gives greedily, up to the end-of-text token."""
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=tokens,
        do_sample=False,
        pad_token_id=tokenizer.eos_token_id,
    )[0, ids.shape[1] :].tolist()
    eos = tokenizer.eos_token_id
    return out[: out.index(eos)] if eos in out else out


def test_the_export_answers_completions_equal_to_generate(cluster_env, runs, port):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    up = serve(cluster_env, "up", "--run", "learn", "--runs-dir", str(runs["lm"]), "--set", f"port={port}")
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-3000:]
    assert "RUNNING" in up.stdout and f"http://127.0.0.1:{port}/v1/completions" in up.stdout
    key = key_of(cluster_env)
    export = runs["lm"] / "learn" / "export"
    tokenizer = AutoTokenizer.from_pretrained(export)
    model = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32)
    for prompt in ("The noble king", "JULIET:\nThe gentle"):
        request = {"prompt": prompt, "max_tokens": 10, "temperature": 0, "return_token_ids": True}
        status, body = post(port, "/v1/completions", request, key)
        assert status == 200, body
        assert body["choices"][0]["token_ids"] == greedy(model, tokenizer, prompt, 10)
    assert post(port, "/v1/completions", {"prompt": "The king"}, None)[0] == 401
    assert post(port, "/v1/completions", {"prompt": "The king"}, key + "x")[0] == 401
    status, body = post(port, "/v1/completions", {"prompt": "The king " * 300, "max_tokens": 4}, key)
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"
    assert post(port, "/v1/completions", {"prompt": "The king", "max_tokens": 2}, key)[0] == 200  # still serving
    shown = serve(cluster_env, "status")
    assert shown.returncode == 0 and "rayfleet  RUNNING" in shown.stdout and "1 RUNNING" in shown.stdout, shown.stdout


def test_a_ddp_run_classifies_the_test_images_as_its_evaluation_did(cluster_env, runs, port, small_dataset):
    up = serve(cluster_env, "up", "--run", "basic", "--runs-dir", str(runs["clf"]), "--set", f"port={port}")
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-3000:]
    test = fashion_mnist.load(small_dataset, train=False)
    correct = 0
    for rank in (0, 1):  # the images each of the job's two ranks evaluated, as one batch each (as it did)
        images, labels = test.images[rank::2], test.labels[rank::2]
        status, body = post(port, "/v1/classify", {"images": images.tolist()}, key_of(cluster_env))
        assert status == 200, body
        correct += (torch.tensor([p["label"] for p in body["predictions"]]) == labels).sum().item()
    accuracy = correct / len(test)
    recorded = read_rows(RunDir(str(runs["clf"]), "basic"))[-1]
    assert recorded["test_images"] == len(test) == 600
    assert accuracy == pytest.approx(recorded["test_accuracy"], abs=1e-9), (accuracy, recorded["test_accuracy"])


def test_what_cannot_be_served_is_refused_in_one_line(cluster_env, runs, tmp_path, port):
    (tmp_path / "empty-run").mkdir()
    (tmp_path / "empty-run" / "metrics.jsonl").write_text("{}\n")
    cases = [
        (["up", "--run", "nope", "--runs-dir", str(runs["lm"])], "no run at"),
        (["up", "--run", "empty-run", "--runs-dir", str(tmp_path)], "nothing to serve"),
        (
            ["up", "--run", "learn", "--runs-dir", str(runs["lm"]), "--set", "gpus_per_replica=1"],
            "gpus_per_replica=1, but the local workers have 0 GPUs",
        ),
        (["up", "--run", "learn", "--runs-dir", str(runs["lm"]), "--set", "replica=2"], "replica: unknown key"),
    ]
    for args, words in cases:
        result = serve(cluster_env, *args)
        assert result.returncode == 2 and words in result.stderr, (args, result.stderr)
    broken = tmp_path / "broken"
    (broken / "export").mkdir(parents=True)
    (broken / "export" / "config.json").write_text("{not json")
    failed = serve(
        cluster_env, "up", "--run", "broken", "--runs-dir", str(tmp_path), "--set", f"port={port}", timeout=300
    )
    assert failed.returncode == 1 and "the application failed to start" in failed.stderr, (
        failed.stdout[-2000:] + failed.stderr
    )


def upload(s3, bucket: str, folder: Path, prefix: str) -> None:
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        s3.upload_file(str(file), bucket, f"{prefix}/{file.relative_to(folder).as_posix()}")


def test_a_run_in_s3_is_downloaded_by_the_replica_and_served(cluster_env, runs, port, aws_stack):
    """The replica reads the run as the task role (the cluster's keys), from the deployment's bucket."""
    s3, bucket = aws_stack["server"].client("s3"), aws_stack["outputs"]["results_bucket"]
    upload(s3, bucket, runs["lm"] / "learn" / "export", "runs/lm-in-s3/export")
    up = serve(cluster_env, "up", "--run", "lm-in-s3", "--runs-dir", f"s3://{bucket}/runs", "--set", f"port={port}")
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-3000:]
    assert f"from s3://{bucket}/runs/lm-in-s3/export" in up.stdout
    status, body = post(
        port, "/v1/completions", {"prompt": "The king", "max_tokens": 4, "temperature": 0}, key_of(cluster_env)
    )
    assert status == 200 and body["model"] == "lm-in-s3", body


def test_on_ecs_a_trainer_task_deploys_the_s3_run_with_the_key_from_secrets_manager(aws_stack, runs, tmp_path):
    """The ECS path up to the cluster: the verb checks the S3 run and the worker type, then RunTask's overrides
    carry Serve's config (storage s3://, the deployment's region, no key and no key file: the workers have it
    from Secrets Manager; Serve's proxy on 127.0.0.1, behind the gate that holds the deployment's Serve port)
    and the verb follows the task; then the config is kept in the deployment's bucket, and `serve down`
    (through a task as well) removes it."""
    outputs = json.loads(Path(aws_stack["outputs"]["outputs_file"]).read_text())
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/serve-api-key-Ab12"
    outputs |= {
        "serve_endpoint": {"value": "http://head.rayfleet.internal:8000"},
        "serve_api_key_secret_arn": {"value": secret},
    }
    outputs_file = tmp_path / "outputs.json"
    outputs_file.write_text(json.dumps(outputs))
    env = {**aws_stack["env"], "RAYFLEET_OUTPUTS": str(outputs_file)}
    server, bucket = aws_stack["server"], aws_stack["outputs"]["results_bucket"]
    s3, ecs = server.client("s3"), server.client("ecs")
    latest = sorted((runs["clf"] / "basic").glob("checkpoint_0*"))[-1]
    upload(s3, bucket, latest, f"runs/clf-ecs/{latest.name}")
    config = (runs["clf"] / "basic" / "config.yaml").read_bytes()
    s3.put_object(Bucket=bucket, Key="runs/clf-ecs/config.yaml", Body=config)
    refused = serve(env, "up", "--run", "clf-ecs", "--set", "gpus_per_replica=2", target="ecs")
    assert (
        refused.returncode == 2
        and "gpus_per_replica=2, but worker group default's nodes (g5.xlarge) have 1 GPUs" in refused.stderr
    )
    began = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rayfleet.cli.main", "serve", "up", "--run", "clf-ecs", "--on", "ecs"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    output, progress = Lines(proc.stdout), Lines(proc.stderr)
    try:
        deadline = time.monotonic() + 90
        while not (listed := s3.list_objects_v2(Bucket=bucket, Prefix="runs/serve-clf-ecs-").get("Contents")):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(progress.lines)
            time.sleep(0.3)
        record = json.loads(s3.get_object(Bucket=bucket, Key=listed[0]["Key"])["Body"].read())
        cluster = aws_stack["outputs"]["cluster_name"]
        task = ecs.describe_tasks(cluster=cluster, tasks=[record["task_arn"]])["tasks"][0]
        command = task["overrides"]["containerOverrides"][0]["command"]
        assert command[:4] == ["python", "-m", "rayfleet.node.serve.control", "up"]
        config = json.loads(command[command.index("--config-json") + 1])
        # Serve's proxy on loopback, behind the serve gate that holds the Serve port (8000) in the head's task
        assert config["http_options"] == {"host": "127.0.0.1", "port": GATED_PROXY_PORT}
        assert config["proxy_location"] == "HeadOnly"
        args = config["applications"][0]["args"]
        assert (args["storage"], args["run_name"], args["kind"], args["folder"]) == (
            f"s3://{bucket}/runs",
            "clf-ecs",
            "classifier",
            latest.name,
        )
        assert args["api_key_file"] is None and args["gated"] and args["region"] == aws_stack["outputs"]["region"]
        progress.wait_for("[rayfleet] trainer task is RUNNING", timeout=60)  # a poll saw it running
        ecs.stop_task(cluster=cluster, task=record["task_arn"], reason="deployed")
        assert proc.wait(timeout=60) == 0, progress.text()
        out = output.text()
    finally:
        proc.kill()
    ended = time.time()
    assert "serving at http://head.rayfleet.internal:8000" in out and f"--secret-id {secret}" in out
    # kept with the deployment, as deployed: a head that starts again gets it back (rayfleet/core/serve_kept.py)
    found = kept.kept(s3, bucket)
    assert found == {"run": "clf-ecs", "config": config, "kept_at": found["kept_at"]}
    assert began <= found["kept_at"] <= ended  # kept by this `serve up`, not left from before
    down = subprocess.Popen(
        [sys.executable, "-m", "rayfleet.cli.main", "serve", "down", "--on", "ecs"],
        env=env,
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    progress = Lines(down.stderr)
    try:
        deadline = time.monotonic() + 90
        while not (listed := s3.list_objects_v2(Bucket=bucket, Prefix="runs/serve-down-").get("Contents")):
            assert time.monotonic() < deadline and down.poll() is None, "".join(progress.lines)
            time.sleep(0.3)
        record = json.loads(s3.get_object(Bucket=bucket, Key=listed[0]["Key"])["Body"].read())
        progress.wait_for("[rayfleet] trainer task is RUNNING", timeout=60)  # a poll saw it running
        ecs.stop_task(cluster=cluster, task=record["task_arn"], reason="shut down")
        assert down.wait(timeout=60) == 0, progress.text()
    finally:
        down.kill()
    assert kept.kept(s3, bucket) is None  # served no more: no head gets it back, autostop may stop the cluster


def test_serve_down_leaves_no_serve_actor_and_no_listener(cluster_env, port):
    down = serve(cluster_env, "down")
    assert down.returncode == 0, down.stderr
    listed = subprocess.run(
        [
            str(Path(sys.executable).parent / "ray"),
            "list",
            "actors",
            "--address",
            f"http://127.0.0.1:{DASHBOARD_PORT}",
            "--filter",
            "state=ALIVE",
            "--format",
            "json",
            "--limit",
            "1000",
        ],
        env=cluster_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    alive = [a["class_name"] for a in json.loads(listed.stdout)]
    assert not [name for name in alive if "Serve" in name or "Proxy" in name or "Endpoint" in name], alive
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
    assert "no Serve applications" in serve(cluster_env, "status").stdout
