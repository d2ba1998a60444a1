# Sourced by the fetch-*.sh scripts: copies the runtime dependencies of a pom from Maven Central
# into a cache outside the repository, once, and prints the directory of jars.
#
#   fetch_maven_jars <label> <pom> <version property> <expected jar>...
#
# The jars land in ${WALRELAY_CACHE_DIR:-~/.cache/walrelay}/<label>-<version>/libs. A finished
# fetch leaves a marker holding the pom's checksum, so later calls cost nothing until the pom
# changes; a fetch that fails or lacks an expected jar ("@VERSION@" stands for the version)
# leaves the cache as it was. Needs a JDK and Maven (scripts/install-deps.sh installs both).
fetch_maven_jars() {
  local label=$1 pom=$2 property=$3
  shift 3
  local version cache libs checksum staging jar
  version=$(sed -n "s:.*<$property>\(.*\)</$property>.*:\1:p" "$pom")
  [ -n "$version" ] || { echo "fetch-$label: no $property in $pom" >&2; return 1; }
  cache="${WALRELAY_CACHE_DIR:-$HOME/.cache/walrelay}/$label-$version"
  libs="$cache/libs"
  checksum=$(sha256sum "$pom" | cut -d' ' -f1)
  if [ -d "$libs" ] && [ "$(cat "$cache/complete" 2>/dev/null)" = "$checksum" ]; then
    echo "$libs"
    return 0
  fi
  for tool in java mvn; do
    command -v "$tool" >/dev/null || {
      echo "fetch-$label: '$tool' not found; run scripts/install-deps.sh" >&2
      return 1
    }
  done
  echo "fetch-$label: fetching $label $version with Maven" >&2
  mkdir -p "$cache"
  staging=$(mktemp -d "$cache/libs.XXXXXX")
  if ! mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$staging" >&2; then
    rm -rf "$staging"
    return 1
  fi
  for jar in "$@"; do
    jar=${jar//@VERSION@/$version}
    [ -f "$staging/$jar" ] || {
      echo "fetch-$label: Maven finished but $jar is missing" >&2
      rm -rf "$staging"
      return 1
    }
  done
  rm -rf "$libs"
  mv "$staging" "$libs"
  echo "$checksum" >"$cache/complete"
  echo "$libs"
}
