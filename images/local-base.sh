#!/usr/bin/env bash
# Build the local stand-in for the images' base when registries cannot be reached (tests, air-gapped CI):
# Debian bookworm minbase with its Python 3.11, the same Python the project pins. The Dockerfiles are the
# same; only BASE_IMAGE / PYTHON_BASE_IMAGE differ from the real (rayproject/ray, python:3.11-slim) ones.
#   images/local-base.sh [IMAGE]     (default localhost/rayfleet-local-base:bookworm; skips if it exists)
set -euo pipefail
image="${1:-localhost/rayfleet-local-base:bookworm}"
if podman image exists "$image"; then
  echo "$image exists"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "error: debootstrap not installed (apt-get install debootstrap)" >&2; exit 1; }
# The packages are checked (issue 54): debootstrap verifies the suite's Release file against this keyring and
# each package against the Release file's SHA256 sums. Named explicitly, because without a keyring debootstrap
# only warns and goes on unverified; a missing keyring is an error here instead.
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || { echo "error: $keyring missing (apt-get install debian-archive-keyring)" >&2; exit 1; }
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
echo "debootstrap bookworm (minbase + python3) into $root ..."
debootstrap --variant=minbase --keyring="$keyring" --include=python3,python3-venv,ca-certificates,passwd \
  bookworm "$root" http://deb.debian.org/debian >/dev/null
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
echo "importing as $image ..."
tar -C "$root" -c . | podman import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "$image ready"
