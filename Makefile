# grpo-rig command surface. `make` (or `make help`) lists the targets.
# Host set-up needs only Python 3.10; uv is bootstrapped into .tools/ when it is not on PATH.

.DEFAULT_GOAL := help
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

UV_VERSION := 0.9.9
# Python 3.10 (the image's version): the first interpreter found that really is 3.10 (pyenv's versions
# under PYENV_ROOT, default ~/.pyenv).
PYENV_ROOT ?= $(HOME)/.pyenv
PYTHON ?= $(shell for p in python3.10 $(PYENV_ROOT)/versions/3.10*/bin/python3.10 /usr/bin/python3.10 /usr/local/bin/python3.10; do \
	"$$p" -c 'import sys; assert sys.version_info[:2] == (3, 10)' >/dev/null 2>&1 && { command -v "$$p" || echo "$$p"; } && break; done)
UV ?= $(shell command -v uv >/dev/null 2>&1 && uv --version | grep -q ' $(UV_VERSION)' && command -v uv || echo .tools/bin/uv)
VENV := .venv
PY := $(VENV)/bin/python
# uv pip compile settings for the lock: Linux x86_64, Python 3.10, versions contemporaneous with
# ms-swift 3.6.4 (released 2025-08-02).
LOCK_FLAGS := --generate-hashes --python-version 3.10 --python-platform x86_64-manylinux_2_35 --no-header
RUNTIME_EXCLUDE_NEWER := 2025-08-03
DEV_EXCLUDE_NEWER := 2026-11-28

RECIPE ?= smoke
COMPOSE ?= docker compose
# The container runs as you, so files in ./output are yours (compose.yaml: user: HOST_UID:HOST_GID;
# not UID/GID, which bash keeps read-only and unexported).
export HOST_UID ?= $(shell id -u)
export HOST_GID ?= $(shell id -g)
# Image identity, recorded as OCI labels and in every run manifest.
export VERSION ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
export REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
export SOURCE ?= https://github.com/grpo-rig/grpo-rig
export LOCK_SHA256 ?= $(shell sha256sum requirements/runtime.lock | cut -d' ' -f1)

# Colour only on a terminal, and never with NO_COLOR set (no-color.org).
.PHONY: help
help:  ## Show this help
	@if [ -t 1 ] && [ -z "$${NO_COLOR:-}" ]; then on='\033[36m' off='\033[0m'; else on='' off=''; fi; \
	grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | \
	awk -v on="$$on" -v off="$$off" 'BEGIN {FS = ":.*?## "}; {printf "  %s%-16s%s %s\n", on, $$1, off, $$2}'

.tools/bin/uv:
	@test -n "$(PYTHON)" || { echo "Python 3.10 not found: install it (e.g. apt install python3.10 python3.10-venv, or pyenv install 3.10) or pass PYTHON=/path/to/python3.10"; exit 1; }
	"$(PYTHON)" -m venv .tools
	.tools/bin/pip install -q uv==$(UV_VERSION)

$(VENV)/.installed: requirements/runtime.lock requirements/dev.lock pyproject.toml | $(UV)
	@test -n "$(PYTHON)" || { echo "Python 3.10 not found: pass PYTHON=/path/to/python3.10"; exit 1; }
	test -x $(PY) || $(UV) venv -q --python "$(PYTHON)" $(VENV)
	@echo "installing the locked Python stack into $(VENV) (first time: about 4 GB of wheels, a few minutes; uv shows its progress)"
	$(UV) pip sync --python $(PY) --require-hashes requirements/runtime.lock
	$(UV) pip install --python $(PY) --require-hashes -r requirements/dev.lock
	$(UV) pip install -q --python $(PY) --no-deps --no-build-isolation -e .
	touch $@

.PHONY: venv
venv: $(VENV)/.installed  ## Create .venv from the hash lock (the image's exact Python stack + test tools)

.PHONY: lock
lock: | $(UV)  ## Re-resolve requirements/*.lock from requirements/*.in (hashes, linux x86_64, py3.10)
	$(UV) pip compile requirements/runtime.in $(LOCK_FLAGS) --exclude-newer $(RUNTIME_EXCLUDE_NEWER) -o requirements/runtime.lock
	$(UV) pip compile requirements/dev.in $(LOCK_FLAGS) --exclude-newer $(DEV_EXCLUDE_NEWER) -o requirements/dev.lock

.PHONY: model
model: venv  ## Download (sha256-checked) and convert the embedded SmolLM2-135M-Instruct
	$(PY) -m entrypoint prepare-model

.PHONY: smoke
smoke: venv model  ## GRPO end to end on the CPU with the embedded model, then base vs adapter on held-out tasks
	$(PY) -m entrypoint train recipe=smoke
	$(PY) -m entrypoint evaluate run=latest EVAL_PROMPTS=12 EVAL_GENERATIONS=4

RUN ?= latest
.PHONY: eval
eval: venv  ## Did training help? Base model vs the run's adapter on held-out prompts: make eval RUN=<name>
	$(PY) -m entrypoint evaluate run=$(RUN) $(ARGS)

.PHONY: rerun
rerun: venv  ## Repeat a run from its manifest into a new run directory, drift refused: make rerun RUN=<name> [ARGS="--plan"]
	$(PY) -m entrypoint rerun run=$(RUN) $(ARGS)

.PHONY: plan
plan: venv  ## Print what `train` would run: make plan RECIPE=countdown-1x4090 ARGS="INVENTORY=examples/inventories/1x4090-driver535.json"
	$(PY) -m entrypoint plan recipe=$(RECIPE) $(ARGS)

.PHONY: validate
validate: venv  ## Every preflight check, every problem printed: make validate RECIPE=tcm-4x4090 ARGS="INVENTORY=... DATASET=..."
	$(PY) -m entrypoint validate recipe=$(RECIPE) $(ARGS)

.PHONY: doctor
doctor: venv  ## This machine's GPUs (NVML), NCCL-relevant facts and /dev/shm: make doctor [ARGS="--save-inventory inv.json"]
	$(PY) -m entrypoint doctor $(ARGS)

.PHONY: keys
keys: venv  ## The keys the entrypoint owns, with their defaults
	$(PY) -m entrypoint keys $(ARGS)

.PHONY: recipes
recipes: venv  ## The shipped recipes, each with what it is for
	$(PY) -m entrypoint recipes

.PHONY: import
import: venv  ## An ms-swift command line or script as a recipe: make import FILE=my_run.sh ARGS="-o recipes/mine.env INVENTORY=..."
	@test -n "$(FILE)" || { echo "make import FILE=<script or file with a swift rlhf command line> [ARGS=\"-o recipes/mine.env\"]"; exit 2; }
	$(PY) -m entrypoint import "$(FILE)" $(ARGS)

.PHONY: lint
lint: venv  ## ruff, the layer contract (import-linter), hadolint, compose config, actionlint, zizmor
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/hadolint Dockerfile
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.compose-spec compose.yaml
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(VENV)/bin/actionlint
	$(VENV)/bin/zizmor --offline .github/workflows
	@if docker compose version >/dev/null 2>&1; then \
		$(COMPOSE) -f compose.yaml config -q && $(COMPOSE) -f compose.yaml -f compose.cpu.yaml config -q && echo "compose config: ok"; \
	else echo "compose config: skipped (docker compose not installed; the schema check above ran)"; fi

# Two phases. The tests that train for real (marked slow, docker, netns: one shared smoke run, the two-node
# run, the container) run one after another: on CI's 2 cores two overlapping CPU trainings ran each step
# 5-10x slower than one alone. The rest (short subprocesses that use one core each) run in FAST_WORKERS
# pytest-xdist processes, whole files per worker.
FAST_WORKERS ?= 2
REAL = slow or docker or netns

.PHONY: test
test: venv model lint  ## Lint, then every test (the real smoke GRPO run and the container test included)
	$(VENV)/bin/pytest -q -n $(FAST_WORKERS) --dist loadfile -m "not ($(REAL))"
	$(VENV)/bin/pytest -q -m "$(REAL)"

# The edit loop: in-process tests only (no training, Docker, namespaces or entrypoint subprocesses; those are
# marked cli), none that imports torch and its kind (marked torch), spread test by test over FAST_WORKERS. The
# hook drift test is among them: a lock bump that changes an upstream function a child hook patches fails here.
.PHONY: test-fast
test-fast: venv model  ## The edit loop: in-process tests only (no training, Docker, subprocesses or torch), in parallel
	$(VENV)/bin/pytest -q -n $(FAST_WORKERS) --dist load -m "not ($(REAL) or cli or torch)"

# Docker, its daemon, Compose v2, and for GPU targets the NVIDIA runtime, each named when missing.
need_docker = @scripts/docker-check.sh
need_docker_gpu = @scripts/docker-check.sh gpu
# The image through `make build` when it is not built yet: its failure names the fix (a base-image mirror, a
# proxy's CA bundle), where `compose run` would build it itself and print only BuildKit's error.
need_image = @image=$$($(COMPOSE) config --images train) && { docker image inspect "$$image" >/dev/null 2>&1 || { \
	echo "the image $$image is not built yet: building it first (make build)"; $(MAKE) --no-print-directory build; }; }

.PHONY: build
build:  ## Build the image (docker compose build); behind a TLS proxy set CA_BUNDLE=/path/to/ca.pem
	$(need_docker)
	@$(COMPOSE) build train || { status=$$?; \
		echo "make build failed (see above). If the base image could not be pulled (Docker Hub unreachable or rate-limited),"; \
		echo "  build from a mirror: BASE_IMAGE=<your mirror of nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04> make build"; \
		echo "If a download failed on a certificate (a proxy that re-signs TLS), pass its CA bundle:"; \
		echo "  CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt make build   (README: Train on your GPUs)"; \
		echo "Then run your make command again: it uses the image once built."; exit $$status; }

# Created by you before compose mounts them; otherwise the daemon creates them owned by root.
output data:
	mkdir -p $@

.PHONY: train
train: | output data  ## Train in the container: make train RECIPE=tcm-4x4090 [ARGS="KEY=VALUE ..."]
	$(need_docker_gpu)
	$(need_image)
	$(COMPOSE) run --rm train recipe=$(RECIPE) $(ARGS)

.PHONY: train-single
train-single: | output data  ## The single-RTX-4090 countdown recipe in the container
	$(need_docker_gpu)
	$(need_image)
	$(COMPOSE) run --rm train recipe=countdown-1x4090 $(ARGS)

.PHONY: container-plan
container-plan: | output data  ## `plan` inside the container: make container-plan RECIPE=... [ARGS=...]
	$(need_docker)
	$(need_image)
	$(COMPOSE) run --rm train plan recipe=$(RECIPE) $(ARGS)

BENCH_MODELS ?= .cache/bench-models
# `make bench` writes its runs, logs and compile caches under BENCH_OUT (git-ignored; bench/throughput/README.md
# says how a run is archived) and copies the report (countdown-throughput.json, .md, .png) to BENCH_REPORT.
BENCH_OUT ?= bench/throughput/latest
BENCH_REPORT ?= docs/benchmarks

.PHONY: bench
bench: venv model  ## GPU only: countdown-1x4090 throughput (seed, before, shipped) on a 24 GiB-capped card (bench/)
	@command -v nvidia-smi >/dev/null 2>&1 || { echo "make bench needs an NVIDIA GPU (nvidia-smi not found)"; exit 1; }
	test -d $(BENCH_MODELS)/qwen-tokenizer || $(PY) bench/qwen_tokenizer.py $(BENCH_MODELS)/qwen-tokenizer
	test -d $(BENCH_MODELS)/q05 || $(PY) bench/make_random_model.py Qwen/Qwen2.5-0.5B-Instruct $(BENCH_MODELS)/q05 \
		--tokenizer $(BENCH_MODELS)/qwen-tokenizer
	$(PY) bench/countdown_throughput.py --models $(BENCH_MODELS) --out $(BENCH_OUT) $(ARGS)
	cp $(BENCH_OUT)/countdown-throughput.* $(BENCH_REPORT)/
	$(PY) bench/validate_time.py

.PHONY: clean
clean:  ## Remove the venv and tools (outputs and caches stay)
	rm -rf $(VENV) .tools
