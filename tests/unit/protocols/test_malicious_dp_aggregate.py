"""A malicious Charlie or data party in dp-aggregate (docs/security.md, "DP aggregation").

Each test runs the honest roles with one participant's outgoing messages rewritten on the wire.
"""

import numpy as np
import pytest

from smcdp.crypto.codec import bigints, ciphertext_from_proto, ciphertext_to_proto
from smcdp.crypto.vector import EncryptedVector
from smcdp.crypto.zkp import open_ciphertext, prove_bit_any_key, prove_modulus
from smcdp.errors import InvalidMessage, SessionAborted
from smcdp.primitives.argmin import random_permutation
from smcdp.primitives.rng import protocol_rng
from smcdp.protocols.dp_aggregate import indicator_context, sensitivity_key, to_fixed
from smcdp.v1 import messages_pb2 as pb
from tests.support.crafted_keys import key_with_a_small_factor
from tests.unit.protocols.test_dp_aggregate import make_params, party_noise, released_T, run_aggregate

K, D = 3, 4
SENS = [0.01, 0.04, 0.02]  # party2 has the largest sensitivity: its noise is the right one
SEEDS = [31, 32, 33]
SEED = 7  # a fixed protocol seed keeps π₁ (party -> position) the same in every run
PI1 = random_permutation(protocol_rng(SEED, "secure-min", "party1"), K)  # party1's first draw


def _rewrite(net, sender, fn):
    ch = net.channels[sender]
    original = ch._transmit

    async def evil(to_role, tag, type_url, data):
        await original(to_role, tag, type_url, fn(to_role, tag, data))

    ch._transmit = evil


def _sum_of_weights(p, ws):
    return np.array([[to_fixed(x, p.frac_bits) for x in w] for w in ws], dtype=object).sum(axis=0)


def _weights():
    rng = np.random.default_rng(5)
    return [rng.uniform(-1, 1, size=D) for _ in range(K)]


def _indicator(zeta, entries, context=lambda k: indicator_context("local", k)):
    """What a deviating Charlie sends: entry k (any value) to party k, a bit proof for it when it is 0 or 1
    (otherwise a proof made as if it were 1), and an opening of the product of the entries."""
    pk = zeta.public_key
    cts = [pk.raw_encrypt_textbook(v) for v in entries]
    out = {}
    for k, (c, v) in enumerate(zip(cts, entries)):
        proof = prove_bit_any_key(zeta, c, v if v in (0, 1) else 1, context(k))
        out[(f"party{k + 1}", "s2/u")] = ciphertext_to_proto(pk, c).SerializeToString()
        out[(f"party{k + 1}", "s2/u-proof")] = bigints(proof).SerializeToString()
    product = 1
    for c in cts:
        product = product * c % pk.nsquare
    out[("party1", "s2/u-open")] = bigints([open_ciphertext(zeta, product)[1]]).SerializeToString()
    return out


def _forge(forged):
    return lambda net: _rewrite(net, "charlie", lambda to, tag, data: forged.get((to, tag), data))


def test_charlie_selecting_no_noise_is_refused(keys):
    """Charlie encrypts an all-zero 'indicator', each entry with a valid proof that it is 0 or 1: every
    party's contribution would carry no noise and the release be the exact average.  The entries'
    product does not open to 1, so party1 refuses before anything reaches Charlie or Dave."""
    p = make_params(K, D, epsilon=2.0)
    with pytest.raises(InvalidMessage, match="does not add up to 1"):
        run_aggregate(
            p, _weights(), SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=_forge(_indicator(keys["zeta"], [0] * K))
        )


def test_charlie_selecting_two_noises_is_refused(keys):
    p = make_params(K, D, epsilon=2.0)
    with pytest.raises(InvalidMessage, match="does not add up to 1"):
        run_aggregate(
            p, _weights(), SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=_forge(_indicator(keys["zeta"], [1, 1, 0]))
        )


@pytest.mark.parametrize("entries", [[2, 0, 0], [0, -1, 2]])
def test_charlie_entry_that_is_not_a_bit_is_refused(keys, entries):
    """An entry of 2 (or −1) cannot be proven 0 or 1: the party that receives it refuses, even when the
    entries add up to 1."""
    p = make_params(K, D, epsilon=2.0)
    with pytest.raises(InvalidMessage, match="not proven to encrypt 0 or 1"):
        run_aggregate(
            p, _weights(), SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=_forge(_indicator(keys["zeta"], entries))
        )


def test_charlie_different_indicators_per_party_are_refused(keys):
    """The attack main allowed (issue 28's review): Charlie sent every party a whole one-hot vector with
    a valid proof, but a *different* one to each, none hot at the receiver's own position -- each check
    passed and the release had no noise (a random choice succeeds with probability ≈ 1/e without
    knowing π₁).  Now every party receives one entry and party1 opens the product of exactly the
    entries the parties use: a vector hot 'elsewhere' for everyone adds up to 0 and is refused.
    (/tmp demonstration against main in the report of issue 28.)"""
    p = make_params(K, D, epsilon=2.0)
    honest = _indicator(keys["zeta"], [int(k == PI1[1]) for k in range(K)])  # a vector hot at party2's position
    forged = dict(honest)
    # each party gets the entry of a vector hot at the position of the *next* party: its own entry is 0
    for k in range(K):
        owner = PI1.index(k)  # the party whose value sits at position k
        other = _indicator(keys["zeta"], [int(i == PI1[(owner + 1) % K]) for i in range(K)])
        for tag in ("s2/u", "s2/u-proof"):
            forged[(f"party{k + 1}", tag)] = other[(f"party{k + 1}", tag)]
    with pytest.raises(InvalidMessage, match="does not add up to 1"):
        run_aggregate(p, _weights(), SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=_forge(forged))


def test_a_charlie_whose_zeta_has_a_small_prime_factor_is_refused_by_every_party(keys):
    """ζ is Charlie's own key, which a party checks for its size only.  Under a modulus with a small prime factor r
    a bit proof with 128-bit challenges passes for a non-bit after about r hashes of grinding, and the party's
    ζ(v_j)^(k_j) shows k_j modulo r (tests/unit/crypto/test_crafted_modulus.py).  The indicator's proofs now hold
    for any modulus but one with a prime factor below 2^16, which every party refuses before it raises Charlie's
    entry to anything -- here a 13-bit factor in an honestly run session (it completed before)."""
    p = make_params(K, D, epsilon=2.0)
    zeta = key_with_a_small_factor(keys["zeta"].public_key.bits, 5)
    with pytest.raises(InvalidMessage, match="prime factor below 2\\^16"):
        run_aggregate(p, _weights(), SENS, {**keys, "zeta": zeta}, noise_seeds=SEEDS, seed=SEED)


def test_a_charlie_whose_zeta_modulus_proof_does_not_verify_is_refused_by_every_party(keys):
    """Charlie's openings under ζ bind only if its modulus is square-free (tests/unit/crypto/test_zkp_any_key.py: under
    n = p^3 one ciphertext opens to two plaintexts), so he proves gcd(n, φ(n)) = 1 with ζ; roots for another
    session's context are refused by every data party before anything else is sent under ζ."""
    p = make_params(K, D, epsilon=2.0)
    stale = bigints(prove_modulus(keys["zeta"], b"smcdp/secure-min/zeta-modulus/another-session/s1"))
    forged = {(f"party{k + 1}", "s1/zeta-proof"): stale.SerializeToString() for k in range(K)}
    with pytest.raises(InvalidMessage, match="does not show gcd"):
        run_aggregate(p, _weights(), SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=_forge(forged))


def test_charlie_proof_is_bound_to_its_session_and_entry(keys):
    """A proof made for another session's context, or for another entry, does not verify here (no replay)."""
    p = make_params(K, D, epsilon=2.0)
    hot = [int(k == PI1[1]) for k in range(K)]
    for context in (lambda k: indicator_context("another-session", k), lambda k: indicator_context("local", k + 1)):
        with pytest.raises(InvalidMessage, match="not proven to encrypt 0 or 1"):
            run_aggregate(
                p,
                _weights(),
                SENS,
                keys,
                noise_seeds=SEEDS,
                seed=SEED,
                tamper=_forge(_indicator(keys["zeta"], hot, context)),
            )


def test_charlie_selecting_a_less_noisy_party_is_refused(keys):
    """Issue 25: an indicator at a position of Charlie's choosing, with valid proofs and opening.  He does
    not know which party sits at a position (π₁), but the comparisons tell him about the positions'
    order, so he could select a *less* noisy party.  Every party checks that the selected key is at
    most its own: at any position but the right one, some party refuses and nothing is published;
    at the right one the session succeeds with exactly party2's noise."""
    p = make_params(K, D, epsilon=2.0)
    assert _outcomes_of_each_selection(keys, p, party_noise(p, SENS[1], SEEDS[1])) == {
        0: "refused",
        1: "released",
        2: "refused",
    }


def _outcomes_of_each_selection(keys, p, released_noise):
    """party -> "refused" or "released" when Charlie puts the indicator at that party's position; a release
    must carry exactly ``released_noise`` (grid steps) on the sum of the models."""
    ws = _weights()
    outcomes = {}
    for position in range(K):
        forged = _indicator(keys["zeta"], [int(k == position) for k in range(K)])
        try:
            res, _net = run_aggregate(p, ws, SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=_forge(forged))
        except (InvalidMessage, SessionAborted) as exc:
            assert "charlie selected is calibrated for a smaller sensitivity" in str(exc)
            outcomes[PI1.index(position)] = "refused"
            continue
        diff = [int(t - w) for t, w in zip(released_T(res, p), _sum_of_weights(p, ws))]
        assert diff == released_noise
        outcomes[PI1.index(position)] = "released"
    return outcomes


def test_refusing_party_is_the_one_that_needs_more_noise(keys):
    """Charlie selects party1 (the least noisy): party2 and party3 need more noise and refuse; no share
    reaches Dave (every party waits until every check has passed)."""
    p = make_params(K, D, epsilon=2.0)
    forged = _indicator(keys["zeta"], [int(k == PI1[0]) for k in range(K)])
    state = {}

    def keep(net):
        state["net"] = net
        _forge(forged)(net)

    with pytest.raises((InvalidMessage, SessionAborted)) as info:
        run_aggregate(p, _weights(), SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=keep)
    assert "calibrated for a smaller sensitivity" in str(info.value)
    transcript = state["net"].transcript
    assert not [t for (s, r, t, tn, d) in transcript if r == "dave"]
    assert not [t for (s, r, t, tn, d) in transcript if t == "s2/psi"]


def test_charlie_lying_about_the_decryption_is_refused(keys):
    """Charlie decrypts the masked selected key for each party's check; he must send its opening, so he
    cannot claim a smaller value (which would let a wrong selection pass)."""
    p = make_params(K, D, epsilon=2.0)

    def lie(to, tag, data):
        if tag != "chk/open":
            return data
        c, r = [int.from_bytes(m, "big") for m in pb.BigInts.FromString(data).magnitude]
        return bigints([c - 1000, r]).SerializeToString()

    with pytest.raises((InvalidMessage, SessionAborted), match="does not open the ciphertext"):
        run_aggregate(
            p, _weights(), SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=lambda net: _rewrite(net, "charlie", lie)
        )


def test_residual_selected_party_can_withhold_its_noise(keys):
    """A malicious data party contributes ζ(Y_j) instead of ζ(v_j·N_j + Y_j).  It does not know whether it
    is selected, but when it is, the release carries no noise at all.  No cheap check sees it (the
    contribution is encrypted under Charlie's key and its noise is private by design); mitigations:
    who may take part (issue 14's policy), and a per-dataset budget that accounts for it."""
    p = make_params(K, D, epsilon=2.0)
    zeta = keys["zeta"]
    pk = zeta.public_key
    packing = p.packing(pk)

    def no_noise(to, tag, data):
        # party2 is a leaf of the tree (K = 3): its s2/agg is its own contribution.  The test stands in for
        # a party that leaves out its noise: it decrypts the contribution and takes party2's noise out
        if tag != "s2/agg":
            return data
        vals = EncryptedVector.from_proto(pb.CiphertextVector.FromString(data), pk, packing=packing).decrypt_ints(zeta)
        vals = [v - n for v, n in zip(vals, party_noise(p, SENS[1], SEEDS[1]))]
        return (
            EncryptedVector.encrypt_ints(
                pk, vals, exponent=-p.frac_bits, packing=packing, bound=p.contribution_bound(1)
            )
            .to_proto()
            .SerializeToString()
        )

    ws = _weights()
    res, _ = run_aggregate(
        p, ws, SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=lambda net: _rewrite(net, "party2", no_noise)
    )
    diff = [int(t - w) for t, w in zip(released_T(res, p), _sum_of_weights(p, ws))]
    assert diff == [0] * D  # the exact sum: no noise
    assert party_noise(p, SENS[1], SEEDS[1]) != [0] * D  # ... where party2's noise belonged


def test_residual_charlie_with_the_selected_party_removes_the_noise(keys):
    """Two colluders, no deviation: Charlie knows the position p̂ he selected (he encrypted the indicator)
    and every data party knows its own position π₁(j) (party1 sends it in Stage 1).  Together they learn
    whether that party's noise was selected -- and when it was, the party knows N_sel = N_j and the
    published shares give T, so T − N_j is the exact sum of the models.  The selected party is the one with
    the smallest data set, so a curator allied with a small site has this with certainty (issue 36: the
    noise must be shared so that no coalition of the curator and t parties can subtract it)."""
    p = make_params(K, D, epsilon=2.0)
    zeta = keys["zeta"]
    seen: dict[int, int] = {}  # position k -> the indicator entry Charlie sent party k

    def watch(to, tag, data):
        if tag == "s2/u":
            k = int(to.removeprefix("party")) - 1
            c = ciphertext_from_proto(pb.CiphertextVector.FromString(data), zeta.public_key, "s2/u")
            seen[k] = int(zeta.raw_decrypt(c))
        return data

    ws = _weights()
    res, _ = run_aggregate(
        p, ws, SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=lambda net: _rewrite(net, "charlie", watch)
    )
    selected = [k for k, v in seen.items() if v == 1]
    assert sorted(seen) == list(range(K)) and len(selected) == 1  # Charlie's view: the position p̂
    # party2 (the largest sensitivity, its noise the right one) knows its own position: the coalition sees
    # that it is p̂, and subtracts party2's noise from the release
    assert PI1[1] == selected[0]
    removed = [int(t - n) for t, n in zip(released_T(res, p), party_noise(p, SENS[1], SEEDS[1]))]
    assert removed == [int(w) for w in _sum_of_weights(p, ws)]  # the exact sum of the models
    assert released_T(res, p) != removed  # ... from a release that carried noise


# ----------------------------------------------------------------------------- shared noise (calibration="gaussian")
def _gaussian():
    return make_params(K, D, epsilon=2.0, calibration="gaussian", delta=1e-6, noise_parties=2)


def test_shared_noise_charlie_selecting_a_less_noisy_party_is_refused(keys):
    """With shared noise every party learns k_sel itself (Charlie opens it masked) and refuses one above its own
    key: at any position but the right one some party refuses; at the right one the release carries every
    party's share for party2's calibration."""
    from smcdp.protocols.dp_aggregate import sensitivity_key, shared_noise

    p = _gaussian()
    k_sel = sensitivity_key(SENS[1])[0]
    shares = [shared_noise("p", p, k_sel, np.random.default_rng(s)) for s in SEEDS]
    assert _outcomes_of_each_selection(keys, p, [sum(col) for col in zip(*shares)]) == {
        0: "refused",
        1: "released",
        2: "refused",
    }


def test_shared_noise_charlie_lying_about_the_selected_key_is_refused(keys):
    """Charlie opens k_sel + s_j to party j; a smaller value (less noise) does not open the ciphertext."""
    p = _gaussian()

    def lie(to, tag, data):
        if tag != "chk/open":
            return data
        c, r = [int.from_bytes(m, "big") for m in pb.BigInts.FromString(data).magnitude]
        return bigints([c + 1000, r]).SerializeToString()

    with pytest.raises((InvalidMessage, SessionAborted), match="does not open the ciphertext"):
        run_aggregate(
            p, _weights(), SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=lambda net: _rewrite(net, "charlie", lie)
        )


# ----------------------------------------------------------------------------- a data party using Charlie's openings
def _open_instead(keys, attacker: int, pick):
    """Tamper: party ``attacker`` sends Charlie, as its masked selected key ("chk/c", the reveal), the ciphertext
    ``pick(seen)`` chooses among what the others sent it (``seen``: (sender, tag) -> bytes); the
    openings Charlie sends it are recorded.  Returns (tamper, openings)."""
    zeta_pk = keys["zeta"].public_key
    me = f"party{attacker + 1}"
    seen: dict[tuple[str, str], bytes] = {}
    openings: list[tuple[int, int]] = []

    def watch(sender):
        def fn(to, tag, data):
            if to == me:
                seen[(sender, tag)] = data
            return data

        return fn

    def swap(to, tag, data):
        if to == "charlie" and tag == "chk/c":
            return ciphertext_to_proto(zeta_pk, pick(seen)).SerializeToString()
        return data

    def record(to, tag, data):
        if to == me and tag == "chk/open":
            openings.append(tuple(int.from_bytes(m, "big") for m in pb.BigInts.FromString(data).magnitude))
        return data

    def tamper(net):
        for sender in [f"party{k + 1}" for k in range(K) if k != attacker] + ["charlie"]:
            _rewrite(net, sender, watch(sender))
        _rewrite(net, me, swap)
        _rewrite(net, "charlie", record)

    return tamper, openings


@pytest.mark.parametrize("shift", [False, True], ids=["as-forwarded", "shifted-by-a"])
def test_shared_noise_a_holder_cannot_have_charlie_open_the_share_it_forwards(keys, shift):
    """party1 holds party2's share a and forwards its encrypted b to Charlie (Stage 1, step 2: PI1 puts party2
    at position 0, party1's index).  With shared noise Charlie opens every party's masked selected key; party1
    sends him the forwarded ciphertext instead -- shifted by its a: E(b)·E(a − 1) = E(v' − 1) = E(K·k), party2's
    sensitivity key times K (found by review: it fitted Charlie's window).  Under ζ he opened it; b is now
    under Charlie's key β, which he never opens: refused, nothing opened to party1."""
    from smcdp.crypto.codec import from_bigints, public_key_from_proto

    p = _gaussian()
    assert PI1[1] == 0  # party1 holds party2's shares

    def pick(seen):
        pk = keys["zeta"].public_key
        if ("charlie", "s1/beta-pk") in seen:  # the key the forwarded share is under
            pk = public_key_from_proto(
                pb.PaillierPublicKey.FromString(seen[("charlie", "s1/beta-pk")]), allow_insecure=True
            )
        zb = ciphertext_from_proto(pb.CiphertextVector.FromString(seen[("party2", "s1/zb")]), pk, "zb")
        if not shift:
            return zb
        (a,) = from_bigints(pb.BigInts.FromString(seen[("party2", "s1/a")]), count=1, bound_bits=4096, what="a")
        return pk.raw_add(zb, pk.raw_encrypt_textbook(a - 1))  # party2's index is 1: v' = K·k + 1

    tamper, openings = _open_instead(keys, 0, pick)
    with pytest.raises((InvalidMessage, SessionAborted)):
        run_aggregate(p, _weights(), SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=tamper)
    assert openings == []  # before β, the shifted one opened to K·k exactly


@pytest.mark.parametrize("which", [0, 1], ids=["selected-key", "indicator"])
def test_shared_noise_a_parent_cannot_have_charlie_open_a_subtree_product(keys, which):
    """party1, the tree's root, receives party2's subtree products ζ(v·k) and ζ(u) (Stage 2, step 3): unmasked,
    0 or k_sel and 0 or 1 -- whether the selected party is in that subtree.  Each carries the subtree's share of
    a zero-sum mask mod n, so what party1 has Charlie open instead of its masked key is out of his window:
    refused, nothing opened."""
    p = _gaussian()
    zeta_pk = keys["zeta"].public_key

    def pick(seen):
        pair = pb.CiphertextVector.FromString(seen[("party2", "s2/agg-sel")])
        return EncryptedVector.from_proto(pair, zeta_pk, length=2, exponent=0, what="pair").ciphertexts[which]

    tamper, openings = _open_instead(keys, 0, pick)
    with pytest.raises((InvalidMessage, SessionAborted), match="not a masked selected value"):
        run_aggregate(p, _weights(), SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=tamper)
    assert openings == []


def test_residual_a_deviating_party_can_open_its_own_indicator_entry(keys):
    """What a single deviating data party can still have Charlie open with shared noise: its own entry of his
    indicator, ζ(u) for its position -- whether the party whose shares it holds is the selected one (party1
    holds party2's, and party2, with the largest sensitivity, is selected).  With k_sel, which every data
    party learns, that is the other party's sensitivity key when the answer is yes (probability 1/K for a
    party outside the coalition); a party that reads k_sel = its own key knows as much of itself anyway.
    Documented in docs/protocols/dp-aggregate.md (Shared noise: a deviating data party)."""
    p = _gaussian()
    zeta_pk = keys["zeta"].public_key

    def pick(seen):
        return ciphertext_from_proto(pb.CiphertextVector.FromString(seen[("charlie", "s2/u")]), zeta_pk, "u")

    tamper, openings = _open_instead(keys, 0, pick)
    # party1's unmodified code then finds the opening is not of what it meant to send and fails the session;
    # a deviating party1 just reads it
    with pytest.raises((InvalidMessage, SessionAborted), match="does not open the ciphertext"):
        run_aggregate(p, _weights(), SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=tamper)
    assert [c for c, _ in openings] == [1]  # party2, whose shares party1 holds, is the selected party


def test_a_forwarded_entry_does_not_strip_the_receivers_child_of_its_mask(keys):
    """party3 holds the indicator entry of party1's value's position and forwards it to party1, who is also its
    tree parent (PI1 = [2, 0, 1]); its own selection term is that entry times g^μ'.  Forwarded as it was, party1
    divided the two and read g^μ' -- the child's mask, and with its own seeds a sibling's (found by review).
    Forwarded re-randomised, the quotient is no power of g."""
    p = _gaussian()
    pk = keys["zeta"].public_key
    assert PI1[0] == 2  # party1's value sits at position 2, whose entry party3 receives
    sent: dict[str, bytes] = {}

    def watch(to, tag, data):
        if to == "party1" and tag in ("s2/v", "s2/agg-sel"):
            sent[tag] = data
        return data

    run_aggregate(
        p, _weights(), SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=lambda net: _rewrite(net, "party3", watch)
    )
    v = ciphertext_from_proto(pb.CiphertextVector.FromString(sent["s2/v"]), pk, "v")
    ind = EncryptedVector.from_proto(
        pb.CiphertextVector.FromString(sent["s2/agg-sel"]), pk, length=2, exponent=0, what="pair"
    ).ciphertexts[1]
    q = ind * pow(int(v), -1, int(pk.nsquare)) % pk.nsquare
    assert q % pk.n != 1  # g^μ' = 1 + μ'·n would be ≡ 1 (mod n)


def test_party1_cannot_have_charlie_publish_a_subtree_product(keys):
    """Stage 3: Charlie publishes, mod M, what party1 sends as ζ(X + s).  party1 sends its child party2's
    subtree product ζ(Σ v·k) instead (one noise: there the selection check's openings go elsewhere, so this was
    its way in): unmasked, Charlie published k_sel's low bits -- and 0 had the selected party not been below
    party2 (found by review).  Masked, it decrypts out of the agreed range: refused, nothing published."""
    p = make_params(K, D, epsilon=2.0)
    pk = keys["zeta"].public_key
    child: dict[str, bytes] = {}
    published: list[bytes] = []

    def watch(to, tag, data):
        if to == "party1" and tag == "s2/agg-sel":
            child["pair"] = data
        return data

    def swap(to, tag, data):
        if to == "charlie" and tag == "s2/psi":
            pair = pb.CiphertextVector.FromString(child["pair"])
            sel = EncryptedVector.from_proto(pair, pk, length=2, exponent=0, what="pair").ciphertexts[0]
            vec = EncryptedVector.from_proto(
                pb.CiphertextVector.FromString(data), pk, length=D, exponent=-p.frac_bits, packing=p.packing(pk)
            )
            cts = [sel] + [pk.raw_encrypt_textbook(0) for _ in vec.ciphertexts[1:]]
            return EncryptedVector(pk, cts, D, -p.frac_bits, p.packing(pk), vec.bound).to_proto().SerializeToString()
        return data

    def record(to, tag, data):
        if tag.startswith("s3/"):
            published.append(data)
        return data

    def tamper(net):
        _rewrite(net, "party2", watch)
        _rewrite(net, "party1", swap)
        _rewrite(net, "charlie", record)

    with pytest.raises((InvalidMessage, SessionAborted), match="outside the agreed range"):
        run_aggregate(p, _weights(), SENS, keys, noise_seeds=SEEDS, seed=SEED, tamper=tamper)
    assert published == []


def test_residual_a_holder_forcing_its_source_selected_reads_its_key(keys):
    """What the selection's design leaves to one deviating data party (docs/protocols/dp-aggregate.md, "A
    deviating data party", not closed): party1 holds party2's Stage-1 share a and sends Charlie ξ(a − 2^L') for
    it, so that party2's position wins the tournament although party1's key is the smallest; with shared noise
    the reveal then gives party2's key -- to every party, and party1 knows whose it is.  party3 refuses (its key
    is below party2's), but only after the reveal.  Checking first would not close it: a party can shift its own
    term of the selection product, or mask something other than k_sel for the party it helps check (found by
    review); closing it needs the parties' terms proven."""
    from smcdp.crypto.codec import public_key_from_proto

    p = _gaussian()
    sm = p.secure_min_params()
    sens = [0.04, 0.01, 0.02]  # keys: party1 < party3 < party2
    assert PI1[1] == 0  # party1 holds party2's shares
    xi: dict[str, object] = {}
    opened: list[int] = []

    def evil(to, tag, data):
        if tag == "s1/xi-pk":
            xi["pk"] = public_key_from_proto(pb.PaillierPublicKey.FromString(data), allow_insecure=True)
        if to == "charlie" and tag == "s1/xa":
            pk = xi["pk"]
            c = ciphertext_from_proto(pb.CiphertextVector.FromString(data), pk, "xa")
            c = pk.raw_add(c, pk.raw_encrypt_textbook(-(1 << sm.shared_bits)))  # a − 2^L': this position wins
            return ciphertext_to_proto(pk, c).SerializeToString()
        return data

    def record(to, tag, data):
        if to == "party1" and tag == "chk/open":
            opened.append(int.from_bytes(pb.BigInts.FromString(data).magnitude[0], "big"))
        return data

    def tamper(net):
        _rewrite(net, "party1", evil)
        _rewrite(net, "charlie", record)

    with pytest.raises((InvalidMessage, SessionAborted), match="smaller sensitivity"):
        run_aggregate(p, _weights(), sens, keys, noise_seeds=SEEDS, seed=SEED, tamper=tamper)
    s_rev = protocol_rng(SEED, "secure-min", "party1", "reveal-mask").randrange(1 << sm.check_mask_bits)
    assert [c - s_rev for c in opened] == [sensitivity_key(0.01)[0]]  # party2's key, not the smallest
