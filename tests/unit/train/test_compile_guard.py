"""A torch.compile failure is recorded and the next attempt trains without compile
(rayfleet/train/control/compile_guard.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rayfleet.core.config import load_config
from rayfleet.core.run_dir import RunDir
from rayfleet.train import ddp
from rayfleet.train.control import compile_guard
from rayfleet.train.ddp.config import DDPConfig


def _raise_from(filename: str, exc: BaseException):
    """`exc` raised from code whose file is `filename`, as Inductor's generated modules raise theirs."""
    code = compile("def boom(exc):\n    raise exc\n", filename, "exec")
    namespace: dict = {}
    exec(code, namespace)  # a fixed two-line function, run to give its frame that file name
    try:
        namespace["boom"](exc)
    except BaseException as raised:
        return raised


def test_errors_from_the_compiler_and_its_generated_code_are_compile_errors():
    def failing_backend(graph_module, example_inputs):
        raise RuntimeError("backend exploded")

    with pytest.raises(Exception) as info:
        torch.compile(lambda x: x * 2, backend=failing_backend)(torch.ones(2))
    assert compile_guard.caused_by(
        compile_guard.COMPILE, info.value
    )  # Dynamo's BackendCompilerFailed (torch._dynamo.exc)

    generated = _raise_from("/tmp/torchinductor_root/ab/cabc123.py", AssertionError("expected size 512==512"))
    assert compile_guard.caused_by(compile_guard.COMPILE, generated)
    wrapped = RuntimeError("step failed")
    wrapped.__cause__ = generated
    assert compile_guard.caused_by(compile_guard.COMPILE, wrapped)


def test_errors_of_the_model_or_data_are_not_compile_errors():
    def model_bug(x):
        raise ValueError("shape mismatch in user code")

    with pytest.raises(ValueError) as info:
        torch.compile(model_bug, backend="eager")(torch.ones(2))
    assert not compile_guard.caused_by(
        compile_guard.COMPILE, info.value
    )  # raised by user code, though run through Dynamo
    assert not compile_guard.caused_by(
        compile_guard.COMPILE, _raise_from("/work/job.py", RuntimeError("CUDA out of memory"))
    )


def _loop_config(tmp_path, *overrides):
    from rayfleet.train.data import synthetic

    synthetic.generate(tmp_path / "data", train=64, test=16)
    cfg = load_config(DDPConfig, None, [f"data_dir={tmp_path / 'data'}", f"storage={tmp_path / 'runs'}", *overrides])
    return {"config": cfg, "run_name": "r1"}


def test_a_compile_failure_is_recorded_and_the_next_attempt_runs_without_compile(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ddp.ray.train, "get_context", lambda: SimpleNamespace(get_world_rank=lambda: 0))
    attempts = []

    def train(loop_config, cfg, run_dir):
        attempts.append(cfg.compile)
        if cfg.compile:
            raise _raise_from("/tmp/torchinductor_u/x.py", AssertionError("expected size 512==512, stride 1==4608"))

    monkeypatch.setattr(ddp, "_train", train)
    loop_config = _loop_config(tmp_path, "compile=true")
    with pytest.raises(AssertionError):
        ddp.train_loop(loop_config)  # attempt 1: fails, recorded
    record = RunDir(str(tmp_path / "runs"), "r1").read(compile_guard.COMPILE.record)
    assert "AssertionError on rank 0: expected size 512==512" in record
    ddp.train_loop(loop_config)  # attempt 2 (a Ray Train retry): the same config, compile now off
    assert attempts == [True, False]
    assert "torch.compile failed in an earlier attempt" in capsys.readouterr().out


def test_other_failures_leave_compile_on(tmp_path, monkeypatch):
    monkeypatch.setattr(ddp.ray.train, "get_context", lambda: SimpleNamespace(get_world_rank=lambda: 0))
    monkeypatch.setattr(ddp, "_train", lambda *a: (_ for _ in ()).throw(RuntimeError("NCCL timeout")))
    with pytest.raises(RuntimeError):
        ddp.train_loop(_loop_config(tmp_path, "compile=true"))
    assert RunDir(str(tmp_path / "runs"), "r1").read(compile_guard.COMPILE.record) is None


def _capture_error():
    """What a failed capture raises: CUDA's error, noticed at capture_end in torch/cuda/graphs.py."""
    return _raise_from(
        "/usr/lib/python3/site-packages/torch/cuda/graphs.py",
        RuntimeError("CUDA error: operation failed due to a previous error during capture"),
    )


def test_a_failed_step_capture_is_recorded_and_the_next_attempt_runs_eagerly(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ddp.ray.train, "get_context", lambda: SimpleNamespace(get_world_rank=lambda: 0))
    attempts = []

    def train(loop_config, cfg, run_dir):
        attempts.append((cfg.compile, cfg.cuda_graph))
        if cfg.cuda_graph is not False:
            raise _capture_error()

    monkeypatch.setattr(ddp, "_train", train)
    loop_config = _loop_config(tmp_path)
    with pytest.raises(RuntimeError):
        ddp.train_loop(loop_config)
    runs = RunDir(str(tmp_path / "runs"), "r1")
    assert "during capture" in runs.read(compile_guard.CUDA_GRAPH.record)
    assert runs.read(compile_guard.COMPILE.record) is None  # not compile's: compile was off
    ddp.train_loop(loop_config)
    assert attempts == [(False, "auto"), (False, False)]
    assert "the whole-step CUDA graph failed in an earlier attempt" in capsys.readouterr().out


def test_a_capture_error_under_reduce_overhead_is_compiles(tmp_path, monkeypatch):
    """With compile_mode=reduce-overhead the graphs are compile's own: turning the step graph off would not help."""
    monkeypatch.setattr(ddp.ray.train, "get_context", lambda: SimpleNamespace(get_world_rank=lambda: 0))
    monkeypatch.setattr(ddp, "_train", lambda *a: (_ for _ in ()).throw(_capture_error()))
    with pytest.raises(RuntimeError):
        ddp.train_loop(_loop_config(tmp_path, "compile=true", "compile_mode=reduce-overhead"))
    runs = RunDir(str(tmp_path / "runs"), "r1")
    assert runs.read(compile_guard.COMPILE.record) and runs.read(compile_guard.CUDA_GRAPH.record) is None
