"""Fixtures of the container tests: podman, the images (built once per session), and the
party containers (one deployment per test module, torn down always)."""

from __future__ import annotations

import os

import pytest

from tests.integration.multihost.cases import available_cases, governance_args

from .harness import ContainerCluster, Podman, build_images, unavailable_reason


def _report(config, line: str) -> None:
    """A line on the terminal even while pytest captures output (build times, image size)."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            tr.write_line(line)


@pytest.fixture(scope="session")
def podman(tmp_path_factory):
    reason = unavailable_reason()
    if reason:
        if os.environ.get("SMCDP_REQUIRE_CONTAINER_TEST") == "1":
            pytest.fail(f"SMCDP_REQUIRE_CONTAINER_TEST=1 but: {reason}")
        pytest.skip(reason)
    return Podman(tmp_path_factory.mktemp("podman"))


@pytest.fixture(scope="session")
def images(podman, request):
    built = build_images(podman)
    size = podman.image_inspect(built.image)["Size"]
    _report(
        request.config,
        f"\ncontainer test: base {built.base} ready in {built.base_seconds:.0f} s; "
        f"party image {built.image} built in {built.build_seconds:.0f} s, {size / 1e6:.0f} MB",
    )
    return built


@pytest.fixture(scope="module")
def cluster(podman, images, tmp_path_factory):
    cases = available_cases()
    parties: list[str] = []
    for case in cases:
        parties += [p for p in case.parties if p not in parties]
    workdir = tmp_path_factory.mktemp("containers")
    inputs, expected = [], {}
    for case in cases:
        items, state = case.inputs(workdir, case.parties)
        inputs += items
        expected[case.protocol] = state
    plugins = [case.module for case in cases if case.module and case.module_needed]
    c = ContainerCluster(
        podman, images.image, parties, workdir, inputs=inputs, plugins=plugins, init_args=governance_args(cases)
    )
    c.cases = {case.protocol: case for case in cases}
    c.expected = expected
    try:
        c.up()
        c.start_all()
        yield c
    finally:
        c.down()
