"""Hugging Face Trainer, nothing from rayfleet: torchrun's environment in, files under RAYFLEET_RUN_DIR out.

    torchrun --nproc-per-node 2 train.py --model DIR --text FILE      # by hand
    launcher: torchrun                                              # the same script from a recipe, across worker nodes

Fine-tunes a causal LM (a Hub-style directory: save_pretrained weights and tokenizer, such as the tiny
GPT-NeoX of `python -m tools.tiny_lm`) on a text file cut into fixed-length blocks, for --max-steps steps.
The Trainer sets up the process group itself from torchrun's variables (gloo on CPU). Every process writes
what it saw, with the logged losses, to ranks/rank-<R>.json. --fail-rank R --fail-at-step S raises on that
rank to show how a failure ends a run.

Preemption (SaveOnPreemptNotice): when a node of the run is about to go, rayfleet writes the file named by
RAYFLEET_PREEMPT_FILE and sends SIGUSR1 to every rank that catches it. The callback has the Trainer save a
checkpoint at that step and stop; the run launched again on the nodes that are left resumes from it
(`resume_from_checkpoint`), copied from and to the run directory when that is s3://.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import tempfile

import torch
from pyarrow import fs
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint


def storage(path: str):
    """(filesystem, path) for a local directory or s3://bucket/prefix."""
    if "://" in path:
        return fs.FileSystem.from_uri(path)
    return fs.LocalFileSystem(), os.path.abspath(path)


def write(path: str, data: bytes) -> None:
    filesystem, where = storage(path)
    filesystem.create_dir(os.path.dirname(where), recursive=True)
    with filesystem.open_output_stream(where) as out:
        out.write(data)


class Blocks(torch.utils.data.Dataset):
    """The text's tokens, concatenated and cut into blocks of `size`: the labels are the inputs (the model
    shifts them)."""

    def __init__(self, tokenizer, text: str, size: int):
        ids = tokenizer(text)["input_ids"]
        self.blocks = torch.tensor(ids[: len(ids) // size * size]).view(-1, size)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


class FailAt(TrainerCallback):
    def __init__(self, rank: int, step: int):
        self.rank, self.step = rank, step

    def on_step_end(self, args, state, control, **kwargs):
        if args.process_index == self.rank and state.global_step == self.step:
            raise RuntimeError(f"injected failure on rank {self.rank} at step {self.step}")


class SaveOnPreemptNotice(TrainerCallback):
    """A node of the run is about to go: save a checkpoint at this step and stop training. Every rank decides
    at the same step (one all-reduce per step), since saving is collective."""

    def __init__(self) -> None:
        self.path = os.environ.get("RAYFLEET_PREEMPT_FILE")
        self.signalled = False
        self.heard_at: int | None = None
        signal.signal(signal.SIGUSR1, self.on_signal)
        signal.siginterrupt(signal.SIGUSR1, False)  # restart what it interrupts: gloo aborts on EINTR

    def on_signal(self, signum, frame) -> None:
        self.signalled = True

    def heard(self, args) -> bool:
        local = self.signalled or bool(self.path and os.path.exists(self.path))
        if args.world_size > 1 and torch.distributed.is_initialized():
            flag = torch.tensor([float(local)], device=args.device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            return bool(flag.item())
        return local

    def on_step_end(self, args, state, control, **kwargs):
        if self.heard_at is None and self.heard(args):
            self.heard_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
            if state.is_world_process_zero:
                print(f"preemption notice: saving at step {state.global_step} and stopping", flush=True)
        return control


def copy_tree(source: str, destination: str) -> None:
    """A checkpoint directory between the local disk and the run directory (local or s3://)."""
    (source_fs, source_path), (destination_fs, destination_path) = storage(source), storage(destination)
    if source_fs.get_file_info(source_path).type == fs.FileType.Directory:
        fs.copy_files(source_path, destination_path, source_fs, destination_fs)


COPIED = "copied.json"  # put in last by `save_copy`: the checkpoint folder in the run directory is whole


def save_copy(local: str, remote: str) -> None:
    """A Trainer checkpoint folder into the run directory, its COPIED marker last: a node that goes while
    copying (the notice's very reason) leaves a folder without it, which `restore` drops."""
    copy_tree(local, remote)
    write(f"{remote}/{COPIED}", b"{}")


def restore(remote: str, output_dir: str) -> str | None:
    """The run directory's Trainer checkpoints brought back to this node's `output_dir`; the latest whole one
    (a folder copied without its marker is removed and named in one line), or None."""
    copy_tree(remote, output_dir)
    cut = sorted(
        name
        for name in (os.listdir(output_dir) if os.path.isdir(output_dir) else [])
        if name.startswith("checkpoint-") and not os.path.exists(os.path.join(output_dir, name, COPIED))
    )
    for name in cut:
        shutil.rmtree(os.path.join(output_dir, name))
    if cut:
        print(f"{', '.join(cut)} in {remote} incomplete (copy cut short): not resumed from", flush=True)
    return get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="a directory with save_pretrained weights and tokenizer")
    parser.add_argument("--text", required=True, help="a text file to train on")
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-at-step", type=int, default=-1)
    args = parser.parse_args()

    run_dir = os.environ.get("RAYFLEET_RUN_DIR", "out")
    local = "://" not in run_dir
    output_dir = os.path.join(os.path.abspath(run_dir), "trainer") if local else tempfile.mkdtemp()
    cuda = torch.cuda.is_available()
    training = TrainingArguments(
        output_dir=output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_steps=0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=not cuda,
        ddp_backend=None if cuda else "gloo",
        ddp_find_unused_parameters=False,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    with open(args.text) as f:
        dataset = Blocks(tokenizer, f.read(), args.block_size)
    notice = SaveOnPreemptNotice()
    callbacks = [notice] + ([FailAt(args.fail_rank, args.fail_at_step)] if args.fail_rank >= 0 else [])
    trainer = Trainer(model=model, args=training, train_dataset=dataset, callbacks=callbacks)
    if local:
        last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
    else:  # the Trainer's checkpoints live on this node's disk: bring the run's whole ones back from s3://
        last = restore(f"{run_dir}/trainer", output_dir)
    if last and trainer.is_world_process_zero():
        print(f"resuming from {os.path.basename(last)}", flush=True)
    trainer.train(resume_from_checkpoint=last)
    if notice.heard_at is not None and not local and trainer.is_world_process_zero():
        step = f"checkpoint-{notice.heard_at}"
        save_copy(os.path.join(output_dir, step), f"{run_dir}/trainer/{step}")

    rank, world = training.process_index, training.world_size
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    seen = {
        "rank": rank,
        "world_size": world,
        **{k: os.environ.get(k) for k in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")},
        **{k: os.environ.get(k) for k in ("RAYFLEET_NODE_RANK", "RAYFLEET_RAY_NODE_ID", "RAYFLEET_ATTEMPT")},
        "host": socket.gethostname(),
        "cwd": os.getcwd(),
        "blocks": len(dataset),
        "losses": losses,
    }
    write(f"{run_dir}/ranks/rank-{rank}.json", json.dumps(seen).encode())
    if trainer.is_world_process_zero() and losses:
        print(f"done: {len(losses)} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
    if torch.distributed.is_initialized():  # no rank leaves while another may still talk to it (gloo aborts)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
