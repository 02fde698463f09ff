#!/usr/bin/env bash
# A local stand-in for python:3.11-slim-bookworm, for machines that reach Debian's package
# archive but no container registry (the container test and CI use it):
#
#   deploy/image/base-image.sh [TAG]          (root and podman needed; debootstrap installed)
#
# debootstrap's minbase variant plus Debian's Python 3.11 (python3-dev too: the C accelerator
# needs Python.h, as it finds it in the official image), `python` linked to python3, Debian's
# EXTERNALLY-MANAGED marker removed (the official image has none), documentation, manuals,
# translations, apt lists and caches removed as in Debian's -slim images, then `podman import`.  The image is labelled with a hash of this script and is
# rebuilt only when the script changed or SMCDP_BASE_REFRESH=1 is set (e.g. to pick up
# Debian security updates), so repeated runs on one machine reuse it.
set -euo pipefail

TAG="${1:-localhost/smcdp-python:3.11-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
PODMAN="${PODMAN:-podman}"
RECIPE="$(sha256sum "$0" | cut -c1-16)"
LABEL=org.smcdp.base-recipe

if [ "${SMCDP_BASE_REFRESH:-0}" != 1 ] && "$PODMAN" image exists "$TAG" \
   && [ "$("$PODMAN" image inspect --format "{{ index .Labels \"$LABEL\" }}" "$TAG")" = "$RECIPE" ]; then
  echo "base image $TAG is up to date (recipe $RECIPE); SMCDP_BASE_REFRESH=1 rebuilds it"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "$0: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "$0: apt-get install debootstrap" >&2; exit 1; }

root="$(mktemp -d "${TMPDIR:-/var/tmp}/smcdp-base.XXXXXX")"
trap 'rm -rf --one-file-system "$root"' EXIT
echo "debootstrap $SUITE from $MIRROR into $root (about a minute) ..."
debootstrap --variant=minbase \
  --include=python3,python3-venv,python3-pip,python3-dev,ca-certificates \
  "$SUITE" "$root" "$MIRROR" > "$root.log" 2>&1 || { tail -30 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
cat > "$root/etc/apt/sources.list" <<SOURCES
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main
SOURCES
ln -sf python3 "$root/usr/bin/python"
rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
# What Debian's own -slim images leave out (and dpkg keeps out of later installs): manuals,
# documentation except copyright files, translations.
cat > "$root/etc/dpkg/dpkg.cfg.d/slim-excludes" <<'EXCLUDES'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EXCLUDES
find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$root"/usr/share/man/* "$root"/usr/share/groff/* "$root"/usr/share/info/* \
       "$root"/usr/share/lintian/* "$root"/usr/share/linda/* "$root"/usr/share/locale/*
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/log/* "$root"/tmp/* \
       "$root"/root/.cache
tar --numeric-owner -C "$root" -c . | "$PODMAN" import --quiet \
  --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
  --change "LABEL $LABEL=$RECIPE" \
  --change "LABEL org.opencontainers.image.description=Debian $SUITE minbase with Python 3 (local stand-in for python:3.11-slim-$SUITE)" \
  --message "smcdp base: debootstrap $SUITE minbase + python3" - "$TAG" >/dev/null
echo "base image $TAG built (recipe $RECIPE)"
