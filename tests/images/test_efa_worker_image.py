"""The EFA variant of the ray-worker image (issue 15 item 9): the same Dockerfile with EFA_INSTALLER_VERSION
set installs libfabric with its EFA provider (AWS's EFA installer, in its container mode) and NCCL's OFI
plugin (aws-ofi-nccl, built against that libfabric), and finds them at run time. Nothing can be downloaded
here, so the variant is checked as written; the plain build (the argument empty) is what tests/images builds
and hadolint lints (test_dockerfiles.py). The task definition's EFA environment is in infra/tests/fsdp.tftest.hcl."""

from __future__ import annotations

import re

from rayfleet.ops import images
from tests.images.build import ROOT

DOCKERFILE = ROOT / "images" / "ray-worker" / "Dockerfile"


def instructions() -> list[str]:
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())  # join continuation lines
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_efa_build_arguments_exist_and_default_to_the_plain_image():
    args = dict(re.match(r"ARG (\w+)=?(.*)", i).groups() for i in instructions() if i.startswith("ARG "))
    assert args["EFA_INSTALLER_VERSION"] == ""  # plain by default: nothing downloaded
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["AWS_OFI_NCCL_VERSION"])  # pinned


def test_the_efa_variant_installs_libfabric_and_the_nccl_ofi_plugin_as_aws_documents():
    run = next(i for i in instructions() if i.startswith("RUN ") and "efa_installer.sh" in i)
    assert 'if [ -z "${EFA_INSTALLER_VERSION}" ]; then exit 0; fi' in run  # the plain build does nothing
    assert "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" in run
    # container mode: no kernel module, no limits file (the task's ulimits set memlock), no device check
    assert re.search(r"\./efa_installer\.sh -y -g -d --skip-kmod --skip-limit-conf --no-verify", run)
    assert "aws-ofi-nccl-${AWS_OFI_NCCL_VERSION}" in run
    assert "--with-libfabric=/opt/amazon/efa" in run and "--with-cuda=/usr/local/cuda" in run
    assert "--prefix=/opt/aws-ofi-nccl" in run and "--enable-platform-aws" in run
    assert "rm -rf /var/lib/apt/lists/* /tmp/efa" in run  # no installer or apt lists left in the layer
    assert "test -e /opt/aws-ofi-nccl/lib/libnccl-net.so" in run  # the build fails if the plugin is missing
    assert run.endswith("&& rayfleet-harden")  # what it installed raises no privilege either (issue 27 item 5)


def test_the_plugin_and_libfabric_are_found_by_the_loader_and_the_user_is_not_root():
    run = next(i for i in instructions() if i.startswith("RUN ") and "efa_installer.sh" in i)
    # NCCL dlopens libnccl-net.so: through ld.so.conf, not LD_LIBRARY_PATH (the plain image's path is untouched)
    assert "echo /opt/aws-ofi-nccl/lib > /etc/ld.so.conf.d/aws-ofi-nccl.conf" in run
    assert "ldconfig -p | grep -q libnccl-net.so && ldconfig -p | grep -q libfabric.so" in run
    assert not [i for i in instructions() if i.startswith("ENV ") and "LD_LIBRARY_PATH" in i]
    users = [i.split()[1] for i in instructions() if i.startswith("USER ")]
    assert users[-1] == "1000"


def test_make_build_passes_the_efa_installer_version_through():
    assert "EFA_INSTALLER_VERSION" in images.BUILD_ARGS_FROM_ENV
