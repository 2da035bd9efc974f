"""Issue 54: nothing an image build fetches from the network is trusted unchecked. Every file a Dockerfile or
build script in images/ downloads is checked against a published checksum before it is used, every `FROM` of
a remote image is pinned by digest or carries the documented exception (`# unpinned-base: VAR`, under the text
that says why and how to pin it), and the debootstrap base is verified against Debian's archive keyring.
Static: read from the files, nothing is built or downloaded."""

from __future__ import annotations

import re

import pytest

from tests.images.build import ROOT

IMAGES = ROOT / "images"
DOCKERFILES = sorted([*IMAGES.glob("*/Dockerfile"), *IMAGES.glob("*/*.Dockerfile")])
SCRIPTS = sorted(p for p in IMAGES.rglob("*") if p.is_file() and p.read_bytes().startswith(b"#!"))
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
FETCH = re.compile(r"\b(curl|wget)\b[^&|;]*?(?:-o|-O|--output)\s+(\S+)")
CHECK = re.compile(r"\b(sha256sum|sha512sum)\s+(?:--check|-c)\b|\bgpg\s+--verify\b")
ids = {"ids": lambda p: str(p.relative_to(IMAGES))}


def instructions(dockerfile) -> list[str]:
    text = re.sub(r"\\\n", " ", dockerfile.read_text())  # continuation lines joined
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def base_refs(dockerfile) -> list[tuple[str, str | None, str]]:
    """(what FROM names, the build argument it comes from, the default it resolves to) for every FROM."""
    steps = instructions(dockerfile)
    defaults = dict(re.match(r"ARG (\w+)=?(.*)", i).groups() for i in steps if i.startswith("ARG "))
    stages, refs = set(), []
    for step in steps:
        if not step.startswith("FROM "):
            continue
        named = step.split()[1]
        arg = re.fullmatch(r"\$\{(\w+)\}", named)
        resolved = defaults.get(arg.group(1), "") if arg else named
        if resolved not in stages:
            refs.append((named, arg.group(1) if arg else None, resolved))
        stages |= {step.split()[-1]} if " AS " in step.upper() else set()
    return refs


def is_local(ref: str) -> bool:
    return ref.startswith("localhost/")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, **ids)
def test_every_remote_base_is_pinned_by_digest_or_says_why_not(dockerfile):
    text = dockerfile.read_text()
    exceptions = set(re.findall(r"^# unpinned-base: (\w+)$", text, flags=re.M))
    for named, arg, ref in base_refs(dockerfile):
        assert ref, f"{dockerfile.name}: FROM {named} has no default"
        if is_local(ref):
            continue
        if DIGEST.search(ref):
            assert arg not in exceptions, f"{dockerfile.name}: {arg} is pinned now: delete its unpinned-base line"
            continue
        assert arg in exceptions, f"{dockerfile.name}: FROM {ref} is neither pinned by digest nor an exception"
        reason = text[: text.index(f"# unpinned-base: {arg}")].rsplit("\n\n", 1)[-1]
        reason = re.sub(r"\s*\n#\s*", " ", reason)  # the comment as one text
        assert "could not be obtained" in reason and "imagetools inspect" in reason, f"{arg}: say why, and how to pin"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, **ids)
def test_every_download_in_a_dockerfile_is_checked_before_it_is_used(dockerfile):
    for step in instructions(dockerfile):
        assert not re.match(r"ADD\s+(--\S+\s+)*https?://", step) or "--checksum=sha256:" in step, step[:120]
        if not step.startswith("RUN "):
            continue
        for fetch in FETCH.finditer(step):
            target = fetch.group(2).strip("\"'")
            rest = step[fetch.end() :]
            check = CHECK.search(rest)
            assert check, f"{dockerfile.name}: {target} is downloaded and never checked"
            before = rest[: check.start()]
            used = re.search(rf"tar\s+\S*\s*{re.escape(target)}|\./\S+", before)
            assert used is None, f"{dockerfile.name}: {target} is used before it is checked"
            command = rest[: check.end()].rsplit("&&", 1)[-1]  # the one command of the chain that checks
            assert target in command, f"{dockerfile.name}: {target} is downloaded, but the check reads another file"


def test_the_efa_installer_and_the_ofi_plugin_are_checked_against_published_values():
    dockerfile = IMAGES / "ray-worker" / "Dockerfile"
    args = dict(re.match(r"ARG (\w+)=?(.*)", i).groups() for i in instructions(dockerfile) if i.startswith("ARG "))
    assert re.fullmatch(r"[0-9a-f]{128}", args["AWS_OFI_NCCL_SHA512"])  # the value of the pinned release
    run = next(i for i in instructions(dockerfile) if "efa_installer.sh" in i)
    published = re.findall(r"(\d+\.\d+\.\d+)\) published=([0-9a-f]*) ;;", run)
    assert published and all(len(sha) == 64 for _, sha in published)
    assert "*) published= ;;" in run  # an unknown version has no value unless EFA_INSTALLER_SHA256 gives one
    assert 'if [ -z "${published}${EFA_INSTALLER_SHA256}" ]' in run and "exit 1" in run
    assert "sha256sum --check --strict" in run and "sha512sum --check --strict" in run
    text = dockerfile.read_text()
    assert "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-verify.html" in text
    assert f"https://github.com/aws/aws-ofi-nccl/releases/tag/v{args['AWS_OFI_NCCL_VERSION']}" in text


@pytest.mark.parametrize("script", SCRIPTS, **ids)
def test_scripts_in_images_fetch_nothing_unverified(script):
    text = script.read_text()
    assert not re.search(r"\b(curl|wget)\b", text) or CHECK.search(text), f"{script.name}: a download never checked"
    for call in re.findall(r"^\s*debootstrap\b.*(?:\\\n.*)*", text, flags=re.M):
        assert "--keyring=" in call, f"{script.name}: debootstrap without --keyring only warns when it cannot verify"
    if "debootstrap " in text:
        assert "debian-archive-keyring" in text and "exit 1" in text  # a missing keyring stops the build


def test_the_models_stage_installs_the_hub_client_the_training_set_pins():
    """images/ray-worker/models.Dockerfile downloads Hub models with huggingface_hub at requirements/train.txt's pin."""
    dockerfile = IMAGES / "ray-worker" / "models.Dockerfile"
    args = dict(re.match(r"ARG (\w+)=?(.*)", i).groups() for i in instructions(dockerfile) if i.startswith("ARG "))
    pinned = re.search(r"^huggingface-hub==\S+$", (ROOT / "requirements" / "train.txt").read_text(), flags=re.M)
    assert args["HUGGINGFACE_HUB"] == pinned.group(0)
