"""The Terraform's shape: standard module files, typed and described variables, providers only in the root,
every output the scripts read, every image a task uses built by images/."""

from __future__ import annotations

import re
from dataclasses import fields

import pytest

from rayfleet.ecs.outputs import FLAT_OUTPUTS, Outputs, WorkerGroup
from tests.infra.hcl import INFRA, MODULES, load_dir, merged

MODULE_DIRS = sorted(p for p in MODULES.iterdir() if p.is_dir())
EXPECTED_MODULES = {"network", "cluster", "ray", "storage", "registry", "observability", "iam", "gcs_store"}


def test_every_concern_has_its_module_with_the_five_files():
    assert {p.name for p in MODULE_DIRS} == EXPECTED_MODULES
    for module in MODULE_DIRS:
        for name in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
            assert (module / name).is_file(), f"{module.name}/{name}"


@pytest.mark.parametrize("path", [INFRA, *MODULE_DIRS], ids=lambda p: p.name)
def test_every_variable_is_typed_and_described(path):
    variables = merged(load_dir(path), "variable")
    assert variables, path
    for name, body in variables.items():
        assert body.get("type"), f"{path.name}: variable {name} has no type"
        assert len(body.get("description", "")) > 10, f"{path.name}: variable {name} has no description"


@pytest.mark.parametrize("path", [INFRA, *MODULE_DIRS], ids=lambda p: p.name)
def test_every_output_is_described(path):
    for name, body in merged(load_dir(path), "output").items():
        assert body.get("description"), f"{path.name}: output {name}"


def test_providers_are_configured_only_in_the_root():
    assert load_dir(INFRA).get("provider")
    for module in MODULE_DIRS:
        assert not load_dir(module).get("provider"), module.name


def test_root_composes_every_module_once():
    modules = merged(load_dir(INFRA), "module")
    assert {body["source"] for body in modules.values()} == {f"./modules/{m}" for m in EXPECTED_MODULES}


def test_every_output_the_scripts_read_exists():
    outputs = merged(load_dir(INFRA), "output")
    wanted = {f.name for f in fields(Outputs)}
    assert wanted <= set(outputs), sorted(wanted - set(outputs))
    # every field of a worker group the scripts read is in each group's entry of the worker_groups output
    # (`{for g, w in local.workers : g => {"service_name": ..., ...}}`: hcl2 keeps the for expression as text)
    group_keys = set(re.findall(r'"(\w+)": ', outputs["worker_groups"]["value"]))
    read = {f.name for f in fields(WorkerGroup)}
    assert read <= group_keys, sorted(read - group_keys)
    # the flat worker_* outputs are an earlier deployment's (Outputs.from_flat reads them from its outputs.json)
    assert not set(FLAT_OUTPUTS.values()) & set(outputs), sorted(set(FLAT_OUTPUTS.values()) & set(outputs))
    # the defaults the scripts fall back on are what the Terraform actually names
    ray_outputs = merged(load_dir(MODULES / "ray"), "output")
    names = ray_outputs["container_names"]["value"]
    locals_ = merged(load_dir(MODULES / "ray"), "locals")
    defaults = {f.name: f.default for f in fields(Outputs)}
    for role, field in (("head", "head_container_name"), ("trainer", "trainer_container_name")):
        container = locals_[f"{role}_container"]  # merge(local.locked_down, {...}): hcl2 keeps it as text
        assert names[role] == f"${{local.{role}_container.name}}"
        name = container["name"] if isinstance(container, dict) else re.search(r'"name": "([^"]+)"', container)[1]
        assert name == defaults[field]
    # every group's worker container: {for g, w in var.worker_groups : g => merge(local.locked_down, {"name": ...})}
    worker = re.search(r'"name": "([^"]+)"', locals_["worker_containers"])[1]
    assert names["worker"] == worker == WorkerGroup.container_name
    prefix = Outputs.__dataclass_fields__["trainer_log_stream_prefix"].default
    assert outputs["trainer_log_stream_prefix"]["value"] == prefix
    assert locals_["logging"]  # the stream prefix is the container's name: trainer/trainer/<task id>


@pytest.mark.parametrize("tfvars", sorted(INFRA.glob("*.tfvars")), ids=lambda p: p.name)
def test_a_variable_file_sets_only_known_variables_and_worker_group_fields(tfvars):
    import hcl2

    with tfvars.open() as handle:
        values = hcl2.load(handle)
    variables = merged(load_dir(INFRA), "variable")
    assert set(values) <= set(variables) and "workers" not in values  # `workers` is refused (worker_groups)
    group_type = variables["worker_groups"]["type"]
    for group in values.get("worker_groups", {}).values():
        for key in group:
            assert f'"{key}": ' in group_type, key  # hcl2 keeps the object type as text


def test_every_checkov_skip_is_inline_with_a_reason():
    for tf in INFRA.rglob("*.tf"):
        for line in tf.read_text().splitlines():
            if "checkov:skip" in line:
                match = re.search(r"#\s*checkov:skip=(CKV2?_AWS_\d+):\s*(\S.{15,})", line)
                assert match, f"{tf.name}: skip without an ID and a reason: {line.strip()}"
