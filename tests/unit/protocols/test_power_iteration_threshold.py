"""Power iteration's DP covariance mode under a group (threshold) key, in memory, with dealt shares
(smcdp.crypto.threshold.deal: the key ceremony is tested on its own).

What is shown: the session computes what the single-key mode computes; every contribution is committed
(digests) before any party's ciphertext leaves it; a Trent asking for the decryption of anything but the
sum of the committed contributions is refused and named; a wrong partial decryption is named; with
n = 5, t = 2 the aggregate's noise is 5/3·σ² (not 5σ²); and a coalition of Trent and t data parties,
pooling their shares and every message they hold, cannot read an honest party's contribution -- which the
same coalition reads in the single-key mode.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math

import numpy as np
import pytest

from smcdp.compute.kernels import clipped_gram_block
from smcdp.crypto.encoding import decode_fixed
from smcdp.crypto.paillier import generate_keypair
from smcdp.crypto.threshold import (
    BadPartialDecryption,
    NotEnoughShares,
    assigned,
    combine,
    combine_assigned,
    combine_vector_ints,
    deal,
    partial_decrypt,
    partial_decrypt_vector,
)
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import InvalidMessage
from smcdp.net.channel import InMemoryNetwork
from smcdp.protocols.power_iteration import (
    COV_TAG,
    PowerIterationParams,
    covariance_pack,
    data_party,
    dp_calibration,
    trent,
)
from smcdp.protocols.power_iteration_threshold import (
    CONTRIB_TAG,
    DIGEST_TAG,
    ECHO_TAG,
    PARTIAL_TAG,
    PROOF_TAG,
    BadContributionProof,
    ContributionMismatch,
    EchoMismatch,
    GroupKey,
    partial_from_proto,
    partial_to_proto,
    split_offset,
    sum_context,
)
from smcdp.v1 import messages_pb2 as pb
from tests.support.group_keys import relayed_proof, relayed_release, with_relayed_release
from tests.support.pca_data import spectral_gap_data, top_eigenvectors
from tests.support.pi_group import run


@pytest.fixture(scope="module")
def sk512():
    return generate_keypair(512, allow_insecure=True)[1]


def params_for(n, t, **kw) -> PowerIterationParams:
    base = dict(n_parties=n, key_bits=512, epsilon=1.0, delta=1e-6, dp_method="covariance")
    if t is not None:
        base.update(key_group="lab", key_threshold=t)
    return PowerIterationParams(**{**base, **kw})


def contributions(net, params, pk):
    """role -> the encrypted release that role sent Trent (what Trent holds)."""
    out = {}
    for sender, tag, _, data in net.received_by("trent"):
        if tag == COV_TAG:
            out[sender] = EncryptedVector.from_proto(
                pb.CiphertextVector.FromString(data), pk, packing=params.packing(pk), bound=params.contribution_bound()
            )
    return out


def decrypt(vec, sk):
    return np.asarray(decode_fixed(vec.decrypt_ints(sk), vec.exponent), dtype=np.float64)


# ------------------------------------------------------------------ the protocol computes what the single key does
def test_with_negligible_noise_the_group_key_session_computes_the_components(sk512):
    """n = 3, t = 1, epsilon = 99: every party's u_1, u_2 match numpy's to 1e-4 (the recomputed sum,
    the partial decryptions and their combination give the sum the single-key mode decrypts)."""
    M = spectral_gap_data(11, k=8, n=3_000)
    params = params_for(3, 1, epsilon=99.0, delta=1e-3, components=2, rows=8, max_samples=3_000)
    _, shares = deal(sk512, 3, 1)
    _, res = run([M[:, :1000], M[:, 1000:2200], M[:, 2200:]], params, sk=sk512, shares=shares)
    assert not isinstance(res, Exception), res
    U = top_eigenvectors(M, 2)
    for role in ("party1", "party2", "party3"):
        for j in range(2):
            assert abs(np.dot(res[role].components[j]["u"], U[:, j])) > 1 - 1e-4, (role, j)
        assert res[role].dp["key"]["kind"] == "threshold" and res[role].dp["key"]["threshold"] == 1
    assert res["party1"].dp["noise_parties"] == 2  # h = n − t


def test_every_contribution_is_committed_before_any_ciphertext_leaves_a_party(sk512):
    """Commit, then reveal: a party sends its release to Trent only after *every* data party holds every data
    party's digest and has echoed it to every other, so no party (colluding with Trent, who sees the releases)
    can choose its contribution after seeing another's -- e.g. the inverse of the honest ones, which would make
    the 'sum' one party's contribution.  A data party sends its digest to Trent alone; Trent's only messages to
    a data party are his relay of every digest (after every digest reached him, before any release; the same
    bytes to each) and the n contributions and their proofs of plaintext knowledge, after every release."""
    rng = np.random.default_rng(1)
    blocks = [rng.normal(size=(4, 30)) for _ in range(3)]
    _, shares = deal(sk512, 3, 1)
    net, res = run(blocks, params_for(3, 1, rows=4, max_samples=30), sk=sk512, shares=shares)
    assert not isinstance(res, Exception), res
    order = [(s, r, t) for s, r, t, _, _ in net.transcript]
    data = ("party1", "party2", "party3")
    assert {(s, r) for s, r, t in order if t == DIGEST_TAG} == {
        *((p, "trent") for p in data),
        *(("trent", p) for p in data),
    }  # one digest each, to Trent; his relay to each
    relays = [d for s, r, t, _, d in net.transcript if s == "trent" and t == DIGEST_TAG]
    assert len(set(relays)) == 1 and len(pb.Blobs.FromString(relays[0]).values) == 6
    to_trent = [i for i, (s, r, t) in enumerate(order) if r == "trent" and t == DIGEST_TAG]
    echoes = [i for i, (s, r, t) in enumerate(order) if t == ECHO_TAG]
    assert len(echoes) == 9  # to the two other data parties and to Trent, from each
    for me in data:  # every echo reached every party before any release left
        assert max(echoes) < order.index((me, "trent", COV_TAG))
    last_release = max(i for i, (_, _, t) in enumerate(order) if t == COV_TAG)
    first_release = min(i for i, (_, _, t) in enumerate(order) if t == COV_TAG)
    from_trent = [(i, t) for i, (s, r, t) in enumerate(order) if s == "trent" and r.startswith("party")]
    assert {t for _, t in from_trent} == {CONTRIB_TAG, DIGEST_TAG}
    relayed = next(d for s, r, t, _, d in net.transcript if s == "trent" and r == "party2" and t == CONTRIB_TAG)
    assert [e.role for e in pb.RelayedReleases.FromString(relayed).releases] == ["party1", "party2", "party3"]
    assert all(i > last_release for i, t in from_trent if t == CONTRIB_TAG)
    assert all(max(to_trent) < i < min(echoes) for i, t in from_trent if t == DIGEST_TAG)
    assert max(echoes) < first_release


# ------------------------------------------------------------------ a deviating coordinator, a wrong partial
def test_a_trent_asking_for_one_contribution_to_be_decrypted_is_refused_and_named(sk512):
    """Trent delivers party3's contribution in place of party1's and party2's to party2: the 'sum' party2 would
    decrypt is 3·W_3 -- party3's release.  party2 checks each contribution against its owner's digest,
    refuses before it decrypts anything (it sends no partial decryption), and names Trent."""
    rng = np.random.default_rng(2)
    blocks = [rng.normal(size=(4, 30)) for _ in range(3)]
    _, shares = deal(sk512, 3, 1)
    third = {}

    def grab(to, tag, data):  # party3's release, as Trent receives it
        if tag == COV_TAG:
            third["w3"] = data
        return data

    def swap(to, tag, data):
        if to == "party2" and tag == CONTRIB_TAG:
            return with_relayed_release(with_relayed_release(data, "party1", third["w3"]), "party2", third["w3"])
        return data

    net, outcome = run(
        blocks,
        params_for(3, 1, rows=4, max_samples=30),
        sk=sk512,
        shares=shares,
        rewrite={"trent": swap, "party3": grab},
    )
    assert isinstance(outcome, ContributionMismatch), outcome
    assert outcome.origin == "trent" and "party2 refuses to decrypt" in str(outcome)
    assert "contribution of party1 that trent delivered" in str(outcome)
    assert not any(s == "party2" and t == PARTIAL_TAG for s, _, t, _, _ in net.transcript)


def test_a_wrong_partial_decryption_is_refused_and_its_party_named(sk512):
    """party2 sends the others a partial decryption with one value changed (the proof no longer holds):
    the session fails with BadPartialDecryption naming party2 (origin org2, share 2)."""
    rng = np.random.default_rng(4)
    blocks = [rng.normal(size=(4, 30)) for _ in range(3)]
    _, shares = deal(sk512, 3, 1)

    def corrupt(to, tag, data):
        if tag != PARTIAL_TAG:
            return data
        msg = pb.BigInts.FromString(data)
        v = int.from_bytes(msg.magnitude[0], "big")
        msg.magnitude[0] = (
            (v * 4 % shares[0].public.public_key.nsquare).to_bytes(len(msg.magnitude[0]) + 1, "big").lstrip(b"\0")
        )
        return msg.SerializeToString()

    _, outcome = run(
        blocks, params_for(3, 1, rows=4, max_samples=30), sk=sk512, shares=shares, rewrite={"party2": corrupt}
    )
    assert isinstance(outcome, BadPartialDecryption), outcome
    assert outcome.party == 2 and outcome.origin == "org2" and "party2" in str(outcome)


# ------------------------------------------------------------------ noise no coalition can subtract
def _noise_ratio(sk, n, t, noise_parties=None):
    """One session on zero data (k = 48: 1,176 values): the decrypted sum of the releases is the aggregate
    noise; its variance over the 1,176 values, divided by one curator's σ²."""
    k = 48
    params = params_for(n, t, rows=k, max_samples=10, noise_parties=noise_parties)
    _, shares = deal(sk, n, t)
    net, res = run([np.zeros((k, 10)) for _ in range(n)], params, sk=sk, shares=shares, timeout=300)
    assert not isinstance(res, Exception), res
    total = None
    for vec in contributions(net, params, sk.public_key).values():
        total = vec if total is None else total + vec
    noise = decrypt(total, sk)
    return float(np.var(noise)) / dp_calibration(params).sigma ** 2


def test_five_parties_threshold_two_add_five_thirds_of_sigma_squared(sk512):
    """n = 5, t = 2: each party adds σ²/h with h = n − t = 3, so the aggregate carries 5/3·σ² -- not the
    single-key mode's 5σ² -- and Trent with any 2 data parties, removing theirs, still faces 3·σ²/3 = σ².
    The variance over 1,176 values has a relative standard error of √(2/1176) = 4.1 %; the tolerance
    (±15 %, 3.6 standard errors) fails for 5σ² and for σ² alike.  With noise_parties = 1 stated (every
    party adds σ², as the single key must) the same measurement gives 5σ², outside it: the test can fail."""
    ratio = _noise_ratio(sk512, 5, 2)
    assert abs(ratio / (5 / 3) - 1) < 0.15, ratio
    full = _noise_ratio(sk512, 5, 2, noise_parties=1)
    assert abs(full / 5 - 1) < 0.15 and abs(full / (5 / 3) - 1) > 0.15, full


def test_noise_share_defaults_to_n_minus_t_and_never_exceeds_it():
    assert params_for(5, 2).noise_share == 3 and params_for(5, 2).validate().noise_share == 3
    assert dp_calibration(params_for(5, 2)).party_sigma == pytest.approx(
        dp_calibration(params_for(5, 2)).sigma / 3**0.5
    )
    assert params_for(5, None).noise_share == 1
    with pytest.raises(InvalidMessage, match="noise_parties=4 exceeds n − t = 3"):
        params_for(5, 2, noise_parties=4).validate()
    with pytest.raises(InvalidMessage, match="key_group and key_threshold go together"):
        dataclasses.replace(params_for(3, 1), key_threshold=None).validate()
    # the exact mode takes a group key too (test_power_iteration_exact_group), and has no noise share to check
    PowerIterationParams(n_parties=3, key_bits=512, key_group="lab", key_threshold=1).validate()
    with pytest.raises(InvalidMessage, match="key_threshold"):
        params_for(3, 3).validate()


def test_a_group_that_is_not_the_sessions_data_parties_is_refused(sk512):
    """A share of a (1, 3) key for a session of (1, 4), or a threshold other than the session's, is refused
    by every data party before it sends anything."""
    _, shares = deal(sk512, 3, 1)
    rng = np.random.default_rng(5)
    blocks = [rng.normal(size=(4, 10)) for _ in range(3)]
    _, outcome = run(blocks, params_for(3, 1, rows=4, max_samples=10, key_threshold=2), sk=sk512, shares=shares)
    assert isinstance(outcome, InvalidMessage) and "is a (1, 3) key" in str(outcome), outcome


# ------------------------------------------------------------------ a coalition of Trent and t data parties
def _coalition_tries(net, params, pub, pooled_shares, target):
    """Trent + the data parties holding ``pooled_shares`` pool every message they hold and their shares, and
    try to decrypt ``target``'s contribution: with their own shares, and with the honest parties' partial
    decryptions (of the sum) that they received.  Returns the exceptions, one per attempt."""
    pk = pub.public_key
    c = contributions(net, params, pk)[target]
    ctx = b"coalition"
    own = [partial_decrypt_vector(s, c, ctx) for s in pooled_shares]
    outcomes = []
    try:
        combine_vector_ints(pub, c, own, ctx)
    except Exception as exc:  # noqa: BLE001
        outcomes.append(exc)
    members = {f"party{s.index}" for s in pooled_shares}
    count = len(c.ciphertexts)
    # the work is split: an honest party's partial covers its assigned ciphertexts of the sum
    honest = [
        partial_from_proto(pb.BigInts.FromString(d), pub, int(s[len("party") :]), len(mine_of(net, pub, count, s)), "p")
        for s, r, t, _, d in net.transcript
        if t == PARTIAL_TAG and r in members and s not in members
    ]
    total = None
    for v in contributions(net, params, pk).values():
        total = v if total is None else total + v
    echo = next(pb.Blobs.FromString(d).values[0] for s, r, t, _, d in net.transcript if t == ECHO_TAG and r in members)
    sctx = sum_context(net.session_id, "final/cov", total, echo)
    for p in honest[:1]:
        try:  # an honest partial of the sum, offered for the target's contribution (at the same positions)
            at = mine_of(net, pub, count, f"party{p.party}")
            cts = [int(c.ciphertexts[k]) for k in at]
            combine(pub, cts, [partial_decrypt(s, cts, sctx) for s in pooled_shares] + [p], sctx)
        except Exception as exc:  # noqa: BLE001
            outcomes.append(exc)
    # what they do read: the sum (their own partials of it and the honest ones), the session's DP output
    sum_cts = [int(x) for x in total.ciphertexts]
    mine = [
        partial_decrypt(s, [sum_cts[k] for k in mine_of(net, pub, count, f"party{s.index}")], sctx)
        for s in pooled_shares
        if mine_of(net, pub, count, f"party{s.index}")
    ]
    plain = combine_assigned(
        pub, sum_cts, mine + honest, sctx, offset=split_offset(net.session_id, PARTIAL_TAG, pub.parties)
    )
    return outcomes, np.asarray(decode_fixed(total._unpack(plain), total.exponent))


def mine_of(net, pub, count, role):
    """The positions of the sum's ciphertexts that ``role`` (party<i>, share i) partially decrypts."""
    offset = split_offset(net.session_id, PARTIAL_TAG, pub.parties)
    return assigned(count, pub.parties, pub.threshold, int(role[len("party") :]), offset)


def _sum(vecs):
    vecs = list(vecs.values())
    total = vecs[0]
    for v in vecs[1:]:
        total = total + v
    return total


def test_trent_and_t_parties_cannot_read_an_honest_contribution_which_they_read_with_the_single_key(sk512):
    """n = 3, t = 1: Trent and party1 pool party1's share and every message either holds.  party3's
    contribution: their one share is not t + 1 (NotEnoughShares), and an honest party's partial decryption
    of the sum does not decrypt it (its proof is for the sum: BadPartialDecryption naming that party).  What
    they can decrypt is the sum, which carries 2·σ²/2 = σ² of honest noise.  The same coalition in the
    single-key mode (party1 holds the key pair) decrypts party3's release exactly: the test can fail."""
    rng = np.random.default_rng(6)
    k = 5
    blocks = [rng.normal(size=(k, 40)) * 0.3 for _ in range(3)]
    params = params_for(3, 1, rows=k, max_samples=40, epsilon=99.0, delta=1e-3)
    pub, shares = deal(sk512, 3, 1)
    net, res = run(blocks, params, sk=sk512, shares=shares)
    assert not isinstance(res, Exception), res
    outcomes, the_sum = _coalition_tries(net, params, pub, [shares[0]], "party3")
    assert isinstance(outcomes[0], NotEnoughShares), outcomes
    assert isinstance(outcomes[1], BadPartialDecryption) and outcomes[1].party in (2, 3), outcomes
    S = [covariance_pack(clipped_gram_block(A, np.eye(k), 1.0)[0]) for A in blocks]
    np.testing.assert_allclose(the_sum, decrypt(_sum(contributions(net, params, pub.public_key)), sk512))
    assert np.max(np.abs(the_sum - sum(S))) < 10 * dp_calibration(params).sigma
    S3 = S[2]
    # the single-key mode, the same coalition: party1's key pair decrypts what Trent holds of party3
    single = dataclasses.replace(params, key_group=None, key_threshold=None)
    net1, res1 = run(blocks, single, sk=sk512)
    assert not isinstance(res1, Exception), res1
    read = decrypt(contributions(net1, single, sk512.public_key)["party3"], sk512)
    assert np.max(np.abs(read - S3)) < 10 * dp_calibration(single).party_sigma  # party3's covariance, read
    # and the group-key mode's ciphertext of party3 is unreadable without t + 1 shares (decrypting with the
    # dealer's key -- which nobody in the session holds -- confirms it was party3's release all along)
    mine = decrypt(contributions(net, params, pub.public_key)["party3"], sk512)
    assert np.max(np.abs(mine - S3)) < 10 * dp_calibration(params).party_sigma


def test_a_partial_decryption_round_trips_through_its_message(sk512):
    pub, shares = deal(sk512, 3, 1)
    vec = EncryptedVector.encrypt(pub.public_key, [1.0, -2.0, 3.5], frac_bits=20)
    p = partial_decrypt_vector(shares[1], vec, b"ctx")
    back = partial_from_proto(pb.BigInts.FromString(partial_to_proto(p).SerializeToString()), pub, 2, 3, "p")
    assert back == p
    q = partial_decrypt_vector(shares[2], vec, b"ctx")
    np.testing.assert_allclose(decode_fixed(combine_vector_ints(pub, vec, [back, q], b"ctx"), -20), [1.0, -2.0, 3.5])


def _assert_envelopes_cover(params, net) -> None:
    """Every role's envelope holds what it received in the session, and not four times more."""
    for role in ["trent", *params.data_roles]:
        env = params.traffic_envelope(role)
        got = [len(d) for *_, d in net.received_by(role)]
        assert max(got) <= env.message_bytes and sum(got) <= env.session_bytes and len(got) <= env.tags, role
        assert env.session_bytes < 4 * sum(got) + 4096, role


@pytest.mark.parametrize("k,n", [(6, 2), (9, 3)])
def test_traffic_envelope_covers_every_message_of_the_group_key_mode(sk512, k, n):
    """Trent: n releases, dims, the public key.  A data party: the n releases Trent relays, n − 1 digests and
    n − 1 partial decryptions (no key pair)."""
    rng = np.random.default_rng(k)
    blocks = [rng.normal(size=(k, 12)) * 0.2 for _ in range(n)]
    params = params_for(n, 1, rows=k, max_samples=12)
    _, shares = deal(sk512, n, 1)
    net, res = run(blocks, params, sk=sk512, shares=shares)
    assert not isinstance(res, Exception), res
    _assert_envelopes_cover(params, net)


def test_the_plug_in_takes_the_share_from_the_key_store_and_the_group_must_be_the_data_parties(sk512, tmp_path):
    """The plug-in maps each data role to its holder's share index by party name (whatever the role order);
    a session whose data roles are not held by exactly the group's parties, or naming a group this party does
    not hold, is refused before anything is sent."""
    from smcdp.errors import PreconditionFailed
    from smcdp.plugins.base import SessionContext
    from smcdp.plugins.keystore import KeyGroup, KeyStore, session_group_key

    pub, shares = deal(sk512, 3, 1)
    names = {1: "alice", 2: "bob", 3: "carol"}
    info = KeyGroup("lab", pub, 2, names, 512, "2026-12-02T00:00:00Z", "ceremony", 1.0)
    KeyStore(tmp_path).save(info, shares[1], replace=False)  # bob's store
    params = params_for(3, 1, rows=4)

    def ctx(roles):
        return SessionContext("s", "power-iteration", roles, {}, keys_dir=tmp_path, allow_insecure_keys=True)

    roles = {"trent": "trent", "party1": "carol", "party2": "bob", "party3": "alice"}

    def _group_key(c, p, role):
        return session_group_key(c, p.key_group, p.data_roles, role)

    key = _group_key(ctx(roles), params, "party2")
    assert key.indices == {"party1": 3, "party2": 2, "party3": 1} and key.share.index == 2
    with pytest.raises(PreconditionFailed, match="must be exactly the group's parties"):
        _group_key(ctx({**roles, "party1": "dave"}), params, "party2")
    with pytest.raises(PreconditionFailed, match="holds no key group 'other'"):
        _group_key(ctx(roles), dataclasses.replace(params, key_group="other"), "party2")


def test_a_replayed_party_sends_the_same_bytes_so_its_commitment_still_holds(sk512):
    """The encryption randomness of a release and the nonce of a partial decryption's proof come from the
    party's randomness root (the nonce also from the statement): a party replayed after a crash -- which may
    have sent its digest and not yet its release -- re-sends every message bit for bit, so the digest the
    others hold still matches.  Another root gives other bytes (nothing is fixed but by the root)."""
    from smcdp.primitives.rng import Randomness

    rng = np.random.default_rng(8)
    blocks = [rng.normal(size=(4, 20)) for _ in range(3)]
    params = params_for(3, 1, rows=4, max_samples=20)
    _, shares = deal(sk512, 3, 1)

    def sent(seeds):
        net, res = run(blocks, params, sk=sk512, shares=shares, seeds=seeds)
        assert not isinstance(res, Exception), res
        return {(s, r, t): d for s, r, t, _, d in net.transcript if s.startswith("party")}

    def root(i):  # a party's secret root, as its checkpoint keeps it (not an experiment seed)
        return Randomness(bytes([i]) * 32)

    roots = [root(40 + i) for i in range(3)]
    first, again = sent(roots), sent([root(40 + i) for i in range(3)])
    assert first == again
    # another root for a party that partially decrypts (the split decides which do)
    who = next(k[0] for k in first if k[2] == PARTIAL_TAG)
    i = int(who[len("party") :]) - 1
    other = sent([root(99) if j == i else r for j, r in enumerate(roots)])
    for tag in (DIGEST_TAG, COV_TAG, PROOF_TAG, PARTIAL_TAG):
        mine = [k for k in first if k[0] == who and k[2] == tag]
        assert mine and all(first[k] != other[k] for k in mine), tag


def test_a_replay_that_encrypts_other_data_uses_other_randomness(sk512):
    """The release's Paillier randomness comes from the party's root -- and from the plaintext.  Were it from
    the root alone, a party replayed with other data (its record lost, its data changed) would encrypt with
    the same r, and E/E' = g^(W − W') ≡ 1 (mod N) would hand Trent the difference of its two releases."""
    from smcdp.primitives.rng import Randomness

    rng = np.random.default_rng(8)
    blocks = [rng.normal(size=(4, 20)) for _ in range(3)]
    params = params_for(3, 1, rows=4, max_samples=20)
    pub, shares = deal(sk512, 3, 1)
    pk = pub.public_key

    def release(first_block):  # party1's release, every party on the same secret root as before
        roots = [Randomness(bytes([40 + i]) * 32) for i in range(3)]
        net, res = run([first_block, *blocks[1:]], params, sk=sk512, shares=shares, seeds=roots)
        assert not isinstance(res, Exception), res
        return contributions(net, params, pk)["party1"].ciphertexts

    first, changed, again = release(blocks[0]), release(blocks[0] * 0.5), release(blocks[0])
    assert [int(c) for c in again] == [int(c) for c in first]  # a replay of the same data: bit for bit
    for c, c2 in zip(first, changed, strict=True):
        ratio = int(c) * pow(int(c2), -1, int(pk.nsquare)) % int(pk.nsquare)
        assert ratio % int(pk.n) != 1  # not g^(W − W'): the randomness differs


# ------------------------------------------------------------------ the noisy power method under the group key
def test_the_noisy_power_method_under_the_group_key_computes_the_components(sk512):
    """dp_method = "power", n = 3, t = 1, negligible noise: T rounds, each round's sum recomputed and decrypted
    by the parties (Trent's start block comes in clear), u_1 matches numpy's; Trent relays every round."""
    M = spectral_gap_data(12, k=8, n=3_000)
    params = params_for(
        3, 1, dp_method="power", iterations=25, epsilon=99.0, delta=1e-3, rows=8, max_samples=3_000, components=1
    )
    _, shares = deal(sk512, 3, 1)
    net, res = run([M[:, :1000], M[:, 1000:2200], M[:, 2200:]], params, sk=sk512, shares=shares)
    assert not isinstance(res, Exception), res
    U = top_eigenvectors(M, 1)
    for role in ("party1", "party2", "party3"):
        assert abs(np.dot(res[role].u, U[:, 0])) > 1 - 1e-4, role
        assert res[role].rounds == 25 and res[role].dp["key"]["kind"] == "threshold"
    releases = [t for s, _, t, _, _ in net.transcript if s == "party2" and t.startswith("noisy/")]
    assert releases == [f"noisy/{t}" for t in range(25)]
    # Trent sends a data party the start block and, per round, his relay of the digests and the three releases --
    # nothing to decrypt alone -- and, from the second round on, the other parties' MACs of their echoes
    to_party = {t for s, r, t, _, _ in net.transcript if s == "trent" and r == "party1"}
    per_round = {f"digest/{t}" for t in range(25)} | {f"contrib/{t}" for t in range(25)}
    assert to_party == {"v/0"} | per_round | {f"echo/{t}" for t in range(1, 25)}
    # the data parties echo to each other directly in the first round only (with their link keys)
    direct = {t for s, r, t, _, _ in net.transcript if s.startswith("party") and r.startswith("party")}
    assert {t for t in direct if t.startswith("echo/")} == {"echo/0"}


@pytest.mark.parametrize("change", ["reorder", "drop", "duplicate"])
def test_a_relay_that_does_not_hold_every_data_role_once_in_order_is_refused(sk512, change):
    """Trent's one relay message of a round must hold every data role's release once, in the session's role order:
    one reordered (the releases still match their digests), missing or doubled is refused before anything is
    checked or decrypted."""
    rng = np.random.default_rng(12)
    blocks = [rng.normal(size=(4, 30)) for _ in range(3)]
    _, shares = deal(sk512, 3, 1)

    def rewrite(to, tag, data):
        if to != "party2" or tag != "contrib/1":
            return data
        msg = pb.RelayedReleases.FromString(data)
        entries = list(msg.releases)
        entries = {
            "reorder": [entries[1], entries[0], entries[2]],
            "drop": entries[:2],
            "duplicate": [*entries, entries[2]],
        }[change]
        return pb.RelayedReleases(releases=entries).SerializeToString()

    params = params_for(3, 1, dp_method="power", iterations=3, rows=4, max_samples=30)
    net, outcome = run(blocks, params, sk=sk512, shares=shares, rewrite={"trent": rewrite})
    assert isinstance(outcome, InvalidMessage), outcome
    assert "must relay the release of every data role in order" in str(outcome)
    assert not any(s == "party2" and t == "partial/1" for s, _, t, _, _ in net.transcript)


def test_in_the_power_method_a_trent_relaying_one_release_for_another_is_refused(sk512):
    """Round 2: Trent delivers party3's release as party1's to party2: refused, Trent named, no partial."""
    rng = np.random.default_rng(9)
    blocks = [rng.normal(size=(4, 30)) for _ in range(3)]
    _, shares = deal(sk512, 3, 1)
    third = {}

    def grab(to, tag, data):
        if tag == "noisy/2":
            third["w3"] = data
        return data

    def swap(to, tag, data):
        return with_relayed_release(data, "party1", third["w3"]) if (to == "party2" and tag == "contrib/2") else data

    params = params_for(3, 1, dp_method="power", iterations=4, rows=4, max_samples=30)
    net, outcome = run(blocks, params, sk=sk512, shares=shares, rewrite={"trent": swap, "party3": grab})
    assert isinstance(outcome, ContributionMismatch) and outcome.origin == "trent", outcome
    assert not any(s == "party2" and t == "partial/2" for s, _, t, _, _ in net.transcript)


def test_traffic_envelope_covers_every_message_of_the_group_key_power_method(sk512):
    rng = np.random.default_rng(10)
    blocks = [rng.normal(size=(6, 12)) * 0.2 for _ in range(3)]
    params = params_for(3, 1, dp_method="power", iterations=3, rows=6, max_samples=12, components=2)
    _, shares = deal(sk512, 3, 1)
    net, res = run(blocks, params, sk=sk512, shares=shares)
    assert not isinstance(res, Exception), res
    _assert_envelopes_cover(params, net)


@pytest.mark.parametrize("cap,messages", [(1, 3), (2, 2)])
def test_large_releases_are_relayed_in_several_messages_of_whole_releases(sk512, monkeypatch, cap, messages):
    """A relay whose releases would pass RELAY_MESSAGE_BYTES goes as several messages of whole releases
    (``contrib/t``, ``contrib/t/1``, …), the same for every party; the session's result and envelope hold.  (The
    cap is lowered to one or two releases' worth here; at 64 MiB it splits covariance releases of k in the
    thousands, which one message would carry past the transport's 256 MiB.)"""
    import smcdp.protocols.power_iteration_threshold as pit_mod

    rng = np.random.default_rng(13)
    blocks = [rng.normal(size=(6, 12)) * 0.2 for _ in range(3)]
    params = params_for(3, 1, dp_method="power", iterations=2, rows=6, max_samples=12)
    pk = sk512.public_key
    count = params.packing(pk).n_ciphertexts(6)
    monkeypatch.setattr(pit_mod, "RELAY_MESSAGE_BYTES", cap * pit_mod.relay_entry_bytes(pk.bits, count, 3))
    _, shares = deal(sk512, 3, 1)
    net, res = run(blocks, params, sk=sk512, shares=shares)
    assert not isinstance(res, Exception), res
    relays = [(r, t) for s, r, t, _, _ in net.transcript if s == "trent" and t.startswith("contrib/1")]
    expected = ["contrib/1", *(f"contrib/1/{j}" for j in range(1, messages))]
    for party in ("party1", "party2", "party3"):
        assert sorted(t for r, t in relays if r == party) == expected
    _assert_envelopes_cover(params, net)


# ------------------------------------------------------------------ secret randomness (seeds and proof nonces)
def test_a_known_nonce_key_does_not_reveal_the_key_share(sk512):
    """The proof's z = r + e·Δ·s is computed over the integers: whoever can recompute the nonce r reads the
    long-lived share s.  In a seeded session the nonce key (a stream of the root) is known to everyone knowing
    the seed; an observer who recomputes r from it and the public statement must not get s: the nonce is also
    keyed by the share's secret (RFC 6979 style)."""
    import gmpy2

    from smcdp.crypto.threshold import _batch_statement, _nonce, partial_decrypt
    from smcdp.primitives.rng import stream_key

    pub, shares = deal(sk512, 3, 1)
    share = shares[1]
    nonce_key = stream_key(7, "power-iteration", "party2", "proof", PARTIAL_TAG)
    cts = [int(pub.public_key.raw_encrypt(5, obfuscate=False))]
    p = partial_decrypt(share, cts, b"context", nonce_key=nonce_key)
    assert partial_decrypt(share, cts, b"context", nonce_key=nonce_key) == p  # still replayable
    # the observer knows the seed, the role, the tag and every public value -- not the share
    x, y = _batch_statement(pub, share.index, [gmpy2.mpz(c) for c in cts], [gmpy2.mpz(v) for v in p.values], b"context")
    guess = dataclasses.replace(share, secret=0)
    r = _nonce(pub, guess, x, y, b"context", stream_key(7, "power-iteration", "party2", "proof", PARTIAL_TAG))
    e, z = p.proofs[0]
    assert (z - r) // (e * pub.delta) != share.secret


def test_a_group_key_session_with_an_experiment_seed_is_refused(sk512):
    """A release's Paillier randomness comes from the party's root (for replay): under a seed that root is
    public, so every release would be decryptable by whoever knows the seed.  The session refuses a seed."""
    from smcdp.primitives.rng import Randomness

    rng = np.random.default_rng(3)
    blocks = [rng.normal(size=(4, 20)) for _ in range(3)]
    params = params_for(3, 1, rows=4, max_samples=20)
    _, shares = deal(sk512, 3, 1)
    for seeds in ([7, 8, 9], [Randomness.from_seed(7 + i) for i in range(3)]):
        net, res = run(blocks, params, sk=sk512, shares=shares, seeds=seeds)
        assert isinstance(res, InvalidMessage) and "seeded session" in str(res), res
        assert not any(tag == COV_TAG for _, tag, _, _ in net.received_by("trent"))


# ------------------------------------------------------------------ a data party contributing what it cannot open
def test_a_party_releasing_a_power_of_an_earlier_release_of_another_is_refused_and_named(sk512):
    """Session A runs; in session B under the same group key party3 commits to and releases party1's session-A
    release raised to C (with Trent handing party3 its own honest release back, so party3's own checks pass).
    Without proofs, party1 and party2 would each send party3 a valid partial decryption of W1_B + W2_B + C·W1_A:
    party3 alone reads party1's session-A release.  Now every release carries a proof that its owner knows
    what it encrypts: party1 and party2 check every proof before summing and refuse, naming party3 -- and no
    partial decryption leaves them."""
    from smcdp.crypto.codec import bigints
    from smcdp.crypto.zkp import prove_plaintext_knowledge
    from smcdp.protocols.power_iteration_threshold import contribution_digest, echo_hash, proof_context

    C = 2
    pub, shares = deal(sk512, 3, 1)
    pk = pub.public_key
    rng = np.random.default_rng(5)
    params = params_for(3, 1, rows=4, max_samples=30)
    net_a, res_a = run([rng.normal(size=(4, 30)) for _ in range(3)], params, sk=sk512, shares=shares)
    assert not isinstance(res_a, Exception), res_a
    w1_a = contributions(net_a, params, pk)["party1"]
    evil = EncryptedVector(
        pk, [c**C % pk.nsquare for c in w1_a.ciphertexts], w1_a.length, w1_a.exponent, w1_a.packing, w1_a.bound
    )
    cts = [int(c) for c in evil.ciphertexts]  # party3's best try: an opening it makes up
    forged = prove_plaintext_knowledge(
        pk, cts, [0] * len(cts), [1] * len(cts), proof_context("local", "party3", "org3", 3, COV_TAG, pub)
    )
    digest = contribution_digest("local", "party3", "org3", evil, forged)
    own, nets = {}, []

    def echo_of(third):  # the echo of every digest Trent relayed to party3, with party3's ``third``
        relay = next(pb.Blobs.FromString(d) for s, t, _, d in nets[0].received_by("party3") if t == DIGEST_TAG)
        held = {role: relay.values[2 * i + 1] for i, role in enumerate(params.data_roles)}
        return echo_hash(pub.fingerprint, params.data_roles, {**held, "party3": third})

    def party3(to, tag, data):
        if tag == DIGEST_TAG:
            own[tag] = pb.Blobs.FromString(data).values[1]
            return pb.Blobs(values=[pub.fingerprint, digest]).SerializeToString()
        if tag == ECHO_TAG:  # the echo of what the others hold: its forged digest (its link key kept)
            return pb.Blobs(values=[echo_of(digest), *pb.Blobs.FromString(data).values[1:]]).SerializeToString()
        if tag in (COV_TAG, PROOF_TAG):
            own[tag] = data
            return (evil.to_proto() if tag == COV_TAG else bigints(list(forged))).SerializeToString()
        return data

    def trent_(to, tag, data):  # colluding: party3's own checks see its honest release
        if to == "party3" and tag == CONTRIB_TAG:
            return with_relayed_release(data, "party3", own[COV_TAG], own[PROOF_TAG])
        return data

    def hook(net):  # party3's own checks see its honest digest in Trent's relay, and echoes of it
        nets.append(net)
        ch = net.channels["party3"]

        async def recv(peer, tag, cls, original=ch.recv):
            got = await original(peer, tag, cls)
            if tag == DIGEST_TAG:
                values = list(got.values)
                values[2 * params.data_roles.index("party3") + 1] = own[DIGEST_TAG]
                return pb.Blobs(values=values)
            return got

        async def recv_all(roles, tag, cls, original=ch.recv_all):
            got = await original(roles, tag, cls)
            if tag != ECHO_TAG:
                return got
            return {r: pb.Blobs(values=[echo_of(own[DIGEST_TAG]), *m.values[1:]]) for r, m in got.items()}

        ch.recv = recv
        ch.recv_all = recv_all

    blocks_b = [rng.normal(size=(4, 30)) for _ in range(3)]
    net_b, outcome = run(
        blocks_b, params, sk=sk512, shares=shares, rewrite={"party3": party3, "trent": trent_}, on_net=hook
    )
    held = contributions(net_b, params, pk)  # the attack is real: the sum holds C·W1_A
    total = _sum(held)
    expected = decrypt(held["party1"], sk512) + decrypt(held["party2"], sk512) + C * decrypt(w1_a, sk512)
    assert np.allclose(decrypt(total, sk512), expected, atol=1e-6)
    assert isinstance(outcome, BadContributionProof), outcome
    assert outcome.origin == "org3" and "party3's release" in str(outcome)
    assert not any(r == "party3" and t == PARTIAL_TAG for _, r, t, _, _ in net_b.transcript)


# ------------------------------------------------------------------ a role taken over under a reused session id
def test_a_party_holding_anothers_role_under_a_reused_session_id_cannot_replay_its_release(sk512, monkeypatch):
    """Session A: party1 = org1, party2 = org2, party3 = org3.  Session B reuses A's id (possible once no honest
    party keeps a record of A) with the roles permuted: org3 now holds party1 and releases, as its own, org1's
    session-A release and proof verbatim (Trent relayed both to org3 in A), committing to them honestly.  Were
    the proof bound to the role's name only, every check would pass and org1, org2 would partially decrypt a sum
    holding org1's old release.  The proof binds the holder's party name and share index: org1 and org2 refuse,
    naming org3, and no partial decryption leaves them."""
    import smcdp.protocols.power_iteration_threshold as pit

    pub, shares = deal(sk512, 3, 1)
    share_of = dict(zip(("org1", "org2", "org3"), shares, strict=True))
    params = params_for(3, 1, rows=4, max_samples=30)
    rng = np.random.default_rng(5)
    data = {o: rng.normal(size=(4, 30)) for o in share_of}

    def session(holders):
        net = InMemoryNetwork({"trent": "trent", **holders}, timeout=120, session_id="org3.pca-S")
        idx = {r: share_of[o].index for r, o in holders.items()}
        coros = {"trent": lambda c: trent(c, params, allow_insecure_keys=True)}
        for r, o in holders.items():
            coros[r] = lambda c, o=o: data_party(
                c, data[o], params, allow_insecure_keys=True, group_key=GroupKey(share_of[o], idx, "lab")
            )
        try:
            return net, asyncio.run(net.run(coros))
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            return net, exc

    net_a, res_a = session({"party1": "org1", "party2": "org2", "party3": "org3"})
    assert not isinstance(res_a, Exception), res_a
    held = {t: d for _, r, t, _, d in net_a.transcript if r == "party3"}  # what org3 received in A
    old_vec = EncryptedVector.from_proto(
        relayed_release(held[CONTRIB_TAG], "party1"),
        pub.public_key,
        packing=params.packing(pub.public_key),
        bound=params.contribution_bound(),
    )
    old_proof = pit.proof_from_proto(relayed_proof(held[CONTRIB_TAG], "party1"), pub.public_key, "org1's")
    honest = pit._encrypt_and_prove

    async def replaying(ch, *args):
        if ch.roles[ch.role] == "org3":  # org1's session-A release and proof, as org3's own
            return old_vec, old_proof
        return await honest(ch, *args)

    monkeypatch.setattr(pit, "_encrypt_and_prove", replaying)
    net_b, outcome = session({"party1": "org3", "party2": "org1", "party3": "org2"})
    sent_b = {t: d for s, r, t, _, d in net_b.transcript if s == "party1" and r == "trent"}
    assert (
        sent_b[COV_TAG] == relayed_release(held[CONTRIB_TAG], "party1").SerializeToString()
    )  # the replay is real: org1's A release, verbatim
    assert isinstance(outcome, BadContributionProof), outcome
    assert outcome.origin == "org3" and "party1's release" in str(outcome)
    assert not any(t == PARTIAL_TAG for _, _, t, _, _ in net_b.transcript)


# ------------------------------------------------------------------ a Trent relaying different digests
def other_digest(role, tag, to=None):
    """Trent's rewrite: in his relay of the digests ``tag`` (to ``to``, or to everyone) ``role``'s digest zeroed."""
    k = 2 * (int(role[len("party") :]) - 1) + 1  # (fingerprint, digest) pairs in role order

    def rewrite(receiver, t, data):
        if t != tag or (to is not None and receiver != to):
            return data
        values = list(pb.Blobs.FromString(data).values)
        values[k] = bytes(32)
        return pb.Blobs(values=values).SerializeToString()

    return rewrite


def test_a_trent_relaying_different_digests_to_different_parties_stops_every_release(sk512):
    """A data party sends its digest to Trent alone; every other party has it from his relay.  Trent relays to
    party1 a set in which party3's digest is another (with party3's release in hand -- were party1 to release
    first -- he could make it the digest of the inverse of party2's release, so that party1 decrypts party2's
    release for him).  The echo round: each data party sends every other, and Trent, the hash of the digests it
    holds, and releases nothing unless every echo equals its own.  party1's differs from everyone else's: no
    release reaches Trent, no partial decryption leaves anyone; the failure names the participants whose
    echoes differ."""
    rng = np.random.default_rng(12)
    blocks = [rng.normal(size=(4, 30)) for _ in range(3)]
    _, shares = deal(sk512, 3, 1)

    trent_ = other_digest("party3", DIGEST_TAG, to="party1")  # towards party1: another digest for party3

    net, outcome = run(
        blocks, params_for(3, 1, rows=4, max_samples=30), sk=sk512, shares=shares, rewrite={"trent": trent_}
    )
    assert not any(r == "trent" and t == COV_TAG for _, r, t, _, _ in net.transcript)
    assert not any(t == PARTIAL_TAG for _, _, t, _, _ in net.transcript)
    assert isinstance(outcome, EchoMismatch), outcome
    assert getattr(outcome, "origin", None) is None
    # whichever party notices first ends the session: a data party "releases nothing", trent "relays nothing"
    assert ("releases nothing" in str(outcome) or "trent relays nothing" in str(outcome)) and outcome.parties in (
        ["party2", "party3"],  # party1's view: the other data parties hold party3's true digest
        ["party1"],  # anyone else's (Trent's too): party1 holds another
    )


def _power_run(sk, seed, trent_rewrite, on_net=None):
    """A four-round power-method session (n = 3, t = 1) whose Trent rewrites what he sends."""
    rng = np.random.default_rng(seed)
    blocks = [rng.normal(size=(4, 30)) for _ in range(3)]
    _, shares = deal(sk, 3, 1)
    params = params_for(3, 1, dp_method="power", iterations=4, rows=4, max_samples=30, components=1)
    return run(blocks, params, sk=sk, shares=shares, rewrite={"trent": trent_rewrite}, on_net=on_net)


def test_in_the_power_method_a_trent_relaying_different_digests_in_a_later_round_stops_its_releases(sk512):
    """From the second round on the echoes go through Trent as MACs under the pairs' keys (agreed at the first
    round's direct echo).  Trent relays party1 another digest for party3 in round 2, and does not check the
    echoes he receives (he takes party1's for the others'): party1's echo differs from the others', so the
    MACs they addressed to it do not verify under its pairs' keys (and its MACs do not at theirs); nobody
    releases round 2, nothing of it is decrypted."""

    trent_ = other_digest("party3", "digest/2", to="party1")

    def unchecked(net):  # Trent's own check passes: party1's echo hash reads as the others'
        ch = net.channels["trent"]

        async def recv_all(roles, tag, cls, original=ch.recv_all):
            got = await original(roles, tag, cls)
            if tag == "echo/2":
                values = list(got["party1"].values)
                values[0] = got["party2"].values[0]
                got = {**got, "party1": pb.Blobs(values=values)}
            return got

        ch.recv_all = recv_all

    net, outcome = _power_run(sk512, 15, trent_, on_net=unchecked)
    assert isinstance(outcome, EchoMismatch), outcome
    assert "releases nothing" in str(outcome) and outcome.parties in (["party2", "party3"], ["party1"])
    assert any(s == "trent" and t == "echo/2" for s, _, t, _, _ in net.transcript)  # he relayed the MACs
    assert any(t == "noisy/1" for _, _, t, _, _ in net.transcript)  # the rounds before went through
    assert not any(t in ("noisy/2", "partial/2") for _, _, t, _, _ in net.transcript)


@pytest.mark.parametrize("change", ["flip", "swap", "its-own"])
def test_a_trent_altering_the_relayed_echo_macs_stops_the_release(sk512, change):
    """Trent cannot forge a MAC under a pair's key, nor pass one party's MAC off as another's, nor hand a party
    its own MACs back (a MAC binds its sender and receiver): a relay to party1 with one MAC's byte flipped, its
    two MACs swapped, or party1's own two MACs fails party1's check -- EchoMismatch, party1 releases nothing
    of round 1 (the others, whose relays are honest, may), and nothing of round 1 is decrypted."""
    own: dict[str, list[bytes]] = {}

    def keep(net):  # what party1 sent Trent with its echo of round 1: its MACs for party2 and party3
        ch = net.channels["trent"]

        async def recv_all(roles, tag, cls, original=ch.recv_all):
            got = await original(roles, tag, cls)
            if tag == "echo/1":
                own["party1"] = list(got["party1"].values[1:])
            return got

        ch.recv_all = recv_all

    def trent_(to, tag, data):
        if to == "party1" and tag == "echo/1":
            values = list(pb.Blobs.FromString(data).values)
            if change == "flip":
                values[1] = bytes([values[1][0] ^ 1]) + values[1][1:]
            elif change == "swap":
                values.reverse()
            else:
                values = own["party1"]
            return pb.Blobs(values=values).SerializeToString()
        return data

    net, outcome = _power_run(sk512, 16, trent_, on_net=keep)
    assert isinstance(outcome, EchoMismatch), outcome
    assert "party1 releases nothing" in str(outcome)
    assert outcome.parties == (["party3"] if change == "flip" else ["party2", "party3"])
    assert not any(s == "party1" and t == "noisy/1" for s, _, t, _, _ in net.transcript)
    assert not any(t == "partial/1" for _, _, t, _, _ in net.transcript)


def test_at_the_first_echo_the_data_parties_catch_a_trent_who_skips_his_own_check(sk512):
    """The first release of a session: Trent relays party1 another digest for party3 and does not check the
    echoes he receives (he takes party1's for the others').  The data parties' direct echoes differ: each of
    them releases nothing (EchoMismatch), whatever Trent does."""
    rng = np.random.default_rng(17)
    blocks = [rng.normal(size=(4, 30)) for _ in range(3)]
    _, shares = deal(sk512, 3, 1)

    trent_ = other_digest("party3", DIGEST_TAG, to="party1")

    def unchecked(net):
        ch = net.channels["trent"]

        async def recv_all(roles, tag, cls, original=ch.recv_all):
            got = await original(roles, tag, cls)
            if tag == ECHO_TAG:
                got = {**got, "party1": got["party2"]}
            return got

        ch.recv_all = recv_all

    net, outcome = run(
        blocks,
        params_for(3, 1, rows=4, max_samples=30),
        sk=sk512,
        shares=shares,
        rewrite={"trent": trent_},
        on_net=unchecked,
    )
    assert isinstance(outcome, EchoMismatch), outcome
    assert "releases nothing" in str(outcome) and outcome.parties in (["party2", "party3"], ["party1"])
    assert not any(r == "trent" and t == COV_TAG for _, r, t, _, _ in net.transcript)


def test_a_trent_relaying_another_digest_as_a_partys_own_is_named_by_that_party(sk512):
    """Trent relays party2's digest as what party2 sent him, but another one (the same to every party, so the
    echoes would agree): party2 checks its own entry against the digest it sent, releases nothing and names
    Trent; nothing reaches Trent, nobody decrypts anything."""
    rng = np.random.default_rng(14)
    blocks = [rng.normal(size=(4, 30)) for _ in range(3)]
    _, shares = deal(sk512, 3, 1)

    trent_ = other_digest("party2", DIGEST_TAG)

    net, outcome = run(
        blocks, params_for(3, 1, rows=4, max_samples=30), sk=sk512, shares=shares, rewrite={"trent": trent_}
    )
    assert isinstance(outcome, ContributionMismatch), outcome
    assert outcome.origin == "trent" and "party2 releases nothing" in str(outcome) and "trent deviated" in str(outcome)
    assert not any(r == "trent" and t == COV_TAG for _, r, t, _, _ in net.transcript)
    assert not any(t == PARTIAL_TAG for _, _, t, _, _ in net.transcript)


# ------------------------------------------------------------------ who is named when a release is not its commitment
def test_a_party_sending_trent_another_release_than_it_committed_to_is_named_by_trent(sk512):
    """party3 commits to its release (digest to every data party and to Trent) and sends Trent a release
    with one ciphertext changed.  Trent checks every release against its owner's digest before relaying:
    he refuses, naming party3 (not himself, as every data party used to), and relays nothing."""
    rng = np.random.default_rng(13)
    blocks = [rng.normal(size=(4, 30)) for _ in range(3)]
    pub, shares = deal(sk512, 3, 1)
    pk = pub.public_key

    def party3(to, tag, data):
        if tag != COV_TAG:
            return data
        msg = pb.CiphertextVector.FromString(data)
        c = int.from_bytes(msg.ciphertexts[0], "big") * (1 + pk.n) % pk.nsquare  # one more in the first slot
        msg.ciphertexts[0] = c.to_bytes((c.bit_length() + 7) // 8, "big")
        return msg.SerializeToString()

    net, outcome = run(
        blocks, params_for(3, 1, rows=4, max_samples=30), sk=sk512, shares=shares, rewrite={"party3": party3}
    )
    assert isinstance(outcome, ContributionMismatch), outcome
    assert outcome.origin == "org3" and "trent relays nothing" in str(outcome) and "party3 deviated" in str(outcome)
    assert not any(s == "trent" and t.startswith(CONTRIB_TAG) for s, _, t, _, _ in net.transcript)


# ----------------------------------------------------------------------------- the distributed discrete Gaussian
def test_distributed_gaussian_tau_is_kairouz_liu_steinke_theorem_1():
    """τ = 10·Σ_{k=1}^{m−1} exp(−2π²σ²·k/(k+1)) (KLS 2021, Thm. 1): nothing for one party, values worked by hand for
    σ = 1/2, and 0 in floating point at the σ ≥ 2^20 grid steps the protocol's grid gives."""
    from smcdp.dp.conversions import distributed_gaussian_tau

    assert distributed_gaussian_tau(0.5, 1) == 0.0
    assert distributed_gaussian_tau(0.5, 2) == pytest.approx(10 * 0.0848050, rel=1e-5)  # 10·e^(−π²/4)
    assert distributed_gaussian_tau(0.5, 3) == pytest.approx(10 * (0.0848050 + 0.0372588), rel=1e-5)  # + e^(−π²/3)
    assert distributed_gaussian_tau(2.0**20, 64) == 0.0


def test_the_distributed_noise_check_refuses_a_sum_far_from_one_discrete_gaussian():
    """check_distributed_noise, the party's check before it releases: with the protocol's grid it passes (τ = 0);
    with a grid so coarse that a party's σ is half a step, the sum of the n − t honest draws is far from one
    discrete Gaussian of their summed variance (KLS's τ√d above 2^-30·Δ/σ), and the release is refused."""
    from smcdp.protocols.power_iteration import dp_noise
    from smcdp.protocols.power_iteration_threshold import check_distributed_noise

    params = PowerIterationParams(
        n_parties=5, key_bits=2048, epsilon=1.0, delta=1e-6, rows=4, max_samples=10, key_group="g", key_threshold=2
    ).validate()
    shape = (4 * 5 // 2,) if params.dp_mode == "covariance" else (4, params.block_size)
    mech = dp_noise(params, dp_calibration(params), shape, None, "party1", 0)
    check_distributed_noise(params, mech, shape)  # the protocol's grid: σ ≥ 2^20 steps

    class Coarse:
        def __init__(self, inner, e):
            self._inner, self._e = inner, e

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def grid_exponent(self, shape):
            return self._e

    e = math.frexp(2 * mech.grid_sigma(shape))[1]  # 2^e > 2σ: σ below half a grid step
    with pytest.raises(InvalidMessage, match="too far from one"):
        check_distributed_noise(params, Coarse(mech, e), shape)
