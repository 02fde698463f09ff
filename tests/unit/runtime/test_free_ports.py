"""The ports test deployments and demos give their parties (smcdp.runtime.local.free_tcp_port).

A .ci/run failed when a module's parties could not bind their ports: the OS had picked them (bind(0)), and in
the moments before the parties bound them the kernel handed one to another process's bind(0) or outgoing
connection.  Ports are now drawn below the kernel's ephemeral range, where it never hands one out by itself."""

from __future__ import annotations

import socket

import smcdp.runtime.local as local


def test_ports_are_free_and_below_the_kernels_ephemeral_range():
    low = local._ephemeral_low()
    ports = {local.free_tcp_port() for _ in range(20)}
    assert len(ports) > 1  # drawn at random, not one fixed port
    for port in ports:
        assert local.FREE_PORT_FLOOR <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free when it was returned (nothing here bound it since)


def test_a_taken_port_is_skipped_and_a_narrow_range_falls_back_to_the_os(monkeypatch):
    kernel_low = local._ephemeral_low()
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        draws = iter([taken, taken])

        class Fixed:
            def randint(self, lo, hi):
                return next(draws, hi)

        monkeypatch.setattr(local, "_PORTS", Fixed())
        monkeypatch.setattr(local, "_ephemeral_low", lambda: 40000)
        assert local.free_tcp_port() == 39999  # the two draws of the taken port were skipped
    monkeypatch.setattr(local, "_ephemeral_low", lambda: local.FREE_PORT_FLOOR + 100)  # no room below it
    assert local.free_tcp_port() >= kernel_low  # the OS picked it, from its own range
