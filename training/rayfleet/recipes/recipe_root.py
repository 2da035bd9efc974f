"""The folder a recipe's own `code:` and `data:` stay in (issue 54 R6): a shared recipe must not package or
stage the operator's own files (~/.aws, ~/.ssh) for its job through an absolute path, `../` or a link.

What the recipe file says stays inside its project: the git work tree (or the folder with a pyproject.toml)
that holds the recipe (the built-in recipes ship the repository with `code: ..`), else the recipe's own
folder, never a home folder or one above it (a dotfiles repository at ~ would widen it to everything the
operator has; a recipe in ~ itself takes nothing from it). What the operator names on the command line
(`--set data=/big/disk/set`, or a folder given as `rayfleet run --root DIR`) is the operator's own choice and
is not confined. Links inside the code and data folders are checked where they are read:
rayfleet/recipes/package.py and stage.py.
"""

from __future__ import annotations

from pathlib import Path

# `rayfleet run --root DIR`: the operator widens (or narrows) the folder for one run.
ROOT_HELP = (
    "the folder the recipe's code: and data: may use (default: the git work tree holding the recipe, else its "
    "folder; never your home folder)"
)


def project_of(recipe_file: Path) -> Path | None:
    """The recipe's project (see the module docstring); None for a recipe in a home folder itself or above it,
    where no folder is safe to assume: its code and data then need `rayfleet run --root DIR`."""
    folder = recipe_file.resolve().parent
    home = Path.home().resolve()
    if home.is_relative_to(folder):
        return None
    for candidate in (folder, *folder.parents):
        # a git work tree, or a project's own root (a copy of it without .git: a tarball, an image's copy)
        if (candidate / ".git").exists() or (candidate / "pyproject.toml").is_file():
            return folder if home.is_relative_to(candidate) else candidate
    return folder


def leaving(root: Path | None, paths: dict[str, tuple[str | None, Path | None]], named: dict) -> str | None:
    """The first of `paths` (key -> (as written, resolved with links followed)) that leads out of `root`, as
    the line to show, or None; a key in `named` (the command line's overrides) is not checked. With no root
    (the recipe sits in a home folder or above) every such path is refused."""
    for key, (value, where) in paths.items():
        if where is not None and key not in named and root is None:
            return (
                f"{key}: {value} would be taken from your home folder or above it, where the recipe sits; "
                "move the recipe into a project folder, or name the folder (rayfleet run --root DIR)"
            )
        if where is not None and key not in named and not where.is_relative_to(root):
            return (
                f"{key}: {value} leads to {where}, outside {root}, the folder a recipe's code and data stay in; "
                f"copy it in, name it on the command line (--set {key}=PATH), "
                "or widen the folder (rayfleet run --root DIR)"
            )
    return None
