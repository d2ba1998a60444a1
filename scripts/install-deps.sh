#!/usr/bin/env bash
# Installs walrelay's build and test dependencies from Debian 12's packages. Idempotent:
# packages already present are not touched, and apt is not called when nothing is missing.
#
#   bash scripts/install-deps.sh            # everything the tests need
#   bash scripts/install-deps.sh demo       # only what building walrelay and its demo need
#   bash scripts/install-deps.sh demo java  # the same, and a JDK with Maven (demo --kafka apache)
set -euo pipefail

# Building walrelay (CMake finds every library at configure time, doctest included) and the
# demo's throwaway PostgreSQL.
demo_packages=(
  build-essential cmake pkg-config
  libpq-dev librdkafka-dev rapidjson-dev libboost-dev libspdlog-dev doctest-dev libcli11-dev
  libhiredis-dev libssl-dev
  postgresql-15
)
java_packages=(openjdk-17-jdk-headless maven)

packages=(
  build-essential cmake pkg-config git
  libpq-dev librdkafka-dev rapidjson-dev libboost-dev libspdlog-dev doctest-dev libcli11-dev
  postgresql-15 postgresql-15-wal2json
  pgbouncer                      # the polling mode's pooler test (integration_polling)
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

# dynalite, a DynamoDB-API server for the DynamoDB store's tests (npm; Debian has no package),
# pinned, into the cache directory src/devtools/dynalite_sandbox.cc looks in. Node.js and npm
# come from Debian when missing.
DYNALITE_VERSION=4.0.0
install_dynalite() {
  local dir="${XDG_CACHE_HOME:-$HOME/.cache}/walrelay/dynalite"
  if [ -f "$dir/node_modules/dynalite/package.json" ] &&
     grep -q "\"version\": \"$DYNALITE_VERSION\"" "$dir/node_modules/dynalite/package.json"; then
    echo "install-deps: dynalite $DYNALITE_VERSION present"
    return 0
  fi
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm
  fi
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "dynalite@$DYNALITE_VERSION"
  echo "install-deps: dynalite $DYNALITE_VERSION installed in $dir"
}

demo_only=false
if [ "${1:-}" = demo ]; then
  demo_only=true
  packages=("${demo_packages[@]}")
  if [ "${2:-}" = java ]; then packages+=("${java_packages[@]}"); fi
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  $demo_only || install_dynalite
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
$demo_only || install_dynalite
