"""rayfleet's DDP job against the original AWS blueprint's training loop, interleaved on one local cluster.

    make bench BENCH=vs-blueprint                                  # 2 rounds of 3 epochs on 12,000 images
    python -m bench.vs_blueprint --rounds 2 --epochs 2 --train-subset 60000
    python -m bench.vs_blueprint --variant "nchw:channels_last=false"   # one lever alone, as key=value overrides

The blueprint's loop, written from its public description: torchvision FashionMNIST with ToTensor +
Normalize((0.5,), (0.5,)) per sample through a DataLoader prepared by `ray.train.torch.prepare_data_loader`,
the model through `prepare_model` (ResNet-18 with a 1-channel 7x7 stem), Adam 1e-3, fp32, batch 128 per
worker, no evaluation inside the timed epoch (the test accuracy is measured after the last epoch). rayfleet's
variants run the real job (rayfleet.train.ddp) with the given overrides. Each round runs every variant once
(A B A B ...), so a noisy machine slows all of them alike; the steady state is the mean over epochs 2..n.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from rayfleet.core import ray_auth

BLUEPRINT = "blueprint"


def blueprint_loop(config: dict) -> None:
    """The blueprint's per-worker loop (runs on each Ray Train worker)."""
    import ray.train
    import ray.train.torch
    import torch
    from torch.utils.data import DataLoader, Subset
    from torchvision import datasets, transforms

    from rayfleet.train.models.resnet import resnet18_grayscale

    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,), (0.5,))])
    train = datasets.FashionMNIST(config["data_dir"], train=True, download=False, transform=transform)
    test = datasets.FashionMNIST(config["data_dir"], train=False, download=False, transform=transform)
    if config["train_subset"]:
        train = Subset(train, range(min(config["train_subset"], len(train))))
    train_loader = ray.train.torch.prepare_data_loader(DataLoader(train, batch_size=128, shuffle=True))
    test_loader = ray.train.torch.prepare_data_loader(DataLoader(test, batch_size=1024))
    model = ray.train.torch.prepare_model(resnet18_grayscale())
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    context = ray.train.get_context()
    rows = []
    for epoch in range(1, config["epochs"] + 1):
        if context.get_world_size() > 1:
            train_loader.sampler.set_epoch(epoch)
        model.train()
        start, seen = time.perf_counter(), 0
        for images, labels in train_loader:
            loss = criterion(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen += labels.numel()
        train_s = time.perf_counter() - start  # its epoch has no evaluation: the whole epoch is its training
        rows.append({"epoch": epoch, "train_s": train_s, "epoch_s": train_s, "images": seen * context.get_world_size()})
    rows[-1]["test_accuracy"] = _blueprint_accuracy(model, test_loader)
    if context.get_world_rank() == 0:
        Path(config["out"]).write_text("".join(json.dumps(row) + "\n" for row in rows))


def _blueprint_accuracy(model, loader) -> float:
    import torch
    import torch.distributed as dist

    model.eval()
    counts = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for images, labels in loader:
            counts += torch.tensor([(model(images).argmax(1) == labels).sum().item(), labels.numel()])
    dist.all_reduce(counts)
    return float(counts[0] / counts[1])


def _run_blueprint(args, storage: Path) -> list[dict]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from rayfleet.train.ray_connect import ray_session

    out = storage / "blueprint.jsonl"
    config = {"data_dir": str(Path(args.data_dir).resolve()), "train_subset": args.train_subset}
    with ray_session():
        TorchTrainer(
            blueprint_loop,
            train_loop_config={**config, "epochs": args.epochs, "out": str(out)},
            scaling_config=ScalingConfig(num_workers=args.workers, resources_per_worker={"CPU": 1.0}),
            run_config=RunConfig(name="blueprint", storage_path=str(storage)),
        ).fit()
    return [json.loads(line) for line in out.read_text().splitlines()]


def _run_rayfleet(args, storage: Path, overrides: list[str]) -> list[dict]:
    from rayfleet.core.run_dir import RunDir
    from rayfleet.train.ddp import main as ddp_main
    from rayfleet.train.metrics import read_rows

    name = f"rayfleet-{time.monotonic_ns()}"
    base = [
        f"epochs={args.epochs}",
        f"num_workers={args.workers}",
        "cpus_per_worker=1.0",
        "device=cpu",
        f"data_dir={args.data_dir}",
        f"storage={storage}",
        f"run_name={name}",
        "max_failures=0",
        "keep_checkpoints=1",
        *([f"train_subset={args.train_subset}"] if args.train_subset else []),
    ]
    if ddp_main([*base, *overrides]) != 0:
        raise SystemExit(f"the rayfleet job failed with overrides {overrides}")
    rows = read_rows(RunDir(str(storage), name))
    return [{**row, "images": row["images_per_s"] * row["train_s"]} for row in rows]


def _table(results: dict[str, list[list[dict]]]) -> list[str]:
    def steady(runs: list[list[dict]]) -> list[dict]:
        return [row for rows in runs for row in (rows[1:] or rows)]

    base = _mean_s(steady(results[BLUEPRINT]), "epoch_s") if BLUEPRINT in results else None
    lines = [
        "| variant | runs | first epoch s | steady training s | steady whole epoch s | images/s | test acc "
        "| whole epoch vs blueprint |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, runs in results.items():
        rows = steady(runs)
        training, whole = _mean_s(rows, "train_s"), _mean_s(rows, "epoch_s")
        rate = sum(r["images"] for r in rows) / sum(r["train_s"] for r in rows)
        first = sum(rows_[0]["epoch_s"] for rows_ in runs) / len(runs)
        accuracy = sum(rows_[-1]["test_accuracy"] for rows_ in runs) / len(runs)
        ratio = f"{whole / base:.2f}x" if base else "-"
        lines.append(
            f"| {label} | {len(runs)} | {first:.1f} | {training:.1f} | {whole:.1f} | {rate:,.0f} | {accuracy:.4f} "
            f"| {ratio} |"
        )
    return lines


def _mean_s(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def machine() -> str:
    """The CPU model and the precision the job picks on it (precision=auto)."""
    import torch

    from rayfleet.train.precision import wants_bf16

    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown CPU")
    return f"{model}, precision {'bf16' if wants_bf16('auto', torch.device('cpu')) else 'fp32'} (auto)"


def _parse_variant(text: str) -> tuple[str, list[str]]:
    label, colon, overrides = text.partition(":")
    if not label or not colon or any("=" not in item for item in overrides.split()):
        raise argparse.ArgumentTypeError(f"expected LABEL:key=value ..., got {text!r}")
    return label, overrides.split()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--train-subset", type=int, default=12_000, help="0: all 60,000 images")
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--no-blueprint", action="store_true", help="only the rayfleet variants")
    parser.add_argument(
        "--variant",
        type=_parse_variant,
        action="append",
        help='LABEL:key=value ... for the rayfleet job (repeatable; default "rayfleet:" = its own defaults)',
    )
    args = parser.parse_args(argv)
    args.train_subset = args.train_subset or None
    variants = dict(args.variant or [("rayfleet", [])])
    ray_auth.use_token_auth()  # before Ray is imported: Ray reads its auth mode once
    from bench.on_cluster import local_cluster_state

    results: dict[str, list[list[dict]]] = {} if args.no_blueprint else {BLUEPRINT: []}
    results.update({label: [] for label in variants})
    with local_cluster_state(), tempfile.TemporaryDirectory(prefix="rayfleet-bench-") as tmp:
        for round_ in range(1, args.rounds + 1):
            for label in results:
                print(f"round {round_}/{args.rounds}: {label} ...", flush=True)
                run = (
                    _run_blueprint(args, Path(tmp))
                    if label == BLUEPRINT
                    else _run_rayfleet(args, Path(tmp), variants[label])
                )
                results[label].append(run)
                print(f"round {round_}/{args.rounds}: {label}: {[round(r['train_s'], 1) for r in run]} s", flush=True)
    print(
        f"\n{args.workers} workers x 1 CPU, batch 128/worker, {args.train_subset or 60_000:,} training images, "
        f"{args.epochs} epochs per run, {args.rounds} interleaved rounds; {machine()}; rayfleet's whole epoch "
        "includes its evaluation of the test set, the blueprint's loop evaluates only after its last epoch"
    )
    print("\n".join(_table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
