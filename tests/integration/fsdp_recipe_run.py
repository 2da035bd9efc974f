"""`make train-fsdp ON=local` on the session cluster: the built-in recipe recipes/fsdp-tiny.yaml through the
Jobs API, its `${RAYFLEET_LAUNCH_DIR}`, `${RAYFLEET_MIN_WORKERS}`, `${RAYFLEET_DATA}` (and the other job
variables) expanded against the job. The command is make's own (tests/integration/make_plan.py), run from a
launch folder of the test's: models/tiny-gpt-neox there is the session's tiny model (what `make text-data`
writes into the checkout), and `data` (SET) a folder holding the session's generated corpus where `make text-data`
writes it offline (synthetic/generated_verse.txt: never under tiny_shakespeare.txt, the real file's name)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from rayfleet.train.data.synthetic_text import GENERATED
from tests.integration.make_plan import command_from_anywhere


def launch_folder(tiny: dict, root: Path) -> tuple[Path, Path]:
    """(the launch folder, the data folder) for the recipe, made once under root."""
    launch, text = root / "launch", root / "text"
    if not launch.exists():
        shutil.copytree(tiny["model"], launch / "models" / "tiny-gpt-neox")
        (text / GENERATED).parent.mkdir(parents=True)
        shutil.copyfile(tiny["data"], text / GENERATED)
    return launch, text


def train_fsdp(env: dict, tiny: dict, root: Path, storage: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    """`make train-fsdp ON=local NAME=name SET="storage=... data=..." ARGS="args"` as rayfleet runs it."""
    launch, text = launch_folder(tiny, root)
    command, path = command_from_anywhere(
        "train-fsdp", "ON=local", f"NAME={name}", f"SET=storage={storage} data={text}", f"ARGS={' '.join(args)}"
    )
    return subprocess.run(command, env={**env, **path}, cwd=launch, capture_output=True, text=True, timeout=600)
