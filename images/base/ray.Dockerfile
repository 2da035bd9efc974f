# The `ray` base shared by ray-head, ray-worker and trainer: the pinned Python dependencies of
# requirements/train.txt (the one version source; the Ray release in BASE_IMAGE matches its ray pin,
# tests/images/test_dockerfiles.py checks it), a non-root user, and the node entry point.
# Built as <registry>/ray-base:<revision> by `make build`; never pushed on its own.
# Not pinned by digest (issue 54): the digest of rayproject/ray:2.60.0-py311-cu128 on Docker Hub could not be
# obtained where this was written (no registry reachable there), and a value copied from elsewhere would be
# trusted without being checked. To pin it, read it from the registry:
#   docker buildx imagetools inspect rayproject/ray:2.60.0-py311-cu128 --format '{{.Manifest.Digest}}'
# and append it, BASE_IMAGE=rayproject/ray:2.60.0-py311-cu128@sha256:<digest>: the engine then refuses any other
# content under that tag. Then delete the exception line below (tests/images/test_image_pins.py requires one of
# the two, and refuses a stale exception). Tests and air-gapped builds pass a local base instead (localhost/...).
# unpinned-base: BASE_IMAGE
ARG BASE_IMAGE=rayproject/ray:2.60.0-py311-cu128
FROM ${BASE_IMAGE}

# Build-time only, from `make build` with podman (scripts/rayfleet/ops/images.py): a pip.conf mounted for the build
# (local indexes, the host CA), never in a layer; the same sources as uv's flags, and the CA's path for uv.
ARG PIP_CONFIG_FILE=
ARG UV_FLAGS=
ARG HOST_CA_BUNDLE=

USER 0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# rayproject/ray ships the user `ray` (uid 1000); a plain Debian base gets the same one.
RUN (id -u ray >/dev/null 2>&1 || useradd --uid 1000 --create-home --shell /bin/bash ray) \
 && python3 -m venv /opt/rayfleet/venv

# Dependencies before code: a code-only change rebuilds only the small layers below.
# uv installs them (about a minute where pip took five on 2 cores: pip's resolver and unpacking in Python) and
# is removed again; it reads no pip configuration, hence UV_FLAGS (empty: PyPI, uv's default). Bytecode is
# compiled here, as pip does: the root file system is read-only on ECS, so no process could write a .pyc.
COPY requirements/ /opt/rayfleet/requirements/
# SC2086: UV_FLAGS is a list of flags, split on purpose.
# hadolint ignore=SC2086
RUN /opt/rayfleet/venv/bin/pip install --no-cache-dir --quiet -r /opt/rayfleet/requirements/uv.txt \
 && if [ -n "${HOST_CA_BUNDLE}" ]; then export SSL_CERT_FILE="${HOST_CA_BUNDLE}"; fi \
 && /opt/rayfleet/venv/bin/uv pip install --python /opt/rayfleet/venv/bin/python --no-cache --quiet --compile-bytecode ${UV_FLAGS} \
    -r /opt/rayfleet/requirements/core.txt -r /opt/rayfleet/requirements/train.txt -r /opt/rayfleet/requirements/serve.txt \
 && /opt/rayfleet/venv/bin/pip uninstall --yes --quiet uv

# HOME: ECS runs the images with a read-only root file system, as uid 1000, with task volumes at /tmp and
# /work (issue 27 item 5); not /home/ray, which on rayproject/ray holds conda (the Python the venv runs on):
# a volume there would start as a copy of it in every task, writable by the jobs. What Ray and the jobs write goes there: Ray's session under /tmp/ray, tempfile
# under /tmp, the caches (pip, Hugging Face, torch, triton, CUDA's) under ~/.cache and ~; so HOME is set here
# rather than left to whatever the engine derives from the user.
ENV PATH=/opt/rayfleet/venv/bin:${PATH} \
    HOME=/work \
    PYTHONPATH=/opt/rayfleet/src \
    PYTHONUNBUFFERED=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    RAY_AUTH_MODE=token
# Nothing left that raises privileges (issue 27 item 5): sudo purged, setuid/setgid bits and file capabilities
# stripped (images/bin/rayfleet-harden). After the last root install; the derived images run it again after
# theirs. /work (empty) belongs to the ray user and /tmp is 1777: an empty volume mounted there starts as a copy.
COPY images/bin/rayfleet-harden /usr/local/sbin/rayfleet-harden
RUN rayfleet-harden \
 && install -d -o 1000 -m 0750 /work \
 && chmod 1777 /tmp
# The packages that run in the images, whole (docs/DESIGN.md, "Layers"): the node entry point and what it
# starts (node), the recipe runtime (recipes), the jobs (train), the Serve application (serve) and the core.
# All of training/ and nothing else of rayfleet: the laptop-only packages (cli, ops, targets, ecs, local) live
# in scripts/, which .dockerignore keeps out of the build context; the layers contract keeps these five from
# importing those, and an image test imports every module here, in the image. The instance catalog comes
# with core (rayfleet/core/instance_types.json, the file Terraform reads too).
COPY training/rayfleet/ /opt/rayfleet/src/rayfleet/
COPY images/bin/rayfleet-node /usr/local/bin/rayfleet-node

USER 1000
WORKDIR /work

# Last: these change with every commit and must not invalidate the layers above.
ARG REVISION=unknown
ARG VERSION=dev
LABEL org.opencontainers.image.source="https://github.com/rayfleet/rayfleet" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.title="rayfleet ray base"
