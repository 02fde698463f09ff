"""Naor–Pinkas 1-out-of-M OT: group constants, correctness, validation, and the sender's view."""

from __future__ import annotations

import asyncio
import secrets

import gmpy2
import pytest
from scipy import stats

from smcdp.crypto import naor_pinkas as otm
from smcdp.errors import InvalidMessage
from smcdp.primitives import ot
from smcdp.v1 import messages_pb2

from .util import run_roles

ROLES = {"sender": "bob", "chooser": "alice"}
G = otm.MODP2048


def transfer(messages, choices, m, **kw):
    res, net = run_roles(
        {
            "sender": lambda ch: ot.ot_send(ch, "chooser", messages, **kw),
            "chooser": lambda ch: ot.ot_choose(ch, "sender", choices, m, **kw),
        },
        roles=ROLES,
    )
    assert res["sender"] is None
    return res["chooser"], net


def test_group_is_rfc3526_modp2048():
    # RFC 3526: p = 2^2048 - 2^1984 - 1 + 2^64 * ( [2^1918 pi] + 124476 )
    ctx = gmpy2.get_context().copy()
    ctx.precision = 4000
    with gmpy2.context(ctx):
        floor_pi = gmpy2.mpz(gmpy2.floor(gmpy2.const_pi() * gmpy2.mpfr(2) ** 1918))
    p = gmpy2.mpz(2) ** 2048 - gmpy2.mpz(2) ** 1984 - 1 + gmpy2.mpz(2) ** 64 * (floor_pi + 124476)
    assert G.p == p
    assert gmpy2.is_prime(G.p) and gmpy2.is_prime(G.q) and G.p == 2 * G.q + 1
    assert G.g == 2 and gmpy2.powmod(G.g, G.q, G.p) == 1 and G.is_element(G.g)
    assert G.byte_length == 256


def test_group_element_checks():
    x = G.hash_to_element(b"test")
    assert G.is_element(x) and gmpy2.powmod(x, G.q, G.p) == 1
    assert G.decode(G.encode(x)) == x
    for bad in (0, 1, G.p - 1, G.p, G.p + 3):
        assert not G.is_element(bad)
    non_residue = G.p - x  # -x is a non-residue since -1 is one (p = 3 mod 4)
    with pytest.raises(InvalidMessage, match="order-q subgroup"):
        G.decode(G.encode(non_residue))
    with pytest.raises(InvalidMessage, match="bytes"):
        G.decode(G.encode(x)[1:])
    # hash-to-group is deterministic and domain-separated
    assert G.hash_to_element(b"a", b"b") == G.hash_to_element(b"a", b"b")
    assert G.hash_to_element(b"a", b"b") != G.hash_to_element(b"ab")


@pytest.mark.parametrize("n,m", [(1, 2), (6, 5), (40, 3)])
def test_chooser_gets_exactly_the_chosen_message(n, m):
    messages = [[secrets.token_bytes(secrets.randbelow(70)) + bytes([j % 256, i]) for i in range(m)] for j in range(n)]
    messages[0][0] = b""  # empty strings are fine
    choices = [j % m for j in range(n)]  # every index is chosen somewhere
    out, net = transfer(messages, choices, m)
    assert out == [messages[j][choices[j]] for j in range(n)]
    # two messages each way, whatever n is
    assert [(s, t) for (s, _, t, _, _) in net.transcript] == [
        ("chooser", "ot/np-hdr"),
        ("chooser", "ot/np-pk0"),
        ("sender", "ot/np-gr"),
        ("sender", "ot/np-ct"),
    ]


def test_other_messages_stay_hidden_from_an_honest_chooser():
    """Decrypting a non-chosen ciphertext with the chooser's key gives noise, not the message."""
    m, n = 4, 3
    messages = [[bytes([i]) * 32 for i in range(m)] for _ in range(n)]
    out, net = transfer(messages, [1, 2, 3], m)
    assert out == [b"\x01" * 32, b"\x02" * 32, b"\x03" * 32]
    cts = messages_pb2.Blobs.FromString(net.transcript[-1][4]).values
    for j in range(n):
        for i in range(m):
            assert cts[j * m + i] != messages[j][i]  # nothing travels in the clear


def test_a_sender_set_up_ahead_sends_what_it_would_have_sent_online():
    """r and its powers made before the chooser speaks (sender_setup) give the same transcript as the same
    rng stream drawn inside ot_send -- and the chooser gets the chosen strings."""
    import random

    m, n = 5, 3
    messages = [[bytes([j, i]) * 9 for i in range(m)] for j in range(n)]
    choices = [4, 0, 2]
    chooser_rng = random.Random(7)

    def run(sender):
        chooser_rng.seed(7)
        res, net = run_roles(
            {"sender": sender, "chooser": lambda ch: ot.ot_choose(ch, "sender", choices, m, rng=chooser_rng)},
            roles=ROLES,
        )
        assert res["chooser"] == [messages[j][choices[j]] for j in range(n)]
        return [(s, t, payload) for (s, _, t, _, payload) in net.transcript]

    online = run(lambda ch: ot.ot_send(ch, "chooser", messages, rng=random.Random(11)))
    setup = ot.sender_setup("test-session", m, tag_prefix="ot", rng=random.Random(11))
    ahead = run(lambda ch: ot.ot_send(ch, "chooser", messages, setup=setup))
    assert ahead == online
    assert setup.gr == G.exp_g(setup.r) and setup.c_r[0] is None
    assert all(c == gmpy2.powmod(otm.derive_c(G, setup.context, i), setup.r, G.p) for i, c in enumerate(setup.c_r) if i)


@pytest.mark.parametrize(
    "session,tag,m", [("other-session", "ot", 3), ("test-session", "kw/label", 3), ("test-session", "ot", 4)]
)
def test_a_sender_set_up_for_another_batch_is_refused(session, tag, m):
    setup = ot.sender_setup(session, m, tag_prefix=tag)
    with pytest.raises(ValueError, match="another batch"):
        run_roles(
            {
                "sender": lambda ch: ot.ot_send(ch, "chooser", [[b"a", b"b", b"c"]], setup=setup),
                "chooser": lambda ch: ot.ot_choose(ch, "sender", [1], 3),
            },
            roles=ROLES,
        )


def test_sender_with_process_pool():
    from concurrent.futures import ProcessPoolExecutor

    m, n = 3, 9
    messages = [[secrets.token_bytes(12) for _ in range(m)] for _ in range(n)]
    choices = [secrets.randbelow(m) for _ in range(n)]
    with ProcessPoolExecutor(max_workers=2) as pool:
        res, _ = run_roles(
            {
                "sender": lambda ch: ot.ot_send(ch, "chooser", messages, executor=pool, chunk=2),
                "chooser": lambda ch: ot.ot_choose(ch, "sender", choices, m),
            },
            roles=ROLES,
        )
    assert res["chooser"] == [messages[j][choices[j]] for j in range(n)]


def test_large_batch_with_tables():
    m, n = 3, ot.TABLE_THRESHOLD + 1
    messages = [[secrets.token_bytes(16) for _ in range(m)] for _ in range(n)]
    choices = [secrets.randbelow(m) for _ in range(n)]
    out, _ = transfer(messages, choices, m)
    assert out == [messages[j][choices[j]] for j in range(n)]


@pytest.mark.parametrize(
    "messages,choices,m,match",
    [
        ([[b"a", b"b"], [b"c"]], [0, 0], 2, "messages\\[1\\] has 1"),
        ([[b"a", "b"]], [0], 2, "expected bytes"),
        ([], [0], 2, "empty"),
        ([[b"a"]], [0], 2, "m = 1"),
    ],
)
def test_sender_refuses_bad_inputs(messages, choices, m, match):
    with pytest.raises(InvalidMessage, match=match):
        asyncio.run(ot.ot_send(None, "chooser", messages))


@pytest.mark.parametrize(
    "choices,m,match",
    [
        ([2], 2, "outside"),
        ([-1], 2, "outside"),
        ([0.0], 2, "not an integer"),
        ([True], 2, "bool"),
        ([], 2, "empty"),
        ([0], 1, "m = 1"),
        ([0], 1 << 17, "outside"),
    ],
)
def test_chooser_refuses_bad_inputs(choices, m, match):
    with pytest.raises(InvalidMessage, match=match):
        asyncio.run(ot.ot_choose(None, "sender", choices, m))


def test_m_mismatch_refused():
    with pytest.raises(InvalidMessage, match="header"):
        transfer([[b"a", b"b", b"c"]], [0], 2)


@pytest.mark.parametrize(
    "defect,match",
    [
        ("count", "expected 2 OT public keys"),
        ("non_residue", "subgroup"),
        ("one", "subgroup"),
        ("short", "bytes"),
    ],
)
def test_sender_refuses_malformed_public_keys(defect, match):
    async def fake_chooser(ch):
        pk = [G.encode(G.hash_to_element(b"x", bytes([j]))) for j in range(2)]
        if defect == "count":
            pk = pk[:1]
        if defect == "non_residue":
            pk[1] = G.encode(G.p - G.hash_to_element(b"y"))
        if defect == "one":
            pk[1] = G.encode(1)
        if defect == "short":
            pk[1] = pk[1][:-1]
        await ch.send("sender", "ot/np-hdr", messages_pb2.Ints(values=[ot.PROTOCOL_VERSION, 2, 2]))
        await ch.send("sender", "ot/np-pk0", messages_pb2.Blobs(values=pk))

    with pytest.raises(InvalidMessage, match=match):
        run_roles(
            {"sender": lambda ch: ot.ot_send(ch, "chooser", [[b"a", b"b"], [b"c", b"d"]]), "chooser": fake_chooser},
            roles=ROLES,
        )


@pytest.mark.parametrize(
    "defect,match",
    [
        ("gr_non_residue", "g\\^r"),
        ("gr_two", "one g\\^r"),
        ("ct_count", "expected 4 OT ciphertexts"),
    ],
)
def test_chooser_refuses_malformed_replies(defect, match):
    async def fake_sender(ch):
        await ch.recv("chooser", "ot/np-hdr", messages_pb2.Ints)
        await ch.recv("chooser", "ot/np-pk0", messages_pb2.Blobs)
        gr = [G.encode(G.exp_g(G.random_exponent()))]
        cts = [b"x"] * 4
        if defect == "gr_non_residue":
            gr = [G.encode(G.p - 2)]
        if defect == "gr_two":
            gr = gr * 2
        if defect == "ct_count":
            cts = cts[:3]
        await ch.send("chooser", "ot/np-gr", messages_pb2.Blobs(values=gr))
        await ch.send("chooser", "ot/np-ct", messages_pb2.Blobs(values=cts))

    with pytest.raises(InvalidMessage, match=match):
        run_roles({"sender": fake_sender, "chooser": lambda ch: ot.ot_choose(ch, "sender", [0, 1], 2)}, roles=ROLES)


# ------------------------------------------------------------ the sender's view
N_VIEW = 150
ALPHA = 1e-4  # false-alarm probability of the independence test


def _view_statistic(net) -> list[float]:
    """Top 64 bits of every PK the sender received, scaled to [0, 1)."""
    vals = []
    for _sender, tag, _type_name, data in net.received_by("sender"):
        if tag.endswith("np-pk0"):
            for b in messages_pb2.Blobs.FromString(data).values:
                assert len(b) == G.byte_length
                vals.append(int.from_bytes(b[:8], "big") / 2.0**64)
    assert len(vals) == N_VIEW
    return vals


def _sender_view(choice: int, m: int, chooser=None) -> list[float]:
    messages = [[bytes([i]) * 8 for i in range(m)] for _ in range(N_VIEW)]
    chooser = chooser or (lambda ch: ot.ot_choose(ch, "sender", [choice] * N_VIEW, m))
    _, net = run_roles({"sender": lambda ch: ot.ot_send(ch, "chooser", messages), "chooser": chooser}, roles=ROLES)
    return _view_statistic(net)


def _leaky_chooser(choice: int, m: int):
    """A deliberately broken chooser: its blinding exponent k comes from a tiny range (weak RNG)."""

    async def run(ch):
        context = otm.context_bytes(ch.session_id, "ot", m)
        cs = otm.derive_cs(G, context, m)
        pks = []
        for _ in range(N_VIEW):
            k = 1 + secrets.randbelow(8)
            gk = G.exp_g(k)
            pk0 = gk if choice == 0 else cs[choice] * gmpy2.invert(gk, G.p) % G.p
            pks.append(G.encode(pk0))
        await ch.send("sender", "ot/np-hdr", messages_pb2.Ints(values=[ot.PROTOCOL_VERSION, N_VIEW, m]))
        await ch.send("sender", "ot/np-pk0", messages_pb2.Blobs(values=pks))

    return run


def test_sender_view_independent_of_choice():
    m = 4
    view_first = _sender_view(0, m)
    view_last = _sender_view(m - 1, m)
    assert len(set(view_first)) == N_VIEW and len(set(view_last)) == N_VIEW
    p_value = stats.ks_2samp(view_first, view_last).pvalue
    assert p_value > ALPHA, f"sender's view depends on the choice (KS p = {p_value:.2e})"
    # each is also consistent with uniform on [0, 1)
    assert stats.kstest(view_first, "uniform").pvalue > ALPHA
    assert stats.kstest(view_last, "uniform").pvalue > ALPHA


def test_independence_test_detects_a_leaky_chooser():
    """Sanity check of the test above: the same statistic and test flag a chooser that leaks."""
    m = 4
    leaky_first = _sender_view(0, m, _leaky_chooser(0, m))
    leaky_last = _sender_view(m - 1, m, _leaky_chooser(m - 1, m))
    p_value = stats.ks_2samp(leaky_first, leaky_last).pvalue
    assert p_value < ALPHA, f"the independence test missed a leaky chooser (KS p = {p_value:.2e})"
