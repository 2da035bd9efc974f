"""A recipe's `launcher:` settings (torchrun, accelerate), checked when it loads: the options rayfleet sets
itself from `resources`, and what a launcher needs of the code directory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: schema.py imports this module
    from rayfleet.recipes.schema import LoadedRecipe

# Launcher options rayfleet sets itself from `resources` (rayfleet/node/driver/multinode.py), in torchrun's and
# accelerate's spellings ('_' read as '-').
RAYFLEET_SETS = {
    "--nnodes",
    "--node-rank",
    "--nproc-per-node",
    "--master-addr",
    "--master-port",
    "--rdzv-endpoint",
    "--rdzv-backend",
    "--standalone",
    "--num-machines",
    "--machine-rank",
    "--num-processes",
    "--main-process-ip",
    "--main-process-port",
    "--multi-gpu",
}


def launcher_problem(loaded: LoadedRecipe) -> str | None:
    """What is wrong with a recipe's launcher settings, or None."""
    recipe = loaded.recipe
    if not recipe.launcher:
        if recipe.launcher_args or recipe.max_restarts:
            key = "launcher_args" if recipe.launcher_args else "max_restarts"
            return f"{key}: only with a launcher (launcher: torchrun or accelerate)"
        return None
    if loaded.entry_kind() == "command":
        return (
            f"entrypoint: with launcher {recipe.launcher}, name the script (train.py) or module (-m pkg.train) "
            "it runs, not a command; the launcher's options go in launcher_args"
        )
    problem = launcher_options_problem(recipe.launcher, recipe.launcher_args)
    if not problem and recipe.launcher == "accelerate":
        problem = accelerate_problem(recipe.launcher_args, loaded.code_dir)
    return problem


def launcher_options_problem(launcher: str, options: list[str]) -> str | None:
    """launcher_args as the launcher's own argument parser reads them (where it is installed here)."""
    if not options:  # nothing to check, and importing torch or accelerate takes seconds
        return None
    try:
        if launcher == "torchrun":
            from torch.distributed.run import get_args_parser as make_parser
        else:
            from accelerate.commands.launch import launch_command_parser as make_parser
    except ImportError:  # a laptop without the training packages: the node's launcher checks them
        return None
    parser = make_parser()

    def fail(message: str):
        raise ValueError(message)

    parser.error = fail
    try:
        _, unknown = parser.parse_known_args([*options, "train.py"])
    except ValueError as exc:
        return f"launcher_args: {launcher}: {exc}"
    if unknown:
        return f"launcher_args: {launcher} has no option {unknown[0]}"
    return None


def accelerate_problem(options: list[str], code_dir: Path) -> str | None:
    """accelerate launch without a config falls back to whatever `accelerate config` left on the node."""
    pairs = [o.split("=", 1) for o in options]
    names = [p[0].replace("-", "_") for p in pairs]
    if "__config_file" in names:
        i = names.index("__config_file")
        value = pairs[i][1] if len(pairs[i]) == 2 else (options[i + 1] if i + 1 < len(options) else "")
        if not (code_dir / value).is_file():
            return f"launcher_args: --config_file {value} is not a file in {code_dir}"
        return None
    if "__mixed_precision" not in names:
        return (
            "launcher_args: accelerate needs its config: --config_file <a file in code> or at least "
            "--mixed_precision=no|fp16|bf16 (otherwise each node reads its own default config)"
        )
    return None
