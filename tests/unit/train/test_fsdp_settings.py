"""The FSDP job's GPU settings exercised on the CPU, one at a time, through its own strategy and export check
(FSDPStrategy, hf_export.write_and_verify): bf16 compute with fp32 reduction over two gloo ranks, and compiled
blocks (fp32: torch 2.14.1's CPU inductor emits C++ that does not compile for the bf16 backward of a GPT-NeoX
block called without a KV cache, "conflicting declaration at_BFloat16_tmp_acc0_vec"; on CUDA the combination
runs and is the fastest, bench/RESULTS.md). Each is checked in what the steps ran (the dtypes a block computed
in, Dynamo's and Inductor's counters), not in the setting: a setting silently not applied fails it. Plain
processes, no Ray: what the local cluster adds (the Ray Train loop, checkpoints, resume, the recipe through the
Jobs API) is tests/integration/test_fsdp_on_local_cluster.py and the DDP recipe's runs; these two once had a
cluster run each, two minutes of the CI's longest lane."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.unit.recipes.helpers import REPO
from tools import tiny_lm

# One rank: six steps on one batch (the loss must fall), then the job's export and its check (rank 0). What the
# steps really ran is recorded, not only the settings: the dtypes a block's first Linear saw in every forward
# (a hook; not under compile, whose graphs a hook would change), the dtypes of the sharded parameters and of
# their gradients, and Dynamo's and Inductor's counters (frames compiled, graphs, kernels generated).
RANK = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import torch, torch.distributed as dist
    import torch._dynamo.utils as dynamo_utils
    import torch._inductor.metrics as inductor_metrics
    from transformers import AutoTokenizer
    from rayfleet.core.config import load_config
    from rayfleet.core.run_dir import RunDir
    from rayfleet.train.fsdp.config import FSDPConfig
    from rayfleet.train.fsdp.strategy import FSDPStrategy
    from rayfleet.train.checkpoint.hf_export import write_and_verify
    from rayfleet.train.models.hf import transformer_blocks

    root, rank, world, settings = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    dist.init_process_group("gloo", init_method=f"file://{root}/pg", rank=rank, world_size=world)
    model = root / "model"
    cfg = load_config(FSDPConfig, "rayfleet/train/configs/fsdp-tiny.yaml",
                      [f"model={model}", f"data={model}", "grad_accum=1", f"num_workers={world}",
                       "async_checkpoint=false", *settings])
    torch.manual_seed(0)
    s = FSDPStrategy(cfg, model, torch.device("cpu"), rank=rank)
    computed, grads = set(), set()
    if not cfg.compile:
        linear = next(m for m in transformer_blocks(s.model)[0].modules() if isinstance(m, torch.nn.Linear))
        linear.register_forward_hook(
            lambda m, args, out: computed.add((str(m.weight.dtype), str(args[0].dtype), str(out.dtype))))
    batch = torch.randint(0, s.config.vocab_size, (2, 32), generator=torch.Generator().manual_seed(rank))
    losses = []
    for _ in range(6):
        losses.append(float(s.micro_step(batch)))
        grads |= {str(p.grad.dtype) for p in s.model.parameters()}
        s.step()
    ran = {"computed": sorted(computed), "params": sorted({str(p.dtype) for p in s.model.parameters()}),
           "grads": sorted(grads), "frames_compiled": dynamo_utils.counters["frames"]["ok"],
           "graphs": dynamo_utils.counters["stats"]["unique_graphs"],
           "kernels": inductor_metrics.generated_kernel_count}
    full, logits = s.gather_for_export(batch[:1])
    if rank == 0:
        tokenizer = AutoTokenizer.from_pretrained(model)
        result = write_and_verify(full, logits, batch[:1], tokenizer, model, RunDir(str(root), "run"), s.bf16)
        print("RESULT " + json.dumps({"losses": losses, "bf16": s.bf16, "ran": ran, **result}))
    dist.barrier()
    dist.destroy_process_group()
""")


@pytest.mark.parametrize(
    ("settings", "world", "bf16"),
    [(["precision=bf16", "compile=false"], 2, True), (["precision=fp32", "compile=true"], 1, False)],
    ids=["bf16-two-ranks", "compiled-blocks"],
)
def test_the_setting_trains_and_its_export_passes_the_jobs_check(tmp_path, settings, world, bf16):
    tiny_lm.build(tmp_path / "model", tiny_lm.corpus(400))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-c", RANK, str(tmp_path)]
    procs = [
        subprocess.Popen([*argv, str(r), str(world), *settings], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
        for r in range(world)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * world, outputs
    line = next(line for line in outputs[0].splitlines() if line.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert result["bf16"] is bf16
    ran = result["ran"]
    # fp32 master weights and gradients (FSDP2's shards) either way; bf16 compute only where asked for.
    assert ran["params"] == ran["grads"] == ["torch.float32"], ran
    if bf16:  # the block's Linear ran on bf16 weights (gathered by FSDP2's policy) and bf16 activations
        assert ran["computed"] == [["torch.bfloat16"] * 3], ran
        assert ran["frames_compiled"] == ran["graphs"] == ran["kernels"] == 0, ran  # nothing compiled
    else:  # the compiled blocks ran: Dynamo compiled frames into graphs, Inductor generated their kernels
        assert ran["frames_compiled"] > 0 and ran["graphs"] > 0 and ran["kernels"] > 0, ran
    assert result["losses"][-1] < result["losses"][0] * 0.9, result["losses"]  # it learns the batch
    # The export check passed (write_and_verify raises, and the rank exits 1, when the reloaded export's logits
    # leave the tolerance of the setting: 16-bit's with bf16 compute, fp32's otherwise), and it was written.
    assert (tmp_path / "run" / "export" / "model.safetensors").is_file()
