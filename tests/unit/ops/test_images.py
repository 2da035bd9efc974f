"""`make build`: the built-in recipes' models go into ray-worker:<tag>-models only (the trainer and the other
groups' workers hold none; MODELS names others, none none, offline none), and the build says what it builds,
what it preloads, how big each image came out and what `make push` will upload. No image is built here: the engine
is a fake that records the commands and answers `image inspect`."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from rayfleet.ops import image_models, image_sizes, images

ROOT = Path(__file__).resolve().parents[3]
GB = 10**9


class FakeEngine:
    """subprocess.run for podman: builds succeed; `image inspect` answers the sizes given (missing: fails)."""

    def __init__(self, sizes: dict[str, int | str]):
        self.sizes = sizes
        self.commands: list[list[str]] = []

    def __call__(self, command, **kwargs):
        self.commands.append(list(command))
        if command[1:3] == ["image", "inspect"]:
            size = self.sizes.get(command[-1])
            return subprocess.CompletedProcess(command, 0 if size is not None else 125, f"{size}\n", "")
        return subprocess.CompletedProcess(command, 0, "", "")

    def builds(self) -> list[list[str]]:
        return [c for c in self.commands if c[1] == "build"]


@pytest.fixture
def engine(monkeypatch):
    def install(sizes):
        fake = FakeEngine(sizes)
        monkeypatch.setattr(images, "engine", lambda: "podman")
        monkeypatch.setattr(images, "revision", lambda: "0123456789ab")
        monkeypatch.setattr(images, "host_pip_mounts", lambda workdir: ([], []))
        monkeypatch.setattr(subprocess, "run", fake)
        return fake

    return install


def build_arg(command: list[str], name: str) -> str | None:
    values = [command[i + 1] for i, a in enumerate(command[:-1]) if a == "--build-arg"]
    return next((v.split("=", 1)[1] for v in values if v.startswith(f"{name}=")), None)


def test_the_trainer_holds_no_weights_and_the_models_image_preloads_only_what_it_is_given():
    trainer = (ROOT / "images" / "trainer" / "Dockerfile").read_text()
    assert "MODELS" not in trainer and "/models" not in trainer
    models = (ROOT / "images" / "ray-worker" / "models.Dockerfile").read_text()
    assert re.findall(r"^ARG MODELS=(.*)$", models, re.M) == [""]
    assert models.rstrip().splitlines()[-1].startswith("      org.opencontainers.image.title=")
    # the weights are the last layer of the image (a COPY of their own stage, after everything else)
    steps = [line.split()[0] for line in models.splitlines() if re.match(r"^[A-Z]+ ", line)]
    assert steps[steps.index("FROM", steps.index("FROM") + 1) :][:2] == ["FROM", "COPY"]


def test_the_default_list_is_the_built_in_recipes_models_and_none_or_offline_gives_none(tmp_path):
    revision = image_sizes.REVISIONS[images_fsdp_model()]
    assert re.fullmatch(r"[0-9a-f]{40}", revision)  # a commit, not a branch that moves
    pinned = f"{images_fsdp_model()}@{revision}"
    assert image_models.recipe_models(ROOT) == [pinned]  # fsdp.yaml's, pinned; fsdp-tiny's is a local path
    said: list[str] = []
    assert image_models.chosen(None, ROOT, said.append, online=lambda url: True) == [pinned]
    assert image_models.chosen("none", ROOT, said.append, online=lambda url: True) == [] and said == []
    assert image_models.chosen(None, ROOT, said.append, online=lambda url: False) == []
    assert said == [
        f"cannot preload {pinned}: no network (huggingface.co did not answer within 3 s); building "
        "without: the ranks that need it will fail until `make build push` runs online"
    ]
    local = f"tiny={tmp_path}"
    assert image_models.chosen(f"{local},org/other", ROOT, said.append, online=lambda url: False) == [local]
    assert said[-1].startswith("cannot preload org/other: no network")


def images_fsdp_model() -> str:
    return image_sizes.FSDP_MODEL


def test_a_build_with_no_models_builds_an_empty_models_image_and_says_so(engine):
    """The groups with models = true run ray-worker:<tag>-models whatever was preloaded: it is built (empty)
    with every ray-worker, so a deployment never points at a tag that was not built or pushed."""
    fake = engine({images.local_name(i, "t"): GB for i in images.IMAGES})
    said = []
    built = images.build(list(images.IMAGES), "t", [], say=said.append, groups=["fsdp"])
    assert said[:2] == [
        "building ray-base (not pushed), ray-head, ray-worker, trainer, gpu-metrics",
        "ray-worker:t-models (for worker group(s) fsdp) preloads nothing (MODELS=none, or none could be): their "
        "ranks download the model from the Hub, or fail in one line naming it",
    ]
    assert build_arg(fake.builds()[-1], "MODELS") == "" and images.local_name("ray-worker", "t-models") in built
    assert all(build_arg(c, "MODELS") is None for c in fake.builds()[:-1])  # the trainer takes none any more
    assert images.build(["ray-head"], "t", [], say=lambda _: None) == [images.local_name("ray-head", "t")]


def test_the_build_says_its_plan_first_and_the_sizes_last(engine, tmp_path):
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 2_000_000)
    sizes = {
        images.local_name("ray-base", "t"): 9 * GB,  # never pushed: not in the total
        images.local_name("ray-worker", "t"): 8_100_000_000,
        images.local_name("ray-worker", "t-models"): 8_102_000_000,
        images.local_name("trainer", "t"): 8_200_000_000,
    }
    fake = engine(sizes)
    said = []
    entries = [f"tiny={model}", "databricks/dolly-v2-7b"]
    images.build(["ray-worker", "trainer"], "t", entries, say=said.append, groups=["fsdp"])

    built = [c[c.index("-t") + 1] for c in fake.builds()]
    assert built == [images.local_name(i, t) for i, t in [("ray-base", "t"), ("ray-worker", "t"), ("trainer", "t"),
                                                            ("ray-worker", "t-models")]]  # fmt: skip
    with_models = fake.builds()[-1]
    assert with_models[with_models.index("-f") + 1] == str(ROOT / "images" / "ray-worker" / "models.Dockerfile")
    assert build_arg(with_models, "MODELS") == "tiny=/mnt/models-src/tiny,databricks/dolly-v2-7b"
    assert build_arg(with_models, "RAY_WORKER") == images.local_name("ray-worker", "t")
    assert f"{model.resolve()}:/mnt/models-src/tiny:ro" in with_models
    assert all(build_arg(c, "MODELS") is None for c in fake.builds()[:-1])
    first_build = next(i for i, line in enumerate(said) if line.startswith("building localhost/"))
    plan, rest = said[:first_build], said[first_build:]
    assert plan[0] == "building ray-base (not pushed), ray-worker, trainer"
    assert (
        plan[1]
        == "ray-worker:t-models (for worker group(s) fsdp; the trainer and other groups hold no weights) preloads:"
    )
    assert [p.split() for p in plan[2:]] == [
        [f"tiny={model}", "~2.0", "MB"],
        ["databricks/dolly-v2-7b", "~13.8", "GB"],
        ["total", "~13.8", "GB"],
    ]
    report = rest[rest.index("image sizes:") :]
    assert [r.split() for r in report[1:4]] == [
        [images.local_name("ray-worker", "t"), "8.1", "GB"],
        [images.local_name("trainer", "t"), "8.2", "GB"],
        [images.local_name("ray-worker", "t-models"), "8.1", "GB"],
    ]
    assert report[4] == "rayfleet images push uploads 3 image(s): at most 24.4 GB (uncompressed sizes)"


def test_a_disk_too_small_for_the_models_is_refused_in_one_line_before_anything_builds(engine, tmp_path, monkeypatch):
    fake = engine({})
    monkeypatch.setattr(image_models, "engine_store", lambda tool: tmp_path)
    monkeypatch.setattr(image_models, "free_bytes", lambda path: 20 * GB)
    with pytest.raises(images.RayfleetError) as caught:
        images.build(["ray-worker"], "t", ["databricks/dolly-v2-7b"], say=lambda _: None)
    assert str(caught.value) == (
        f"preloading databricks/dolly-v2-7b needs about 41.4 GB of disk under {tmp_path}, which has 20.0 GB free: "
        "free some, or build with MODELS=none"
    )
    assert fake.builds() == []
    monkeypatch.setattr(image_models, "free_bytes", lambda path: 50 * GB)
    images.build(["ray-worker"], "t", ["databricks/dolly-v2-7b"], say=lambda _: None)  # room: it builds
    assert len(fake.builds()) == 3

    def remote(path):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(image_models, "free_bytes", remote)  # DOCKER_HOST: the engine's disk is elsewhere
    said: list[str] = []
    image_models.check_disk(["databricks/dolly-v2-7b"], tmp_path, said.append)
    assert said == [f"cannot check the disk for the models ({tmp_path}: No such file or directory); building anyway"]


def test_a_push_without_the_models_image_is_refused_in_one_line(engine, tmp_path):
    """ray-worker is pushed with its models image, or not at all: the groups with models would run a tag that
    does not exist."""
    engine({images.local_name("ray-worker", "t"): GB})  # built before the models image existed
    path = outputs_with(tmp_path, {"fsdp": {"service_name": "w", "models": True}})
    urls = {"ecr_repository_urls": {"ray-worker": "123456789012.dkr.ecr.us-east-1.amazonaws.com/rf/ray-worker"}}
    Path(path).write_text(json.dumps({**json.loads(Path(path).read_text()), **urls}))
    out = images.Outputs.load(path)
    with pytest.raises(images.RayfleetError) as caught:
        images.push(["ray-worker"], "t", out, say=lambda _: None)
    assert str(caught.value) == (
        f"{images.local_name('ray-worker', 't-models')} is not built (the image of the worker groups with models): "
        "rayfleet images build --images ray-worker --tag t"
    )


def test_the_models_tag_is_the_one_terraform_gives_a_group_with_models():
    task_definitions = (ROOT / "infra" / "modules" / "ray" / "task_definitions.tf").read_text()
    assert f'"${{var.images["ray-worker"]}}{image_models.models_tag("")}"' in task_definitions


def test_a_wrong_model_directory_is_refused_before_anything_builds(engine, tmp_path):
    fake = engine({})
    with pytest.raises(images.RayfleetError, match="is not a model directory"):
        images.build(["ray-worker"], "t", [f"x={tmp_path}"], say=lambda line: None)
    assert fake.builds() == []


def test_models_of_unknown_size_are_named_so():
    plan = image_models.plan(["someone/some-model", "databricks/dolly-v2-7b"], "t", None)
    assert plan[0].startswith("ray-worker:t-models (for the worker groups with models = true;")
    assert plan[1].split() == ["someone/some-model", "size", "unknown"]
    assert plan[-1].split()[:3] == ["total", "~13.8", "GB"] and plan[-1].endswith("and the models of unknown size")


def test_an_image_the_engine_cannot_inspect_is_left_out_of_the_total_and_said():
    run = FakeEngine({"a": 3 * GB, "b": "not a number"})
    report = image_sizes.size_report("docker", ["a", "b", "c"], run=run)
    assert [r.split()[-2:] for r in report[1:4]] == [["3.0", "GB"], ["size", "unknown"], ["size", "unknown"]]
    assert report[4] == (
        "rayfleet images push uploads 3 image(s): at most 3.0 GB and the images of unknown size (uncompressed sizes)"
    )
    assert run.commands[0] == ["docker", "image", "inspect", "--format", "{{.Size}}", "a"]


def test_the_hint_names_the_model_the_fsdp_job_defaults_to():
    from rayfleet.train.fsdp.config import FSDPConfig

    config = (ROOT / "training" / "rayfleet" / "train" / "configs" / "fsdp.yaml").read_text()
    assert re.search(r"^model:\s*(\S+)", config, re.M).group(1) == image_sizes.FSDP_MODEL
    assert FSDPConfig.model_fields["model"].default == image_sizes.FSDP_MODEL


def test_an_fsdp_job_without_its_model_says_in_one_line_how_to_preload_it(tmp_path, monkeypatch):
    from rayfleet.train.models.hf import ModelNotFound, resolve_model_dir

    monkeypatch.setenv("MODEL_DIR", str(tmp_path))  # a worker image built with MODELS=none: nothing there
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as in the trainer image
    with pytest.raises(ModelNotFound) as caught:
        resolve_model_dir("nobody/no-such-model")
    message = str(caught.value)
    assert "\n" not in message and message.endswith(
        "; preload it into the workers' image: make build push MODELS=nobody/no-such-model (then make deploy, for a "
        "worker group with models = true)"
    )
    with pytest.raises(ModelNotFound) as caught:
        resolve_model_dir(str(tmp_path / "missing"))  # a path: no image build would help
    assert "make build" not in str(caught.value)


def test_a_podman_build_gets_pips_sources_as_a_pip_conf_and_as_uvs_flags(monkeypatch, tmp_path):
    """The ray base installs with uv (images/base/ray.Dockerfile), which reads no pip.conf: the same sources
    reach it as UV_FLAGS, at the same paths (mounted read-only), and the host's CA as HOST_CA_BUNDLE."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    host = {"extra-index-url": "https://mirror.example/simple", "find-links": str(wheels), "timeout": "9"}
    monkeypatch.setattr(images.pip_config, "settings", lambda: host)
    monkeypatch.setattr(images, "CA_BUNDLE", tmp_path / "ca.crt")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    volumes, args = images.host_pip_mounts(tmp_path)
    assert ["-v", f"{wheels}:{wheels}:ro"] == volumes[:2]
    flags = build_arg([*args, "."], "UV_FLAGS").split()
    assert flags[:2] == ["--index-strategy", "unsafe-best-match"]
    assert "https://mirror.example/simple" in flags and str(wheels) in flags
    assert build_arg([*args, "."], "HOST_CA_BUNDLE") == "/run/rayfleet/ca.crt"
    assert build_arg([*args, "."], "PIP_CONFIG_FILE") == "/run/rayfleet/pip.conf"
    conf = (tmp_path / "pip.conf").read_text()
    assert "cert = /run/rayfleet/ca.crt" in conf and "timeout" not in conf  # only the sources and the CA


def outputs_with(tmp_path, groups: dict) -> str:
    names = {"region": "us-east-1", "cluster_name": "c", "private_subnet_ids": [], "task_security_group_id": "sg"}
    names |= {"trainer_task_definition": "t", "head_service_name": "h", "results_bucket": "b", "trainer_log_group": "l"}
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({**names, "worker_groups": groups}))
    return str(path)


def test_a_deployment_with_an_efa_group_gets_the_efa_worker(engine, tmp_path, monkeypatch):
    """Whenever a worker group has EFA, ray-worker is built with the pinned EFA installer (one whose SHA-256 the
    Dockerfile carries); a deployment without one, or none yet, gets the plain worker, said; the variable wins."""
    monkeypatch.delenv("EFA_INSTALLER_VERSION", raising=False)
    dockerfile = (ROOT / "images" / "ray-worker" / "Dockerfile").read_text()
    assert re.search(rf"^\s+{re.escape(images.EFA_INSTALLER)}\) published=[0-9a-f]{{64}} ;;", dockerfile, re.M)
    fake = engine({images.local_name(i, "t"): GB for i in images.IMAGES})
    groups = {"ddp": {"service_name": "w-ddp", "instance_types": ["g5.xlarge"]},
              "fsdp": {"service_name": "w-fsdp", "instance_types": ["g5.12xlarge"], "efa": True}}  # fmt: skip
    said: list[str] = []
    efa = images.efa_installer(outputs_with(tmp_path, groups), say=said.append)
    assert efa == images.EFA_INSTALLER and said[0].startswith("ray-worker: worker group(s) fsdp use EFA: AWS's EFA")
    images.build(["ray-worker", "ray-head"], "t", [], say=lambda _: None, efa=efa)
    built = {c[c.index("-t") + 1]: c for c in fake.builds()}
    assert build_arg(built[images.local_name("ray-worker", "t")], "EFA_INSTALLER_VERSION") == images.EFA_INSTALLER
    assert build_arg(built[images.local_name("ray-head", "t")], "EFA_INSTALLER_VERSION") is None

    assert images.efa_installer(outputs_with(tmp_path, {"ddp": groups["ddp"]}), say=said.append) is None
    assert images.efa_installer(str(tmp_path / "none.json"), say=said.append) is None
    assert said[-1].startswith("ray-worker: the plain worker (no deployment yet")
    monkeypatch.setenv("EFA_INSTALLER_VERSION", "none")  # the operator's choice: the plain worker, passed nowhere
    assert images.efa_installer(outputs_with(tmp_path, groups), say=said.append) is None
    images.build(["ray-worker"], "t", [], say=lambda _: None)
    worker = [c for c in fake.builds() if c[c.index("-t") + 1] == images.local_name("ray-worker", "t")][-1]
    assert build_arg(worker, "EFA_INSTALLER_VERSION") is None


class FakeEcr:
    def get_authorization_token(self):
        token = "QVdTOnNlY3JldA=="  # AWS:secret
        return {"authorizationData": [{"authorizationToken": token, "proxyEndpoint": "https://registry"}]}


@pytest.mark.parametrize(
    "groups, models_image_pushed, staged",
    [
        ({"fsdp": {"service_name": "w", "models": True}}, True, False),
        ({"fsdp": {"service_name": "w", "models": True, "models_from": "s3"}}, False, True),
        (
            {
                "fsdp": {"service_name": "w", "models": True, "models_from": "s3"},
                "big": {"service_name": "w2", "models": True},
            },
            True,
            True,
        ),
    ],
    ids=["image", "s3 only: the 14 GB image is not pushed", "both"],
)
def test_push_sends_the_weights_where_the_groups_read_them(
    engine, tmp_path, monkeypatch, groups, models_image_pushed, staged
):
    fake = engine({images.local_name("ray-worker", "t"): GB, images.local_name("ray-worker", "t-models"): GB})
    path = outputs_with(tmp_path, groups)
    urls = {"ecr_repository_urls": {"ray-worker": "123456789012.dkr.ecr.us-east-1.amazonaws.com/rf/ray-worker"}}
    Path(path).write_text(json.dumps({**json.loads(Path(path).read_text()), **urls}))
    monkeypatch.setattr(images, "Aws", lambda region: type("A", (), {"client": lambda self, s: FakeEcr()})())
    cached: list[str] = []
    monkeypatch.setattr(
        images.model_cache, "push_to_cache", lambda tool, image, out, say: cached.append(image) or "s3://b/staged/x"
    )
    images.push(["ray-worker"], "t", images.Outputs.load(path), say=lambda _: None)
    pushes = [c[-1] for c in fake.commands if c[1] == "push"]
    assert pushes[0].endswith("/rf/ray-worker:t")
    assert any(p.endswith(":t-models") for p in pushes) == models_image_pushed
    assert cached == ([images.local_name("ray-worker", "t-models")] if staged else [])
