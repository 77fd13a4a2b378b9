#!/usr/bin/env bash
# What a `make` target that runs containers needs, checked one by one so the message names the missing
# piece: the docker CLI, a running daemon, Compose v2, and (for GPU targets) the NVIDIA runtime.
#   scripts/docker-check.sh [gpu]
set -u
need_gpu=${1:-}
if ! command -v docker >/dev/null 2>&1; then
  echo "docker is not installed: install Docker Engine (https://docs.docker.com/engine/install/)," \
       "then the NVIDIA Container Toolkit for GPUs." >&2
  exit 1
fi
if ! err=$(docker info 2>&1 >/dev/null); then
  case "$err" in
    *"permission denied"*)
      echo "docker is installed but this user may not use its socket: add yourself to the docker group" \
           "(sudo usermod -aG docker \$USER, then log in again) or use sudo." >&2 ;;
    *)
      echo "docker is installed but its daemon is not running (${err##*$'\n'}): start it" \
           "(sudo systemctl start docker), then try again." >&2 ;;
  esac
  exit 1
fi
if ! docker compose version >/dev/null 2>&1; then
  echo "Docker Compose v2 (\`docker compose\`) is missing: install the docker-compose-plugin package" \
       "(https://docs.docker.com/compose/install/linux/)." >&2
  exit 1
fi
if [ "$need_gpu" = gpu ] && [[ "${COMPOSE_FILE:-}" != *compose.cpu.yaml* ]]; then
  runtimes=$(docker info --format '{{json .Runtimes}}' 2>/dev/null || true)
  cdi=$(docker info --format '{{json .CDISpecDirs}}' 2>/dev/null || true)
  if [[ "$runtimes" != *nvidia* ]] && ! ls /etc/cdi/nvidia*.yaml /var/run/cdi/nvidia*.yaml >/dev/null 2>&1; then
    echo "Docker has no NVIDIA runtime, so it cannot give the container a GPU (compose would fail with" \
         "'could not select device driver \"nvidia\"'). Install the NVIDIA Container Toolkit" \
         "(https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html)," \
         "run 'sudo nvidia-ctk runtime configure --runtime=docker' and restart Docker; or run on the CPU:" \
         "export COMPOSE_FILE=compose.yaml:compose.cpu.yaml (CDI dirs: ${cdi:-none})." >&2
    exit 1
  fi
fi
