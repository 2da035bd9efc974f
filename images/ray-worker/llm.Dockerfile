# The ray-worker's LLM variant: Ray Serve LLM with vLLM for `make serve` with `engine: vllm` on GPU workers
# (training/rayfleet/serve/vllm_app.py). vLLM pins its own torch, so this image installs requirements/serve-llm.txt
# instead of the training set; it serves, it does not train. Build it on a machine with the CUDA base:
#   docker build -f images/ray-worker/llm.Dockerfile -t <registry>/rayfleet/ray-worker:<tag>-llm .
# and point the worker service at it. Not built by the test suite (the vLLM wheel alone is 316 MB).
# As in images/base/ray.Dockerfile:
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

ARG PIP_CONFIG_FILE=

USER 0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN (id -u ray >/dev/null 2>&1 || useradd --uid 1000 --create-home --shell /bin/bash ray) \
 && python3 -m venv /opt/rayfleet/venv
COPY requirements/ /opt/rayfleet/requirements/
RUN /opt/rayfleet/venv/bin/pip install --no-cache-dir --quiet -r /opt/rayfleet/requirements/serve-llm.txt

# As the ray base (images/base/ray.Dockerfile): HOME (/work) for a read-only root with volumes at /tmp and /work,
# and nothing left that raises privileges (images/bin/rayfleet-harden; issue 27 item 5).
ENV PATH=/opt/rayfleet/venv/bin:${PATH} \
    HOME=/work \
    PYTHONPATH=/opt/rayfleet/src \
    PYTHONUNBUFFERED=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    RAY_AUTH_MODE=token
COPY images/bin/rayfleet-harden /usr/local/sbin/rayfleet-harden
RUN rayfleet-harden \
 && install -d -o 1000 -m 0750 /work \
 && chmod 1777 /tmp
# The in-image packages, whole, as in the ray base (vLLM's own torch runs the replicas).
COPY training/rayfleet/ /opt/rayfleet/src/rayfleet/
COPY images/bin/rayfleet-node /usr/local/bin/rayfleet-node

USER 1000
WORKDIR /work
ENTRYPOINT ["rayfleet-node"]
CMD ["worker"]

ARG REVISION=unknown
ARG VERSION=dev
LABEL org.opencontainers.image.source="https://github.com/rayfleet/rayfleet" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.title="rayfleet ray-worker (LLM serving: vLLM)"
