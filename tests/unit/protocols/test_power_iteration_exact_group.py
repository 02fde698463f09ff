"""Power iteration's exact mode under a group (threshold) key, in memory, with dealt shares.

What is shown: the session computes numpy's eigenvectors (u at every data party, x at Trent) with decoys as
with the single key; a Trent who sends, as a block or a blinded Gram, anything that is not a combination of the
sums every data party recomputed -- one party's contribution or Gram -- is refused before anything is decrypted
and named; a wrong partial decryption is named; a coalition of Trent and t data parties, pooling their share and
every message they hold, cannot read an honest party's contribution (which the same coalition reads in the
single-key mode); and every role's traffic stays inside its envelope.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from smcdp.crypto.paillier import generate_keypair
from smcdp.crypto.threshold import (
    BadPartialDecryption,
    NotEnoughShares,
    assigned,
    combine,
    combine_vector_ints,
    deal,
    partial_decrypt,
    partial_decrypt_vector,
)
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import InvalidMessage
from smcdp.protocols.power_iteration import PowerIterationParams, plaintext_reference
from smcdp.protocols.power_iteration_threshold import BadCombination, Tags, partial_from_proto, split_offset
from smcdp.v1 import messages_pb2 as pb
from tests.support.group_keys import relayed_release
from tests.support.pi_group import run


@pytest.fixture(scope="module")
def sk512():
    return generate_keypair(512, allow_insecure=True)[1]


def params_for(n, t, **kw) -> PowerIterationParams:
    base = dict(n_parties=n, key_bits=512, tol=1e-10, max_iterations=200)
    if t is not None:
        base.update(key_group="lab", key_threshold=t)
    return PowerIterationParams(**{**base, **kw})


def blocks_with_gap(rng, k, ns, gap=3.0):
    M = rng.normal(size=(k, sum(ns)))
    M += gap * np.outer(rng.normal(size=k), rng.normal(size=sum(ns)))
    return np.split(M, np.cumsum(ns)[:-1], axis=1)


def relayed_contribution(net, role, to, t=0):
    """``role``'s contribution of round t as Trent relayed it to ``to`` (what every data party holds)."""
    tag = Tags.exact_release("contrib", t).contrib
    relay = next(d for s, r, g, _, d in net.transcript if s == "trent" and r == to and g == tag)
    return relayed_release(relay, role).SerializeToString()


@pytest.mark.parametrize("k,ns,t,p", [(6, (5, 7, 4), 1, 0.7), (5, (6, 3, 4, 5, 2), 2, 0.8)])
def test_the_group_key_session_computes_numpys_eigenvectors(sk512, k, ns, t, p):
    """n = 3, t = 1 and n = 5, t = 2, with decoys: every party's u and Trent's x equal numpy's to 1e-5, as
    the single-key mode's do; the record names the group key.  Every role has a fixed secret root (a group key
    refuses experiment seeds, not roots), so that the decoys this test requires are certain, not likely."""
    from smcdp.primitives.rng import Randomness

    rng = np.random.default_rng(k * 10 + len(ns))
    blocks = blocks_with_gap(rng, k, ns)
    _, shares = deal(sk512, len(ns), t)
    roots = [Randomness(bytes([60 + i]) * 32) for i in range(len(ns))]
    _, res = run(
        blocks, params_for(len(ns), t, p=p), sk=sk512, shares=shares, seeds=roots, trent_seed=Randomness(b"\x07" * 32)
    )
    assert not isinstance(res, Exception), res
    u_ref, x_ref = plaintext_reference(blocks)
    tr = res["trent"]
    assert tr.converged and tr.n_per_party == list(ns)
    assert np.allclose(tr.x, x_ref, atol=1e-5)
    for i in range(len(ns)):
        pr = res[f"party{i + 1}"]
        assert np.allclose(pr.u, u_ref, atol=1e-5)
        assert pr.stats["key"]["kind"] == "threshold" and pr.stats["key"]["threshold"] == t
    assert tr.real_rounds + tr.decoys == tr.rounds and tr.decoys > 0


def _swap_in(net_box, tag_of_victim, target_tag, to, field=None):
    """A Trent rewrite: the message ``target_tag`` to ``to`` replaced by (its ``field`` replaced by) the release
    ``tag_of_victim`` (``<relay tag>/<role>``: that role's entry of the relay) Trent sent ``to`` -- one party's
    ciphertext, for decryption."""
    relay_tag, role = tag_of_victim.rsplit("/", 1)

    def rewrite(dest, tag, data):
        if dest != to or tag != target_tag:
            return data
        relay = next(d for s, r, g, _, d in net_box[0].transcript if s == "trent" and r == to and g == relay_tag)
        victim = relayed_release(relay, role).SerializeToString()
        if field is None:
            return victim
        msg = pb.PowerIterationReply.FromString(data)
        exponent = getattr(msg, field).exponent  # relabelled as a blinded Gram's, so that only the proof tells
        getattr(msg, field).CopyFrom(pb.CiphertextVector.FromString(victim))
        getattr(msg, field).exponent = exponent
        return msg.SerializeToString()

    return rewrite


@pytest.mark.parametrize(
    "victim,target,field",
    [
        ("relayed/contrib/0/party3", "v/0", None),  # the first block: party3's start contribution
        ("relayed/contrib/1/party3", "reply/0", "block"),  # a later block: party3's next contribution
        ("relayed/gram/0/party3", "reply/0", "blinded_gram"),  # the blinded Gram: party3's own Gram
    ],
)
def test_a_trent_sending_one_partys_ciphertext_for_decryption_is_refused_and_named(sk512, victim, target, field):
    """Trent sends party2, in place of a block or a blinded Gram, party3's own ciphertext (which he holds): what
    party2 and its partners would decrypt is party3's contribution or Gram.  party2 checks Trent's proof against
    the sums it recomputed, refuses before it sends a partial decryption of it, and names Trent."""
    rng = np.random.default_rng(3)
    blocks = blocks_with_gap(rng, 4, (5, 6, 7))
    _, shares = deal(sk512, 3, 1)
    box = []
    net, outcome = run(
        blocks,
        params_for(3, 1),
        sk=sk512,
        shares=shares,
        rewrite={"trent": _swap_in(box, victim, target, "party2", field)},
        on_net=box.append,
    )
    assert isinstance(outcome, BadCombination), outcome
    assert outcome.origin == "trent" and "party2 refuses to decrypt" in str(outcome)
    partial = Tags.decryption(target).partial  # v/0's, or reply/0's (its Gram and block in one)
    assert not any(s == "party2" and g == partial for s, _, g, _, _ in net.transcript)


def test_a_wrong_partial_decryption_is_refused_and_its_party_named(sk512):
    """The first data party to send the others its partial decryption of the first block sends it with one value
    changed: named.  (The decryption is split: every partial a party receives is one it combines, so every one
    is verified; which parties decrypt the block depends on its size and tag, so the culprit is whoever sends.)"""
    rng = np.random.default_rng(4)
    blocks = blocks_with_gap(rng, 4, (5, 6, 7))
    _, shares = deal(sk512, 3, 1)
    n2 = shares[0].public.public_key.nsquare
    culprit: list[str] = []

    def corrupt_as(role):
        def corrupt(to, tag, data):
            if tag != Tags.decryption("v/0").partial or culprit[:1] not in ([], [role]):
                return data
            culprit[:1] = [role]
            msg = pb.BigInts.FromString(data)
            v = int.from_bytes(msg.magnitude[0], "big")
            msg.magnitude[0] = (v * 4 % n2).to_bytes(len(msg.magnitude[0]) + 1, "big").lstrip(b"\0")
            return msg.SerializeToString()

        return corrupt

    rewrite = {f"party{i}": corrupt_as(f"party{i}") for i in (1, 2, 3)}
    _, outcome = run(blocks, params_for(3, 1), sk=sk512, shares=shares, rewrite=rewrite)
    assert culprit, "nobody sent a partial decryption of the first block"
    i = int(culprit[0][len("party") :])
    assert isinstance(outcome, BadPartialDecryption), outcome
    assert outcome.party == i and outcome.origin == f"org{i}"


def _vector(data, pk, params, L, packing):
    return EncryptedVector.from_proto(pb.CiphertextVector.FromString(data), pk, length=L, packing=packing)


def test_trent_and_t_parties_cannot_read_an_honest_contribution_which_they_read_with_the_single_key(sk512):
    """n = 3, t = 1: Trent and party1 pool party1's share and every message either holds, and try to decrypt
    party3's start contribution C_3⁽⁰⁾: their one share is not t + 1 (NotEnoughShares), and party2's partial
    decryption of the first block does not decrypt it (its proof is for the block: BadPartialDecryption naming
    party2).  What they do decrypt, the block, is Trent's scale times the *sum* of the three contributions.  In
    the single-key mode party1's key pair decrypts C_3⁽⁰⁾ as Trent received it, exactly: the test can fail."""
    rng = np.random.default_rng(6)
    blocks = blocks_with_gap(rng, 4, (5, 6, 7))
    params = params_for(3, 1)
    pub, shares = deal(sk512, 3, 1)
    pk = pub.public_key
    net, res = run(blocks, params, sk=sk512, shares=shares)
    assert not isinstance(res, Exception), res
    L, packing = 4 * params.block_size, params.packing(pk)
    c3 = _vector(relayed_contribution(net, "party3", "party1"), pk, params, L, packing)
    outcomes = []
    try:
        combine_vector_ints(pub, c3, [partial_decrypt_vector(shares[0], c3, b"coalition")], b"coalition")
    except Exception as exc:  # noqa: BLE001 - the test looks at it
        outcomes.append(exc)
    partial_tag = Tags.decryption("v/0").partial
    # the decryption is split: an honest party's partial covers its assigned ciphertexts of the block
    count = len(c3.ciphertexts)
    offset = split_offset(net.session_id, partial_tag, 3)
    sender, data = next(
        (s, d) for s, r, g, _, d in net.transcript if g == partial_tag and s != "party1" and r == "party1"
    )
    h = int(sender[len("party") :])
    at = assigned(count, 3, 1, h, offset)
    honest = partial_from_proto(pb.BigInts.FromString(data), pub, h, len(at), "p")
    cts = [int(c3.ciphertexts[k]) for k in at]
    try:  # offered for party3's contribution at the same positions
        combine(pub, cts, [partial_decrypt(shares[0], cts, b"ctx"), honest], b"ctx")
    except Exception as exc:  # noqa: BLE001
        outcomes.append(exc)
    assert isinstance(outcomes[0], NotEnoughShares), outcomes
    assert isinstance(outcomes[1], BadPartialDecryption) and outcomes[1].party == h, outcomes
    # the block they decrypt with party2's partial is a multiple of the sum of the contributions (the dealer's
    # key, which nobody in the session holds, shows what each ciphertext is)
    block = _vector(
        next(d for s, r, g, _, d in net.transcript if s == "trent" and r == "party1" and g == "v/0"),
        pk,
        params,
        L,
        packing,
    )
    total = sum(
        np.asarray(
            _vector(relayed_contribution(net, role, "party1"), pk, params, L, packing).decrypt_ints(sk512), dtype=object
        )
        for role in ("party1", "party2", "party3")
    )
    b_ints = np.asarray(block.decrypt_ints(sk512), dtype=object)
    scale = b_ints[0] // total[0]
    assert scale > 0 and all(b == scale * s for b, s in zip(b_ints, total))
    # the single-key mode: party1 holds the key pair and reads every contribution Trent received, party3's too:
    # three non-zero vectors whose sum is the direction of the first block
    single = dataclasses.replace(params, key_group=None, key_threshold=None)
    net1, res1 = run(blocks, single, sk=sk512)
    assert not isinstance(res1, Exception), res1

    def sent(sender, to, tag):
        return next(d for s, r, g, _, d in net1.transcript if s == sender and r == to and g == tag)

    read = {
        role: np.asarray(
            _vector(sent(role, "trent", "contrib/0"), pk, single, L, packing).decrypt_ints(sk512), dtype=object
        )
        for role in ("party1", "party2", "party3")
    }
    v0 = np.asarray(_vector(sent("trent", "party1", "v/0"), pk, single, L, packing).decrypt_ints(sk512), dtype=object)
    summed = read["party1"] + read["party2"] + read["party3"]
    assert any(read["party3"]) and any(read["party3"] != summed)
    assert all(v * summed[0] == s * v0[0] for v, s in zip(v0, summed))


def test_traffic_envelope_covers_every_message_of_the_exact_group_mode(sk512):
    rng = np.random.default_rng(8)
    blocks = blocks_with_gap(rng, 6, (5, 7, 4))
    params = params_for(3, 1, rows=6, max_samples=7, max_iterations=60)
    _, shares = deal(sk512, 3, 1)
    net, res = run(blocks, params, sk=sk512, shares=shares)
    assert not isinstance(res, Exception), res
    for role in ["trent", *params.data_roles]:
        env = params.traffic_envelope(role)
        got = [len(d) for *_, d in net.received_by(role)]
        assert max(got) <= env.message_bytes and sum(got) <= env.session_bytes and len(got) <= env.tags, role


def test_the_exact_mode_accepts_a_group_key_and_checks_it_as_the_dp_modes_do():
    params_for(3, 1).validate()
    params_for(5, 2, components=2).validate()
    with pytest.raises(Exception, match="key_group and key_threshold go together"):
        dataclasses.replace(params_for(3, 1), key_threshold=None).validate()
    with pytest.raises(Exception, match="key_threshold"):
        params_for(3, 3).validate()


def test_trents_chosen_basis_block_which_the_single_key_cannot_stop_is_refused_under_the_group_key(sk512):
    """The single-key mode's residual (docs/security.md): a Trent sending c·[e_j] as the block passes every
    check there and learns row j of every party's matrix.  Under the group key the block must come with a proof
    that it is a combination of the recomputed sums: a basis block, even sent with the honest block's proof,
    is refused before anything is decrypted, and no party sends anything in clear."""
    rng = np.random.default_rng(9)
    blocks = blocks_with_gap(rng, 4, (5, 6, 7))
    params = params_for(3, 1)
    _, shares = deal(sk512, 3, 1)
    pk = shares[0].public.public_key
    basis = np.zeros(4 * params.block_size)
    basis[2] = 2.0**10

    def rewrite(to, tag, data):
        if tag != "v/0":
            return data
        vec = EncryptedVector.encrypt(pk, basis, frac_bits=params.frac_bits, packing=params.packing(pk))
        return vec.to_proto().SerializeToString()

    net, outcome = run(blocks, params, sk=sk512, shares=shares, rewrite={"trent": rewrite})
    assert isinstance(outcome, BadCombination) and outcome.origin == "trent", outcome
    assert not any(g.startswith("final/") or g == Tags.decryption("v/0").partial for _, _, g, _, _ in net.transcript)


def test_every_role_replays_bit_for_bit_from_its_root(sk512):
    """Trent's re-randomisers and proof nonces, the parties' releases, proofs and partial decryptions all come
    from the roles' roots (and the statements): a replayed role re-sends every message bit for bit, so its
    commitments hold and a resumed session ends as it would have.  Another Trent root gives other blocks."""
    from smcdp.primitives.rng import Randomness

    rng = np.random.default_rng(10)
    blocks = blocks_with_gap(rng, 4, (5, 6, 7))
    params = params_for(3, 1, p=0.6)
    _, shares = deal(sk512, 3, 1)

    def sent(trent_byte):
        roots = [Randomness(bytes([50 + i]) * 32) for i in range(3)]
        net, res = run(
            blocks, params, sk=sk512, shares=shares, seeds=roots, trent_seed=Randomness(bytes([trent_byte]) * 32)
        )
        assert not isinstance(res, Exception), res
        return {(s, r, t): d for s, r, t, _, d in net.transcript}

    first, again = sent(7), sent(7)
    assert first == again
    other = sent(8)
    assert first[("trent", "party1", "v/0")] != other[("trent", "party1", "v/0")]


def test_a_trent_sending_different_valid_blocks_to_different_parties_is_caught_before_anyone_is_blamed(
    sk512, monkeypatch
):
    """Found in review: Trent sends party3 another valid, proven v/0 (the same combination, another
    re-randomiser) than party1 and party2.  Each party's partial decryption is proven for the block it holds, so
    the others' would fail their proofs and an honest party would be named.  With its partial each party now
    sends a digest of what it decrypts, and the digests differ first: EchoMismatch (no honest party blamed), and
    nobody combines anything."""
    import hashlib

    import smcdp.protocols.power_iteration as pi
    from smcdp.protocols.power_iteration_threshold import EchoMismatch

    honest = pi.proven_combination
    alt = {}

    def twice(pk, rows, exps, key, tag, context, exponent_bits):
        if tag == "v/0":  # the same statement with another stream: another s, another proof -- both valid
            vec, proof = honest(pk, rows, exps, hashlib.sha256(b"other" + key).digest(), tag, context, exponent_bits)
            alt["v/0"] = vec.to_proto().SerializeToString()
            alt["v/0/proof"] = pi.bigints(proof).SerializeToString()
        return honest(pk, rows, exps, key, tag, context, exponent_bits)

    monkeypatch.setattr(pi, "proven_combination", twice)
    rng = np.random.default_rng(3)
    blocks = blocks_with_gap(rng, 4, (5, 6, 7))
    _, shares = deal(sk512, 3, 1)
    _, outcome = run(
        blocks,
        params_for(3, 1),
        sk=sk512,
        shares=shares,
        rewrite={"trent": lambda to, tag, data: alt[tag] if to == "party3" and tag in alt else data},
    )
    assert isinstance(outcome, EchoMismatch), outcome
    assert getattr(outcome, "origin", None) is None and "trent sent different data parties" in str(outcome)
    assert not isinstance(outcome, BadPartialDecryption)


def test_trents_malformed_replies_are_refused_naming_him(sk512):
    """Found in review: a proof one integer short, or a block with a ciphertext too many, was refused without
    saying from whom; the errors now say 'from trent'."""
    rng = np.random.default_rng(3)
    blocks = blocks_with_gap(rng, 4, (5, 6, 7))
    _, shares = deal(sk512, 3, 1)

    def short_proof(to, tag, data):
        if tag != "v/0/proof":
            return data
        msg = pb.BigInts.FromString(data)
        del msg.magnitude[-1]
        if len(msg.negative):
            del msg.negative[-1]
        return msg.SerializeToString()

    def extra_ciphertext(to, tag, data):
        if tag != "v/0":
            return data
        msg = pb.CiphertextVector.FromString(data)
        msg.ciphertexts.append(msg.ciphertexts[0])
        return msg.SerializeToString()

    for fn in (short_proof, extra_ciphertext):
        _, outcome = run(blocks, params_for(3, 1), sk=sk512, shares=shares, rewrite={"trent": fn})
        assert isinstance(outcome, InvalidMessage) and "from trent" in str(outcome), (fn.__name__, outcome)


def test_residual_trent_may_combine_the_sums_with_any_coefficients(sk512, monkeypatch):
    """What the proof does not stop (found in review; docs/crypto.md): its coefficients are residues mod N, not
    bounded non-negative integers.  A Trent sending reply/0's block as 2a·U_1 − a·U_0 (honest blocks are
    non-negative combinations) passes every check; the parties decrypt it -- still a function of sums over every
    party, which is all the group key promises -- and the session goes on."""
    import secrets

    import gmpy2
    from gmpy2 import mpz

    import smcdp.protocols.power_iteration as pi
    from smcdp.crypto.modexp import multi_exp
    from smcdp.crypto.zkp import CHALLENGE_BITS, SCALE_HIDING_BITS, _combination_challenge, _unit_below

    honest = pi.proven_combination
    seen = {}

    def signed(pk, rows, exps, key, tag, context, exponent_bits):
        if tag != "reply/0/block":
            return honest(pk, rows, exps, key, tag, context, exponent_bits)
        n, n2, a = pk.n, pk.nsquare, 1 << 20
        coeffs = [-a, 2 * a]  # rows: the sums U_0, U_1
        ss = [_unit_below(n) for _ in rows[0].ciphertexts]
        cts = [
            int(multi_exp([rows[0].ciphertexts[i], rows[1].ciphertexts[i]], coeffs, n2) * gmpy2.powmod(s, n, n2) % n2)
            for i, s in enumerate(ss)
        ]
        xbits = exponent_bits + CHALLENGE_BITS + SCALE_HIDING_BITS
        xs = [(1 << (xbits - 1)) + secrets.randbits(xbits - 2) for _ in coeffs]  # z = x + e·a stays >= 0
        us = [_unit_below(n) for _ in cts]
        bases = [[mpz(c) for c in r.ciphertexts] for r in rows]
        A = [int(multi_exp([b[i] for b in bases], xs, n2) * gmpy2.powmod(u, n, n2) % n2) for i, u in enumerate(us)]
        e = _combination_challenge(pk, bases, [mpz(c) for c in cts], A, context)
        proof = [
            *A,
            *(x + e * c for x, c in zip(xs, coeffs)),
            *(int(u * gmpy2.powmod(s, e, n) % n) for u, s in zip(us, ss)),
        ]
        seen.update(rows=rows, a=a)
        vec = EncryptedVector(pk, [mpz(c) for c in cts], rows[0].length, rows[0].exponent, rows[0].packing, None)
        seen["vec"] = vec
        return vec, proof

    monkeypatch.setattr(pi, "proven_combination", signed)
    rng = np.random.default_rng(3)
    blocks = blocks_with_gap(rng, 4, (5, 6, 7))
    _, shares = deal(sk512, 3, 1)
    _, res = run(blocks, params_for(3, 1), sk=sk512, shares=shares)
    assert not isinstance(res, Exception), res
    u0, u1 = (np.asarray(r.decrypt_ints(sk512), dtype=object) for r in seen["rows"])
    a = seen["a"]
    assert all(np.asarray(seen["vec"].decrypt_ints(sk512), dtype=object) == 2 * a * u1 - a * u0)


def test_a_proven_block_that_decrypts_into_the_overflow_region_is_refused_as_trents():
    """Found in review: a proven combination with coefficients the protocol does not use (1/2 mod N, say) decrypts
    into the overflow region, which surfaced as a bare CryptoOverflow; it is now an invalid message from trent."""
    from smcdp.errors import CryptoOverflow
    from smcdp.protocols.power_iteration import _in_overflow_region

    with pytest.raises(InvalidMessage, match="reply/3 from trent decrypts into the overflow region"):
        with _in_overflow_region("reply/3"):
            raise CryptoOverflow("decrypted value lies in the overflow region")
