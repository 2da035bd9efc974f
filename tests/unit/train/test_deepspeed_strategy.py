"""DeepSpeedStrategy keeps FSDPStrategy's interface: the loss and the grad norm stay on the device, its
checkpoints are synchronous, and the export forward runs without a KV cache (a stand-in engine: no ZeRO-3)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from rayfleet.train.fsdp.deepspeed import DeepSpeedStrategy


class Engine:
    """Records every forward's keyword arguments."""

    def __init__(self):
        self.forwards = []

    def __call__(self, **kwargs):
        self.forwards.append(kwargs)
        logits = torch.zeros(1, 4, 8, requires_grad=True)
        return SimpleNamespace(logits=logits, loss=logits.sum() + 2.0)

    def backward(self, loss):
        loss.backward()

    def step(self):
        pass

    def get_global_grad_norm(self):
        return torch.tensor(0.25)

    def eval(self):
        pass

    def train(self):
        pass

    def _zero3_consolidated_16bit_state_dict(self):
        return {"w": torch.zeros(1)}


def strategy() -> DeepSpeedStrategy:
    s = DeepSpeedStrategy.__new__(DeepSpeedStrategy)  # the engine replaced: no DeepSpeed initialization
    s.engine, s.rank = Engine(), 0
    return s


def test_the_loss_and_the_grad_norm_stay_on_the_device(monkeypatch):
    s = strategy()
    reads = []
    monkeypatch.setattr(torch.Tensor, "item", lambda self: reads.append("item"))
    monkeypatch.setattr(torch.Tensor, "__float__", lambda self: reads.append("float"))
    loss, norm = s.micro_step(torch.zeros(1, 4, dtype=torch.long)), s.step()
    assert reads == []
    monkeypatch.undo()
    assert isinstance(loss, torch.Tensor) and not loss.requires_grad and loss.item() == 2.0
    assert isinstance(norm, torch.Tensor) and norm.item() == 0.25
    assert s.engine.forwards[0]["use_cache"] is False
    assert s.finish_checkpoint() == {} and s.finish_checkpoint(wait=False) == {}


def test_the_export_forward_runs_without_a_kv_cache():
    s = strategy()
    full, logits = s.gather_for_export(torch.zeros(1, 4, dtype=torch.long))
    assert [kwargs.get("use_cache", "unset") for kwargs in s.engine.forwards] == [False]
    assert "w" in full and logits.dtype == torch.float32
