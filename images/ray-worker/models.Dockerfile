# The ray-worker with preloaded models: the image of the worker groups with `models = true` (infra/variables.tf;
# the default's fsdp group), tagged <tag>-models, so the FSDP job's ranks load dolly-v2-7b from their own node with
# no download (training/rayfleet/train/models/hf.py: $MODEL_DIR/<id>). Only those groups pull it: a 1-GPU DDP
# node runs the plain ray-worker. `make build` builds it after ray-worker (rayfleet/ops/images.py):
#   MODELS: comma-separated Hugging Face ids (org/name@<commit> pins a revision; else the Hub's current one,
#   recorded), downloaded here with huggingface_hub, or
#   name=/path entries for a directory mounted into the build (tests use a tiny GPT-NeoX); listed with every
#   file's size and SHA-256 in /models/manifest.json.
# The weights are fetched in a stage of their own on the small Python base, which no code change touches, and
# copied in as the last layer: a rebuild after a code change finds that stage cached, the layer's content is
# the same, and a push skips it.
# The models stage's base is gpu-metrics' (images/gpu-metrics/Dockerfile), and not pinned by digest for the same
# reason: the digest of python:3.11-slim-bookworm could not be obtained where this was written; to pin it,
# read it with `docker buildx imagetools inspect python:3.11-slim-bookworm --format '{{.Manifest.Digest}}'`,
# pass PYTHON_BASE_IMAGE=python:3.11-slim-bookworm@sha256:<digest> and delete the line below.
# unpinned-base: PYTHON_BASE_IMAGE
ARG PYTHON_BASE_IMAGE=python:3.11-slim-bookworm
ARG RAY_WORKER=localhost/rayfleet/ray-worker:dev

FROM ${PYTHON_BASE_IMAGE} AS models
ARG MODELS=
ARG PIP_CONFIG_FILE=
# requirements/train.txt's pin (tests/images/test_image_pins.py keeps them equal)
ARG HUGGINGFACE_HUB=huggingface-hub==2.4.0
COPY images/ray-worker/preload.py /opt/rayfleet/preload.py
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# root for this step only, as the base is: mounted model directories keep their host owner and mode (but never
# a setuid or setgid bit: /models is all the final stage takes from here)
# huggingface_hub only when an entry is a Hub id (a name=/dir entry needs nothing but Python)
RUN python3 -m venv /opt/preload \
 && hub=0 && IFS=',' read -ra entries <<< "${MODELS}" \
 && for entry in "${entries[@]}"; do if [[ -n "${entry// /}" && "${entry}" != *=* ]]; then hub=1; fi; done \
 && if [ "${hub}" = 1 ]; then /opt/preload/bin/pip install --no-cache-dir --quiet "${HUGGINGFACE_HUB}"; fi \
 && /opt/preload/bin/python /opt/rayfleet/preload.py --dest /models "${MODELS}" \
 && find /models -xdev -perm /6000 -exec chmod ug-s {} +

FROM ${RAY_WORKER}
COPY --from=models --chown=1000:1000 /models /models
ENV MODEL_DIR=/models \
    HF_HUB_OFFLINE=1

# Last: these change with every commit and must not invalidate the layers above.
ARG REVISION=unknown
ARG VERSION=dev
LABEL org.opencontainers.image.source="https://github.com/rayfleet/rayfleet" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.title="rayfleet ray-worker with preloaded models"
