"""Whom a participant probes during a session (issue 28): its nearest unfinished neighbours in a ring."""

import itertools

import pytest

from smcdp.runtime.liveness import ring_neighbours


def test_two_and_three_participants_probe_everyone_as_before():
    assert ring_neighbours(["a", "b"], "a", set()) == ["b"]
    assert sorted(ring_neighbours(["a", "b", "c"], "b", set())) == ["a", "c"]


@pytest.mark.parametrize("n", [4, 7, 34, 258])
def test_every_participant_probes_two_and_is_probed_by_two(n):
    ring = [f"p{i:03d}" for i in range(n)]
    probes = {p: ring_neighbours(ring, p, set()) for p in ring}
    assert all(len(v) == 2 for v in probes.values())  # O(N) heartbeats per interval in all
    probed_by = {p: [q for q in ring if p in probes[q]] for p in ring}
    assert all(len(v) == 2 for v in probed_by.values())


def test_finished_participants_are_skipped_so_every_running_one_stays_watched():
    ring = [f"p{i}" for i in range(8)]
    for finished in itertools.chain.from_iterable(itertools.combinations(ring, k) for k in range(0, 7)):
        done = set(finished)
        running = [p for p in ring if p not in done]
        # what each running participant probes, knowing (from its probes' replies) which finished
        probes = {p: ring_neighbours(ring, p, done) for p in running}
        assert all(q not in done for v in probes.values() for q in v)
        for p in running:
            watchers = [q for q in running if p in probes[q]]
            assert len(watchers) == min(2, len(running) - 1), (done, p, watchers)
    assert ring_neighbours(ring, "p3", set(ring) - {"p3"}) == []
