"""Recipes: strict schema, one clear error per bad recipe before anything is submitted, the command built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from scripts.code_package import package
from scripts.recipe import Capacity, check_fits, command, job_env, load
from training.config import ConfigError

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, recipe: dict, files: dict[str, str] | None = None) -> Path:
    for name, text in (files if files is not None else {"train.py": "print('hi')\n"}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    path = tmp_path / "recipe.yaml"
    path.write_text(json.dumps(recipe))
    return path


GOOD = {"name": "job", "entrypoint": "train.py"}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"epochs": 3}, "epochs: unknown key"),
        ({"resources": {"workers": 2, "gpu": 1}}, "resources.gpu: unknown key"),
        ({"entrypoint": None}, "entrypoint: missing"),
        ({"code": "no-such-dir"}, "code: no-such-dir is not a directory"),
        ({"entrypoint": "missing.py"}, "entrypoint: missing.py is not a file"),
        ({"pip": ["einops"]}, "'einops' is not pinned"),
        ({"pip": ["einops>=0.8"]}, "'einops>=0.8' is not pinned"),
        ({"pip": ["einops==0.*"]}, "is not pinned"),
        ({"name": "My Job"}, "name: String should match pattern"),
        ({"resources": {"workers": 0}}, "resources.workers: Input should be greater than or equal to 1"),
        ({"env": {"A": {"secret": "vault:x"}}}, "is not a secret reference"),
        ({"env": {"RAYFLEET_RUN_NAME": "x"}}, "RAYFLEET_RUN_NAME is set by rayfleet"),
        ({"entrypoint": "-m"}, "-m takes one module name"),
        ({"storage": "s3://"}, "s3:// needs a bucket"),
    ],
)
def test_bad_recipes_fail_with_one_clear_error(tmp_path, change, expected):
    recipe = {**GOOD, **change}
    if change.get("entrypoint", "") is None:
        del recipe["entrypoint"]
    with pytest.raises(ConfigError) as err:
        load(write(tmp_path, recipe))
    assert expected in str(err.value)
    assert str(err.value).count("\n  ") == 1  # exactly one problem named


def test_a_missing_recipe_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"recipe .*nope\.yaml does not exist"):
        load(tmp_path / "nope.yaml")


def test_pinned_packages_and_overrides_are_accepted(tmp_path):
    loaded = load(write(tmp_path, {**GOOD, "pip": ["einops==0.8.1", "tqdm===4.67.1"]}), ["resources.workers=4"])
    assert loaded.recipe.resources.workers == 4
    assert loaded.code_dir == tmp_path.resolve()
    assert loaded.entry_kind() == "script"


def test_more_gpus_than_a_worker_has_is_refused():
    recipe = load(REPO / "recipes" / "fsdp.yaml").recipe  # 1 GPU per worker
    with pytest.raises(ConfigError, match=r"gpus_per_worker: 1 GPUs, but a worker of this machine has 0"):
        check_fits(recipe, Capacity("this machine", cpus=4, gpus=0, memory_gib=24, nodes=None))
    check_fits(recipe, Capacity("g5.12xlarge", cpus=48, gpus=4, memory_gib=192, nodes=None))


def test_workers_beyond_a_fixed_cluster_are_refused(tmp_path):
    recipe = load(write(tmp_path, {**GOOD, "resources": {"workers": 3, "cpus_per_worker": 1}})).recipe
    with pytest.raises(ConfigError, match="3 workers do not fit the local cluster, which holds 2"):
        check_fits(recipe, Capacity("the local cluster", cpus=1, gpus=0, memory_gib=None, nodes=2))


def test_bad_recipe_fails_the_cli_before_anything_is_written(tmp_path):
    path = write(tmp_path, {**GOOD, "pip": ["torch"]})
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "RAYFLEET_STATE_DIR": str(tmp_path / "state"),
        "RAYFLEET_OUTPUTS": str(tmp_path / "x.json"),
    }
    result = subprocess.run([sys.executable, "-m", "scripts.run_recipe", str(path)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 2
    assert "'torch' is not pinned" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "state").exists()  # no run, no cluster


def test_gpu_recipe_on_a_cpu_machine_fails_before_a_cluster_starts(tmp_path):
    path = write(tmp_path, {**GOOD, "resources": {"workers": 1, "gpus_per_worker": 2}})
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "RAYFLEET_STATE_DIR": str(tmp_path / "state"),
        "RAYFLEET_OUTPUTS": str(tmp_path / "x.json"),
    }
    result = subprocess.run([sys.executable, "-m", "scripts.run_recipe", str(path), "--target", "local"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "gpus_per_worker: 2 GPUs, but a worker of this machine has 0" in result.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "state").exists()


def test_command_per_entrypoint_kind(tmp_path):
    variables = job_env(load(write(tmp_path, GOOD)).recipe, "r1", "/runs", "/home/me")
    module = load(write(tmp_path, {**GOOD, "entrypoint": "-m pkg.train", "args": ["lr=${RAYFLEET_RUN_DIR}"]}))
    assert command(module.recipe, "/venv/bin/python", variables, ["x y"]).endswith(
        "/venv/bin/python -m pkg.train lr=/runs/r1 'x y'"
    )  # fmt: skip
    script = load(write(tmp_path, {**GOOD, "setup": "pip list"}))
    assert command(script.recipe, "/venv/bin/python", variables, []).endswith("pip list && /venv/bin/python train.py")
    torchrun = load(write(tmp_path, {**GOOD, "entrypoint": "torchrun --nproc-per-node 2 train.py"}))
    built = command(torchrun.recipe, "/venv/bin/python", variables, [])
    assert built.startswith("export PATH=/venv/bin:") and built.endswith("torchrun --nproc-per-node 2 train.py")
    with_pip = load(write(tmp_path, {**GOOD, "pip": ["einops==0.8.1"]}))  # Ray's job virtualenv is on PATH
    assert command(with_pip.recipe, "/venv/bin/python", variables, []) == "python train.py"
    typo = load(write(tmp_path, {**GOOD, "args": ["${RAYFLEET_RUNDIR}"]}))
    with pytest.raises(ConfigError, match="unknown variable 'RAYFLEET_RUNDIR'"):
        command(typo.recipe, "/venv/bin/python", variables, [])


def test_code_package_is_reproducible_and_leaves_out_caches(tmp_path):
    code = tmp_path / "code"
    files = {"train.py": "x=1\n", "pkg/mod.py": "y=2\n", "pkg/__pycache__/mod.cpython-311.pyc": "junk",
             ".git/HEAD": "ref", "data/big.bin": "0" * 100, "notes.ckpt": "w", "pkg/data/keep.py": "z=3\n"}  # fmt: skip
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


def test_builtin_recipes_load_and_ship_only_code():
    for name in ("ddp", "fsdp", "fsdp-tiny"):
        loaded = load(REPO / "recipes" / f"{name}.yaml")
        assert loaded.code_dir == REPO and loaded.entry_kind() == "module"
    from scripts.code_package import files_of

    shipped = files_of(REPO, load(REPO / "recipes" / "ddp.yaml").recipe.exclude)
    assert "training/ddp.py" in shipped and "scripts/local_cluster.py" in shipped
    assert "training/data/fashion_mnist.py" in shipped  # /data excludes the top-level data only
    assert not [f for f in shipped if f.startswith(("data/", "models/", "runs/", ".venv", "infra/", "tests/"))]


def test_job_outcome_exit_codes_and_traceback_tail():
    from scripts.ray_jobs import JobOutcome, exit_code_of

    assert exit_code_of("SUCCEEDED", None) == 0 and exit_code_of("FAILED", 3) == 3
    assert exit_code_of("FAILED", None) == 1 and exit_code_of("STOPPED", None) == 130
    log = [
        "step 1\n",
        "Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'\n",
        "retrying\nTraceback (most recent call last):\n",
        '  File "b.py", line 9, in main\nValueError: bad\n',
    ]
    tail = JobOutcome("j", "FAILED", 1, log=log).traceback_tail()
    assert tail.startswith("Traceback") and tail.endswith("ValueError: bad") and "KeyError" not in tail
    assert JobOutcome("j", "FAILED", 1, log=["no traceback here\n"]).traceback_tail() == "no traceback here"
