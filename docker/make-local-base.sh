#!/usr/bin/env bash
# Make a stand-in for python:3.11-slim-bookworm where no container registry can be reached,
# so `FROM python:3.11-slim-bookworm` in docker/Dockerfile builds unchanged (neither builder
# pulls an image that exists locally). Needs root, mmdebstrap and a Debian mirror.
#
#   docker/make-local-base.sh            # local/debian:12, then python:3.11-slim-bookworm
#
# Env: DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR (default deb.debian.org), BASE_TAG (stand-in tag),
#      FORCE=1 (rebuild even if the images exist).
# The stand-in is Debian 12's Python 3.11 (/usr/bin/python3) with venv and pip, not the
# official image's /usr/local build; the project needs nothing that differs between the two.
set -euo pipefail

MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
DEBIAN_TAG=${DEBIAN_TAG:-local/debian:12}
BASE_TAG=${BASE_TAG:-python:3.11-slim-bookworm}
FORCE=${FORCE:-0}

command -v docker >/dev/null || { echo "docker CLI not found" >&2; exit 2; }
docker info >/dev/null 2>&1 || { echo "no Docker engine answers (set DOCKER_HOST?)" >&2; exit 2; }

if [ "$FORCE" = 1 ] || ! docker image inspect "$DEBIAN_TAG" >/dev/null 2>&1; then
    command -v mmdebstrap >/dev/null || { echo "mmdebstrap not found: apt-get install -y mmdebstrap" >&2; exit 2; }
    echo "making $DEBIAN_TAG with mmdebstrap from $MIRROR"
    mmdebstrap --variant=minbase --include=ca-certificates bookworm - \
        "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" "deb $SECURITY bookworm-security main" \
        | docker import - "$DEBIAN_TAG"
fi

if [ "$FORCE" = 1 ] || ! docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
    ctx=$(mktemp -d)
    trap 'rm -rf "$ctx"' EXIT
    cat > "$ctx/Dockerfile" <<DOCKERFILE
FROM $DEBIAN_TAG
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      python3 python3-venv python3-pip python-is-python3 ca-certificates \\
 && rm -rf /var/lib/apt/lists/*
ENV LANG=C.UTF-8 \\
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \\
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \\
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
CMD ["python3"]
DOCKERFILE
    echo "making stand-in $BASE_TAG"
    # --network host: works whether or not the engine has a bridge network (setup-host.sh starts
    # one with --bridge=none so that it leaves the host's firewall and interfaces alone).
    DOCKER_BUILDKIT=0 docker build -q --network host -t "$BASE_TAG" "$ctx"
fi
docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E "^(${DEBIAN_TAG}|${BASE_TAG})" || true
