#!/usr/bin/env bash
# Start/stop a private Docker engine on a host without systemd (CI, build machines).
#   eval "$(docker/dockerd-local.sh start DIR)"   # prints `export DOCKER_HOST=unix://DIR/docker.sock`
#   docker/dockerd-local.sh stop DIR
# Uses overlay2 (vfs works too, ~10x slower). Stopping leaves the FORWARD=DROP iptables policy
# and the docker0 bridge that dockerd set up; it stops only the dockerd whose pid is in DIR.
set -euo pipefail
cmd=${1:?usage: dockerd-local.sh start|stop DIR}
dir=${2:?usage: dockerd-local.sh start|stop DIR}
case "$cmd" in
start)
    command -v dockerd >/dev/null || { echo "dockerd not found: apt-get install -y docker.io" >&2; exit 2; }
    mkdir -p "$dir/root" "$dir/exec"
    dockerd --data-root "$dir/root" --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
        -H "unix://$dir/docker.sock" --storage-driver "${DOCKERD_STORAGE:-overlay2}" >"$dir/dockerd.log" 2>&1 &
    for _ in $(seq 1 60); do
        if DOCKER_HOST="unix://$dir/docker.sock" docker info >/dev/null 2>&1; then
            echo "export DOCKER_HOST=unix://$dir/docker.sock"
            exit 0
        fi
        sleep 0.5
    done
    echo "dockerd did not answer within 30 s; see $dir/dockerd.log" >&2
    exit 1
    ;;
stop)
    if [ -f "$dir/dockerd.pid" ]; then
        pid=$(cat "$dir/dockerd.pid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.5; done
        echo "dockerd $pid still running" >&2
        exit 1
    fi
    ;;
*)
    echo "usage: dockerd-local.sh start|stop DIR" >&2; exit 2 ;;
esac
