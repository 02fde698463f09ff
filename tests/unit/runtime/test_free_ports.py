"""The ports test deployments and demos give their parties (smcdp.runtime.local.free_tcp_port).

Two .ci/run failures: a module's parties could not bind ports picked for them moments before.  First the OS
had picked them (bind(0)) and handed one to another process meanwhile; then, drawn at random below the
kernel's ephemeral range, one was drawn by another test process too.  Ports are now drawn below the ephemeral
range *and* reserved (a file per port) against every other process drawing from it."""

from __future__ import annotations

import os
import socket
import time

import pytest

import smcdp.runtime.local as local


@pytest.fixture
def reservations(tmp_path, monkeypatch):
    """A reservation directory of the test's own (the host's may hold other runs' reservations)."""
    monkeypatch.setattr(local, "_reservations", lambda: tmp_path)
    return tmp_path


class Draws:
    """A generator that draws the given ports, then ``last`` forever."""

    def __init__(self, ports, last):
        self.ports, self.last = iter(ports), last

    def randint(self, lo, hi):
        return next(self.ports, self.last)


def test_ports_are_free_reserved_and_below_the_kernels_ephemeral_range(reservations):
    low = local._ephemeral_low()
    ports = {local.free_tcp_port() for _ in range(20)}
    assert len(ports) == 20  # drawn at random, each reserved: no port twice
    for port in ports:
        assert local.FREE_PORT_FLOOR <= port < low
        assert (reservations / str(port)).exists()
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free when it was returned (nothing here bound it since)


def test_a_port_reserved_by_another_process_or_bound_is_skipped_and_a_stale_reservation_taken_over(
    reservations, monkeypatch
):
    monkeypatch.setattr(local, "_ephemeral_low", lambda: 40000)
    (reservations / "30001").touch()  # another process's fresh reservation
    stale = reservations / "30002"
    stale.touch()
    old = time.time() - local.PORT_RESERVATION_SECONDS - 5
    os.utime(stale, (old, old))
    with socket.socket() as held:  # a port someone has bound
        held.bind(("127.0.0.1", 30003))
        monkeypatch.setattr(local, "_PORTS", Draws([30001, 30003, 30002], 30004))
        assert local.free_tcp_port() == 30002  # 30001 reserved, 30003 bound: skipped; 30002's reservation stale
    assert time.time() - (reservations / "30002").stat().st_mtime < 60  # now this process's


def test_a_narrow_range_falls_back_to_the_os(reservations, monkeypatch):
    kernel_low = local._ephemeral_low()
    monkeypatch.setattr(local, "_ephemeral_low", lambda: local.FREE_PORT_FLOOR + 100)  # no room below it
    assert local.free_tcp_port() >= kernel_low  # the OS picked it, from its own range


def test_a_reservation_directory_another_user_owns_is_not_used(monkeypatch):
    """Another user could make the directory's name first (the temp dir is shared): its files must not decide
    which ports this process gets, so nothing is reserved there and ports are drawn and checked as before."""
    monkeypatch.setattr(local, "_reservations", lambda: None)
    monkeypatch.setattr(local, "_PORTS", Draws([30011], 30012))
    monkeypatch.setattr(local, "_ephemeral_low", lambda: 40000)
    assert local.free_tcp_port() == 30011
