#!/usr/bin/env bash
# Installs walrelay's build and test dependencies from Debian 12's packages. Idempotent:
# packages already present are not touched, and apt is not called when nothing is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libpq-dev librdkafka-dev rapidjson-dev libboost-dev libspdlog-dev doctest-dev libcli11-dev
  postgresql-15 postgresql-15-wal2json
  kcat
  libhiredis-dev redis-server    # the idempotent consumer's Redis store and its tests
  libssl-dev                     # the REST API's https listener
  openssl                        # certificates for the TLS integration test
  clang libclang-rt-14-dev       # libFuzzer and the sanitizers, for scripts/fuzz.sh
  clang-format                   # scripts/check-format.sh
  openjdk-17-jdk-headless maven  # the Apache Kafka broker (scripts/fetch-kafka.sh) and its tests
  unzip xz-utils                 # unpacking other PostgreSQL majors (scripts/fetch-postgres.sh)
  podman runc debootstrap        # the container image test (tests/container/container_test.sh)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# The server packages start a default PostgreSQL cluster on 5432 and a redis-server on 6379;
# walrelay's demo and tests never use them (they start their own on free ports), so keep apt
# from starting services.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
