#!/usr/bin/env bash
# Makes the Debian 12 base image that docker/Dockerfile's FROM lines name, for podman on a
# machine without a container registry: a minbase debootstrap from Debian's packages, imported
# as localhost/debian-base:bookworm and tagged docker.io/library/debian:bookworm and
# :bookworm-slim, so `podman build --pull=never` finds both stages' bases.
#
# The root file system is kept as a tarball under ~/.cache/walrelay (about 60 MB compressed), so
# only the first run on a machine downloads it (about a minute). This image stands in for the
# registry's debian images: same release and packages, not the same bytes (no apt clean-up
# tweaks of the official slim image). Needs root (debootstrap) and podman, debootstrap
# (scripts/install-deps.sh --container).
set -euo pipefail

cache="${WALRELAY_CACHE:-$HOME/.cache/walrelay}"
tarball="$cache/debian-bookworm-minbase.tar.gz"
image=localhost/debian-base:bookworm
mirror="${WALRELAY_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if ! podman image exists "$image"; then
  if [ ! -s "$tarball" ]; then
    mkdir -p "$cache"
    rootfs="$(mktemp -d)"
    trap 'rm -rf "$rootfs"' EXIT
    echo "container-base: debootstrap bookworm (minbase) from $mirror"
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
      tail -20 "$rootfs.log" >&2
      echo "container-base: debootstrap failed (log above)" >&2
      exit 1
    }
    rm -f "$rootfs.log"
    # As the registry's image has it: bookworm with its updates and security suites, and no
    # package cache or lists (every Dockerfile stage runs apt-get update first).
    rm -f "$rootfs/etc/apt/sources.list"
    cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
      "$rootfs"/var/lib/apt/lists/*
    # Written under a temporary name first, so an interrupted run leaves no half tarball.
    tar -C "$rootfs" -czf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
  fi
  echo "container-base: importing $tarball as $image"
  podman import "$tarball" "$image" >/dev/null
fi
podman tag "$image" docker.io/library/debian:bookworm docker.io/library/debian:bookworm-slim
echo "container-base: $image ready (tagged debian:bookworm, debian:bookworm-slim)"
