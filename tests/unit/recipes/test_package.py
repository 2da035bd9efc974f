"""The code package: reproducible, caches and excluded paths left out; the built-in recipes ship only code."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile

import pytest

from rayfleet.recipes.package import PackageError, files_of, package
from rayfleet.recipes.schema import load
from tests.unit.recipes.helpers import REPO


def test_code_package_is_reproducible_and_leaves_out_caches(tmp_path):
    code = tmp_path / "code"
    files = {
        "train.py": "x=1\n",
        "pkg/mod.py": "y=2\n",
        "pkg/__pycache__/mod.cpython-311.pyc": "junk",
        ".git/HEAD": "ref",
        "data/big.bin": "0" * 100,
        "notes.ckpt": "w",
        "pkg/data/keep.py": "z=3\n",
    }
    for name, text in files.items():
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        (code / name).write_text(text)
    first = package(code, tmp_path / "a.zip", ["/data", "*.ckpt"])
    os.utime(code / "train.py", (1, 1))  # a newer mtime: same content, same zip
    second = package(code, tmp_path / "b.zip", ["/data", "*.ckpt"])
    assert first.sha256 == second.sha256
    assert sorted(zipfile.ZipFile(first.path).namelist()) == ["pkg/data/keep.py", "pkg/mod.py", "train.py"]
    assert "pkg/data/keep.py" not in zipfile.ZipFile(package(code, tmp_path / "d.zip", ["data"]).path).namelist()
    (code / "train.py").write_text("x=2\n")
    assert package(code, tmp_path / "c.zip", ["/data", "*.ckpt"]).sha256 != first.sha256


def test_builtin_recipes_load_and_ship_only_what_runs_on_the_cluster():
    for name in ("ddp", "fsdp", "fsdp-tiny"):
        loaded = load(REPO / "recipes" / f"{name}.yaml")
        assert loaded.code_dir == REPO / "training" and loaded.entry_kind() == "module"
    shipped = files_of(REPO / "training", load(REPO / "recipes" / "ddp.yaml").recipe.exclude)
    assert "rayfleet/train/ddp/__init__.py" in shipped and "rayfleet/train/data/fashion_mnist.py" in shipped
    assert "rayfleet/train/configs/fsdp.yaml" in shipped  # the fsdp recipes' --config, relative to the code
    assert all(f.startswith("rayfleet/") for f in shipped), shipped  # nothing of the operator's machine
    assert not (REPO / "training" / "rayfleet" / "local").exists()


def _tree(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_state_and_key_files_are_left_out_and_named(tmp_path):
    code = tmp_path / "code"
    secrets = ["terraform.tfstate", "terraform.tfstate.backup", ".env", "conf/.env.prod", "tls/server.pem", "id_rsa"]
    _tree(code, {"train.py": "x=1\n", "env.py": "ok\n", **{name: "secret" for name in secrets}})
    pkg = package(code, tmp_path / "a.zip")
    assert sorted(zipfile.ZipFile(pkg.path).namelist()) == ["env.py", "train.py"]
    assert pkg.left_out == sorted(secrets)


def test_a_link_out_of_the_code_directory_is_refused_and_one_inside_is_shipped(tmp_path):
    code, outside = tmp_path / "code", tmp_path / "outside"
    _tree(code, {"train.py": "x=1\n", "lib/real.py": "y=2\n"})
    _tree(outside, {"secret.txt": "s", "pkg/mod.py": "m"})
    (code / "alias.py").symlink_to(code / "lib" / "real.py")
    pkg = package(code, tmp_path / "ok.zip")
    assert zipfile.ZipFile(pkg.path).read("alias.py") == b"y=2\n"
    for link, target in (("leak.txt", outside / "secret.txt"), ("vendored", outside / "pkg")):
        (code / link).symlink_to(target)
        with pytest.raises(PackageError, match=rf"code: {link} is a link to .*outside"):
            package(code, tmp_path / "bad.zip")
        (code / link).unlink()


def test_a_git_work_tree_ships_what_git_would(tmp_path):
    code = tmp_path / "code"
    _tree(code, {"train.py": "x=1\n", "notes.tmp": "scratch", "build/out.bin": "b", ".gitignore": "*.tmp\n/build/\n"})
    subprocess.run(["git", "init", "-q", str(code)], check=True)
    subprocess.run(["git", "-C", str(code), "add", "train.py", ".gitignore"], check=True)
    (code / "new.py").write_text("untracked but not ignored\n")
    assert files_of(code) == [".gitignore", "new.py", "train.py"]
    shutil.rmtree(code / ".git")
    assert "notes.tmp" in files_of(code)  # no work tree: only the recipe's own excludes apply


def test_deployment_variables_and_registry_and_cluster_credentials_are_left_out(tmp_path):
    """Issue 54 R6: the sensitive list (shared with staged data) names Terraform variables, package registry
    tokens and kubeconfig files too."""
    code = tmp_path / "code"
    secrets = ["prod.tfvars", "x.tfvars.json", ".pypirc", "sub/.npmrc", "kubeconfig", "home/.kube/config"]
    _tree(code, {"train.py": "x=1\n", "config.py": "ok\n", **{name: "secret" for name in secrets}})
    pkg = package(code, tmp_path / "a.zip")
    assert sorted(zipfile.ZipFile(pkg.path).namelist()) == ["config.py", "train.py"]
    assert pkg.left_out == sorted(secrets)
