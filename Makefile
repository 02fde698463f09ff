# smcdp — every target does its own set-up: it creates .venv if missing and installs the package.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    ?= out

.PHONY: all install demo test proto proto-check bench experiments multihost-test docker-image clean

all: test

$(STAMP): pyproject.toml setup.py smcdp/crypto/_mont.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev]'
	@touch $(STAMP)

install: $(STAMP)

## The main job: privacy-preserving power iteration between three separate party processes
## (Trent and two data parties) over gRPC with mutual TLS, on bundled example data.
demo: $(STAMP)
	$(BIN)/python examples/power_iteration_demo.py --out $(OUT)/demo

## The whole test suite.
test: $(STAMP)
	$(BIN)/python -m pytest -q -ra

## Regenerate the protobuf/gRPC code in smcdp/v1 from protos/ (a test fails if it is stale).
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iprotos --python_out=. --pyi_out=. --grpc_python_out=. protos/smcdp/v1/*.proto

## Benchmarks: ratios against plain phe / numpy measured in the same run; writes docs/benchmarks.md.
bench: $(STAMP)
	$(BIN)/python bench/run_all.py --write docs/benchmarks.md

## Reproductions of the seed papers' experiments at reduced repetitions (FULL=1 for the papers').
experiments: $(STAMP)
	$(BIN)/python examples/exp_all.py --out $(OUT)/experiments $(if $(FULL),--full,)

## The multi-host test in network namespaces (needs root).
multihost-test: $(STAMP)
	$(BIN)/python -m pytest -q -ra -m multihost tests/integration/multihost

## Build the party image where a Docker engine exists.
docker-image:
	docker build -f deploy/Dockerfile -t smcdp:latest .

clean:
	rm -rf $(VENV) $(OUT) build *.egg-info .pytest_cache
