"""A recipe's own `code:` and `data:` stay in its project (rayfleet/recipes/recipe_root.py, issue 54 R6): a shared
recipe cannot package or stage the operator's ~/.aws through an absolute path, `../` or a link; what the operator
names on the command line is the operator's own."""

from __future__ import annotations

import subprocess

import pytest

from rayfleet.core.config import ConfigError
from rayfleet.recipes.schema import load
from tests.unit.recipes.helpers import GOOD, REPO, write


@pytest.fixture
def home(tmp_path):
    """The operator's files beside the shared recipe's folder, as ~/.aws is beside ~/Downloads."""
    aws = tmp_path / "home" / ".aws"
    aws.mkdir(parents=True)
    (aws / "credentials").write_text("[default]\naws_secret_access_key = x\n")
    return tmp_path / "home"


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"data": "ABSOLUTE"}, "data"),
        ({"data": "../home/.aws"}, "data"),
        ({"data": "through-a-link"}, "data"),
        ({"code": "../home"}, "code"),
        ({"code": "ABSOLUTE"}, "code"),
    ],
)
def test_code_and_data_that_leave_the_recipes_folder_are_refused(tmp_path, home, change, key):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "through-a-link").symlink_to(home / ".aws")
    change = {k: str(home / ".aws") if v == "ABSOLUTE" else v for k, v in change.items()}
    with pytest.raises(ConfigError) as err:
        load(write(shared, {**GOOD, **change}))
    assert f"{key}: {change[key]} leads to " in str(err.value) and f"outside {shared}" in str(err.value)
    assert "--set" in str(err.value)  # and says how the operator names a folder of their own


def test_inside_is_accepted_and_the_command_line_or_a_named_root_may_point_anywhere(tmp_path, home):
    shared = tmp_path / "shared"
    (shared / "data").mkdir(parents=True)
    recipe = write(shared, {**GOOD, "data": "data"})
    assert load(recipe).data_path == (shared / "data").resolve()
    assert load(recipe, [f"data={home / '.aws'}"]).data_path == (home / ".aws").resolve()  # the operator's choice
    outside = write(shared, {**GOOD, "data": "../home/.aws"})
    assert load(outside, root=tmp_path).data_path == (home / ".aws").resolve()  # a folder the operator named


def test_a_recipe_in_a_git_work_tree_may_use_the_work_tree_but_not_beyond(tmp_path, home):
    project = tmp_path / "project"
    (project / "recipes").mkdir(parents=True)
    (project / "data").mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    recipe = write(project / "recipes", {**GOOD, "code": "..", "data": "../data", "entrypoint": "-m x"}, {})
    assert load(recipe).code_dir == project.resolve()
    escape = write(project / "recipes", {**GOOD, "code": "..", "data": "../../home/.aws", "entrypoint": "-m x"}, {})
    with pytest.raises(ConfigError, match=rf"data: \.\./\.\./home/\.aws leads to .*outside {project}"):
        load(escape)
    for name in ("ddp", "fsdp", "fsdp-tiny"):  # the built-in recipes, from this checkout
        assert load(REPO / "recipes" / f"{name}.yaml").code_dir == REPO / "training"


def test_a_work_tree_at_the_home_folder_does_not_widen_it(tmp_path, home, monkeypatch):
    """A dotfiles repository at ~ must not make ~/.aws part of every recipe's project under ~."""
    subprocess.run(["git", "init", "-q", str(home)], check=True)
    monkeypatch.setenv("HOME", str(home))
    (home / "Downloads").mkdir()
    with pytest.raises(ConfigError, match=rf"outside {home / 'Downloads'}"):
        load(write(home / "Downloads", {**GOOD, "data": "../.aws"}))


def test_the_operator_widens_the_folder_with_rayfleet_run_root(tmp_path, monkeypatch, capsys):
    """`rayfleet run --root DIR` is parsed once by the verb and reaches the recipe's loader: without it the
    shared recipe's `data: ../datasets` is refused (exit 2, the refusal names --root); with the operator's
    folder it loads."""
    from rayfleet.cli import main as cli
    from rayfleet.targets import run as target_run

    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "train.txt").write_text("x\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    recipe = write(shared, {**GOOD, "data": "../datasets"})
    loaded = []

    class Capture:
        def submit(self, recipe, args, run_name, detach):
            loaded.append(recipe)
            return 0

    monkeypatch.setattr(target_run, "target_for", lambda *_: Capture())
    assert cli.main(["run", str(recipe), "--on", "local"]) == 2
    err = capsys.readouterr().err
    assert "data: ../datasets" in err and "--root DIR" in err and "Traceback" not in err and not loaded
    assert cli.main(["run", str(recipe), "--on", "local", "--root", str(tmp_path)]) == 0
    assert loaded and str(loaded[0].data_path).endswith("datasets")


def test_a_recipe_in_the_home_folder_itself_takes_nothing_from_it_unless_named(tmp_path, home, monkeypatch):
    """A recipe saved straight into ~ (no git tree) would otherwise make ~ its project: `data: .kube` would stage
    the operator's kubeconfig, whose file is just `config`."""
    monkeypatch.setenv("HOME", str(home))
    kube = home / ".kube"
    kube.mkdir()
    (kube / "config").write_text("users: [{user: {token: secret}}]\n")
    recipe = write(home, {**GOOD, "data": ".kube"})
    with pytest.raises(ConfigError, match=r"code: \. would be taken from your home folder.*--root DIR"):
        load(recipe)  # its code (the whole home folder) first
    (home / "proj").mkdir()
    with pytest.raises(ConfigError, match=r"data: \.kube would be taken from your home folder.*--root DIR"):
        load(recipe, [f"code={home / 'proj'}"])
    loaded = load(recipe, root=home)  # the operator's own choice
    from rayfleet.recipes import stage

    found, left_out = stage.walk(loaded.data_path)
    assert found == [] and left_out == ["config"]  # still never staged: .kube/config by where it is


def test_the_built_in_recipes_load_from_a_copy_without_git(tmp_path):
    """A tarball or an image's copy of the project has no .git: its pyproject.toml marks the project, so
    recipes/ddp.yaml's `code: ../training` and `data: ../data` still load."""
    import shutil

    copy = tmp_path / "rayfleet"
    (copy / "recipes").mkdir(parents=True)
    (copy / "data").mkdir()
    (copy / "training").mkdir()
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    shutil.copy(REPO / "recipes" / "ddp.yaml", copy / "recipes" / "ddp.yaml")
    loaded = load(copy / "recipes" / "ddp.yaml")
    assert loaded.data_path == (copy / "data").resolve()
