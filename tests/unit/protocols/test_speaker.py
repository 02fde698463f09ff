"""Speaker verification and identification (issue 37) in one process: the secure decision and speaker
against the same computation in the clear (small Paillier and DGK keys: a test-only opt-in)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from smcdp.crypto import dgk
from smcdp.errors import CryptoOverflow, InputRejected, InvalidMessage
from smcdp.net.channel import InMemoryNetwork
from smcdp.plugins.speaker import SpeakerIdentifyPlugin, SpeakerVerifyPlugin
from smcdp.protocols import speaker
from smcdp.protocols.speaker import (
    IdentifyParams,
    VerifyParams,
    identify_alice,
    identify_bob,
    verify_alice,
    verify_bob,
    verify_error_bound,
)
from smcdp.speech.speaker import DiagGMM, SpeakerModels, map_adapt_means
from smcdp.v1 import messages_pb2 as pb
from tests.support.crafted_keys import key_with_a_small_factor
from tests.unit.protocols.keyword_util import run_pair

C, D, T = 4, 3, 12
NAMES = ("ann", "bo", "cy")


@pytest.fixture(scope="module")
def dgk_key():
    return dgk.generate_keypair(512, 32, max_ell=256, allow_insecure=True)


def _models(seed=0, threshold=0.0) -> SpeakerModels:
    rng = np.random.default_rng(seed)
    w = rng.random(C) + 0.2
    ubm = DiagGMM(w / w.sum(), rng.normal(size=(C, D)) * 2, rng.uniform(0.5, 2.0, (C, D)))
    means = np.stack([map_adapt_means(ubm, rng.normal(size=(40, D)) * 2 + 1.5 * i) for i in range(len(NAMES))])
    return SpeakerModels(ubm, NAMES, means, threshold=threshold)


def _utterance(seed=1, shift=1.5) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(T, D)) * 2 + shift


def _params(cls, sk, **kw):
    return cls(key_bits=sk.public_key.bits, dgk_bits=512, dgk_t=32, max_mixtures=C, max_features=D, max_frames=T, **kw)


def _verify(X, models, sk, dgk_key, **kw):
    p = _params(VerifyParams, sk, **kw)
    res, _ = run_pair(
        lambda ch: verify_alice(ch, X, p, private_key=sk, allow_insecure_keys=True, dgk_key=dgk_key),
        lambda ch: verify_bob(ch, models, p, allow_insecure_keys=True),
    )
    return res["alice"], res["bob"]


def _identify(X, models, sk, dgk_key, **kw):
    p = _params(IdentifyParams, sk, **kw)
    res, _ = run_pair(
        lambda ch: identify_alice(ch, X, p, private_key=sk, allow_insecure_keys=True, dgk_key=dgk_key),
        lambda ch: identify_bob(ch, models, p, allow_insecure_keys=True),
    )
    return res["alice"], res["bob"]


@pytest.mark.parametrize("claim", NAMES)
def test_verification_decision_equals_plaintext_and_reaches_bob_only(claim, keypair512, dgk_key):
    _, sk = keypair512
    X = _utterance()
    models = _models(threshold=0.0)
    score = models.score(models.index(claim), X)
    for theta in (score - 0.5, score + 0.5, 0.0):  # both outcomes, and the default threshold
        models = _models(threshold=theta)
        a, b = _verify(X, models, sk, dgk_key, claim=claim)
        assert a.accept is None and a.decision is None  # alice learns nothing (output = bob)
        assert b.accept == models.verify(claim, X) == (score >= theta)


def test_decision_to_alice_when_the_policy_says_so(keypair512, dgk_key):
    _, sk = keypair512
    X = _utterance()
    models = _models()
    for theta in (models.score(1, X) - 0.3, models.score(1, X) + 0.3):
        models = _models(threshold=theta)
        a, b = _verify(X, models, sk, dgk_key, claim="bo", output="alice")
        assert b.accept is None
        assert a.accept == models.verify("bo", X)


def test_secure_decision_is_right_just_beyond_the_documented_bound(keypair512, dgk_key):
    """θ just beyond the fixed-point bound (docs/protocols/speaker.md) either side of the plaintext score:
    the secure decision is the plaintext one -- the secure score is within the bound."""
    _, sk = keypair512
    X = _utterance(seed=5)
    models = _models()
    score = models.score(0, X)
    bound = verify_error_bound(models, "ann", X, _params(VerifyParams, sk, claim="ann"))
    assert 0 < bound < 1e-6 * abs(score)  # relative score error below 1e-6
    for eps, want in ((-1.0001 * bound, True), (1.0001 * bound, False)):
        _a, b = _verify(X, _models(threshold=score + eps), sk, dgk_key, claim="ann")
        assert b.accept is want


def test_many_components_decide_as_in_the_clear_through_the_spread_layout(keypair512, dgk_key):
    """A GMM of many components (24 at this key; 64 at 2048 bits) goes through the forward algorithm's spread
    layout -- Alice's terms several per ciphertext, one weighted sum back per frame and model -- and the
    decision is still the plaintext one just beyond the documented bound on either side."""
    _, sk = keypair512
    rng = np.random.default_rng(11)
    c = 24
    w = rng.random(c) + 0.2
    ubm = DiagGMM(w / w.sum(), rng.normal(size=(c, D)) * 2, rng.uniform(0.5, 2.0, (c, D)))
    means = np.stack([map_adapt_means(ubm, rng.normal(size=(60, D)) * 2 + 1.5 * i) for i in range(len(NAMES))])
    X = _utterance(seed=6)
    p = VerifyParams(
        key_bits=sk.public_key.bits, dgk_bits=512, dgk_t=32, max_mixtures=c, max_features=D, max_frames=T, claim="bo"
    )
    score = SpeakerModels(ubm, NAMES, means).score(1, X)
    bound = verify_error_bound(SpeakerModels(ubm, NAMES, means), "bo", X, p)
    assert 0 < bound < 1e-6 * abs(score)
    for eps, want in ((-1.0001 * bound, True), (1.0001 * bound, False)):
        models = SpeakerModels(ubm, NAMES, means, threshold=score + eps)
        res, net = run_pair(
            lambda ch: verify_alice(ch, X, p, private_key=sk, allow_insecure_keys=True, dgk_key=dgk_key),
            lambda ch, models=models: verify_bob(ch, models, p, allow_insecure_keys=True),
        )
        assert res["bob"].accept is want and res["alice"].accept is None
        back = [pb.CiphertextVector.FromString(d) for _, t, _, d in net.received_by("alice") if "/mix-u/" in t]
        terms = [pb.CiphertextVector.FromString(d) for _, t, _, d in net.received_by("bob") if "/mix-e/" in t]
        assert sum(len(v.ciphertexts) for v in back) == 2 * T  # one per frame and model: spread
        assert sum(len(v.ciphertexts) for v in terms) < 2 * T * c  # fewer than one per term


@pytest.mark.parametrize("output", ["bob", "alice"])
def test_identification_equals_plaintext(output, keypair512, dgk_key):
    _, sk = keypair512
    for shift, seed in ((0.0, 2), (3.0, 3)):
        X = _utterance(seed=seed, shift=shift)
        models = _models(threshold=float(np.sort(_models().scores(X))[-1]) - 0.2)
        a, b = _identify(X, models, sk, dgk_key, max_speakers=4, output=output)
        told, other = (b, a) if output == "bob" else (a, b)
        assert told.learned and not other.learned and other.speaker is None
        assert told.speaker == models.identify(X) is not None


def test_the_quadratic_forms_bits_below_the_grid_are_masked_too(keypair512, dgk_key):
    """Alice decrypts each quadratic form q at its full fixed point, 2^shift finer than the grid, before rounding;
    Bob's mask V was a multiple of 2^shift, so q mod 2^shift reached her exactly -- his coefficients' low bits by
    linear algebra over a few frames (a review).  With the sub-grid part u, the same features and models give
    other low bits in every session: the decrypted values' lowest 16 bits (shift = 24 here) differ between two
    sessions."""
    _, sk = keypair512
    X = _utterance()
    models = _models(threshold=0.0)
    lows = []
    for _ in range(2):
        p = _params(VerifyParams, sk, claim="bo")
        _, net = run_pair(
            lambda ch, p=p: verify_alice(ch, X, p, private_key=sk, allow_insecure_keys=True),
            lambda ch, p=p: verify_bob(ch, models, p, allow_insecure_keys=True),
        )
        qs = [pb.CiphertextVector.FromString(d) for _, t, _, d in net.received_by("alice") if "/q/" in t]
        assert qs
        lows.append([int(sk.raw_decrypt(int.from_bytes(c, "big"))) % 65536 for v in qs for c in v.ciphertexts])
    assert len(lows[0]) == len(lows[1]) > 4
    # uniform low 16 bits agree by chance 1 in 65,536; without u half of them were the same in every session
    assert sum(a != b for a, b in zip(*lows)) >= 0.9 * len(lows[0])


def test_the_name_transfer_does_not_show_the_names_lengths(keypair512, dgk_key):
    """output = "alice": the 1-of-n OT of the winner's name padded every label to the longest enrolled name, so its
    sizes showed Alice that length (a review).  Labels are padded to the public MAX_NAME_BYTES: the bytes Bob sends
    in the transfer are the same for short and long names."""
    _, sk = keypair512
    X = _utterance(seed=2, shift=0.0)
    sent = []
    for names in (("a", "b", "c"), ("a" * 60, "bb", "c")):
        base = _models()
        models = SpeakerModels(base.ubm, names, base.means, threshold=float(np.sort(base.scores(X))[-1]) - 0.2)
        p = _params(IdentifyParams, sk, max_speakers=4, output="alice")
        res, net = run_pair(
            lambda ch, p=p: identify_alice(ch, X, p, private_key=sk, allow_insecure_keys=True),
            lambda ch, models=models, p=p: identify_bob(ch, models, p, allow_insecure_keys=True),
        )
        assert res["alice"].speaker == models.identify(X)
        sent.append(sum(len(d) for _, t, _, d in net.received_by("alice") if "/label" in t))
    assert sent[0] == sent[1] > 0


def test_padding_speakers_are_speakers_of_their_own():
    """Dummies were copies of speaker 0: their emission rows were zero deltas from its rows (cheaper for Bob, so his
    time a block grew with K) and their forms repeated its forms (a review told K from either).  Each dummy is now
    the UBM MAP-adapted to frames drawn from a random enrolled speaker (the UBM when none is): every component's
    mean moved, no model repeats another, and Bob's keyed stream makes the same ones again (replay)."""
    import random

    from smcdp.protocols.speaker import padding_speakers

    m = _models()  # (a SpeakerModels holds at least one speaker)
    pads = padding_speakers(m, 5, random.Random(7))
    assert len(pads) == 5
    means = [p.means for p in pads] + [m.speaker(k).means for k in range(m.n_speakers)] + [m.ubm.means]
    for i, a in enumerate(means):
        for b in means[i + 1 :]:
            assert np.all(np.any(a != b, axis=1))  # every component's mean differs from every other model's
    for p in pads:
        assert np.array_equal(p.weights, m.ubm.weights) and np.array_equal(p.covars, m.ubm.covars)
    again = padding_speakers(m, 5, random.Random(7))
    assert all(np.array_equal(a.means, b.means) for a, b in zip(pads, again))


def test_identification_says_none_below_the_threshold(keypair512, dgk_key):
    _, sk = keypair512
    X = _utterance(seed=4)
    models = _models(threshold=float(_models().scores(X).max()) + 0.1)
    assert models.identify(X) is None
    _, b = _identify(X, models, sk, dgk_key, max_speakers=3)
    assert b.learned and b.speaker is None


def test_more_speakers_than_the_public_bound_are_refused(keypair512, dgk_key):
    _, sk = keypair512
    with pytest.raises(InputRejected, match="max_speakers"):
        _identify(_utterance(), _models(), sk, dgk_key, max_speakers=2)


def test_parameters_are_validated():
    with pytest.raises(InvalidMessage, match="speaker name"):
        VerifyParams.from_mapping({"claim": "two words"})
    with pytest.raises(InvalidMessage, match="output"):
        VerifyParams.from_mapping({"claim": "ann", "output": "carol"})
    with pytest.raises(InvalidMessage, match="max_states"):
        VerifyParams.from_mapping({"claim": "ann", "max_states": 2})
    with pytest.raises(InvalidMessage, match="max_models"):
        IdentifyParams.from_mapping({"max_speakers": 4, "max_models": 3})
    with pytest.raises(InvalidMessage, match="max_speakers"):
        IdentifyParams.from_mapping({"max_speakers": "4"})
    assert IdentifyParams.from_mapping({"max_speakers": 4}).max_models == 5
    assert VerifyParams.from_mapping({"claim": "ann"}).key_bits == 2048


@pytest.mark.parametrize("plugin", [SpeakerVerifyPlugin(), SpeakerIdentifyPlugin()], ids=lambda p: p.name)
@pytest.mark.parametrize("output", ["bob", "alice"])
def test_summary_names_the_designated_party(plugin, output):
    params = {"output": output, **({"claim": "ann"} if plugin.name == "speaker-verify" else {})}
    roles = {"alice": "p0", "bob": "p1"}
    norm = plugin.validate_params(params, roles)
    s = plugin.summary(norm, roles)
    assert [o.recipients for o in s.outputs] == [(output,)]
    assert s.key_bits["paillier"] == 2048
    for role in roles:
        env = plugin.traffic_envelope(norm, roles, role)
        assert env.message_bytes >= 1 and env.session_bytes >= env.message_bytes


@pytest.mark.parametrize("key_kind", ["standard", "subgroup"])
@pytest.mark.parametrize("protocol,ubm", [("verify", "private"), ("verify", "shared"), ("identify", "private")])
def test_each_role_replays_from_its_journal_and_root(tmp_path, protocol, ubm, key_kind):
    """Checkpoint/replay (docs/fault-tolerance.md): every role replayed alone from its journal and randomness
    root reaches the same result and sends nothing again (the keys, masks, π and s come from the root; Alice's
    subgroup key from its own stream of her root)."""
    from tests.unit.protocols.test_replay import _run_and_replay

    X = _utterance(seed=6)
    models = _models(threshold=0.1)
    roles = {"alice": "alice", "bob": "bob"}
    kw = {"key_bits": 768, "dgk_bits": 512, "dgk_t": 32, "max_mixtures": C, "max_features": D, "max_frames": T}
    kw["key_kind"] = key_kind
    if protocol == "verify":
        p, fa, fb = VerifyParams(claim="cy", output="alice", ubm=ubm, **kw), verify_alice, verify_bob
    else:
        p, fa, fb = IdentifyParams(max_speakers=3, **kw), identify_alice, identify_bob

    def fns(roots):
        return {
            "alice": lambda ch: fa(ch, X, p, seed=roots["alice"], allow_insecure_keys=True),
            "bob": lambda ch: fb(ch, models, p, seed=roots["bob"], allow_insecure_keys=True),
        }

    first = _run_and_replay(tmp_path, roles, fns)
    if protocol == "verify":
        assert first["alice"].accept == models.verify("cy", X)
    else:
        assert first["bob"].speaker == models.identify(X)


def test_a_key_prepared_while_idle_is_the_sessions_own(dgk_key):
    """Issue 27 for speaker-verify: the plug-in's prepare_next makes alice's next key and obfuscators ahead;
    the session with that root takes them (offline "prepared") and decides as in the clear."""
    from smcdp.crypto.prepared import SHELF
    from smcdp.primitives.rng import Randomness
    from smcdp.protocols.speaker import prepare_alice

    X = _utterance(seed=8)
    models = _models(threshold=0.2)
    root = Randomness.fresh()
    prepare_alice(root, len(X), "speaker-verify", key_bits=512, allow_insecure_keys=True)
    p = VerifyParams(key_bits=512, dgk_bits=512, dgk_t=32, claim="bo", max_mixtures=C, max_features=D, max_frames=T)
    try:
        res, _ = run_pair(
            lambda ch: verify_alice(ch, X, p, seed=root, allow_insecure_keys=True),
            lambda ch: verify_bob(ch, models, p, allow_insecure_keys=True),
        )
    finally:
        SHELF.clear()
    assert res["alice"].timings["offline"]["prepared"] is True
    assert res["bob"].accept == models.verify("bo", X)


def test_a_subgroup_key_decides_as_in_the_clear_just_beyond_the_bound(dgk_key):
    """Alice's key ξ as a subgroup key (docs/crypto.md, "Subgroup keys"; key_kind = "subgroup"): the same
    decisions just beyond the fixed-point bound on either side, in verification and identification."""
    from smcdp.crypto.paillier import generate_keypair

    _, sk = generate_keypair(512, allow_insecure=True, subgroup=True)
    X = _utterance(seed=5)
    models = _models()
    score = models.score(0, X)
    bound = verify_error_bound(models, "ann", X, _params(VerifyParams, sk, claim="ann"))
    for eps, want in ((-1.0001 * bound, True), (1.0001 * bound, False)):
        a, b = _verify(X, _models(threshold=score + eps), sk, dgk_key, claim="ann", key_kind="subgroup")
        assert b.accept is want
        assert a.prepare_next.key_kind == "subgroup"
    models = _models(threshold=-50.0)
    _a, b = _identify(X, models, sk, dgk_key, key_kind="subgroup", max_speakers=4)
    assert b.speaker == models.identify(X)


@pytest.mark.parametrize("kbar", [3, 4, 5, 8])
def test_the_tournament_finds_the_plaintext_speaker_with_every_bracket_and_n_minus_one_comparisons(
    kbar, keypair512, dgk_key
):
    """Step 5 as a tournament (docs/protocols/speaker.md): K̄ + 1 candidates of either parity (byes at odd
    levels), each speaker in turn the best and "none", under several permutations π (Alice's seeded
    roots: the winner's slot meets byes or not), give the plaintext outcome with K̄ DGK comparisons in all."""
    _, sk = keypair512
    p = _params(IdentifyParams, sk, max_speakers=kbar)
    assert sum(p.levels()) == kbar  # K̄ + 1 candidates, K̄ matches
    runs = 0
    for target in (0, 1, 2, None):
        X = _utterance(seed=9, shift=1.5 * (target or 0))
        scores = _models().scores(X)
        if target is not None and int(np.argmax(scores)) != target:
            continue  # this utterance's best is another speaker: covered by its own shift
        theta = float(scores.max()) + (0.1 if target is None else -0.3)
        models = _models(threshold=theta)
        for root in (1, 2, 3):
            res, net = run_pair(
                lambda ch, root=root, X=X: identify_alice(
                    ch, X, p, private_key=sk, seed=root, allow_insecure_keys=True
                ),
                lambda ch, models=models: identify_bob(ch, models, p, allow_insecure_keys=True),
            )
            assert res["bob"].learned and res["bob"].speaker == models.identify(X)
            assert (res["bob"].speaker is None) == (target is None)
            from smcdp.v1 import messages_pb2 as pbm

            compared = sum(
                len(pbm.Blobs.FromString(data).values) // (p.ell + 1)
                for _sender, tag, _type, data in net.received_by("alice")  # bob's blinded values to the key holder
                if tag.startswith("si/cmp/") and tag.endswith("/dgk-c")
            )
            assert compared == kbar  # one DGK comparison a match, not one a pair of candidates
            runs += 1
    assert runs >= 6  # at least two speakers and "none"


def test_a_selector_that_is_not_a_bit_is_refused(keypair512, dgk_key, monkeypatch):
    """A deviating Bob who sends ζ(2) instead of ζ(z) in the tournament (step 5b) would read Alice's shares'
    difference from her reply; its bit proof fails and Alice refuses the level before she computes anything."""
    import smcdp.protocols.speaker as spk

    real = spk._send_vector

    async def cheat(ch, peer, tag, pk, cts):
        if "/pick/" in tag:
            cts = [pk.raw_encrypt_textbook(2)] + list(cts[1:])
        return await real(ch, peer, tag, pk, cts)

    monkeypatch.setattr(spk, "_send_vector", cheat)
    _, sk = keypair512
    X = _utterance(seed=9)
    with pytest.raises(InvalidMessage, match="not proven to encrypt bits"):
        _identify(X, _models(threshold=-50.0), sk, dgk_key, max_speakers=3)


@pytest.mark.parametrize("which", ["verify", "identify"])
def test_alice_holds_the_dgk_key_of_every_comparison(which, keypair512, dgk_key):
    """A DGK key holder with a crafted key reads the other side's comparison input whole (docs/primitives.md,
    tests/unit/primitives/test_dgk_key_holder.py).  Alice's inputs are what the comparisons are about -- in
    verification x = D + r, so her score; in identification each match's masked difference -- so the key is hers:
    every DGK key and encrypted bit goes from alice to bob, bob sends only his blinded values, and the key in every
    comparison is the one alice was given."""
    _, sk = keypair512
    X, models = _utterance(seed=9), _models(threshold=-50.0)
    if which == "verify":
        p = _params(VerifyParams, sk, claim="bo")
        alice = lambda ch: verify_alice(ch, X, p, private_key=sk, allow_insecure_keys=True, dgk_key=dgk_key)  # noqa: E731
        bob = lambda ch: verify_bob(ch, models, p, allow_insecure_keys=True)  # noqa: E731
    else:
        p = _params(IdentifyParams, sk, max_speakers=3)
        alice = lambda ch: identify_alice(ch, X, p, private_key=sk, allow_insecure_keys=True, dgk_key=dgk_key)  # noqa: E731
        bob = lambda ch: identify_bob(ch, models, p, allow_insecure_keys=True)  # noqa: E731
    _, net = run_pair(alice, bob)
    cmp = [(snd, tag, data) for snd, _rcv, tag, _t, data in net.transcript if "/cmp" in tag]
    assert cmp and {tag.rsplit("/", 1)[1] for _, tag, _ in cmp} >= {"dgk-pk", "dgk-bits", "dgk-c"}
    for snd, tag, data in cmp:
        kind = tag.rsplit("/", 1)[1]
        assert snd == ("bob" if kind == "dgk-c" else "alice"), (snd, tag)
        if kind == "dgk-pk":
            assert data == dgk_key.public.to_proto().SerializeToString(), tag


def test_a_bob_whose_zeta_has_a_small_prime_factor_is_refused_before_alice_raises_his_selectors(keypair512, dgk_key):
    """ζ is Bob's own key, and Alice raises his selectors ζ(z) to her shares' differences.  Under a modulus with a
    small prime factor r a one-challenge bit proof passes for an entry g·y (y of order r) after about r hashes, and
    her reply then shows the difference modulo r (tests/unit/crypto/test_crafted_modulus.py).  Alice now takes ζ
    only without a prime factor below 2^16 (what makes the selectors' chunked proofs sound, for any modulus:
    tests/unit/crypto/test_zkp_any_key.py) and with Bob's proof that its modulus is square-free: this honestly run
    session with a 13-bit factor in ζ completed before."""
    _, sk = keypair512
    p = _params(IdentifyParams, sk, max_speakers=3)
    zeta = key_with_a_small_factor(sk.public_key.bits, 3)
    with pytest.raises(InvalidMessage, match="prime factor below 2\\^16"):
        run_pair(
            lambda ch: identify_alice(
                ch, _utterance(seed=9), p, private_key=sk, allow_insecure_keys=True, dgk_key=dgk_key
            ),
            lambda ch: identify_bob(ch, _models(threshold=-50.0), p, allow_insecure_keys=True, zeta_key=zeta),
        )


def test_a_zeta_proof_for_another_session_is_refused(keypair512, dgk_key, monkeypatch):
    """Bob's proof that ζ's modulus is square-free is bound to the session and the step: roots made for another
    session's context do not verify, and Alice refuses before anything is sent under ζ."""
    import smcdp.protocols.speaker as spk

    real = spk.send_owned_key

    async def stale(ch, to, tag, key, context):
        return await real(ch, to, tag, key, spk._zeta_context("another-session", "si"))

    monkeypatch.setattr(spk, "send_owned_key", stale)
    _, sk = keypair512
    with pytest.raises(InvalidMessage, match="does not show gcd"):
        _identify(_utterance(seed=9), _models(threshold=-50.0), sk, dgk_key, max_speakers=3)


def test_a_selector_proof_is_bound_to_its_match(keypair512, dgk_key, monkeypatch):
    """Each selector's proof names its session, level and match: the contexts of two statements differ in any of
    them, and Bob's proofs made (validly) for the next match's context are refused, so no proof stands for another
    match's selector."""
    import smcdp.protocols.speaker as spk

    contexts = {spk._pick_context(s, "si", lv, i) for s in ("s1", "s2") for lv in range(5) for i in range(8)}
    assert len(contexts) == 2 * 5 * 8
    real = spk.prove_bit_any_key
    made = []

    def elsewhere(key, c, bit, context, rng):
        made.append(context)
        for lv in range(5):
            for i in range(8):
                if context == spk._pick_context("local", "si", lv, i):
                    return real(key, c, bit, spk._pick_context("local", "si", lv, i + 1), rng)
        raise AssertionError(f"not a selector context of this session: {context!r}")

    monkeypatch.setattr(spk, "prove_bit_any_key", elsewhere)
    _, sk = keypair512
    with pytest.raises(InvalidMessage, match="not proven to encrypt bits"):
        _identify(_utterance(seed=9), _models(threshold=-50.0), sk, dgk_key, max_speakers=3)
    assert made  # the refusal came from the proofs made for other matches


@pytest.mark.parametrize("output", ["bob", "alice"])
def test_a_shared_ubm_decides_as_in_the_clear_just_beyond_its_bound(output, keypair512, dgk_key):
    """ubm = "shared": Bob sends his UBM, Alice adds its component forms to his rows herself and takes her
    ℓ_UBM off the masked score; the forward algorithm runs on one model instead of two.  The decision is
    the plaintext one just beyond the (smaller) documented bound on either side, and Bob's rows carry no
    squared-feature coefficient."""
    _, sk = keypair512
    X = _utterance(seed=5)
    models = _models()
    for claim in ("ann", "cy"):
        score = models.score(models.index(claim), X)
        p = _params(VerifyParams, sk, claim=claim, ubm="shared")
        assert p.max_models == 1
        bound = verify_error_bound(models, claim, X, p)
        assert 0 < bound < 1e-6 * abs(score)
        assert bound < verify_error_bound(models, claim, X, _params(VerifyParams, sk, claim=claim))
        for eps, want in ((-1.0001 * bound, True), (1.0001 * bound, False)):
            a, b = _verify(X, _models(threshold=score + eps), sk, dgk_key, claim=claim, ubm="shared", output=output)
            learner, other = (b, a) if output == "bob" else (a, b)
            assert learner.accept is want and other.accept is None


def test_a_shared_ubm_is_sent_once_and_checked(keypair512, dgk_key):
    """The UBM message is what Alice scores with: a UBM of another shape, or an invalid GMM, is refused by
    name before anything else happens; the byte envelope counts the message."""
    from smcdp.protocols.speaker import ubm_from_proto, ubm_to_proto

    _, sk = keypair512
    models = _models()
    p = _params(VerifyParams, sk, claim="ann", ubm="shared")
    msg = ubm_to_proto(models.ubm)
    back = ubm_from_proto(msg, p, D, "sv/ubm", T)
    assert np.array_equal(back.means, models.ubm.means) and np.array_equal(back.covars, models.ubm.covars)
    with pytest.raises(InvalidMessage, match="sv/ubm"):
        ubm_from_proto(msg, p, D + 1, "sv/ubm", T)  # the utterance has another dimension
    bad = pb.Matrix(rows=msg.rows, cols=msg.cols, values=[-1.0] + list(msg.values[1:]))
    with pytest.raises(InvalidMessage, match="sv/ubm: weights"):
        ubm_from_proto(bad, p, D, "sv/ubm", T)
    many = VerifyParams(key_bits=sk.public_key.bits, max_mixtures=C - 1, max_features=D, claim="ann", ubm="shared")
    with pytest.raises(InvalidMessage, match=r"1\.\.3 components"):
        ubm_from_proto(msg, many, D, "sv/ubm", T)
    private = _params(VerifyParams, sk, claim="ann")
    grow = p.traffic_envelope("alice").session_bytes - private.traffic_envelope("alice").session_bytes
    assert grow < 0  # one model instead of two, the UBM message included
    with pytest.raises(InvalidMessage, match="ubm"):
        _params(VerifyParams, sk, claim="ann", ubm="public").validate()


def _sharp_ubm(ubm: DiagGMM, variance: float) -> DiagGMM:
    covars = ubm.covars.copy()
    covars[1, 2] = variance  # one component, one feature: a density as sharp as bob likes
    return DiagGMM(ubm.weights, ubm.means, covars)


def test_a_shared_ubm_that_could_overflow_anywhere_in_the_feature_box_is_refused_on_arrival(keypair512, dgk_key):
    """A UBM whose forms could reach Alice's later bounds for *some* utterance inside the agreed box is refused
    when it arrives -- whatever her features are, so no later refusal tells bob where they lie -- in a real
    session before Alice makes or sends her key; the limits are exact (2^41 nats a form, 2^40 the total)."""
    from smcdp.protocols import speaker as S
    from smcdp.protocols.secure_forward import known_bounds

    _, sk = keypair512
    models = _models()
    p = _params(VerifyParams, sk, claim="ann", ubm="shared")
    # a form's worst case is about x²/(2σ²) at the box's corner x = 2^8: 2^15/σ² reaches 2^41 at σ² = 2^-26
    for variance, frames, ok in ((2.0**-20, T, True), (2.0**-27, T, False), (2.0**-20, 10**5, False)):
        sharp = _sharp_ubm(models.ubm, variance)
        if ok:
            S.check_shared_ubm(sharp, p, frames, "sv/ubm from bob")
        else:
            with pytest.raises(InvalidMessage, match="sv/ubm from bob: a component's log-density"):
                S.check_shared_ubm(sharp, p, frames, "sv/ubm from bob")
    # the bound is the forms' largest value in the box: reached at its corner, never exceeded inside it
    bounds = known_bounds(SpeakerModels.hmm_set([models.ubm], ["u"]), p.feature_bits)
    inside = np.random.default_rng(3).uniform(-(2.0**8), 2.0**8, (500, D))
    forms = S.known_rows(SpeakerModels.hmm_set([models.ubm], ["u"]))(inside)
    assert np.all(np.abs(forms) <= bounds[None, :])
    # in a session: bob (deviating) sends the sharp UBM; alice refuses it by name and never sends her key
    real = S.ubm_to_proto
    net = InMemoryNetwork({"alice": "alice", "bob": "bob"}, timeout=60)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(S, "ubm_to_proto", lambda ubm: real(_sharp_ubm(ubm, 2.0**-30)))
        with pytest.raises(InvalidMessage, match="sv/ubm from bob: a component's log-density"):
            asyncio.run(
                net.run(
                    {
                        "alice": lambda ch: S.verify_alice(
                            ch, _utterance(), p, private_key=sk, allow_insecure_keys=True
                        ),
                        "bob": lambda ch: S.verify_bob(ch, models, p, allow_insecure_keys=True),
                    }
                )
            )
    finally:
        mp.undo()
    assert [tag for frm, _, tag, _, _ in net.transcript] == ["sv/ubm"]  # bob's UBM, and nothing from alice


def test_a_known_part_needs_gaussian_models_of_the_shape():
    """model_coefficients refuses a known part of another kind with a ValueError naming both (not an
    assertion), and known_coefficients refuses discrete models."""
    from smcdp.protocols.secure_forward import ForwardParams, known_coefficients, model_coefficients
    from tests.unit.protocols.keyword_util import synthetic_models

    rng = np.random.default_rng(0)
    diag, discrete = synthetic_models("diag", rng), synthetic_models("discrete", rng)
    with pytest.raises(ValueError, match="known part"):
        model_coefficients(diag, ForwardParams(), known=discrete)
    with pytest.raises(ValueError, match="Gaussian"):
        known_coefficients(discrete)


@pytest.mark.parametrize("ubm", ["private", "shared"])
def test_a_claim_of_no_enrolled_speaker_is_rejected_like_an_impostor_not_refused(ubm, keypair512, dgk_key, monkeypatch):
    """A refusal ("no enrolled speaker") told the claimant, who proposes, whether a name is enrolled at bob, one
    name a session.  Now bob scores a padding speaker of his own and shifts D below any score: reject for certain,
    even at a threshold every enrolled speaker passes, with the messages of an enrolled claim (same tags, same
    sizes), and alice -- when she is told -- learns reject as for an impostor."""
    _, sk = keypair512
    X = _utterance()
    models = _models(threshold=-1e5)  # every enrolled claim is accepted
    shapes = []

    class Recording(speaker.ForwardAlice):
        async def prepare(self, *args, **kw):
            plan = await super().prepare(*args, **kw)
            shapes.append(self.shape)
            return plan

    monkeypatch.setattr(speaker, "ForwardAlice", Recording)
    for output in ("bob", "alice"):
        a, b = _verify(X, models, sk, dgk_key, claim=NAMES[0], ubm=ubm, output=output)
        assert (b if output == "bob" else a).accept is True
        a2, b2 = _verify(X, models, sk, dgk_key, claim="nobody", ubm=ubm, output=output)
        assert (b2 if output == "bob" else a2).accept is False
        for key in ("messages_sent", "messages_received"):
            assert b2.stats[key] == b.stats[key] and a2.stats[key] == a.stats[key]
        for key in ("bytes_sent", "bytes_received"):  # a ciphertext's length varies by a byte or two
            assert abs(b2.stats[key] - b.stats[key]) < 0.001 * b.stats[key]
        assert shapes[-1].to_proto() == shapes[-2].to_proto()  # the header alice read: all bob's models' bits
    # the header shows the coefficient bits of all bob's models: the same whichever is claimed (they were the
    # claimed model's, and a padding speaker -- adapted twice towards the UBM -- needed fewer than a speaker)
    far = SpeakerModels(models.ubm, NAMES, models.means + np.array([0.0, 0.0, 40.0])[:, None, None], threshold=-1e5)
    shapes.clear()
    for claim in (NAMES[0], NAMES[2], "nobody"):
        _verify(X, far, sk, dgk_key, claim=claim, ubm=ubm)
    assert shapes[0].to_proto() == shapes[1].to_proto() == shapes[2].to_proto()


@pytest.mark.parametrize("ubm", ["private", "shared"])
@pytest.mark.parametrize("value", [400.0, 1e7])
def test_a_feature_beyond_feature_bits_is_clipped_not_refused(ubm, value, keypair512, dgk_key, caplog):
    """feature_bits is the proposer's: a refusal told him whether Alice's largest |feature| reached 2^feature_bits,
    a bit of her utterance a session.  Such a value is clipped inside the bound (only her log says so), and the
    session decides as in the clear on the clipped frames -- with the UBM shared too, where Alice's ℓ_UBM was of
    the raw frames and the speaker's of the clipped ones (400: D ≈ 2,000 nats a frame, "accept" at any
    threshold; 1e7: her UBM check refused after the forward algorithm, telling Bob).  The error bound is of the
    clipped frames too."""
    _, sk = keypair512
    X = _utterance()
    X[3, 1] = value  # beyond 2^8
    models = _models()
    clipped = np.clip(X, -(2.0**8), 2.0**8)
    score = models.score(models.index("bo"), clipped)
    p = _params(VerifyParams, sk, claim="bo", feature_bits=8, ubm=ubm)
    assert verify_error_bound(models, "bo", X, p) == verify_error_bound(models, "bo", clipped, p)
    for theta in (score - 0.5, score + 0.5):
        models = _models(threshold=theta)
        caplog.clear()
        with caplog.at_level("WARNING"):
            _, b = _verify(X, models, sk, dgk_key, claim="bo", feature_bits=8, ubm=ubm)
        assert b.accept == (score >= theta)
        assert "clipped inside it" in caplog.text


@pytest.mark.parametrize("ubm", ["private", "shared"])
def test_the_claim_free_coefficient_bits_are_those_of_all_models_at_once(ubm):
    """The enrolled speakers' bits are kept per model set (a Bob's file is loaded each session, and a thousand
    speakers' rows take seconds to form); with the session's padding speaker they must be the bits of every
    model formed together -- for a padding speaker that needs more bits than the speakers, too."""
    import random

    models = _models()
    p = VerifyParams(claim="ann", ubm=ubm, max_mixtures=C, max_features=D)
    for pad in (speaker.padding_speakers(models, 1, random.Random(3))[0], _models(seed=9).speaker(0)):
        far = DiagGMM(pad.weights, pad.means * 40.0, pad.covars)  # far from the UBM: more bits than any speaker
        for g in (pad, far):
            every = [models.speaker(i) for i in range(models.n_speakers)] + [g]
            want = speaker._coefficient_bits(models, every, ubm == "shared", p.forward())
            assert speaker._claim_free_forward(models, g, p, speaker.EnrolledBits()).coef_bits == want


def test_a_stated_coef_bits_is_checked_against_every_model_whatever_the_claim(keypair512, dgk_key):
    """coef_bits stated (not "auto"): the forward checked the claimed speaker's rows and the UBM's only, so
    whether the session was refused told the claimant -- who may propose coef_bits -- whether a name is enrolled
    and how large its model's coefficients are (a review: cy, far from the UBM, refused; ann and an unenrolled
    name completed).  Now every enrolled model is checked whatever the claim: all refused alike, or all run."""
    _, sk = keypair512
    models = _models()
    far = SpeakerModels(models.ubm, NAMES, models.means + np.array([0.0, 0.0, 40.0])[:, None, None], threshold=-1e5)
    fw = _params(VerifyParams, sk, claim="ann").forward()
    need = [speaker._coefficient_bits(far, [far.speaker(i)], False, fw) for i in range(len(NAMES))]
    assert need[0] < need[2]  # cy needs more bits than ann
    X = _utterance()
    for claim in ("ann", "cy", "nobody"):
        with pytest.raises(CryptoOverflow) as info:
            _verify(X, far, sk, dgk_key, claim=claim, coef_bits=need[0])
        assert "does not fit the protocol's" in info.value.public_message
        _, b = _verify(X, far, sk, dgk_key, claim=claim, coef_bits=need[2])
        assert b.accept is (claim != "nobody")  # threshold -1e5: every enrolled claim accepted


def test_identification_draws_every_padding_speaker_whatever_the_number_enrolled(keypair512, dgk_key, monkeypatch):
    """Bob drew K̄ − K padding speakers before his first message (210 ms each at C = 64, d = 39): his time to it
    fell as K grew, showing Alice the number of enrolled speakers K̄ hides.  Now he draws K̄ and uses the first
    K̄ − K, the same pads a draw of K̄ − K gave (a stream's first pads do not depend on how many follow)."""
    import random

    models = _models()
    drawn: list[int] = []
    real = speaker.padding_speakers
    monkeypatch.setattr(speaker, "padding_speakers", lambda m, n, rng: (drawn.append(n), real(m, n, rng))[1])
    _, sk = keypair512
    X = _utterance(shift=1.5 * 2)
    for names in (NAMES, NAMES[:1]):
        some = SpeakerModels(models.ubm, names, models.means[: len(names)], threshold=-1e5)
        _identify(X, some, sk, dgk_key, max_speakers=4)
    assert drawn == [4, 4]
    many, few = real(models, 4, random.Random(7)), real(models, 1, random.Random(7))
    assert np.array_equal(many[0].means, few[0].means)


@pytest.mark.parametrize("ubm", ["private", "shared"])
def test_models_that_could_leave_the_score_range_are_refused_by_bob_before_any_message(ubm, keypair512, dgk_key):
    """Alice refuses a score beyond ±2^40 nats, but she sees it masked (ℓ + ω, |ω| < 2^40): with variances of
    10⁻⁶, features inside the box at −250 refused in half of the sessions (by ω), features near the means never --
    a bit of her utterance for Bob (a review).  Bob now refuses, before any message, models that could reach the
    range for some utterance of max_frames frames inside the box -- every model he holds, whatever the claim --
    so no in-box utterance reaches Alice's check.  Models of ordinary variances run as before."""
    _, sk = keypair512
    rng = np.random.default_rng(5)
    mu = rng.uniform(90, 110, size=(C, D))
    tiny = DiagGMM(np.full(C, 1 / C), mu, np.full((C, D), 1e-6))
    narrow = SpeakerModels(tiny, NAMES, np.stack([mu + rng.normal(size=(C, D)) * 1e-3 for _ in NAMES]))
    for claim in ("bo", "nobody"):
        p = _params(VerifyParams, sk, claim=claim, ubm=ubm)
        for X in (np.full((T, D), -250.0), mu[rng.integers(C, size=T)]):
            net = InMemoryNetwork({"alice": "alice", "bob": "bob"}, timeout=120.0)
            with pytest.raises(InputRejected, match=r"could reach 2\^40 nats"):
                asyncio.run(
                    net.run(
                        {
                            "alice": lambda ch, X=X, p=p: verify_alice(
                                ch, X, p, private_key=sk, allow_insecure_keys=True
                            ),
                            "bob": lambda ch, p=p: verify_bob(ch, narrow, p, allow_insecure_keys=True),
                        }
                    )
                )
            assert not [t for t in net.transcript if t[0] == "bob"]  # before any message of his
    _, b = _verify(_utterance(), _models(), sk, dgk_key, claim="bo", ubm=ubm)  # ordinary models: as before
    assert b.accept is not None
    # one enrolled speaker beyond the range refuses every claim alike (the enrolled speakers' bound is kept per
    # model set, as their coefficient bits are)
    models = _models()
    far = SpeakerModels(models.ubm, NAMES, models.means + np.array([0.0, 0.0, 1e6])[:, None, None])
    for claim in ("ann", "cy", "nobody"):
        with pytest.raises(InputRejected, match=r"could reach 2\^40 nats"):
            _verify(_utterance(), far, sk, dgk_key, claim=claim, ubm=ubm)


def test_identification_bounds_only_its_padding_speakers_in_a_session(keypair512, dgk_key, monkeypatch):
    """Bob bounded every model's score range before his first message -- K + K̄ + 1 models, 2.4 ms each, so his
    time showed K again (a review of the change that drew every pad).  The enrolled models' bound is kept per model
    set and made while he is idle (EnrolledBits.ranges, prepare_bob); a session bounds its K̄ pads only."""
    _, sk = keypair512
    models = _models()
    bounded: list[int] = []
    real = speaker.models_range
    X = _utterance()
    p = _params(IdentifyParams, sk, max_speakers=4)
    for names in (NAMES, NAMES[:1]):
        some = SpeakerModels(models.ubm, names, models.means[: len(names)], threshold=-1e5)
        kept = speaker.EnrolledBits()
        kept.ranges(some, p.feature_bits)  # made while Bob was idle
        monkeypatch.setattr(speaker, "models_range", lambda g, fb: (bounded.append(len(list(g))), real(g, fb))[1])
        run_pair(
            lambda ch: identify_alice(ch, X, p, private_key=sk, allow_insecure_keys=True, dgk_key=dgk_key),
            lambda ch, some=some, kept=kept: identify_bob(ch, some, p, allow_insecure_keys=True, enrolled_bits=kept),
        )
        monkeypatch.setattr(speaker, "models_range", real)
    assert bounded == [4, 4]
