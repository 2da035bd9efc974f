"""A DeepSpeed save and resume through DeepSpeedStrategy, in a process of its own (DeepSpeed's process group,
ZeRO-3 hooks and transformers' DeepSpeed config are process-wide): test_deepspeed_checkpoint.py runs it.

    python -m tests.unit.train.deepspeed_resume ROOT PRECISION CASE...

One rank on the CPU (gloo) trains a tiny GPT-NeoX one step, saves through the strategy's own save (the job's
Ray Train report into a run folder through Ray's worker-API seam), then for each case resumes a fresh
strategy from a copy of that checkpoint: `clean` as written, the others with one file tampered (`PWNED`
names the marker file a payload would create); `incomplete` resumes through the real checkpoint.latest.
Prints one JSON line: per case, what loaded or the refusal, and every torch.load call.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist

from rayfleet.core.config import load_config
from rayfleet.train import checkpoint
from rayfleet.train.fsdp.config import FSDPConfig
from tools import tiny_lm

MODEL_STATES = "zero_pp_rank_0_mp_rank_00_model_states.pt"
OPTIM_STATES = "zero_pp_rank_0_mp_rank_00_optim_states.pt"  # with a bf16_ prefix when the run is bf16


class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ['PWNED']}",))


def dotted_payload(command: str) -> bytes:
    """`os.system(command)` reached from an allow-listed class's module by a dotted name (pickle protocol 4
    walks `torch.serialization.os.system` attribute by attribute from deepspeed.runtime.fp16.loss_scaler)."""

    def text(value: str) -> bytes:
        data = value.encode()
        return b"\x8c" + bytes([len(data)]) + data  # SHORT_BINUNICODE

    module, name = "deepspeed.runtime.fp16.loss_scaler", "torch.serialization.os.system"
    return b"\x80\x04" + text(module) + text(name) + b"\x93" + text(command) + b"\x85R."  # ... TUPLE1 REDUCE STOP


def plant(directory: Path, case: str) -> None:
    files = {p.name.removeprefix("bf16_"): p for p in (directory / "state").glob("*.pt")}
    if case == "dotted":
        files[OPTIM_STATES].write_bytes(dotted_payload(f"touch {os.environ['PWNED']}"))
        return
    target = files[{"model_states": MODEL_STATES, "optim_states": OPTIM_STATES}[case]]
    state = torch.load(target, weights_only=False)  # the test's own file, written a moment ago
    torch.save({**state, "planted": Payload()}, target)  # a checkpoint that looks whole, plus one object


def snapshot(strategy) -> dict:
    optimizer = strategy.engine.optimizer
    adam = [v for state in optimizer.optimizer.state.values() for _, v in sorted(state.items())]
    return {
        "params": [p.ds_tensor.detach().clone() for p in strategy.engine.module.parameters()],
        "fp32": [t.detach().clone() for t in optimizer.fp32_partitioned_groups_flat],
        "adam": [v.clone() if isinstance(v, torch.Tensor) else torch.tensor(v) for v in adam],
    }


def equal(a: dict, b: dict) -> dict:
    return {key: len(a[key]) == len(b[key]) and all(map(torch.equal, a[key], b[key])) for key in a}


def main(root: Path, precision: str, cases: list[str]) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("gloo")
    tiny_lm.build(root / "model", tiny_lm.corpus(400))
    overrides = [f"model={root / 'model'}", f"data={root / 'corpus.txt'}", "strategy=deepspeed"]
    overrides += [f"precision={precision}", "micro_batch_size=2", "grad_accum=1"]
    cfg = load_config(FSDPConfig, "rayfleet/train/configs/fsdp-tiny.yaml", overrides)

    from rayfleet.train.fsdp.deepspeed import DeepSpeedStrategy

    def strategy():
        return DeepSpeedStrategy(cfg, root / "model", torch.device("cpu"), rank=0)

    from tests.unit.train.ray_storage_seam import RunStorage, installed

    saving = RunStorage(root / "saved")  # the job's own report, sealed, into a run folder (Ray's worker-API seam)
    saved = saving.folder(checkpoint.step_checkpoint_name(1))
    resume_from = saved

    @contextmanager
    def latest(required=()):
        yield resume_from

    real_latest = checkpoint.latest
    checkpoint.latest = latest  # the Ray Train session the job would have: resume from `resume_from`

    trained = strategy()
    torch.manual_seed(0)
    batch = torch.randint(0, trained.config.vocab_size, (2, 16))
    trained.micro_step(batch)
    with installed(saving):
        trained.save(1, {"attempt": 0, "seed": cfg.seed, "strategy": "deepspeed"}, {"step": 1})
    before = snapshot(trained)
    steps = trained.engine.global_steps

    loads = []
    real_load = torch.load

    def spy(*args, **kwargs):
        loads.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    results = {}
    if "incomplete" in cases:
        results["incomplete"] = incomplete(root, saved, strategy, real_latest)
    for case in (c for c in cases if c != "incomplete"):
        resume_from = root / f"resume-{case}"
        shutil.copytree(saved, resume_from)
        os.environ["PWNED"] = str(root / f"pwned-{case}")
        if case != "clean":
            plant(resume_from, case)
        resumed = strategy()
        fresh = snapshot(resumed)
        loads.clear()
        torch.load = spy
        try:
            train_state = resumed.load()
        except Exception as exc:
            results[case] = {"error": str(exc), "traceback": "".join(traceback.format_exception(exc))}
        else:
            after = snapshot(resumed)
            results[case] = {
                "equal": equal(before, after),
                "fresh_equal": equal(before, fresh),
                "steps": [steps, resumed.engine.global_steps],
                "train_state": train_state,
            }
        finally:
            torch.load = real_load
        results[case]["weights_only"] = list(loads)
    return results


def incomplete(root: Path, saved: Path, strategy, real_latest) -> dict:
    """The job's real resume (checkpoint.latest through Ray's worker-API seam, ray_storage_seam.py) with two kept
    checkpoints: step 1 as saved, then "step 2", a copy of it whose rank-0 optimizer partition is gone. What
    loaded, and what rank 0 printed."""
    import contextlib
    import io

    from tests.unit.train.ray_storage_seam import RunStorage, installed

    session = RunStorage(root / "storage")
    for step in (1, 2):
        shutil.copytree(saved, session.folder(checkpoint.step_checkpoint_name(step)))
        session.register(checkpoint.step_checkpoint_name(step))
    next(session.folder(checkpoint.step_checkpoint_name(2)).glob(f"state/*{OPTIM_STATES}")).unlink()
    resumed, printed = strategy(), io.StringIO()
    double, checkpoint.latest = checkpoint.latest, real_latest
    try:
        with installed(session), contextlib.redirect_stdout(printed):
            return {"train_state": resumed.load(), "printed": printed.getvalue()}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "printed": printed.getvalue()}
    finally:
        checkpoint.latest = double


if __name__ == "__main__":
    out = main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
    print("RESULT " + json.dumps(out))
