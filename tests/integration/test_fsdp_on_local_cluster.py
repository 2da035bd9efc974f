"""The FSDP2 job on a real local Ray cluster (2 CPU workers, gloo) with a tiny GPT-NeoX saved by save_pretrained;
its DeepSpeed strategy through `make train-fsdp` (the built-in recipe recipes/fsdp-tiny.yaml, Jobs API)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import yaml

from rayfleet.core.run_dir import RunDir
from rayfleet.train.metrics import read_rows
from rayfleet.train.tracking.events import read_scalars
from tests.integration.helpers import FSDP_LEARN, inspector_at, run_fsdp
from tests.integration.run_attempts import RAY_LOST_THE_CODE, check_attempts

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed"])
def test_two_workers_learn_hold_their_shard_checkpoint_and_export(fsdp_learned, tiny, strategy):
    """The session's run (stopped after step 10 and resumed to 30; DeepSpeed's through `make train-fsdp`):
    the loss falls, each rank holds its shard, sharded checkpoints (last two kept), an export equal to the
    sharded model, progress lines, TensorBoard scalars and the curves (across both invocations)."""
    learned = fsdp_learned(strategy)
    first, result, tmp_path = learned["first"], learned["result"], learned["storage"]
    assert first.returncode == 0, first.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_rows(RunDir(str(tmp_path), "learn"))
    assert [r["step"] for r in rows] == [10, 20, 30]
    assert rows[-1]["loss"] < rows[0]["loss"] * 0.7
    # Each rank holds only its shard: about half of the fp32 parameter bytes.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny["model"])
    total = sum(p.numel() * 4 for p in model.parameters())
    shards = rows[0]["param_bytes_per_rank"]
    if strategy == "fsdp":
        assert sum(shards) == total and all(abs(s - total / 2) < 0.1 * total for s in shards)
    else:  # ZeRO-3 pads every partition, a visible overhead only on a model this small
        assert all(s < 0.7 * total for s in shards) and sum(shards) >= total
    # Sharded checkpoints: one set of files per rank plus the train state, in one directory; the last two kept.
    run_dir = tmp_path / "learn"
    assert sorted(p.name for p in run_dir.glob("checkpoint_step_*")) == [
        "checkpoint_step_0000020",
        "checkpoint_step_0000030",
    ]
    last = run_dir / "checkpoint_step_0000030"
    files = {str(p.relative_to(last)) for p in last.rglob("*")}
    zero_files = {f"state/zero_pp_rank_{r}_mp_rank_00_{kind}_states.pt" for r in (0, 1) for kind in ("model", "optim")}
    per_rank = {"__0_0.distcp", "__1_0.distcp", ".metadata"} if strategy == "fsdp" else zero_files
    assert per_rank | {"train_state.json"} <= files
    # The export loads with from_pretrained and gives the sharded model's logits.
    exported = AutoModelForCausalLM.from_pretrained(run_dir / "export")
    assert AutoTokenizer.from_pretrained(run_dir / "export").eos_token == "<|endoftext|>"
    probe = torch.load(run_dir / "export" / "probe_logits.pt", weights_only=True)
    with torch.no_grad():
        logits = exported(input_ids=probe["probe"]).logits
    assert torch.allclose(logits, probe["logits"], atol=1e-5)
    both = first.stdout + result.stdout
    assert "step 30/30" in result.stdout and both.count("step 10/30 ") == 1
    # Progress lines between the logged steps (progress_every_s=0.2: on an idle host 10 steps take under 2 s),
    # from rank 0 only; TensorBoard's reader finds each logged step's scalars, across the two invocations; the
    # curves PNG.
    progress = re.findall(r"learn  step (\d+)/30  loss \S+  tok/s/device \S+  elapsed \S+  remaining \S+", both)
    assert progress and all(int(step) % 10 for step in progress), result.stdout
    assert len(progress) == len(set(progress))
    scalars = read_scalars(run_dir / "tensorboard")
    assert scalars["train/loss"] == [(r["step"], pytest.approx(r["loss"])) for r in rows]
    assert [step for step, _ in scalars["throughput/tokens_per_s"]] == [10, 20, 30]
    assert {"lr", "grad_norm", "memory/peak_gb"} <= set(scalars)
    assert (run_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_make_train_fsdp_runs_the_tiny_recipe_through_the_jobs_api(fsdp_learned, tiny):
    """`make train-fsdp ON=local` (the session's DeepSpeed run, submitted twice under one name): the built-in
    recipe recipes/fsdp-tiny.yaml, run through the Jobs API, its arguments' ${RAYFLEET_...} expanded against
    the job (the model under the launch folder, the corpus under the recipe's data, the recipe's workers as the
    job's minimum), the second submission of the name resuming the first's checkpoint; one attempt each, no
    resubmission (what only this run proves: no other test runs the shortcut or this recipe)."""
    learned = fsdp_learned("deepspeed")
    root, run = learned["storage"], learned["storage"] / "learn"
    assert learned["first"].returncode == 0, learned["first"].stdout[-3000:] + learned["first"].stderr[-3000:]
    assert learned["result"].returncode == 0, learned["result"].stdout[-3000:] + learned["result"].stderr[-3000:]
    record = json.loads((run / "run.json").read_text())
    assert record["recipe"] == "fsdp-tiny" and record["recipe_file"].endswith("recipes/fsdp-tiny.yaml")
    assert record["target"] == "local" and record["state"] == "SUCCEEDED" and record["submission"] == 2
    check_attempts(record, [("SUCCEEDED", 0)], allowing=RAY_LOST_THE_CODE)  # the second submission's
    config = yaml.safe_load((run / "config.yaml").read_text())  # the job's resolved config
    assert config["model"] == str(root / "launch" / "models" / "tiny-gpt-neox")  # ${RAYFLEET_LAUNCH_DIR}
    # ${RAYFLEET_DATA}/tiny_shakespeare.txt is not there: the generated corpus beside it, said and recorded
    assert config["data"] == str(root / "text" / "synthetic" / "generated_verse.txt")
    assert record["data"] == f"SYNTHETIC generated verse, not tiny_shakespeare ({config['data']})"
    assert f"data: SYNTHETIC generated verse, not tiny_shakespeare ({config['data']}); " in learned["first"].stdout
    assert (config["num_workers"], config["min_workers"], config["cpus_per_worker"]) == (2, 2, 1.0)
    assert (config["run_name"], config["storage"], config["strategy"]) == ("learn", str(root), "deepspeed")
    assert "${" not in (run / "config.yaml").read_text()
    # its goodput ledger across both submissions: the queue, and the two attempts' phases from rank 0
    seconds = {r["phase"]: r["seconds"] for r in record["ledger"]["phases"]}
    assert record["ledger"]["job_phases"] is True and {"phases/0", "phases/1"} <= set(record)
    assert all(seconds.get(p, 0) > 0 for p in ("run_start", "model_load", "data", "compute", "checkpoint")), seconds


def uninterrupted(cluster_env, tiny, moto_endpoint, bucket, tmp_path) -> tuple[list[dict], dict, Path]:
    """The session's FSDP run's twin, never interrupted: (its metrics rows, its export's tensors, its run
    directory). It reads its text from an s3:// object under data/ and writes its run under runs/ on a real
    moto server with IAM enforced: the ranks hold the task role's keys (cluster_env), as on ECS."""
    from safetensors.torch import load

    s3 = inspector_at(moto_endpoint, "s3")  # the test's own arranging and inspecting
    if bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:  # the session's server may hold it
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="data/text/corpus.txt", Body=Path(tiny["data"]).read_bytes())
    s3_tiny = {**tiny, "data": f"s3://{bucket}/data/text/corpus.txt"}
    # the workers learn the endpoint from the config alone (s3_endpoint_url)
    args = [*FSDP_LEARN, "strategy=fsdp", "run_name=straight", f"s3_endpoint_url={moto_endpoint}"]
    result = run_fsdp(cluster_env, s3_tiny, f"s3://{bucket}/runs", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="runs/straight/")["Contents"]}
    assert {
        "runs/straight/checkpoint_step_0000030/__0_0.distcp",
        "runs/straight/checkpoint_step_0000030/__1_0.distcp",
        "runs/straight/checkpoint_step_0000030/train_state.json",
        "runs/straight/metrics.jsonl",
        "runs/straight/export/model.safetensors",
    } <= keys
    assert not any(key.startswith("runs/straight/checkpoint_step_0000010/") for key in keys)  # keep_checkpoints=2
    body = s3.get_object(Bucket=bucket, Key="runs/straight/metrics.jsonl")["Body"].read().decode()
    rows = [json.loads(line) for line in body.splitlines() if line.strip()]
    export = s3.get_object(Bucket=bucket, Key="runs/straight/export/model.safetensors")["Body"].read()
    return rows, load(export), Path(f"s3://{bucket}/runs/straight")


def uninterrupted_deepspeed(cluster_env, tiny, tmp_path) -> tuple[list[dict], dict]:
    """The session's DeepSpeed run's twin, never interrupted, run directly: (its metrics rows, its export's
    tensors)."""
    from safetensors.torch import load_file

    result = run_fsdp(cluster_env, tiny, tmp_path, *FSDP_LEARN, "strategy=deepspeed", "run_name=straight")
    assert result.returncode == 0, result.stderr[-3000:]
    export = load_file(tmp_path / "straight" / "export" / "model.safetensors")
    return read_rows(RunDir(str(tmp_path), "straight")), export


@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed"])
def test_interrupted_and_resumed_equals_uninterrupted(
    cluster_env, fsdp_learned, tiny, moto_endpoint, rendered_bucket, tmp_path, strategy
):
    """The session's run, stopped after step 10 and resumed, equals an uninterrupted twin on the same two
    ranks: the same losses and the same exported weights (1e-5: gloo's reductions on CPU). FSDP's twin also
    proves s3:// text and s3:// sharded checkpoints (per-rank files, train state, metrics, export, the ones past
    keep_checkpoints deleted from the bucket: the DDP job's own checkpoints in S3 are the rehearsal's,
    tests/integration/test_rehearsal.py). DeepSpeed's run is `make train-fsdp` submitted twice under one name
    (ZeRO-3's per-rank partitions and optimizer state saved by the first submission, loaded by the second); that
    a tampered DeepSpeed checkpoint is refused is tests/unit/train/test_deepspeed_checkpoint.py."""
    from safetensors.torch import load_file

    learned = fsdp_learned(strategy)
    assert not learned["exported_early"]  # stopped early: nothing exported yet
    assert learned["first"].returncode == 0 and "step 10/30" in learned["first"].stdout
    assert "step 11/30" not in learned["first"].stdout  # it stopped at 10
    assert "resuming at step 11 (attempt 1)" in learned["result"].stdout
    b = read_rows(RunDir(str(learned["storage"]), "learn"))
    assert [r["step"] for r in b] == [10, 20, 30] and [r["attempt"] for r in b] == [0, 1, 1]
    if strategy == "fsdp":
        a, pa, _ = uninterrupted(cluster_env, tiny, moto_endpoint, rendered_bucket, tmp_path)
    else:
        a, pa = uninterrupted_deepspeed(cluster_env, tiny, tmp_path)
    assert [r["attempt"] for r in a] == [0, 0, 0]
    for x, y in zip(a, b, strict=True):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5, abs=1e-6)
    pb = load_file(learned["storage"] / "learn" / "export" / "model.safetensors")
    assert pa.keys() == pb.keys()
    assert max((pa[k] - pb[k]).abs().max().item() for k in pa) < 1e-5
