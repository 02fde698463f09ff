"""Power iteration's byte envelope (issue 24): k is bounded even when ``rows`` is not stated (``max_rows``),
the final blocks count as max_samples samples rather than a whole chunk each, and with the bounds at the
inputs' own sizes every role's envelope is within a small factor of what it received.  Before, a session
without ``rows`` derived its envelope from k = 1,000,000: the [limits] ceilings (2 GiB) were all that held."""

from __future__ import annotations

import numpy as np
import pytest

from smcdp.errors import InputRejected, InvalidMessage, SessionAborted, public_message
from smcdp.protocols.power_iteration import PowerIterationParams
from tests.unit.protocols.test_power_iteration import blocks_with_gap, run


@pytest.mark.parametrize("k,ns,r", [(30, (80, 120), 1), (12, (40, 9, 25), 2)])
def test_the_envelope_of_tight_bounds_is_close_to_the_transcript(k, ns, r):
    blocks = blocks_with_gap(np.random.default_rng(k), k, ns)
    params = PowerIterationParams(
        n_parties=len(ns), key_bits=512, p=1.0, tol=1e-14, max_iterations=6, components=r, rows=k, max_samples=max(ns)
    )
    net, res = run(blocks, params, seed=3)
    assert res["trent"].rounds == 6
    for role in ["trent", *params.data_roles]:
        env = params.traffic_envelope(role)
        got = [len(d) for *_, d in net.received_by(role)]
        assert max(got) <= env.message_bytes and sum(got) <= env.session_bytes and len(got) <= env.tags
        assert env.session_bytes <= 3 * sum(got) + 16 * 1024, (role, sum(got), env)


def test_without_rows_k_is_bounded_by_max_rows():
    unset = PowerIterationParams()
    for role in ("trent", "party1"):
        env = unset.traffic_envelope(role)
        assert env == PowerIterationParams(rows=unset.max_rows).traffic_envelope(role)
        # 2,000 rounds of k <= 1,000, 3072-bit; contributions in Gram-wide slots (issue 26: 167 MiB, 138 before)
        assert env.session_bytes < 170 << 20, env
    # 30 values: two 3072-bit ciphertexts of 26 Gram-wide slots (one of 33 before issue 26)
    assert PowerIterationParams(rows=30).traffic_envelope("party1").session_bytes < 7 << 20
    with pytest.raises(InvalidMessage, match="max_rows"):
        PowerIterationParams.from_mapping({"max_rows": 0})


def test_data_with_more_rows_than_max_rows_is_refused_with_the_rule_only():
    blocks = [np.ones((6, 3)), np.ones((6, 4))]
    with pytest.raises((InputRejected, SessionAborted)) as info:
        run(blocks, PowerIterationParams(n_parties=2, key_bits=512, max_rows=5))
    err = info.value
    text = public_message(err) if isinstance(err, InputRejected) else str(err)
    assert "max_rows" in text and "k = 6" not in text
