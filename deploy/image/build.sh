#!/usr/bin/env bash
# Build the party image (make docker-image):
#
#   deploy/image/build.sh            Docker where a Docker engine answers, podman otherwise
#
# Environment (all optional):
#   IMAGE=smcdp:latest                     tag to build
#   PYTHON_IMAGE=python:3.11-slim-bookworm base of both stages (any Debian-based Python 3.11
#                                          image; deploy/image/base-image.sh makes one locally)
#   BUILD_CA=FILE                          PEM file of an extra CA that pip in the build stage
#                                          must trust (a TLS-intercepting proxy); passed as the
#                                          build secret "build_ca", never stored in the image
#   CONTAINER_ENGINE=docker|podman         force an engine
#   SOURCE=URL                             org.opencontainers.image.source (default: the git
#                                          remote "origin", credentials stripped)
#   BUILD_FLAGS="..."                      extra flags for `docker build` / `podman build`
set -euo pipefail
cd "$(dirname "$0")/../.."

IMAGE="${IMAGE:-smcdp:latest}"
PYTHON_IMAGE="${PYTHON_IMAGE:-python:3.11-slim-bookworm}"
engine="${CONTAINER_ENGINE:-}"
if [ -z "$engine" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    engine=docker                  # a docker CLI alone is not enough: the engine must answer
  elif command -v podman >/dev/null 2>&1; then
    engine=podman
  else
    echo "$0: neither a Docker engine (docker info failed) nor podman is available;" \
         "install one (Debian: apt-get install podman)" >&2
    exit 1
  fi
fi

version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml | head -n1)"
revision=unknown created=unknown source="${SOURCE:-}"
if git rev-parse --git-dir >/dev/null 2>&1; then
  revision="$(git rev-parse HEAD)"
  # a build from uncommitted changes must not claim to be that commit
  [ -z "$(git status --porcelain --untracked-files=no -- pyproject.toml setup.py README.md smcdp deploy/Dockerfile deploy/requirements.lock deploy/build-requirements.lock)" ] \
    || revision="$revision-dirty"
  created="$(git log -1 --format=%cI)"
  [ -n "$source" ] || source="$(git config --get remote.origin.url 2>/dev/null | sed -E 's#^([a-z+]+://)[^/@]*@#\1#' || true)"
fi
[ -n "$source" ] || source=unknown

args=(build -f deploy/Dockerfile -t "$IMAGE"
      --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" --build-arg "VERSION=$version"
      --build-arg "REVISION=$revision" --build-arg "SOURCE=$source" --build-arg "CREATED=$created")
# The same values as --label too: buildah (podman 4.3) reuses a cached LABEL layer although its
# build arguments changed, which would leave the previous commit's revision on a new image.
for kv in "version=$version" "revision=$revision" "source=$source" "created=$created"; do
  args+=(--label "org.opencontainers.image.$kv")
done
if [ -n "${BUILD_CA:-}" ]; then
  [ -r "$BUILD_CA" ] || { echo "$0: BUILD_CA=$BUILD_CA is not a readable file" >&2; exit 1; }
  args+=(--secret "id=build_ca,src=$BUILD_CA")
fi
case "$engine" in
  docker) export DOCKER_BUILDKIT=1 ;;      # build secrets need BuildKit
  # Docker image format: the OCI format has no HEALTHCHECK, and podman would drop it.
  podman) args+=(--format docker) ;;
  *) echo "$0: CONTAINER_ENGINE must be docker or podman, not $engine" >&2; exit 1 ;;
esac
# shellcheck disable=SC2086
set -- "${args[@]}" ${BUILD_FLAGS:-} .
echo "+ $engine $*" >&2
exec "$engine" "$@"
