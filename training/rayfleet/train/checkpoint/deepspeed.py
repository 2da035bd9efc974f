"""DeepSpeed's checkpoint files, read back without arbitrary unpickling.

A resume reads every file through the engine's checkpoint engine: the model states (SDLoaderFactory) and
each rank's ZeRO optimizer partition. DeepSpeed's own TorchCheckpointEngine loads them with
`torch.load(weights_only=False)`, so whoever can write the run's storage would get code execution on every
rank. WeightsOnlyCheckpointEngine loads them with torch's weights-only unpickler instead, which admits
tensors and plain containers, and for this load only the two DeepSpeed objects a ZeRO optimizer partition
holds. Saving stays DeepSpeed's own. Imported only where DeepSpeed runs (it is optional).
"""

from __future__ import annotations

import pickle

import torch
from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine
from deepspeed.runtime.fp16.loss_scaler import LossScaler
from deepspeed.runtime.zero.config import ZeroStageEnum

# What torch.serialization.get_unsafe_globals_in_checkpoint finds in the files the jobs write (ZeRO-3, fp32 or
# bf16): the stage (an enum) and the static loss scaler (a float and a flag). Exact classes, matched by their
# full name, so no other name of their modules passes. fp16's DynamicLossScaler is left out: no job uses fp16.
CHECKPOINT_GLOBALS = (LossScaler, ZeroStageEnum)


class WeightsOnlyCheckpointEngine(TorchCheckpointEngine):
    def load(self, path: str, map_location=None):
        try:
            # Scoped: the allow-list is torch's process-wide one only while this file is read.
            with torch.serialization.safe_globals(list(CHECKPOINT_GLOBALS)):
                return torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as err:
            raise pickle.UnpicklingError(
                f"{path} holds more than DeepSpeed checkpoint data; refused, nothing in it ran"
            ) from err


def use_weights_only_loads(engine) -> None:
    """Make a DeepSpeedEngine read its checkpoints through WeightsOnlyCheckpointEngine.

    The jobs' DeepSpeed config names no checkpoint writer, so DeepSpeed made a TorchCheckpointEngine; anything
    else would mean the config changed and its loads need their own look, so that is an error, not a swap."""
    if type(engine.checkpoint_engine) is not TorchCheckpointEngine:
        raise TypeError(f"expected DeepSpeed's TorchCheckpointEngine, got {type(engine.checkpoint_engine).__name__}")
    engine.checkpoint_engine = WeightsOnlyCheckpointEngine(engine._config)
