#!/usr/bin/env bash
# Make a Docker engine and Docker Compose available for `make compose-check` on a clean Debian
# machine (CI): install Debian's docker.io, docker-compose (v1) and debootstrap when missing, and
# start dockerd when nothing answers `docker info`. Exit 0 when the engine answers, 1 with the
# reason (the end of dockerd's log) when it cannot start here, for example in a container
# without the privileges an engine needs.
set -uo pipefail
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker-compose >/dev/null 2>&1 \
        || ! command -v debootstrap >/dev/null 2>&1; then
    apt-get update -q && apt-get install -y -q --no-install-recommends \
        docker.io docker-compose debootstrap iptables || exit 1
fi
if docker info >/dev/null 2>&1; then
    exit 0
fi
log=/tmp/optistudio-dockerd.log
nohup dockerd >"$log" 2>&1 &
for _ in $(seq 60); do
    if docker info >/dev/null 2>&1; then
        echo "Docker engine started (log: $log)"
        exit 0
    fi
    sleep 1
done
echo "No Docker engine could start here; the end of dockerd's log ($log):"
tail -n 20 "$log"
exit 1
