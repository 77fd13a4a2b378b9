#!/usr/bin/env bash
# A stand-in base image for CI machines that cannot pull nvidia/cuda from Docker Hub.
#
# Usage: scripts/make-test-base-image.sh [TAG]     (default grpo-rig-test-base:bookworm-py310)
#
# Debian bookworm (debootstrap minbase) plus a copy of this machine's CPython 3.10 at /opt/py310, linked
# as /usr/local/bin/python3.10 and python3. The Dockerfile finds python3.10 on PATH and skips installing
# one, so the same Dockerfile builds on this and on nvidia/cuda:*-ubuntu22.04 (where apt installs it).
# Only for CPU tests: there is no CUDA toolkit here (torch's wheels bring the CUDA runtime anyway).
#
# Idempotent: does nothing when TAG already exists (FORCE=1 rebuilds it).
# Environment: PYTHON310_PREFIX (default: /root/.pyenv/versions/3.10.13, else the prefix of the first
# python3.10 on PATH), DEBIAN_MIRROR (default http://deb.debian.org/debian). Needs root and debootstrap.
set -euo pipefail

TAG=${1:-grpo-rig-test-base:bookworm-py310}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Shared libraries the copied Python's extension modules link against (ssl, sqlite3, readline, ctypes,
# lzma, bz2, zlib), plus CA certificates. Everything else comes from the Dockerfile's own apt step.
PACKAGES=ca-certificates,libssl3,libsqlite3-0,libreadline8,libffi8,liblzma5,libbz2-1.0,zlib1g,libncursesw6,libuuid1

die() { echo "make-test-base-image: ERROR: $*" >&2; exit 1; }

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$TAG" >/dev/null 2>&1; then
    echo "make-test-base-image: $TAG already exists"
    exit 0
fi

if [ -z "${PYTHON310_PREFIX:-}" ]; then
    if [ -x /root/.pyenv/versions/3.10.13/bin/python3.10 ]; then
        PYTHON310_PREFIX=/root/.pyenv/versions/3.10.13
    elif command -v python3.10 >/dev/null; then
        PYTHON310_PREFIX=$(python3.10 -c 'import sys; print(sys.base_prefix)')
    else
        die "no Python 3.10 found: set PYTHON310_PREFIX to a CPython 3.10 installation prefix"
    fi
fi
[ -x "$PYTHON310_PREFIX/bin/python3.10" ] || die "$PYTHON310_PREFIX/bin/python3.10 does not exist"
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null || die "debootstrap is not installed (scripts/docker-engine.sh installs it)"

rootfs=$(mktemp -d /tmp/grpo-rig-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
start=$(date +%s)
echo "make-test-base-image: debootstrap bookworm into $rootfs"
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$rootfs" "$DEBIAN_MIRROR" >"$rootfs.log" 2>&1 ||
    { tail -n 30 "$rootfs.log" >&2; die "debootstrap failed (log: $rootfs.log)"; }
rm -f "$rootfs.log"

echo "make-test-base-image: copying Python from $PYTHON310_PREFIX"
mkdir -p "$rootfs/opt/py310"
# The pyenv tree without its caches and test suite (smaller image, same interpreter).
tar -C "$PYTHON310_PREFIX" --exclude='__pycache__' --exclude='lib/python3.10/test' --exclude='lib/python3.10/site-packages/*' -cf - . |
    tar -C "$rootfs/opt/py310" -xf -
echo /opt/py310/lib >"$rootfs/etc/ld.so.conf.d/py310.conf"
chroot "$rootfs" /sbin/ldconfig
ln -sf /opt/py310/bin/python3.10 "$rootfs/usr/local/bin/python3.10"
ln -sf /opt/py310/bin/python3.10 "$rootfs/usr/local/bin/python3"
chroot "$rootfs" /usr/local/bin/python3.10 -c 'import ssl, sqlite3, readline, ctypes, lzma, bz2, zlib, venv, ensurepip' ||
    die "the copied Python cannot import its standard extension modules"
# apt caches and lists from debootstrap: the Dockerfile runs apt-get update itself.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*

tar -C "$rootfs" -cf - . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'CMD ["/bin/bash"]' - "$TAG" >/dev/null
echo "make-test-base-image: $TAG built in $(($(date +%s) - start))s ($(docker image inspect -f '{{.Size}}' "$TAG") bytes)"
