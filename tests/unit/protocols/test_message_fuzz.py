"""Fuzz what a participant receives: one message of one sender mutated, the rest of the session honest.

Each case runs one protocol session in memory (small insecure keys) in which exactly one message -- the
first one that ``sender`` sends to ``receiver`` under ``tag`` -- has its bytes rewritten on the wire (the
sender's ``_transmit`` wrapped, as tests/support/pi_group.py does).  The mutation is either protobuf-aware
(the bytes parsed as the type the sender named, one field changed: an integer to 0, -1, 2^63-1 or huge, a
float to nan/inf/-inf/1e308/-0.0, a repeated field emptied, cut by one, grown by one or ten times as long,
a big integer to b"", one zero byte, 2^4096 or itself + 1, a string to "" or a long one, a nested message
cleared) or raw (the bytes cut in half, one byte flipped, emptied, or replaced by random bytes).

The oracle: the session either completes (any result -- a changed value may change the output) or fails
with an :class:`~smcdp.errors.SmcdpError` whose gRPC code is not INTERNAL.  Anything else -- a builtin
exception escaping, an SmcdpError reported as INTERNAL, or a hang past the time limit -- is a bug.

Cases are deterministic: which message, which field and which variant are chosen by a ``random.Random``
seeded with the case's name, and each test id names protocol mode, sender>receiver, tag and mutation.
Per target (``MODES``: the set-up, rounds and end of power iteration's exact, DP power and DP covariance
modes under a single key and under a dealt (1, 3) group key, dp-aggregate under a single key and under a
group key, the dealer-free key ceremony with three parties (BGW) and with two (ephemeral Paillier keys; 256
bits: about 0.1 s a ceremony, so every step's message is a target), keyword recognition, speaker
verification with a private and with a shared UBM, and identification) one mutation of each top-level field
is drawn first, then of fields not touched yet (breadth before repetition), plus one raw mutation.  Roles
that draw randomness get fixed roots (a group key and the ceremony need secret roots, not experiment
seeds), so the tags of a clean session -- the ceremony's first biprime's candidate, the decryptors of each
partial decryption -- are the same every run.  The fresh randomness left (the n = 2 ceremony's ciphertexts,
some encryptions' obfuscators) may change which refusal a changed ciphertext gets, not whether the case passes.  Known bugs are marked ``xfail(strict=True)`` in
``KNOWN_BUGS``: each flips to XPASS (a failure) when fixed.
``test_trent_never_returns_a_zero_x_for_a_huge_final_block`` checks one output beyond the oracle (a completed
session whose result a finite value silently zeroed), and
``test_key_ceremony_refuses_a_theta_product_beyond_its_bound`` pins down one outcome of a target whose outcome
depends on fresh randomness (a theta product beyond its bound once escaped as a ValueError).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import random
import traceback
from collections.abc import Callable

import numpy as np
import pytest
from google.protobuf.descriptor import FieldDescriptor as FD
from google.protobuf.message import Message

from smcdp.crypto import dgk
from smcdp.crypto.encoding import bytes_to_int, int_to_bytes
from smcdp.crypto.threshold import deal
from smcdp.errors import SmcdpError
from smcdp.net.channel import InMemoryNetwork
from smcdp.plugins.keyword import load_utterance
from smcdp.primitives.rng import Randomness
from smcdp.protocols import dp_aggregate as dpa
from smcdp.protocols import dp_aggregate_threshold as dpt
from smcdp.protocols import keygen as kg
from smcdp.protocols import power_iteration as pi
from smcdp.protocols import speaker as sv
from smcdp.protocols.keyword import KeywordParams, keyword_alice, keyword_bob
from smcdp.protocols.power_iteration_threshold import GroupKey
from smcdp.v1 import messages_pb2 as pb
from tests.support.limits import time_limit
from tests.unit.protocols.aggregate_util import small_dgk, small_paillier
from tests.unit.protocols.keyword_util import fixture_utterances, synthetic_models
from tests.unit.protocols.test_power_iteration import blocks_with_gap

#: wall-clock limit of one session (a clean one takes 0.03-0.4 s)
CASE_SECONDS = 5
#: protobuf-aware mutations drawn per target (one for each top-level field first), raw ones
PB_PER_TARGET = 6
RAW_PER_TARGET = 1


# ============================================================================ sessions
@functools.cache
def _paillier512():
    from tests.conftest import _keypair

    return _keypair(512)[1]


@functools.cache
def _speaker_dgk():
    return dgk.generate_keypair(512, 32, max_ell=256, allow_insecure=True)


def _pi_session(params: pi.PowerIterationParams):
    def build():
        sk = _paillier512()
        blocks = blocks_with_gap(np.random.default_rng(1), 4, (3, 3))
        roles = {"trent": "trent", "party1": "org1", "party2": "org2"}
        coros = {"trent": lambda c: pi.trent(c, params, seed=1, allow_insecure_keys=True)}
        for i, A in enumerate(blocks):
            coros[f"party{i + 1}"] = lambda c, A=A, i=i: pi.data_party(
                c, A, params, private_key=sk if i == 0 else None, seed=10 + i, allow_insecure_keys=True
            )
        return roles, coros

    return build


def _pi_group_session(params: pi.PowerIterationParams, ns=(3, 3, 2)):
    """A mode (exact, DP power or DP covariance) under a dealt (1, 3) group key; every role has a fixed secret root
    (a group key refuses experiment seeds), so the decoys, the round count, the noise and each round's decryptors
    are the same every run."""

    def build():
        _, shares = _dealt(len(ns), params.key_threshold)
        blocks = blocks_with_gap(np.random.default_rng(1), 4, ns)
        roles = {"trent": "trent", **{f"party{i + 1}": f"org{i + 1}" for i in range(len(ns))}}
        index = {f"party{i + 1}": i + 1 for i in range(len(ns))}
        coros = {"trent": lambda c: pi.trent(c, params, seed=Randomness(b"\x07" * 32), allow_insecure_keys=True)}
        for i, A in enumerate(blocks):
            coros[f"party{i + 1}"] = lambda c, A=A, i=i: pi.data_party(
                c,
                A,
                params,
                group_key=GroupKey(shares[i], index, "lab"),
                seed=Randomness(bytes([60 + i]) * 32),
                allow_insecure_keys=True,
            )
        return roles, coros

    return build


@functools.cache
def _dealt(n: int, t: int):
    return deal(_paillier512(), n, t)


def _dpa_session():
    p = dpa.DPAggregateParams(
        n_parties=3, dim=3, key_bits=768, dgk_bits=512, dgk_t=64, epsilon=2.0, lam=0.1, max_sensitivity=0.5
    ).validate()
    ws = [np.array([0.1, -0.2, 0.3]) * (j + 1) for j in range(3)]
    sens = [0.01, 0.03, 0.02]
    roles = {"charlie": "charlie", "dave": "dave", **{f"party{i + 1}": f"p{i + 1}" for i in range(3)}}
    coros = {
        "charlie": lambda c: dpa.charlie(
            c,
            p,
            seed=3,
            allow_insecure_keys=True,
            zeta_key=small_paillier(768, 1),
            dgk_key=small_dgk(),
            beta_key=small_paillier(768, 3),
        ),
        "dave": lambda c: dpa.dave(c, p),
    }
    for i in range(3):
        coros[f"party{i + 1}"] = lambda c, i=i: dpa.data_party(
            c, ws[i], sens[i], p, seed=3, allow_insecure_keys=True, noise_random_state=np.random.default_rng(i)
        )
    return roles, coros


def _keyword_session(kind: str):
    def build():
        sk = _paillier512()
        if kind == "fixture":  # the fixture's models (diagonal Gaussians), the first 8 frames of an utterance
            from tests.unit.protocols.test_keyword import MODELS

            models, X = MODELS, load_utterance(fixture_utterances()[0][0])[:8]
        else:  # discrete emissions: the forward algorithm's oblivious-transfer path
            models = synthetic_models("discrete", np.random.default_rng(3), D=2, N=3, M=4)
            X = np.array([0, 1, 3, 2])
        p = KeywordParams(key_bits=512)
        return {"alice": "alice", "bob": "bob"}, {
            "alice": lambda c: keyword_alice(c, X, p, private_key=sk, allow_insecure_keys=True),
            "bob": lambda c: keyword_bob(c, models, p, allow_insecure_keys=True),
        }

    return build


def _speaker_session(which: str):
    def build():
        from tests.unit.protocols.test_speaker import _models, _params, _utterance

        sk, X, models = _paillier512(), _utterance(), _models()
        seeds = {}
        if which == "verify":
            p = _params(sv.VerifyParams, sk, claim="bo")
            a, b = sv.verify_alice, sv.verify_bob
        elif which == "verify-shared":  # bob shows alice his UBM (his policy's allow_reveal = ["ubm"]); she decides
            p = _params(sv.VerifyParams, sk, claim="bo", ubm="shared", output="alice")
            a, b = sv.verify_alice, sv.verify_bob
            seeds = {"alice": 21, "bob": 22}  # bob's masks too: the same bytes every run
        else:
            p = _params(sv.IdentifyParams, sk)
            a, b = sv.identify_alice, sv.identify_bob
        return {"alice": "alice", "bob": "bob"}, {
            "alice": lambda c: a(
                c, X, p, private_key=sk, allow_insecure_keys=True, dgk_key=_speaker_dgk(), seed=seeds.get("alice")
            ),
            "bob": lambda c: b(c, models, p, allow_insecure_keys=True, seed=seeds.get("bob")),
        }

    return build


def _dpa_group_session():
    """dp-aggregate under a dealt (1, 3) group key (shared-noise calibration: the only one a group key runs), every
    data party with a fixed secret root (a group key refuses experiment seeds) and a fixed noise generator."""
    p = dpa.DPAggregateParams(
        n_parties=3,
        dim=3,
        key_bits=512,
        dgk_bits=512,
        dgk_t=64,
        epsilon=1.0,
        delta=1e-5,
        lam=0.1,
        max_sensitivity=0.5,
        calibration="gaussian",
        key_group="lab",
        key_threshold=1,
        noise_parties=2,
        size_levels=12,
        levels_per_octave=2,
    ).validate()
    _, shares = _dealt(3, 1)
    ws = [np.array([0.1, -0.2, 0.3]) * (j + 1) for j in range(3)]
    sens = [0.01, 0.03, 0.02]
    roles = {"charlie": "charlie", "dave": "dave", **{f"party{i + 1}": f"org{i + 1}" for i in range(3)}}
    index = {f"party{i + 1}": i + 1 for i in range(3)}
    coros = {"charlie": lambda c: dpt.charlie(c, p, allow_insecure_keys=True), "dave": lambda c: dpa.dave(c, p)}
    for i in range(3):
        coros[f"party{i + 1}"] = lambda c, i=i: dpt.data_party(
            c,
            ws[i],
            sens[i],
            p,
            GroupKey(shares[i], index, "lab"),
            seed=Randomness(bytes([70 + i]) * 32),
            noise_random_state=np.random.default_rng(i),
        )
    return roles, coros


def _keygen_session(n: int, t: int):
    """The dealer-free key ceremony at its smallest test size (256 bits; 0.05-0.15 s), every party with a fixed
    root: the candidates, the first biprime's index (so its tags) and every message are the same every run (but
    n = 2's ephemeral-key ciphertexts' fresh randomness)."""

    def build():
        params = kg.KeygenParams(parties=n, threshold=t, key_bits=256, allow_insecure=True).validate()
        roles = {r: f"org{r[5:]}" for r in kg.party_roles(n)}
        return roles, {
            r: (lambda c, r=r: kg.party(c, params, seed=Randomness(bytes([80 + int(r[5:])]) * 32))) for r in roles
        }

    return build


PI = dict(n_parties=2, key_bits=512)
#: mode -> (session builder, targets (sender, receiver, tag, message type)): set-up, rounds and end of each
MODES: dict[str, tuple[Callable, list[tuple[str, str, str, type[Message]]]]] = {
    "pi-exact": (
        _pi_session(pi.PowerIterationParams(**PI, p=0.9, tol=1e-6)),
        [
            ("party1", "party2", "keypair", pb.PaillierKeyPair),
            ("party1", "party2", "sigma", pb.Floats),
            ("party1", "trent", "public_key", pb.PaillierPublicKey),
            ("party2", "trent", "dims", pb.Ints),
            ("party1", "trent", "contrib/0", pb.CiphertextVector),
            ("trent", "party2", "v/0", pb.CiphertextVector),
            ("party1", "trent", "round/0", pb.PowerIterationRound),
            ("trent", "party1", "reply/0", pb.PowerIterationReply),
            ("trent", "party2", "reply/6", pb.PowerIterationReply),  # the last: the stop bit
            ("party2", "trent", "final/cols", pb.Ints),
            ("party1", "trent", "final/x/0", pb.Matrix),
        ],
    ),
    "pi-group-exact": (
        _pi_group_session(
            pi.PowerIterationParams(n_parties=3, key_bits=512, p=0.7, tol=1e-6, key_group="lab", key_threshold=1)
        ),
        [
            ("trent", "party1", "digest/contrib/0", pb.Blobs),
            ("party1", "trent", "pok/contrib/0", pb.BigInts),
            ("trent", "party2", "relayed/contrib/0", pb.RelayedReleases),
            ("trent", "party1", "v/0/proof", pb.BigInts),
            ("party1", "party2", "partial/v/0", pb.BigInts),
            ("party2", "trent", "flag/0", pb.PowerIterationRound),
            ("trent", "party3", "reply/0/proof", pb.BigInts),
            ("trent", "party1", "reply/8", pb.PowerIterationReply),  # the last: the stop bit
        ],
    ),
    "pi-dp-power": (
        _pi_session(pi.PowerIterationParams(**PI, epsilon=1.0, delta=1e-6, iterations=3, dp_method="power")),
        [
            ("party1", "party2", "keypair", pb.PaillierKeyPair),
            ("party1", "trent", "public_key", pb.PaillierPublicKey),
            ("party1", "trent", "dims", pb.Ints),
            ("trent", "party1", "v/0", pb.CiphertextVector),
            ("party2", "trent", "noisy/1", pb.CiphertextVector),
            ("trent", "party2", "final/v", pb.CiphertextVector),
        ],
    ),
    "pi-dp-cov": (
        _pi_session(pi.PowerIterationParams(**PI, epsilon=1.0, delta=1e-6, dp_method="covariance")),
        [
            ("party2", "trent", "dims", pb.Ints),
            ("party1", "trent", "noisy/cov", pb.CiphertextVector),
            ("trent", "party1", "final/cov", pb.CiphertextVector),
        ],
    ),
    "dpa": (
        _dpa_session,
        [
            ("charlie", "party1", "s1/zeta-pk", pb.PaillierPublicKey),
            ("charlie", "party1", "s1/zeta-proof", pb.BigInts),
            ("party1", "party2", "s1/pi1", pb.Ints),
            ("party1", "party2", "s1/xi-keypair", pb.PaillierKeyPair),
            ("party2", "party1", "s1/a", pb.BigInts),
            ("party3", "charlie", "s1/xa", pb.CiphertextVector),
            ("party2", "charlie", "s1/cmp/dgk-pk", pb.BigInts),  # the evaluator holds its match's DGK key
            ("party2", "charlie", "s1/cmp/dgk-bits", pb.Blobs),
            ("charlie", "party2", "s1/cmp/dgk-c", pb.Blobs),
            ("charlie", "party1", "s2/u-proof", pb.BigInts),
            ("party3", "party1", "s2/seed", pb.Blobs),
            ("party2", "party1", "s2/agg-sel", pb.CiphertextVector),
            ("charlie", "party1", "chk/open", pb.BigInts),
            ("party3", "party1", "chk/party3/dgk-hdr", pb.Ints),
            ("party2", "party1", "s2/ok", pb.Flag),
            ("party1", "charlie", "s2/psi", pb.CiphertextVector),
            ("party2", "dave", "s3/share", pb.BigInts),
        ],
    ),
    "kw": (
        _keyword_session("fixture"),
        [
            ("alice", "bob", "kw/pk", pb.PaillierPublicKey),
            ("bob", "alice", "kw/fw/hdr", pb.Ints),
            ("alice", "bob", "kw/fw/plan", pb.Ints),
            ("alice", "bob", "kw/fw/prod/0", pb.CiphertextVector),
            ("bob", "alice", "kw/fw/c/0", pb.BigInts),
            ("bob", "alice", "kw/fw/q/0", pb.CiphertextVector),
            ("alice", "bob", "kw/fw/e/0/0", pb.CiphertextVector),
            ("bob", "alice", "kw/fw/fin-c", pb.BigInts),
            ("bob", "alice", "kw/ranked", pb.CiphertextVector),
            ("bob", "alice", "kw/label/np-ct", pb.Blobs),
        ],
    ),
    "kw-discrete": (
        _keyword_session("discrete"),
        [
            ("alice", "bob", "kw/fw/ot/0/np-hdr", pb.Ints),
            ("alice", "bob", "kw/fw/ot/0/np-pk0", pb.Blobs),
            ("bob", "alice", "kw/fw/ot/0/np-gr", pb.Blobs),
            ("bob", "alice", "kw/fw/ot/0/np-ct", pb.Blobs),
        ],
    ),
    "sv-verify": (
        _speaker_session("verify"),
        [
            ("alice", "bob", "sv/pk", pb.PaillierPublicKey),
            ("bob", "alice", "sv/fw/hdr", pb.Ints),
            ("alice", "bob", "sv/fw/mix-e/0", pb.CiphertextVector),
            ("bob", "alice", "sv/fw/mix-u/0", pb.CiphertextVector),
            ("alice", "bob", "sv/fw/fin-l", pb.CiphertextVector),
            ("bob", "alice", "sv/masked", pb.CiphertextVector),
            ("alice", "bob", "sv/cmp/dgk-hdr", pb.Ints),
            ("alice", "bob", "sv/cmp/dgk-pk", pb.BigInts),  # alice holds the DGK key
            ("alice", "bob", "sv/cmp/dgk-bits", pb.Blobs),
            ("bob", "alice", "sv/cmp/dgk-c", pb.Blobs),
            ("alice", "bob", "sv/cmp/dgk-delta", pb.Ints),  # output = bob: his decision's last message
        ],
    ),
    "sv-identify": (
        _speaker_session("identify"),
        [
            ("bob", "alice", "si/zeta-pk", pb.PaillierPublicKey),
            ("bob", "alice", "si/zeta-proof", pb.BigInts),
            ("bob", "alice", "si/zeta-r", pb.CiphertextVector),
            ("alice", "bob", "si/shuffled", pb.CiphertextVector),
            ("bob", "alice", "si/pick/0", pb.CiphertextVector),
            ("bob", "alice", "si/pick-proof/0", pb.BigInts),
            ("alice", "bob", "si/picked/0", pb.CiphertextVector),
            ("bob", "alice", "si/label/np-hdr", pb.Ints),
            ("alice", "bob", "si/label/np-ct", pb.Blobs),
        ],
    ),
    "sv-verify-shared": (
        _speaker_session("verify-shared"),
        [
            ("bob", "alice", "sv/ubm", pb.Matrix),
            ("alice", "bob", "sv/pk", pb.PaillierPublicKey),
            ("bob", "alice", "sv/fw/hdr", pb.Ints),
            ("alice", "bob", "sv/fw/plan", pb.Ints),
            ("bob", "alice", "sv/fw/ready", pb.Ints),
            ("alice", "bob", "sv/fw/blk/0", pb.Ints),
            ("alice", "bob", "sv/fw/prod/0", pb.CiphertextVector),
            ("bob", "alice", "sv/fw/c/0", pb.BigInts),
            ("bob", "alice", "sv/fw/q/0", pb.CiphertextVector),
            ("alice", "bob", "sv/fw/mix-e/0", pb.CiphertextVector),
            ("bob", "alice", "sv/fw/mix-u/2", pb.CiphertextVector),  # the last frame's
            ("bob", "alice", "sv/fw/fin-c", pb.BigInts),
            ("alice", "bob", "sv/fw/fin-l", pb.CiphertextVector),
            ("bob", "alice", "sv/masked", pb.CiphertextVector),
            ("alice", "bob", "sv/cmp/dgk-pk", pb.BigInts),
            ("alice", "bob", "sv/cmp/dgk-bits", pb.Blobs),
            ("bob", "alice", "sv/cmp/dgk-c", pb.Blobs),  # output = alice: she holds the key, her decision's last
        ],
    ),
    "pi-group-dp-power": (
        _pi_group_session(
            pi.PowerIterationParams(
                n_parties=3,
                key_bits=512,
                epsilon=1.0,
                delta=1e-6,
                iterations=3,
                dp_method="power",
                key_group="lab",
                key_threshold=1,
            )
        ),
        [
            ("party1", "trent", "public_key", pb.PaillierPublicKey),
            ("party3", "trent", "dims", pb.Ints),
            ("trent", "party2", "v/0", pb.Matrix),
            ("party2", "trent", "digest/0", pb.Blobs),
            ("trent", "party1", "digest/0", pb.Blobs),
            ("party3", "party2", "echo/0", pb.Blobs),
            ("party1", "trent", "noisy/1", pb.CiphertextVector),
            ("party3", "trent", "pok/1", pb.BigInts),
            ("trent", "party2", "contrib/1", pb.RelayedReleases),
            ("trent", "party3", "echo/1", pb.Blobs),
            ("party2", "party1", "partial/2", pb.BigInts),  # the last round's
        ],
    ),
    "pi-group-dp-cov": (
        _pi_group_session(
            pi.PowerIterationParams(
                n_parties=3,
                key_bits=512,
                epsilon=1.0,
                delta=1e-6,
                dp_method="covariance",
                key_group="lab",
                key_threshold=1,
            )
        ),
        [
            ("party2", "trent", "dims", pb.Ints),
            ("trent", "party3", "digest/cov", pb.Blobs),
            ("party1", "party3", "echo/cov", pb.Blobs),
            ("party3", "trent", "noisy/cov", pb.CiphertextVector),
            ("party1", "trent", "pok/cov", pb.BigInts),
            ("trent", "party2", "contrib/cov", pb.RelayedReleases),
            ("party3", "party1", "partial/cov", pb.BigInts),
        ],
    ),
    "dpa-group": (
        _dpa_group_session,
        [
            ("party1", "charlie", "g0/key", pb.Blobs),
            ("party2", "charlie", "g0/key", pb.Blobs),
            ("party1", "charlie", "g1a/digest", pb.Blobs),
            ("charlie", "party2", "g1a/digest", pb.Blobs),
            ("party2", "party3", "g1a/echo", pb.Blobs),
            ("party3", "charlie", "g1a/levels", pb.CiphertextVector),
            ("party1", "charlie", "g1a/pok", pb.BigInts),
            ("charlie", "party1", "g1a/contrib", pb.RelayedReleases),
            ("party2", "charlie", "g2a/blinded", pb.CiphertextVector),
            ("party3", "charlie", "g2a/proof", pb.BigInts),
            ("charlie", "party3", "g2a/contrib", pb.RelayedReleases),
            ("party3", "party1", "g2a/partial", pb.BigInts),
            ("charlie", "party2", "g2b/echo", pb.Blobs),
            ("party1", "charlie", "g3/release", pb.CiphertextVector),
            ("party2", "charlie", "g3/pok", pb.BigInts),
            ("charlie", "party3", "g3/contrib", pb.RelayedReleases),
            ("party3", "charlie", "g3/partial", pb.BigInts),
            ("party2", "dave", "s3/share", pb.BigInts),
            ("charlie", "dave", "s3/share", pb.BigInts),
        ],
    ),
    "kg": (  # n = 3, t = 1: BGW products (Shamir over a prime field)
        _keygen_session(3, 1),
        [
            ("party2", "party1", "kg/1/sieve/a", pb.BigInts),
            ("party1", "party3", "kg/1/sieve/mul1", pb.BigInts),
            ("party3", "party2", "kg/1/sieve/mul2", pb.BigInts),
            ("party2", "party1", "kg/1/sieve/open", pb.BigInts),
            ("party3", "party1", "kg/1/n", pb.BigInts),
            ("party1", "party2", "kg/1/n/open", pb.BigInts),
            ("party2", "party3", "kg/1/jacobi/0", pb.BigInts),
            ("party3", "party1", "kg/1/jacobi/rest/55", pb.BigInts),  # the first biprime: candidate 55
            ("party1", "party3", "kg/1/gcd/55", pb.BigInts),
            ("party2", "party1", "kg/1/gcd/55/open", pb.BigInts),
            ("party3", "party2", "kg/1/theta", pb.BigInts),
            ("party1", "party2", "kg/1/theta/open", pb.BigInts),
            ("party2", "party3", "kg/1/commit", pb.BigInts),
            ("party3", "party1", "kg/1/share", pb.BigInts),
            ("party1", "party3", "kg/1/fingerprint", pb.BigInts),
        ],
    ),
    "kg-2": (  # n = 2: Paillier products under party1's ephemeral keys
        _keygen_session(2, 1),
        [
            ("party1", "party2", "kg/0/ephemeral-keys", pb.BigInts),
            ("party1", "party2", "kg/1/sieve/enc", pb.Blobs),
            ("party2", "party1", "kg/1/sieve/ret", pb.Blobs),
            ("party1", "party2", "kg/1/n/enc", pb.Blobs),
            ("party2", "party1", "kg/1/n/ret", pb.Blobs),
            ("party1", "party2", "kg/1/n/open", pb.BigInts),
            ("party2", "party1", "kg/1/jacobi/0", pb.BigInts),
            ("party1", "party2", "kg/1/jacobi/rest/20", pb.BigInts),  # the first biprime: candidate 20
            ("party1", "party2", "kg/1/gcd/20/enc", pb.Blobs),
            ("party2", "party1", "kg/1/gcd/20/ret", pb.Blobs),
            ("party1", "party2", "kg/1/gcd/20/open", pb.BigInts),
            ("party1", "party2", "kg/1/theta/enc", pb.Blobs),
            # a changed ciphertext here decrypts to a value that depends on the fresh encryption randomness, so which
            # refusal it gets may vary (test_key_ceremony_refuses_a_theta_product_beyond_its_bound pins one down)
            ("party2", "party1", "kg/1/theta/ret", pb.Blobs),
            ("party1", "party2", "kg/1/theta/open", pb.BigInts),
            ("party2", "party1", "kg/1/commit", pb.BigInts),
            ("party1", "party2", "kg/1/share", pb.BigInts),
            ("party2", "party1", "kg/1/fingerprint", pb.BigInts),
        ],
    ),
}


# ============================================================================ mutations
class NotApplicable(Exception):
    """The mutation cannot be applied to this message (an element of an empty repeated field)."""


_INT_RANGES = {
    FD.TYPE_INT32: (-(2**31), 2**31 - 1),
    FD.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FD.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FD.TYPE_UINT32: (0, 2**32 - 1),
    FD.TYPE_FIXED32: (0, 2**32 - 1),
    FD.TYPE_INT64: (-(2**63), 2**63 - 1),
    FD.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FD.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FD.TYPE_UINT64: (0, 2**64 - 1),
    FD.TYPE_FIXED64: (0, 2**64 - 1),
}
_NAMED = {2**31 - 1: "2^31-1", -(2**31): "-2^31", 2**32 - 1: "2^32-1", 2**63 - 1: "2^63-1", -(2**63): "-2^63"}
_NAMED[2**64 - 1] = "2^64-1"
LONG_STRING = "x" * 100_000
#: a scalar's zero (what an element mutation starts from when the repeated field is empty)
_ZERO = {FD.TYPE_BYTES: b"", FD.TYPE_STRING: "", FD.TYPE_BOOL: False}
BIG_4096 = int_to_bytes(1 << 4096)


def _int_variants(ftype: int) -> list[tuple[str, int]]:
    """0, -1, 2^63-1 and a huge value, as the receiver parses them into a field of this type (a varint
    beyond the type's width arrives truncated, so -1 in a uint32 is 2^32-1; the huge one is the type's
    extreme: its largest unsigned or its most negative signed value)."""
    lo, hi = _INT_RANGES[ftype]
    out: dict[int, str] = {}
    for v in (0, -1, 2**63 - 1, lo if lo < 0 else hi):
        v = v % (hi + 1) if lo == 0 else max(lo, min(hi, v))
        out.setdefault(v, _NAMED.get(v, str(v)))
    return [(name, v) for v, name in out.items()]


def _scalar_variants(fd) -> list[tuple[str, Callable]]:
    """(name, fn(old value) -> new value) for one scalar of this field."""
    if fd.type in _INT_RANGES:
        return [(n, lambda _old, v=v: v) for n, v in _int_variants(fd.type)]
    if fd.type in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
        vals = [("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf), ("1e308", 1e308), ("-0.0", -0.0)]
        return [(n, lambda _old, v=v: v) for n, v in vals]
    if fd.type == FD.TYPE_BOOL:
        return [("not", lambda old: not old)]
    if fd.type == FD.TYPE_BYTES:
        return [
            ("empty", lambda _old: b""),
            ("zero-byte", lambda _old: b"\x00"),
            ("2^4096", lambda _old: BIG_4096),
            ("plus1", lambda old: int_to_bytes(bytes_to_int(old) + 1)),
        ]
    if fd.type == FD.TYPE_STRING:
        return [("empty", lambda _old: ""), ("long", lambda _old: LONG_STRING)]
    if fd.type == FD.TYPE_ENUM:
        return [("0", lambda _old: 0), ("999", lambda _old: 999)]
    raise AssertionError(f"no variants for field type {fd.type}")


def _resolve(msg: Message, path: tuple):
    """The message that holds the last step of ``path`` (steps: field names, or ints for elements)."""
    for step in path[:-1]:
        if isinstance(step, int):
            if not len(msg) or step >= len(msg):
                raise NotApplicable(f"no element {step}")
            msg = msg[step]
        else:
            msg = getattr(msg, step)
    return msg


def _set_list(holder: Message, fd, values: list) -> None:
    field = getattr(holder, fd.name)
    if fd.type == FD.TYPE_MESSAGE:
        copies = [type(v)() for v in values]
        for c, v in zip(copies, values):
            c.CopyFrom(v)
        del field[:]
        for c in copies:
            field.add().CopyFrom(c)
    else:
        del field[:]
        field.extend(values)


def _list_ops():
    return [
        ("empty", lambda xs: []),
        ("drop-last", lambda xs: xs[:-1]),
        ("dup-last", lambda xs: xs + xs[-1:]),
        ("x10", lambda xs: xs * 10),
    ]


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    apply: Callable[[bytes, type[Message], random.Random], bytes]


def _pb_mutation(name: str, edit: Callable[[Message], None]) -> Mutation:
    def apply(data: bytes, mtype: type[Message], rng: random.Random) -> bytes:
        msg = mtype.FromString(data)
        edit(msg)
        return msg.SerializeToString()

    return Mutation(name, apply)


def _field_mutations(desc, prefix: tuple, label: str) -> dict[str, list[Mutation]]:
    """field label -> its mutations, for every field of ``desc`` (nested messages: their fields too)."""
    out: dict[str, list[Mutation]] = {}
    for fd in desc.fields:
        path = prefix + (fd.name,)
        lbl = f"{label}{fd.name}"
        muts: list[Mutation] = []
        repeated = fd.is_repeated
        if repeated:
            for opname, op in _list_ops():

                def edit(msg, path=path, fd=fd, op=op, opname=opname):
                    holder = _resolve(msg, path)
                    values = list(getattr(holder, fd.name))
                    if not values and opname != "empty":
                        raise NotApplicable("empty repeated field")
                    _set_list(holder, fd, op(values))

                muts.append(_pb_mutation(f"{lbl}={opname}", edit))
        if fd.type == FD.TYPE_MESSAGE:
            if not repeated:

                def clear(msg, path=path, fd=fd):
                    _resolve(msg, path).ClearField(fd.name)

                muts.append(_pb_mutation(f"{lbl}=cleared", clear))
                out[lbl] = muts
                out.update(_field_mutations(fd.message_type, path, f"{lbl}."))
            else:
                out[lbl] = muts
                out.update(_field_mutations(fd.message_type, path + (0,), f"{lbl}@0."))
            continue
        for vname, fn in _scalar_variants(fd):
            if repeated:
                for idx, iname in ((0, "@0"), (-1, "@last")):

                    def edit(msg, path=path, fd=fd, fn=fn, idx=idx):
                        field = getattr(_resolve(msg, path), fd.name)
                        if not len(field):  # an element where none is expected
                            field.append(fn(_ZERO.get(fd.type, 0)))
                        else:
                            field[idx] = fn(field[idx])

                    muts.append(_pb_mutation(f"{lbl}{iname}={vname}", edit))
            else:

                def edit(msg, path=path, fd=fd, fn=fn):
                    holder = _resolve(msg, path)
                    setattr(holder, fd.name, fn(getattr(holder, fd.name)))

                muts.append(_pb_mutation(f"{lbl}={vname}", edit))
        out[lbl] = muts
    return out


RAW_MUTATIONS = [
    Mutation("raw:truncate-half", lambda d, _t, _r: d[: len(d) // 2]),
    Mutation("raw:flip-byte", lambda d, _t, r: _flip(d, r)),
    Mutation("raw:empty", lambda d, _t, _r: b""),
    Mutation("raw:random", lambda d, _t, r: r.randbytes(len(d))),
]


def _flip(d: bytes, rng: random.Random) -> bytes:
    if not d:
        raise NotApplicable("no byte to flip")
    i = rng.randrange(len(d))
    return d[:i] + bytes([d[i] ^ 0xFF]) + d[i + 1 :]


def sample_mutations(key: str, mtype: type[Message]) -> list[Mutation]:
    """PB_PER_TARGET protobuf mutations and RAW_PER_TARGET raw ones, drawn with ``random.Random(key)``:
    first one mutation of each top-level field (of it or of a field nested in it), in a drawn order, then
    mutations of fields not touched yet, then any."""
    rng = random.Random(key)
    by_label = _field_mutations(mtype.DESCRIPTOR, (), "")
    tops: dict[str, list[str]] = {}
    for label in by_label:
        tops.setdefault(label.split(".")[0].split("@")[0], []).append(label)
    order = list(tops)
    rng.shuffle(order)
    picked: list[Mutation] = []
    used: set[str] = set()
    for top in order[:PB_PER_TARGET]:
        label = rng.choice(tops[top])
        picked.append(rng.choice(by_label[label]))
        used.add(label)
    fresh = [lbl for lbl in by_label if lbl not in used]
    rng.shuffle(fresh)
    for label in fresh[: PB_PER_TARGET - len(picked)]:
        picked.append(rng.choice(by_label[label]))
    rest = [m for ms in by_label.values() for m in ms if m not in picked]
    picked += rng.sample(rest, min(len(rest), PB_PER_TARGET - len(picked)))
    return picked + rng.sample(RAW_MUTATIONS, RAW_PER_TARGET)


# ============================================================================ the cases
#: case id -> diagnosis of a known bug (the case is xfail(strict=True) until smcdp/ is fixed).  Empty: what this file
#: found on 2026-12-04 is fixed, with a test each -- the last reply's stop bit cleared left Trent and the party waiting
#: for each other until the deadline; a finite 1e308 in a final block made x zero; the key ceremony's refusals were
#: INTERNAL, a party whose view of an opening was changed took another branch than the others alone (each waited
#: for the other until the deadline: now the echo after each opening, keygen._Ceremony.agree), and a theta product
#: beyond its bound escaped as a ValueError.
KNOWN_BUGS: dict[str, str] = {}


def _cases():
    for mode, (_build, targets) in MODES.items():
        for sender, receiver, tag, mtype in targets:
            for mut in sample_mutations(f"{mode}|{sender}>{receiver}|{tag}", mtype):
                cid = f"{mode}-{sender}>{receiver}-{tag}-{mut.name}"
                marks = [pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[cid])] if cid in KNOWN_BUGS else []
                yield pytest.param(mode, sender, receiver, tag, mtype, mut, id=cid, marks=marks)


CASES = list(_cases())


def run_session(mode: str, rewrite: Callable | None = None):
    """Run ``mode``'s session; ``rewrite(sender, to, tag, type_url, data) -> data`` on every message.
    Returns (network, results or the exception)."""
    roles, coros = MODES[mode][0]()
    net = InMemoryNetwork(roles, timeout=4 * CASE_SECONDS)  # the time limit, not the deadline, ends a hang
    if rewrite is not None:
        for role, ch in net.channels.items():

            async def wrapped(to_role, tag, type_url, data, original=ch._transmit, role=role):
                await original(to_role, tag, type_url, rewrite(role, to_role, tag, type_url, data))

            ch._transmit = wrapped
    try:
        return net, asyncio.run(net.run(coros))
    except Exception as exc:  # noqa: BLE001 - the oracle looks at it
        return net, exc


def _where(exc: BaseException) -> str:
    """file:line of the innermost frame in smcdp/ the exception passed through."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/smcdp/" in f.filename]
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.filename[f.filename.rfind('/smcdp/') + 1 :]}:{f.lineno} ({f.name})"


#: the gRPC status codes a refused message may carry (grpc.StatusCode's names but OK, UNKNOWN and INTERNAL)
ALLOWED_CODES = {
    "CANCELLED",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
}


def verdict(outcome) -> str | None:
    """None if the outcome is allowed, else what is wrong with it."""
    if not isinstance(outcome, BaseException):
        return None
    if isinstance(outcome, SmcdpError) and outcome.code in ALLOWED_CODES:
        return None
    if "took more than" in str(outcome) and isinstance(outcome, AssertionError):
        return f"hang: {outcome}"
    kind = f"SmcdpError with code {outcome.code}" if isinstance(outcome, SmcdpError) else "not an SmcdpError"
    return f"{kind}: {type(outcome).__name__}: {str(outcome)[:300]} at {_where(outcome)}"


@pytest.mark.parametrize("mode", list(MODES))
def test_clean_session_sends_every_target(mode):
    """Without mutation every mode completes and sends each target it fuzzes (else a case fuzzes nothing)."""
    with time_limit(4 * CASE_SECONDS, f"clean {mode} session"):
        net, res = run_session(mode)
    assert not isinstance(res, BaseException), verdict(res) or res
    sent = {(s, r, t) for s, r, t, _tn, _d in net.transcript}
    types = {(s, r, t): tn for s, r, t, tn, _d in net.transcript}
    for sender, receiver, tag, mtype in MODES[mode][1]:
        assert (sender, receiver, tag) in sent, (sender, receiver, tag)
        assert types[(sender, receiver, tag)] == mtype.DESCRIPTOR.full_name, (tag, types[(sender, receiver, tag)])


@pytest.mark.parametrize("mode,sender,receiver,tag,mtype,mutation", CASES)
def test_mutated_message_is_refused_cleanly_or_tolerated(mode, sender, receiver, tag, mtype, mutation):
    rng = random.Random(f"{mode}|{sender}>{receiver}|{tag}|{mutation.name}")
    hit: list[tuple[bytes, bytes]] = []

    def rewrite(frm, to, t, type_url, data):
        if (frm, to, t) != (sender, receiver, tag) or hit:
            return data
        assert type_url == mtype.DESCRIPTOR.full_name, type_url
        new = mutation.apply(data, mtype, rng)
        hit.append((data, new))
        return new

    try:
        with time_limit(CASE_SECONDS, f"{mode} session with {tag} from {sender} to {receiver} {mutation.name}"):
            _net, outcome = run_session(mode, rewrite)
    except AssertionError as exc:  # the time limit fired outside the session's tasks
        outcome = exc
    if isinstance(outcome, NotApplicable):
        pytest.skip(f"not applicable: {outcome}")
    assert hit, f"{tag} from {sender} to {receiver} was never sent"
    if hit[0][0] == hit[0][1] and not isinstance(outcome, BaseException):
        return  # the mutation left the bytes as they were (a field already at that value)
    problem = verdict(outcome)
    assert problem is None, problem


def test_known_bugs_name_existing_cases():
    ids = {c.id for c in CASES}
    assert not set(KNOWN_BUGS) - ids, sorted(set(KNOWN_BUGS) - ids)


def test_trent_never_returns_a_zero_x_for_a_huge_final_block():
    """Beyond the oracle above (which lets any completed session pass): one data party's final/x with a finite
    1e308 in it must be refused or still give a unit vector x, never Trent's silent x = 0 (nothing corrupted)."""

    def rewrite(frm, to, tag, type_url, data):
        if (frm, to, tag) != ("party1", "trent", "final/x/0"):
            return data
        m = pb.Matrix.FromString(data)
        m.values[0] = 1e308
        return m.SerializeToString()

    with time_limit(4 * CASE_SECONDS, "pi-exact session with a huge final/x"):
        _net, res = run_session("pi-exact", rewrite)
    if isinstance(res, BaseException):
        assert verdict(res) is None, verdict(res)
    else:
        x = np.asarray(res["trent"].x)
        assert np.all(np.isfinite(x)) and abs(np.linalg.norm(x) - 1) < 1e-9, x


@pytest.mark.parametrize(
    "mode,receiver,tag", [("pi-exact", "party2", "reply/6"), ("pi-group-exact", "party1", "reply/8")]
)
def test_a_party_that_missed_the_last_stop_bit_ends_the_session_at_once(mode, receiver, tag):
    """The last reply's stop bit cleared on its way to one party: it begins another round while Trent waits for its
    final block.  Both used to wait for each other until the session's deadline, which then named the party; Trent
    now sees the round's first message come instead of the final block and fails the session at once."""

    def rewrite(frm, to, t, type_url, data):
        if (frm, to, t) != ("trent", receiver, tag):
            return data
        m = pb.PowerIterationReply.FromString(data)
        assert m.stop  # the case's premise: this is the last reply
        m.stop = False
        return m.SerializeToString()

    with time_limit(CASE_SECONDS, f"{mode} session with {tag}'s stop bit cleared"):
        _net, res = run_session(mode, rewrite)
    assert isinstance(res, SmcdpError) and res.code == "INVALID_ARGUMENT", verdict(res) or res
    assert "did not take the stop bit" in str(res) and receiver in str(res), res


def test_key_ceremony_refuses_a_theta_product_beyond_its_bound():
    """n = 2: party2 answers party1's step-6 product (kg/1/theta/ret) with an encryption, under party1's ephemeral big
    key, of 2^(d_bits + 8) (below the key's third: it decrypts without overflow).  The fuzz's changed ciphertexts
    there decrypt to random values -- an overflow, a w <= 0 (both parties retry: fine) or one this large, which
    escaped as a ValueError in one run of three; this is that case made deterministic.  It must be refused with a
    non-INTERNAL SmcdpError (or tolerated), never a builtin exception."""
    from smcdp.crypto.codec import from_bigints
    from smcdp.crypto.paillier import PublicKey

    params = kg.KeygenParams(parties=2, threshold=1, key_bits=256, allow_insecure=True).validate()
    keys: dict[str, int] = {}

    def rewrite(frm, to, tag, type_url, data):
        if tag == "kg/0/ephemeral-keys":
            ns = from_bigints(pb.BigInts.FromString(data), count=2, bound_bits=1 << 16, what=tag, nonnegative=True)
            keys["big"] = ns[1]
        if (frm, to, tag) != ("party2", "party1", "kg/1/theta/ret"):
            return data
        pk = PublicKey(keys["big"])
        value = 1 << (params.d_bits + 8)
        assert 3 * value < pk.n  # decrypts to it: no overflow
        return pb.Blobs(values=[int_to_bytes(int(pk.raw_encrypt(value, obfuscate=False)))]).SerializeToString()

    with time_limit(4 * CASE_SECONDS, "kg-2 session with a huge theta product"):
        _net, res = run_session("kg-2", rewrite)
    assert verdict(res) is None, verdict(res)
