#!/usr/bin/env bash
# Regenerate the image's lock files (make docker-lock):
#
#   deploy/requirements.lock        smcdp's runtime dependencies, every version pinned, every
#                                   file hashed (pip-compile --generate-hashes, from pyproject.toml)
#   deploy/build-requirements.lock  the build tools the image's build stage uses to build
#                                   smcdp and sdist-only dependencies (setuptools, wheel)
#
# pip-compile runs in a throwaway virtualenv with pip's configuration files ignored, so the
# result depends only on PyPI and on the Python that runs it -- which must be the image's
# (3.11): markers such as python_version are resolved for it.  PIP_CERT / PIP_INDEX_URL from
# the environment are honoured (a proxy CA, a mirror).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
want=3.11
have="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[ "$have" = "$want" ] || { echo "$0: $PY is Python $have; the image runs $want (set PYTHON=python$want)" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PIP_CONSTRAINT
"$PY" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet "pip-tools==7.4.1"
compile() {  # OUT INPUT...
  local out="$1"; shift
  CUSTOM_COMPILE_COMMAND="make docker-lock" "$tmp/venv/bin/pip-compile" --quiet --generate-hashes \
    --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
    --resolver=backtracking --output-file "$out" "$@"
}
compile deploy/requirements.lock pyproject.toml
printf 'setuptools>=68\nwheel\n' > "$tmp/build-requirements.in"
compile deploy/build-requirements.lock "$tmp/build-requirements.in"
# pip-compile records the temporary input path; name the real source instead
sed -i "s|$tmp/build-requirements.in|deploy/image/lock.sh (setuptools>=68, wheel)|" deploy/build-requirements.lock
echo "wrote deploy/requirements.lock and deploy/build-requirements.lock (Python $have)"
