# smcdp — every target does its own set-up: it creates .venv if missing and installs the package.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    ?= out

.PHONY: all install demo test test-quick proto proto-check bench fuzz fault-campaign experiments multihost-test docker-image docker-lock constraints \
        container-test wheel-test lint docs notebook-test clean

all: test

## Every extra, at the versions constraints.txt pins: the environment CI tested, not whatever PyPI serves that
## day (a grpcio-tools release once failed CI on unchanged code).  `make constraints` moves them.
EXTRAS := test,dev,packaging,lint,docs,notebook
$(STAMP): pyproject.toml setup.py smcdp/crypto/_mont.c constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[$(EXTRAS)]'
	@touch $(STAMP)

install: $(STAMP)

## Byte-code for the package and the tests, written before a run that starts many processes: where
## PYTHONDONTWRITEBYTECODE is set (it is on some CI images), every party process would otherwise compile
## the whole package from source at start-up (~0.3 CPU-s each, hundreds of processes per test run).
## Python still reads .pyc files under that variable; compileall skips what is up to date.
BYTECODE = $(BIN)/python -m compileall -q -j 0 smcdp tests examples >/dev/null

## The main job: privacy-preserving power iteration between three separate party processes
## (Trent and two data parties) over gRPC with mutual TLS, on bundled example data.
demo: $(STAMP)
	$(BYTECODE)
	$(BIN)/python examples/power_iteration_demo.py --out $(OUT)/demo

## The whole test suite, on JOBS parallel workers (pytest-xdist; tests/support/scheduling.py says which
## tests share a worker; JOBS=0: one process).  docs/testing.md has where the time goes (six workers keep the two
## cores busy, four left a fifth of them idle); --durations=25 puts the slowest tests (setup, call and teardown)
## at the end of every log, CI's included.
JOBS ?= 6
test: $(STAMP)
	$(BYTECODE)
	$(BIN)/python -m pytest -q -ra -n $(JOBS) --dist loadgroup --durations=25

## The edit loop (about 6 min on two cores): the unit tests (tests/unit) that are not marked slow -- none starts a party
## process, a Dask cluster or a subprocess.  The whole suite is still `make test`.
test-quick: $(STAMP)
	$(BYTECODE)
	$(BIN)/python -m pytest -q -ra -n $(JOBS) --dist loadgroup -m "not slow" tests/unit

## Regenerate the protobuf/gRPC code in smcdp/v1 from protos/ (a test fails if it is stale).
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iprotos --python_out=. --pyi_out=. --grpc_python_out=. protos/smcdp/v1/*.proto

## Benchmarks: ratios against plain phe / numpy measured in the same run; rewrites the sections of
## docs/benchmarks.md it generates and keeps the others and their hand-written ### subsections.
bench: $(STAMP)
	$(BIN)/python bench/run_all.py --write docs/benchmarks.md

## Fuzz the party boundary (a real party process, 100,000 requests, payloads and live sessions) and
## the C accelerator (100,000 calls, then under valgrind); docs/security.md records a run.
fuzz: $(STAMP)
	@mkdir -p $(OUT)
	$(BIN)/python bench/fuzz_boundary.py --json $(OUT)/fuzz-boundary.json
	$(BIN)/python bench/fuzz_native.py --json $(OUT)/fuzz-native.json

## A seeded fault campaign against real party processes (kills, pauses, a party kept down, damaged
## journals and checkpoints): per fault identical / named-and-resumed-identical / named / lost.
FAULTS ?= 24
FAULT_KINDS ?= process,link
fault-campaign: $(STAMP)
	@mkdir -p $(OUT)
	$(BIN)/python bench/fault_campaign.py --faults $(FAULTS) --kinds $(FAULT_KINDS) --json $(OUT)/fault-campaign.json

## Reproductions of the seed papers' experiments at reduced repetitions (FULL=1 for the papers').
## Writes a PNG and a markdown page per experiment and OUT/experiments/index.html indexing them.
experiments: $(STAMP)
	$(BIN)/python examples/exp_all.py --out $(OUT)/experiments $(if $(FULL),--full,)

## The multi-host test in network namespaces (needs root).
multihost-test: $(STAMP)
	$(BIN)/python -m pytest -q -ra -m multihost tests/integration/multihost

## The party image (deploy/Dockerfile): built with Docker where a Docker engine answers, with
## podman otherwise.  IMAGE: the tag; PYTHON_IMAGE: the base of both stages; BUILD_CA: a PEM file
## of an extra CA pip must trust while building (a build secret, never stored in the image);
## CONTAINER_ENGINE=docker|podman forces an engine.  See deploy/image/build.sh.
IMAGE        ?= smcdp:latest
PYTHON_IMAGE ?= python:3.11-slim-bookworm
BUILD_CA     ?=
docker-image:
	IMAGE='$(IMAGE)' PYTHON_IMAGE='$(PYTHON_IMAGE)' BUILD_CA='$(BUILD_CA)' deploy/image/build.sh

## Regenerate deploy/requirements.lock and deploy/build-requirements.lock (the image's pinned,
## hashed dependencies) from pyproject.toml with pip-compile; needs Python 3.11, the image's.
docker-lock:
	PYTHON='$(PYTHON)' deploy/image/lock.sh

## Regenerate constraints.txt: every extra resolved afresh from pyproject.toml in a throwaway venv, frozen.
## Commit it on its own, after `make test` passes on it (CONTRIBUTING.md, "Dependencies").
constraints:
	rm -rf $(OUT)/constraints-venv
	$(PYTHON) -m venv $(OUT)/constraints-venv
	$(OUT)/constraints-venv/bin/python -m pip install --quiet --upgrade pip
	$(OUT)/constraints-venv/bin/python -m pip install --quiet '.[$(EXTRAS)]'
	{ echo "# The versions make install and make wheel-test use (pip -c): every extra of pyproject.toml as one"; \
	  echo "# resolution, frozen by 'make constraints' on $$(date -u +%Y-%m-%d) with $$($(PYTHON) --version)."; \
	  $(OUT)/constraints-venv/bin/python -m pip freeze --exclude-editable | grep -v '^smcdp[ =@]'; } > constraints.txt
	rm -rf $(OUT)/constraints-venv

## The party image built and run: base image, image, one container per party from `smcdp deploy
## init` bundles, every protocol, confinement, SIGTERM, restart, docker-compose against podman's
## socket.  Needs root, podman, runc, debootstrap, docker-compose (.ci/run installs them).
container-test: $(STAMP)
	$(BIN)/python -m pytest -q -ra -m container tests/integration/containers

## Lint (issue 39): ruff's rules and formatter over the code, mypy over smcdp/ at the strictness set in
## pyproject.toml ([tool.ruff], [tool.mypy]; CONTRIBUTING.md says why).  CI runs it; so does pre-commit.
LINT_PATHS := smcdp tests bench examples
lint: $(STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy

## The documentation site (issue 39): docs/*.md and the API reference of the public API (docs/api) with
## Sphinx into OUT/docs; every warning -- a broken reference, a docstring that does not render -- fails.
docs: $(STAMP)
	$(BIN)/python -m sphinx -b html -n -W --keep-going -q docs $(OUT)/docs
	@echo "docs: $(OUT)/docs/index.html"

## The notebooks of examples/notebooks executed top to bottom in a fresh kernel (nbclient).
notebook-test: $(STAMP)
	$(BIN)/python tests/packaging/run_notebooks.py

## The wheel as users get it (issue 39): python -m build, installed into a fresh venv outside the
## repository; smcdp --version, the demo on the bundled data, a DP learner, the pure fallback.
wheel-test: $(STAMP)
	PIP_ARGS='-c $(abspath constraints.txt)' tests/packaging/wheel_test.sh $(abspath $(BIN))/python

clean:
	rm -rf $(VENV) $(OUT) build *.egg-info .pytest_cache
