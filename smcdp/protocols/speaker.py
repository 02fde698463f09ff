"""Privacy-preserving speaker verification and identification with GMMs (seed 003 §5.2.2; Pathak & Raj,
IEEE TASLP 2013) between Alice (the user's device: the utterance's features, the Paillier private key) and
Bob (the service: a GMM-UBM, the enrolled speakers' MAP-adapted GMMs and the threshold θ).

A GMM is a one-state HMM with a mixture emission, so the log-likelihood of an utterance with independent
frames, Σ_t log p(x_t | λ), is what the secure forward algorithm (:mod:`smcdp.protocols.secure_forward`)
returns for it: per frame one LOGSUM over the mixture components of Gaussian log-likelihoods computed
as quadratic forms of Alice's encrypted features, and for the frame sum nothing more (a state with one
predecessor costs no round trip) -- all frames of a block in one round.  Scores are on the grid 2^−F
(F = ``log_frac_bits``).

**Verification** (``speaker-verify``), for the claimed speaker s (a public parameter: the user says who
she is):

1. Alice makes a Paillier key pair ξ and sends the public key.
2. Alice and Bob run the secure forward algorithm on the two models (λ_s, λ_UBM); Bob obtains
   ``ξ(ℓ_s)`` and ``ξ(ℓ_UBM)``, ℓ = Σ_t log p(x_t | λ) on the grid.
3. Bob forms ``ξ(D) = ξ(ℓ_s − ℓ_UBM − T·fx(θ))`` (T, the number of frames, is public), draws r uniform
   in [0, 2^{L+κ}) (|D| < 2^L, κ = ``stat_bits``) and sends ``ξ(D + r)``, re-randomised.
4. Alice decrypts x = D + r (statistically hiding D); Bob (y = r) and Alice (x) run the DGK comparison
   (:mod:`smcdp.primitives.comparison`, Alice holds the DGK key: a crafted key would read the other side's
   input whole, and hers is the input to protect): ``[y ≤ x] = [D ≥ 0]``, the accept bit, goes only to the
   designated party (``output``: bob by default, or alice).  Accept ⇔ D ≥ 0 ⇔ the average frame
   log-likelihood ratio ≥ θ.

With ``ubm = "shared"`` (bob's policy must ``allow_reveal = ["ubm"]``) Bob first sends Alice his UBM
(step 0); step 2 runs on λ_s alone, Bob's rows being its differences from the UBM's component forms, which
Alice adds to his masked rows herself (the forward algorithm's *known part*); step 3 sends
``ξ(ℓ_s − T·fx(θ) + r)`` and in step 4 Alice takes her ℓ_UBM, computed in the clear, off what she decrypts.

**Identification** (``speaker-identify``), K enrolled speakers padded to the public bound
``max_speakers`` = K̄ with dummy models:

1. As above.
2. The secure forward algorithm on the K̄ + 1 models (padded speakers, UBM): Bob obtains ``ξ(ℓ_k)``
   and ``ξ(ℓ_UBM)``.
3. Candidates j = 0 … K̄: "none of them" (j = 0, D_0 = 0) and the speakers (j = k + 1,
   D_j = ℓ_k − ℓ_UBM − T·fx(θ); a dummy gets D_j = −2^L, below every real score).  Ties are broken by
   distinct offsets, ``v_j = (K̄ + 1)·D_j + t_j`` (a speaker beats "none" at D = 0, a lower index beats a
   higher one), so all v_j differ.  Bob draws r_j uniform in [0, 2^{L'+κ}) (|v| < 2^{L'}) and sends
   ``ξ(v_j + r_j)``; with his own Paillier key ζ (public key first) he sends ``ζ(r_j)``.
4. Alice decrypts a_j = v_j + r_j, draws a secret permutation π and s_j uniform in [0, 2^{L'+2κ}) and
   returns ``ζ(r_{π(j)} + s_j)`` in π's order; she keeps x_j = a_{π(j)} + s_j, Bob decrypts
   y_j = r_{π(j)} + s_j: v_{π(j)} = x_j − y_j, shared in an order Bob does not know.
5. A tournament over slots (the positions at first), level by level: a batch of DGK comparisons of each
   match's two slots (Alice's key), ``[y_a − y_b ≤ x_a − x_b] = [v_b ≤ v_a]`` to Bob, who takes
   ``z = [v_a < v_b]`` from it; Bob sends ``ζ(z)``, Alice
   returns ``ζ(x_a + z·(x_b − x_a) + s)`` with a fresh s (her share of the winner: −s; Bob's: y_w − X).
   Bob knows which position won each match; the last one's is w.
6. Output to bob: Alice sends, by 1-out-of-(K̄+1) oblivious transfer, the candidate index π(j) of every
   position j; Bob chooses w and learns π(w): a speaker or "none".  Output to alice: Bob sends w, Alice
   computes c = π(w) and obtains the candidate's name (empty for "none") from Bob by 1-out-of-(K̄+1) OT.

docs/protocols/speaker.md says exactly who learns what and proves the fixed-point bound.
"""

from __future__ import annotations

import hashlib
import math
import random
import struct
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Self

import gmpy2
import numpy as np
import numpy.typing as npt
from gmpy2 import mpz

from smcdp.crypto import dgk
from smcdp.crypto.codec import (
    bigints,
    ciphertext_from_proto,
    ciphertext_to_proto,
    from_bigints,
    peer_public_key,
    public_key_to_proto,
)
from smcdp.crypto.encoding import UNPACKED
from smcdp.crypto.naor_pinkas import MODP2048
from smcdp.crypto.paillier import PrivateKey, PublicKey, check_key_kind, generate_keypair
from smcdp.crypto.threads import CryptoThreads
from smcdp.crypto.vector import EncryptedVector
from smcdp.crypto.zkp import (
    ANY_KEY_CHUNKS,
    bit_proof_any_key_size,
    modulus_proof_size,
    prove_bit_any_key,
    verify_bit_any_key,
)
from smcdp.errors import InputRejected, InvalidMessage
from smcdp.net.channel import Channel
from smcdp.net.limits import TrafficEnvelope, ciphertext_vector_bytes, public_key_bytes
from smcdp.primitives.comparison import compare_holder_a, compare_holder_b
from smcdp.primitives.ot import ot_choose, ot_send
from smcdp.primitives.owned_key import recv_owned_key, send_owned_key
from smcdp.primitives.rng import (
    Randomness,
    SeedLike,
    owned_session_key,
    prepare_session_keypair,
    protocol_rng,
)
from smcdp.protocols.secure_forward import (
    MAX_FRAMES,
    SCORE_BOUND_NATS,
    ForwardAlice,
    ForwardBob,
    ForwardParams,
    clip_frames,
    forward_traffic,
    known_bounds,
    known_coefficients,
    known_rows,
    model_coefficients,
)
from smcdp.speech.forward import products
from smcdp.speech.frontend import CMN_MODES
from smcdp.speech.speaker import DiagGMM, SpeakerModels, check_name, map_adapt_means
from smcdp.v1 import messages_pb2 as pb

ALICE, BOB = "alice", "bob"
OUTPUTS = (BOB, ALICE)
#: speaker-verify's ``ubm``: "private" (only bob holds the UBM; the secure forward algorithm runs on the
#: speaker model and the UBM) or "shared" (bob sends alice his UBM, which she then scores in the clear and
#: the secure forward algorithm runs on the speaker model's difference from it alone: half the work;
#: bob's policy must allow_reveal "ubm")
UBM_MODES = ("private", "shared")
#: public bound (bits, nats) on |D| = |ℓ_s − ℓ_UBM − T·θ|: the forward's scores lie below 2^40 nats each
#: (Alice refuses more), |θ| ≤ 2^20 and T ≤ 10^5 < 2^17, so |D| < 2^41 + 2^37 < 2^42
SCORE_BOUND_BITS = 42
MAX_THRESHOLD_NATS = float(1 << 20)
MAX_SPEAKERS_BOUND = 64
#: the largest candidate label Bob transfers (a speaker name, ≤ 64 characters of UTF-8)
MAX_NAME_BYTES = 256


# =============================================================================== parameters
@dataclass
class SpeakerParams(ForwardParams):
    """Public parameters shared by both speaker protocols (and the secure forward algorithm's)."""

    protocol_name = "speaker"

    key_bits: int = 2048
    #: alice's key ξ: "standard", or "subgroup" (decryption about 4x cheaper; both parties' policies must
    #: allow it: docs/crypto.md, "Subgroup keys")
    key_kind: str = "standard"
    dgk_bits: int = 2048  # Alice's DGK key for the comparisons
    dgk_t: int = 224
    stat_bits: int = 40  # κ: statistical hiding of every masked score
    #: the party that learns the result (the accept bit, the speaker): bob (the service, default) or alice
    output: str = BOB
    #: cepstral mean normalisation of Alice's front end for a WAV input (must match Bob's models)
    cmn: str = "utterance"
    # the forward algorithm's bounds for GMMs: one state; 64 components of 39 MFCCs; 3 s of frames
    max_states: int = 1
    max_mixtures: int = 64
    max_features: int = 39
    max_models: int = 0  # derived: 2 (verify) or max_speakers + 1 (identify); 0 = derive it

    def models_needed(self) -> int:  # pragma: no cover - both protocols override
        raise NotImplementedError

    def __post_init__(self) -> None:
        if self.max_models == 0:
            self.max_models = self.models_needed()

    def validate(self) -> Self:
        super().validate()
        if isinstance(self.key_bits, bool) or not isinstance(self.key_bits, int) or not 256 <= self.key_bits <= 16384:
            raise InvalidMessage(
                f"{self.protocol_name} parameter key_bits={self.key_bits!r} must be an integer in [256, 16384]"
            )
        check_key_kind(self.key_kind, f"{self.protocol_name} parameter")
        for name, lo, hi in (("dgk_bits", 256, 8192), ("dgk_t", 16, 1024), ("stat_bits", 20, 128)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise InvalidMessage(f"{self.protocol_name} parameter {name}={v!r} must be an integer in [{lo}, {hi}]")
        if self.output not in OUTPUTS:
            raise InvalidMessage(
                f"{self.protocol_name} parameter output={self.output!r} must be one of {list(OUTPUTS)}"
            )
        if self.cmn not in CMN_MODES:
            raise InvalidMessage(f"{self.protocol_name} parameter cmn={self.cmn!r} must be one of {list(CMN_MODES)}")
        if self.max_states != 1:
            raise InvalidMessage(f"{self.protocol_name}: max_states must be 1 (a GMM is a one-state model)")
        if self.max_models != self.models_needed():
            raise InvalidMessage(
                f"{self.protocol_name}: max_models is {self.models_needed()} here (derived; leave it out)"
            )
        if self.frames_per_round != 1:
            raise InvalidMessage(
                f"{self.protocol_name}: frames_per_round must be 1 (one-state models need no induction round trips)"
            )
        return self

    def forward(self) -> ForwardParams:
        names = {f.name for f in fields(ForwardParams)}
        return ForwardParams(**{k: v for k, v in asdict(self).items() if k in names})

    @property
    def score_bits(self) -> int:
        """L: |D| < 2^L on the grid 2^−F."""
        return SCORE_BOUND_BITS + self.log_frac_bits

    def _forward_envelope(
        self, role: str, extra_alice: list[tuple[int, ...]], extra_bob: list[tuple[int, ...]]
    ) -> TrafficEnvelope:
        source = (
            f"{self.protocol_name} parameters ({self.max_frames} frames, {self.max_models} GMMs of "
            f"{self.max_mixtures} components, {self.max_features} features, {self.key_bits}-bit key)"
        )
        to_alice, to_bob = forward_traffic(self.forward(), self.key_bits, "gmm-diag")
        msgs = to_alice + extra_alice if role == ALICE else to_bob + extra_bob
        return TrafficEnvelope.from_messages(msgs, source)

    def _dgk_batch(self, count: int, ell: int) -> int:
        """The largest message of a batch of ``count`` DGK comparisons of ``ell`` bits (either side)."""
        ct = self.dgk_bits // 8 + 8
        return count * (ell + 1) * ct + 256

    def _dgk_key(self) -> int:
        return 4 * (self.dgk_bits // 8 + 8) + 64


@dataclass
class VerifyParams(SpeakerParams):
    """Public parameters of a speaker-verification session."""

    protocol_name = "speaker-verify"
    #: the claimed identity (public: the user names who she is)
    claim: str = ""
    #: where the UBM's part of the score is computed (:data:`UBM_MODES`): "private" keeps the UBM bob's,
    #: "shared" shows it to alice (bob's policy decides: allow_reveal = ["ubm"])
    ubm: str = "private"

    def models_needed(self) -> int:
        return 1 if self.ubm == "shared" else 2

    def validate(self) -> VerifyParams:
        if self.ubm not in UBM_MODES:
            raise InvalidMessage(f"speaker-verify parameter ubm={self.ubm!r} must be one of {list(UBM_MODES)}")
        super().validate()
        check_name(self.claim)
        return self

    @property
    def shared_ubm(self) -> bool:
        return self.ubm == "shared"

    @property
    def ell(self) -> int:
        """DGK comparison length: x = D + r and y = r lie in (−2^L, 2^{L+κ} + 2^L)."""
        return self.score_bits + self.stat_bits + 2

    def traffic_envelope(self, role: str) -> TrafficEnvelope:
        ct1 = ciphertext_vector_bytes(1, self.key_bits)
        hdr = 64
        batch = self._dgk_batch(1, self.ell)
        ubm = [(1, ubm_message_bytes(self.max_mixtures, self.max_features))] if self.shared_ubm else []
        return self._forward_envelope(
            role,
            [(1, ct1), (1, batch), *ubm],  # sv/masked, Bob's blinded DGK ciphertexts, sv/ubm
            [(1, public_key_bytes(self.key_bits)), (1, hdr), (1, self._dgk_key()), (1, batch), (1, hdr)],
        )  # sv/pk; Alice's DGK header, public key, encrypted bits, and the result's share


@dataclass
class IdentifyParams(SpeakerParams):
    """Public parameters of a speaker-identification session."""

    protocol_name = "speaker-identify"
    #: public bound K̄ on the enrolled speakers: Bob pads to it, so their number stays his
    max_speakers: int = 16

    def models_needed(self) -> int:
        k = self.max_speakers
        return k + 1 if isinstance(k, int) and not isinstance(k, bool) else 0

    def validate(self) -> IdentifyParams:
        k = self.max_speakers
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_SPEAKERS_BOUND:
            raise InvalidMessage(
                f"speaker-identify parameter max_speakers={k!r} must be an integer in [1, {MAX_SPEAKERS_BOUND}]"
            )
        super().validate()
        return self

    @property
    def candidates(self) -> int:
        return self.max_speakers + 1

    @property
    def value_bits(self) -> int:
        """L': |v_j| < 2^{L'} for v_j = (K̄ + 1)·D_j + t_j."""
        return self.score_bits + math.ceil(math.log2(self.candidates)) + 1

    @property
    def ell(self) -> int:
        """DGK comparison length: |x_p − x_q|, |y_p − y_q| < 2^{L'+2κ+2}."""
        return self.value_bits + 2 * self.stat_bits + 3

    def levels(self) -> list[int]:
        """Step 5's tournament: the matches of each level (⌊slots/2⌋ for the slots left, K̄ + 1 at first)."""
        out, slots = [], self.candidates
        while slots > 1:
            out.append(slots // 2)
            slots -= slots // 2
        return out

    def traffic_envelope(self, role: str) -> TrafficEnvelope:
        n = self.candidates
        ctv = ciphertext_vector_bytes(n, self.key_bits)
        group = MODP2048.byte_length + 32
        label_ot = max(2, n) * (MAX_NAME_BYTES + 6) + 16
        to_alice: list[tuple[int, ...]] = [(1, public_key_bytes(self.key_bits)), (1, modulus_proof_size(self.key_bits))]
        to_alice += [(2, ctv)]
        to_bob: list[tuple[int, ...]] = [(1, public_key_bytes(self.key_bits)), (1, ctv)]
        for m in self.levels():  # per level: Alice's DGK header, key and bits and her shares of the results (Ints
            # of m bits); Bob's blinded ciphertexts, his ζ(z) and its bit proofs (4·8 integers below n a match); back
            batch, picks = self._dgk_batch(m, self.ell), ciphertext_vector_bytes(m, self.key_bits)
            proofs = m * bit_proof_any_key_size(self.key_bits)
            to_alice += [(1, batch), (1, picks), (1, proofs)]
            to_bob += [(1, 64), (1, self._dgk_key()), (1, batch), (1, 2 * m + 32), (1, picks)]
        return self._forward_envelope(
            role,
            to_alice + [(1, group), (1, label_ot), (1, 64)],
            to_bob + [(1, group), (1, 64), (1, label_ot)],
        )


# =============================================================================== results
@dataclass
class VerifyResult:
    """A role's result: ``accept`` is None at the party that does not learn the decision; ``prepare_next``
    (Alice's): what her next session's key and obfuscators are made for (:func:`prepare_alice`)."""

    accept: bool | None
    frames: int = 0
    timings: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, object] = field(default_factory=dict)
    prepare_next: AliceSizes | None = None

    @property
    def decision(self) -> str | None:
        return None if self.accept is None else ("accept" if self.accept else "reject")


@dataclass
class IdentifyResult:
    """A role's result: ``learned`` says whether this party learned the outcome; ``speaker`` is the name,
    or None for "none of them" (and None, with ``learned`` False, at the other party)."""

    learned: bool
    speaker: str | None = None
    frames: int = 0
    timings: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, object] = field(default_factory=dict)
    prepare_next: AliceSizes | None = None


# =============================================================================== shared pieces
def ubm_message_bytes(components: int, dim: int) -> int:
    """The largest ``sv/ubm`` (a Matrix of C rows [w_c, μ_c, σ²_c]): 8 bytes a double, and framing."""
    return 8 * components * (2 * dim + 1) + 64


def ubm_to_proto(ubm: DiagGMM) -> pb.Matrix:
    rows = np.hstack([ubm.weights[:, None], ubm.means, ubm.covars])
    return pb.Matrix(rows=rows.shape[0], cols=rows.shape[1], values=rows.ravel().tolist())


def ubm_from_proto(msg: pb.Matrix, params: SpeakerParams, dim: int, what: str, frames: int) -> DiagGMM:
    """Bob's UBM as alice receives it: C ≤ max_mixtures rows of 2d + 1 finite values for her d features,
    a valid GMM (weights summing to 1, positive variances) whose component forms stay within Alice's later
    checks for every utterance of ``frames`` frames inside the agreed box (:func:`check_shared_ubm`), else
    InvalidMessage naming the message."""
    ubm = _ubm_rows(msg, params, dim, what)
    check_shared_ubm(ubm, params, frames, what)
    return ubm


def check_shared_ubm(ubm: DiagGMM, params: SpeakerParams, frames: int, what: str) -> None:
    """Refuse a shared UBM (InvalidMessage naming ``what``) whose component forms could, for *some* utterance
    of ``frames`` frames with |x_i| < 2^feature_bits, reach what Alice refuses later: a form of 2^41 nats
    (:data:`SCORE_BOUND_NATS`, when she adds it to Bob's rows) or a log-likelihood of 2^40 (when she takes
    ℓ_UBM off).  Decided from public values only (the UBM, the box, the frame count Bob sees anyway), so a
    UBM with a tiny variance cannot make Alice's later refusals depend on where her features lie."""
    form, per_frame = _log_density_bounds(ubm, params.feature_bits)
    if not _within_range(form, per_frame, frames):
        raise InvalidMessage(
            f"{what}: a component's log-density can reach {form:.3g} nats inside the agreed feature "
            f"bound 2^{params.feature_bits} ({frames} frames: {frames * per_frame:.3g}); the shared UBM must keep "
            "each below 2^41 and the utterance's total below 2^40 (floor its variances)"
        )


def _log_density_bounds(gmm: DiagGMM, feature_bits: int) -> tuple[float, float]:
    """(B, b) for a GMM: B the largest |component form| any frame inside the box |x_i| < 2^feature_bits can give,
    b ≥ |log p(x)| for every such frame (B + max|log w_c| + log C: log p lies between the best component's
    log w_c + form_c and that plus log C)."""
    B = float(np.max(known_bounds(SpeakerModels.hmm_set([gmm], ["m"]), feature_bits)))
    live = gmm.weights > 0
    log_w = float(np.max(np.abs(np.log(gmm.weights[live])))) if live.any() else math.inf
    return B, B + log_w + math.log(gmm.n_components)


def _within_range(form: float, per_frame: float, frames: int) -> bool:
    """Whether forms below ``form`` and log-likelihoods of ``frames`` frames below ``per_frame`` each stay within
    what the forward algorithm's later checks refuse (2^41 a form, 2^40 an utterance: with a margin of 2^-20 for
    the fixed point's error, so that a computed score never reaches the check)."""
    return form < SCORE_BOUND_NATS and frames * per_frame * (1 + 2.0**-20) < float(1 << 40)


def models_range(gmms: Iterable[DiagGMM], feature_bits: int) -> tuple[float, float]:
    """(B, b) of :func:`_log_density_bounds` over several models: the largest of each (the range check is
    monotone in both, so the largest pass iff every model does)."""
    bounds = [_log_density_bounds(g, feature_bits) for g in gmms]
    return max(b[0] for b in bounds), max(b[1] for b in bounds)


def check_models_range(bound: tuple[float, float], params: SpeakerParams) -> None:
    """Bob, before any message: refuse (InputRejected) if any of his models -- every one he holds, not only those a
    session scores, so that the refusal says nothing of a claim; ``bound`` is :func:`models_range` over them --
    could give a log-likelihood of 2^40 nats (or a form of 2^41) for *some* utterance of ``max_frames`` frames
    inside the agreed box.  Alice refuses a score beyond that range, but she sees it masked (ℓ + ω, |ω| < 2^40):
    whether her check fired depended on where her features lay and on Bob's mask, a bit of her utterance for Bob
    (a review).  With this, no utterance inside the box reaches her check unless Bob deviates.  Public values
    only (Bob's models, the box, max_frames)."""
    form, per_frame = bound
    if not _within_range(form, per_frame, params.max_frames):
        raise InputRejected(
            "a speaker model's log-likelihood could reach 2^40 nats for an utterance of max_frames frames inside "
            "the agreed feature bound (floor the models' variances, or propose a smaller max_frames or "
            "feature_bits)",
            f"a component's log-density up to {form:.3g} nats, {params.max_frames} frames: "
            f"{params.max_frames * per_frame:.3g}",
        )


def _ubm_rows(msg: pb.Matrix, params: SpeakerParams, dim: int, what: str) -> DiagGMM:
    C, cols = int(msg.rows), int(msg.cols)
    if not 1 <= C <= params.max_mixtures or cols != 2 * dim + 1 or len(msg.values) != C * cols:
        raise InvalidMessage(
            f"{what} must be a UBM of 1..{params.max_mixtures} components over the utterance's {dim} features "
            f"({2 * dim + 1} values a row), got {C} x {cols} with {len(msg.values)} values"
        )
    rows = np.asarray(msg.values, dtype=np.float64).reshape(C, cols)
    try:
        return DiagGMM(rows[:, 0].copy(), rows[:, 1 : dim + 1].copy(), rows[:, dim + 1 :].copy())
    except InvalidMessage as exc:
        raise InvalidMessage(f"{what}: {exc}") from None


def _frames(X: npt.ArrayLike, params: SpeakerParams) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or not 1 <= X.shape[0] <= min(params.max_frames, MAX_FRAMES):
        raise InputRejected(
            f"the utterance must be a T x d feature matrix with 1..{params.max_frames} frames", f"shape {X.shape}"
        )
    if not np.all(np.isfinite(X)):
        raise InputRejected("the utterance must not contain NaN or infinite values", "")
    # the forward algorithm's projection into the agreed box, here, before anything else sees the frames: the
    # shared UBM's log-likelihood scored raw frames while the speaker's was of clipped ones -- one value beyond
    # the box made D anything (2,000 nats a frame: "accept" at any threshold) or the UBM's check refuse
    return clip_frames(X, params.feature_bits, warn_from=0)[0]


def ubm_loglik_grid(ubm: DiagGMM, X: np.ndarray, F: int) -> int:
    """fx(ℓ_UBM): Alice's log-likelihood of her frames under the shared UBM, computed in the clear (float64)
    from the same component forms she adds to Bob's rows (:func:`known_rows`), rounded to the grid 2^−F.
    Refused beyond 2^40 nats (as the forward algorithm refuses such a score)."""
    from scipy.special import logsumexp  # lazily: scipy's import is a party's start-up cost

    ll = float(logsumexp(_weighted_forms(ubm, X), axis=1).sum())
    if not math.isfinite(ll) or abs(ll) >= float(1 << 40):
        raise InputRejected("the utterance's log-likelihood under the UBM must be finite and below 2^40 nats", "")
    return round(ll * (1 << F))


def _weighted_forms(ubm: DiagGMM, X: np.ndarray) -> np.ndarray:
    """q_c(z_t) + log w_c of every frame and component of the UBM, (T, C): the forms Alice adds to Bob's rows
    (:func:`known_rows`) with the weights' logs (−inf for a zero weight)."""
    with np.errstate(divide="ignore"):
        logw = np.log(ubm.weights)
    return known_rows(SpeakerModels.hmm_set([ubm], ["ubm"]))(X) + logw[None, :]


def _threshold_int(threshold: float, F: int) -> int:
    if not math.isfinite(threshold) or abs(threshold) > MAX_THRESHOLD_NATS:
        raise InputRejected(
            f"the threshold must be finite and at most {MAX_THRESHOLD_NATS:g} nats per frame", repr(threshold)
        )
    return round(threshold * (1 << F))


async def _alice_forward(
    ch: Channel,
    X: np.ndarray,
    params: SpeakerParams,
    tag: str,
    seed: SeedLike,
    bob: str,
    allow_insecure_keys: bool,
    private_key: PrivateKey | None,
    known: DiagGMM | None = None,
) -> tuple[PrivateKey, dict[str, Any], dict[str, Any], int, AliceSizes]:
    """Step 1 and Alice's half of step 2: key, public key, secure forward.  Returns (sk, offline timings,
    online timings with the clocks' starts, frames, what the next session is to be prepared for).
    ``known``: a GMM of Bob's shape whose component forms Alice adds herself (the shared UBM)."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    private_key, obfuscators = owned_session_key(
        seed,
        params.protocol_name,
        ch.role,
        params.key_bits,
        params.key_kind,
        private_key=private_key,
        allow_insecure=allow_insecure_keys,
    )
    keygen = time.perf_counter() - t0
    await ch.send(bob, f"{tag}/pk", public_key_to_proto(private_key.public_key))
    role = ForwardAlice(
        ch,
        params.forward(),
        private_key=private_key,
        bob=bob,
        tag=f"{tag}/fw",
        seed=seed,
        labels=(params.protocol_name, "forward"),
        obfuscators=obfuscators,
        known=None if known is None else known_rows(SpeakerModels.hmm_set([known], ["ubm"])),
    )
    try:
        await role.prepare(len(X))
        sizes = AliceSizes(params.key_bits, max(1.0, float(role.offline["obfuscator_count"]) / len(X)), params.key_kind)
        offline = {
            "keygen": keygen,
            "prepared": obfuscators is not None,
            **role.offline,
            "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0,
        }
        w_on, c_on = time.perf_counter(), time.process_time()
        fw = await role.run(X)
        online = {"forward": dict(role.online), "w0": w_on, "c0": c_on}
    finally:
        role.close()
    return private_key, offline, online, fw.frames, sizes


#: frames a padding speaker is MAP-adapted to (docs/protocols/speaker.md, identification, step 2)
PADDING_FRAMES = 1000
#: speaker-verify, a claim of no enrolled speaker: Bob sends ξ(r − this many nats) for ξ(D + r), so D = −2^41
#: (with the UBM shared Alice takes |ℓ_UBM| < 2^40 off: D in (−3·2^40, −2^40)): reject for certain, |D| < 2^42
UNENROLLED_SHIFT_NATS = 1 << 41


def padding_speakers(models: SpeakerModels, count: int, rng: random.Random) -> list[DiagGMM]:
    """``count`` padding speakers for identification, each the UBM's means MAP-adapted (as enrolment adapts them) to
    PADDING_FRAMES frames drawn from an enrolled speaker's model picked at random (from the UBM when none is
    enrolled): every component's mean moves, so Bob's emission rows cost for a dummy what they cost for a speaker,
    and no dummy repeats another model.  From Bob's keyed stream ``rng`` (a replay makes the same ones)."""
    gen = np.random.default_rng(rng.getrandbits(128))
    K = models.n_speakers
    out = []
    for _ in range(count):
        src = models.speaker(int(gen.integers(K))) if K else models.ubm
        w = np.asarray(src.weights, dtype=np.float64)
        comp = gen.choice(w.size, size=PADDING_FRAMES, p=w / w.sum())
        frames = src.means[comp] + gen.standard_normal((PADDING_FRAMES, src.means.shape[1])) * np.sqrt(src.covars[comp])
        out.append(models.ubm.with_means(map_adapt_means(models.ubm, frames)))
    return out


def warm_padding() -> None:
    """Import what :func:`padding_speakers` needs (scipy's ``logsumexp``, through MAP adaptation) while a Bob is
    idle: speaker-verify draws a padding speaker in every session, and a party's first session would pay it."""
    from scipy.special import logsumexp  # noqa: F401 - imported for its side effect: the module is loaded


def _coefficient_bits(models: SpeakerModels, gmms: list[DiagGMM], shared: bool, fw: ForwardParams) -> int:
    """``coef_bits = "auto"`` for Bob's rows of ``gmms`` (with the UBM beside them, or their differences from it
    when it is shared)."""
    labels = [str(i) for i in range(len(gmms) + 1)]
    if shared:
        known = models.hmm_set([models.ubm] * len(gmms), labels[:-1])
        return model_coefficients(models.hmm_set(gmms, labels[:-1]), fw, known=known)[1]
    return model_coefficients(models.hmm_set([*gmms, models.ubm], labels), fw)[1]


class EnrolledBits:
    """The coefficient bits of every enrolled speaker and the UBM, kept per model set (by a digest of the models)
    and UBM mode: a Bob loads his models file for each session, and forming a thousand speakers' rows takes
    seconds.  The speaker-verify plug-in holds one for its party process (a protocol module keeps no state);
    the last ``kept`` model sets are kept."""

    def __init__(self, kept: int = 8) -> None:
        self._bits: dict[tuple[bytes, bool], int] = {}
        self._ranges: dict[tuple[bytes, int], tuple[float, float]] = {}
        self._kept = kept

    @staticmethod
    def _digest(models: SpeakerModels) -> bytes:
        h = hashlib.blake2b(digest_size=32)
        for a in (models.ubm.weights, models.ubm.means, models.ubm.covars, models.means):
            arr = np.ascontiguousarray(a, dtype=np.float64)
            h.update(repr(arr.shape).encode())
            h.update(arr.tobytes())
        return h.digest()

    def _keep(self, table: dict[Any, Any], key: tuple[Any, ...], value: Any) -> None:
        while len(table) >= self._kept:
            table.pop(next(iter(table)), None)
        table[key] = value

    def __call__(self, models: SpeakerModels, shared: bool, fw: ForwardParams) -> int:
        key = (self._digest(models), shared)
        bits = self._bits.get(key)
        if bits is None:
            bits = _coefficient_bits(models, [models.speaker(i) for i in range(models.n_speakers)], shared, fw)
            self._keep(self._bits, key, bits)
        return bits

    def ranges(self, models: SpeakerModels, feature_bits: int) -> tuple[float, float]:
        """:func:`models_range` over the UBM and every enrolled speaker (1.7 ms a model: 1.7 s at a thousand)."""
        key = (self._digest(models), feature_bits)
        bound = self._ranges.get(key)
        if bound is None:
            gmms = [models.ubm, *(models.speaker(i) for i in range(models.n_speakers))]
            bound = models_range(gmms, feature_bits)
            self._keep(self._ranges, key, bound)
        return bound


def prepare_bob(models: SpeakerModels, enrolled: EnrolledBits) -> None:
    """A Bob's idle work for his next verification (the plug-in's ``prepare_next``): the imports his padding
    speaker needs, and his enrolled speakers' coefficient bits in both UBM modes."""
    warm_padding()
    fw = VerifyParams().forward()
    for shared in (False, True):
        enrolled(models, shared, fw)
    enrolled.ranges(models, fw.feature_bits)


def _claim_free_forward(
    models: SpeakerModels, pad: DiagGMM, params: VerifyParams, enrolled: EnrolledBits
) -> ForwardParams:
    """The forward parameters Bob runs a verification with: with ``coef_bits = "auto"`` the bits his header
    shows are those of every enrolled speaker, the padding speaker and the UBM together (their differences from
    the UBM when it is shared), so they say nothing of which speaker -- or whether one -- is scored.  The
    enrolled speakers' part comes from ``enrolled`` (once per model set); the padding speaker's, a model of its
    own, is formed every session."""
    fw = params.forward()
    shared = params.shared_ubm
    auto = replace(fw, coef_bits="auto")
    bits = max(enrolled(models, shared, auto), _coefficient_bits(models, [pad], shared, auto))
    if fw.coef_bits == "auto":
        return replace(fw, coef_bits=bits)
    # a stated coef_bits: every model must fit, checked here whatever the claim (the forward checked the claimed
    # speaker's and the UBM's only, so its refusal told the claimant that a name was enrolled, or not).  "auto"
    # rounds up: beyond the stated bits it may still fit, which the exact check over all models decides.
    if bits > int(fw.coef_bits):
        every = [models.speaker(i) for i in range(models.n_speakers)] + [pad]
        _coefficient_bits(models, every, shared, fw)  # CryptoOverflow (its rule public) if one does not fit
    return fw


async def _bob_forward(
    ch: Channel,
    gmms: list[DiagGMM],
    labels: list[str],
    models: SpeakerModels,
    params: SpeakerParams,
    tag: str,
    seed: SeedLike,
    alice: str,
    allow_insecure_keys: bool,
    known: DiagGMM | None = None,
    forward: ForwardParams | None = None,
) -> tuple[PublicKey, list[mpz], dict[str, Any], dict[str, Any], int]:
    """Bob's half of steps 1-2: Alice's key, the secure forward on ``gmms``; ξ(ℓ) of every model.
    ``known``: the GMM whose component forms Alice adds herself (the shared UBM): Bob's rows are the
    differences from it."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    pk = peer_public_key(
        await ch.recv(alice, f"{tag}/pk", pb.PaillierPublicKey),
        bits=params.key_bits,
        kind=params.key_kind,
        who=alice,
        allow_insecure=allow_insecure_keys,
    )
    hmms = models.hmm_set(gmms, labels)
    role = ForwardBob(
        ch,
        hmms,
        params.forward() if forward is None else forward,
        public_key=pk,
        alice=alice,
        tag=f"{tag}/fw",
        seed=seed,
        labels=(params.protocol_name, "forward"),
        known=None if known is None else models.hmm_set([known] * len(gmms), labels),
    )
    try:
        await role.prepare()
        offline = {**role.offline, "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}
        w_on, c_on = time.perf_counter(), time.process_time()
        fw = await role.run()
        online = {"forward": dict(role.online), "w0": w_on, "c0": c_on}
        lls = list(fw.log_likelihoods.ciphertexts)
        if fw.log_likelihoods.exponent != -params.log_frac_bits or len(lls) != len(gmms):
            raise InvalidMessage("the secure forward algorithm returned scores of an unexpected shape")
    finally:
        role.close()
    return pk, lls, offline, online, fw.frames


# =============================================================================== Alice's next session, ahead
#: obfuscators per frame before any session has shown the real number: two (verify) or K̄ + 1 = 17
#: (identify) models of 64 components, whose terms the forward algorithm's spread layout packs 10 to a
#: ciphertext at 2048 bits, and a few for the products (79 per block of 20 frames) and the termination
DEFAULT_OBFUSCATORS_PER_FRAME = MappingProxyType(
    {"speaker-verify": 2 * 64 / 10 + 5, "speaker-identify": 17 * 64 / 10 + 5}
)


@dataclass(frozen=True)
class AliceSizes:
    """What Alice's next session is prepared for: the key size and obfuscators per frame of her last
    session (its result's ``prepare_next``, kept by the plug-in), or the defaults before any (None:
    :data:`DEFAULT_OBFUSCATORS_PER_FRAME`)."""

    key_bits: int = 2048
    obfuscators_per_frame: float | None = None
    key_kind: str = "standard"


def prepare_alice(
    root: Randomness,
    frames: int,
    protocol: str,
    *,
    sizes: AliceSizes = AliceSizes(),
    key_bits: int | None = None,
    allow_insecure_keys: bool = False,
) -> None:
    """Alice's offline phase for a session of ``protocol`` with randomness root ``root``, started now in the
    background (as keyword's): the key that session derives, its tables and the obfuscators for ``frames``
    frames, of ``sizes``.  The mixture step's per-term encryptions are the protocol's largest cost, so a
    warm party does most of its work while idle."""
    per_frame = sizes.obfuscators_per_frame or DEFAULT_OBFUSCATORS_PER_FRAME[protocol]
    count = int(per_frame * max(1, min(int(frames), MAX_FRAMES))) + 8
    bits = sizes.key_bits if key_bits is None else key_bits
    prepare_session_keypair(
        root,
        protocol,
        ALICE,
        bits,
        uses=count,
        obfuscators=count,
        allow_insecure=allow_insecure_keys,
        subgroup=sizes.key_kind == "subgroup",
    )


def _close_clock(online: dict[str, Any]) -> dict[str, Any]:
    w0, c0 = online.pop("w0"), online.pop("c0")
    online["seconds"] = time.perf_counter() - w0
    online["cpu_seconds"] = time.process_time() - c0
    return online


def _check_models(models: SpeakerModels, params: SpeakerParams) -> None:
    if models.ubm.n_components > params.max_mixtures or models.ubm.dim > params.max_features:
        raise InputRejected(
            "the speaker models are larger than the session's public bounds allow",
            f"{models.ubm.n_components} components of {models.ubm.dim} features; bounds "
            f"{params.max_mixtures}, {params.max_features}",
        )


# =============================================================================== the fixed-point bound
def induction_rounding(params: ForwardParams) -> float:
    """δ: one secure LOGSUM's error (nats), docs/protocols/keyword.md step 8: 1.0001(|ε_a| + η) + e_ln,
    η = 0.75·2^{−p}(1 + 2^{−40}) + 2^{−51}, |ε_a| ≤ 2^{−41} + 2^{−43}, e_ln ≤ 2^{−41} + 2^{−47} (7.0·10⁻¹⁰ at p = 30)."""
    eta = 0.75 * 2.0**-params.precision_bits * (1 + 2.0**-40) + 2.0**-51
    return 1.0001 * (2.0**-41 + 2.0**-43 + eta) + 2.0**-41 + 2.0**-47


def loglik_error_bound(
    models: SpeakerModels,
    gmms: list[DiagGMM],
    X: npt.ArrayLike,
    params: SpeakerParams,
    known: DiagGMM | None = None,
) -> list[float]:
    """For each GMM, the bound on |ℓ̂ − ℓ| (nats) of the secure forward algorithm on ``X``
    (docs/protocols/speaker.md): Σ_t ε_em(t) + δ_fin, ε_em(t) = max_c ε_c(t) + 2^{−41} + 2^{−43} + δ, the
    component error ε_c(t) = 2^{−f_p−1}‖c‖₁ + 2^{−f_c−1}‖z_t‖₁ + P·2^{−f_p−f_c−2} + 2^{−49}Σ|c_p z_tp| + 2^{−40}
    over the quadratic form's coefficients c and the frame's products z_t.  With ``known`` (the shared
    UBM) the coefficients c are the differences from its forms k, and Alice's addition of k_c(z_t) rounded
    to the grid adds 2^{−F−1} + ρ_PΣ|k_p z_tp| (float64's rounding of a sum of P products: ρ_P = 2^{−44} up to
    P = 510, (P + 2)·2^{−53} beyond, :func:`_float_sum_error`)."""
    fw = params.forward()
    labels = [f"m{i}" for i in range(len(gmms))]
    hmms = models.hmm_set(gmms, labels)
    coefs, bits = model_coefficients(hmms, fw, None if known is None else models.hmm_set([known] * len(gmms), labels))
    fp, fc = fw.product_frac_bits(bits), fw.coef_frac_bits
    Z = np.abs(products(np.asarray(X, dtype=np.float64), "diag"))  # (T, P)
    A = np.abs(coefs).reshape(len(gmms), -1, coefs.shape[-1])  # (models, C, P)
    P = Z.shape[1]
    delta = induction_rounding(fw)
    added = 0.0
    if known is not None:
        K = np.abs(known_coefficients(models.hmm_set([known], ["k"])))  # (C, P)
        added = 2.0 ** (-fw.log_frac_bits - 1) + _float_sum_error(P) * (Z @ K.T)  # (T, C)
    out = []
    for m in range(len(gmms)):
        comp = (
            2.0 ** (-fp - 1) * A[m].sum(1)[None, :]
            + 2.0 ** (-fc - 1) * Z.sum(1)[:, None]
            + P * 2.0 ** (-fp - fc - 2)
            + 2.0**-49 * (Z @ A[m].T)
            + 2.0**-40  # Alice's rounding of the form plus Bob's sub-grid mask: one grid step
            + added
        )  # (T, C)
        em = comp.max(1) + 2.0**-41 + 2.0**-43 + delta
        out.append(float(em.sum() + delta))
    return out


def _float_sum_error(P: int) -> float:
    """A relative bound on float64's error in a sum of P products (or a log-sum-exp over P terms): (P + 2)·u
    with u = 2^−53, the products' own rounding and exp/log's included, and never below 2^−44."""
    return max(2.0**-44, (P + 2) * 2.0**-53)


def verify_error_bound(models: SpeakerModels, claim: str, X: npt.ArrayLike, params: VerifyParams) -> float:
    """The bound (nats per frame) on |secure score − plaintext score| for a verification: the two models'
    log-likelihood bounds and the threshold's rounding T·2^{−F−1}, over T.  The secure decision equals the
    plaintext one whenever the plaintext score is farther than this from θ -- the plaintext score of the frames
    the protocol computes on, ``X`` clipped into the agreed box (:func:`~smcdp.protocols.secure_forward.clip_frames`,
    as here)."""
    X, _ = clip_frames(np.asarray(X, dtype=np.float64), params.feature_bits)
    F = params.log_frac_bits
    if params.shared_ubm:
        # the speaker's score with Alice's UBM forms added, and her ℓ_UBM in float64: per frame the forms'
        # rounding (ρ_PΣ|k_p z_tp| each) and log-sum-exp's (ρ_P of its largest magnitude), the sum over
        # T frames (T·2^{−52} of Σ|ℓ_t|), then the grid's 2^{−F−1}
        ubm = models.ubm
        (b,) = loglik_error_bound(models, [models.speaker(models.index(claim))], X, params, known=ubm)
        K = np.abs(known_coefficients(models.hmm_set([ubm], ["k"])))
        Z = np.abs(products(X, "diag"))
        forms = _weighted_forms(ubm, X)
        forms = np.where(np.isfinite(forms), forms, 0.0)  # a zero weight's component adds nothing
        size = np.abs(forms).max(1) + math.log(ubm.n_components) + 1.0
        rho = _float_sum_error(max(Z.shape[1], ubm.n_components))
        ubm_err = float((rho * ((Z @ K.T).max(1) + size)).sum() + len(X) * 2.0**-52 * size.sum())
        return (b + ubm_err + 2.0 ** (-F - 1) + len(X) * 2.0 ** (-F - 1)) / len(X)
    both = loglik_error_bound(models, [models.speaker(models.index(claim)), models.ubm], X, params)
    return (sum(both) + len(X) * 2.0 ** (-F - 1)) / len(X)


# =============================================================================== verification
async def verify_alice(
    ch: Channel,
    X: npt.ArrayLike,
    params: VerifyParams,
    *,
    private_key: PrivateKey | None = None,
    bob: str = BOB,
    seed: SeedLike = None,
    allow_insecure_keys: bool = False,
    dgk_key: dgk.DGKPrivateKey | None = None,
) -> VerifyResult:
    """Role Alice of ``speaker-verify``: the utterance's T × d features; learns the decision only with
    ``output = "alice"``."""
    params.validate()
    t_start = time.perf_counter()
    X = _frames(X, params)
    tag = "sv"
    ubm = None
    if params.shared_ubm:  # --- Step 0 (ubm = "shared"): Bob's UBM, which Alice scores herself.
        ubm = ubm_from_proto(
            await ch.recv(bob, f"{tag}/ubm", pb.Matrix), params, X.shape[1], f"{tag}/ubm from {bob}", len(X)
        )
    # --- Steps 1-2: key, secure forward (Bob obtains ξ(ℓ_s), ξ(ℓ_UBM); with the UBM shared ξ(ℓ_s) only,
    # Alice adding the UBM's component forms to his rows herself).
    sk, offline, online, frames, sizes = await _alice_forward(
        ch, X, params, tag, seed, bob, allow_insecure_keys, private_key, known=ubm
    )
    # --- Step 4: x = D + r, then the comparison [r ≤ x] = [D ≥ 0] under her DGK key.
    t0 = time.perf_counter()
    pk = sk.public_key
    c = ciphertext_from_proto(await ch.recv(bob, f"{tag}/masked", pb.CiphertextVector), pk, f"{tag}/masked from {bob}")
    x = sk.raw_decrypt_signed(c)
    if not -(1 << params.score_bits) < x < (1 << (params.score_bits + params.stat_bits)) + (1 << params.score_bits):
        raise InvalidMessage(f"{tag}/masked from {bob} is outside the masked score's range")
    if ubm is not None:  # Bob's x is ℓ_s − T·fx(θ) + r: Alice takes her ℓ_UBM off
        x -= ubm_loglik_grid(ubm, X, params.log_frac_bits)
        if not -(1 << params.score_bits) < x < (1 << (params.score_bits + params.stat_bits)) + (1 << params.score_bits):
            raise InvalidMessage(f"{tag}/masked from {bob} less the UBM's log-likelihood is outside the range")
    # Alice holds the DGK key (a crafted one reads the other side's input whole: docs/primitives.md), Bob y = r:
    # z' = [r ≤ x] = [D ≥ 0], the acceptance itself
    if dgk_key is None:
        dgk_key = _alice_dgk_key(params, seed, ch.role, allow_insecure_keys)
    z = await compare_holder_b(
        ch,
        bob,
        [x],
        ell=params.ell,
        key=dgk_key,
        predicate="le",
        output="b" if params.output == ALICE else "a",
        tag_prefix=f"{tag}/cmp",
    )
    online["compare"] = time.perf_counter() - t0
    accept = None if z is None else bool(z[0])
    timings = {
        "offline": offline,
        "online": _close_clock(online),
        "frames": frames,
        "total": time.perf_counter() - t_start,
    }
    return VerifyResult(accept, frames, timings, ch.stats.as_dict(), prepare_next=sizes)


def _alice_dgk_key(
    params: VerifyParams | IdentifyParams, seed: SeedLike, role: str, allow_insecure_keys: bool
) -> dgk.DGKPrivateKey:
    """Alice's DGK key for the comparisons, from her root (30–100 ms at 2,048 bits: made in the session)."""
    return dgk.generate_keypair(
        params.dgk_bits,
        params.dgk_t,
        max_ell=max(params.ell, dgk.DEFAULT_MAX_ELL),
        allow_insecure=allow_insecure_keys,
        rng=protocol_rng(seed, params.protocol_name, role, "dgk-key"),
    )


async def verify_bob(
    ch: Channel,
    models: SpeakerModels,
    params: VerifyParams,
    *,
    alice: str = ALICE,
    seed: SeedLike = None,
    allow_insecure_keys: bool = False,
    enrolled_bits: EnrolledBits | None = None,
) -> VerifyResult:
    """Role Bob of ``speaker-verify``: the UBM, the enrolled models, θ; learns the decision with
    ``output = "bob"`` (the default) and nothing else.  ``enrolled_bits``: where his models' coefficient bits
    are kept between sessions (the plug-in's; None: formed for this session)."""
    params.validate()
    t_start = time.perf_counter()
    _check_models(models, params)
    F = params.log_frac_bits
    theta = _threshold_int(models.threshold, F)
    rng = protocol_rng(seed, params.protocol_name, ch.role)
    tag = "sv"
    shared = params.shared_ubm
    # A claim of no enrolled speaker is rejected like an impostor's, not refused: a refusal told the claimant
    # (the proposer) whether a name is enrolled, one name a session.  Bob scores a padding speaker of his own
    # instead (what a speaker costs; drawn in every session, from a stream of its own, so that neither his time
    # nor his other draws tell) and sends ξ(r − 2^41 nats) in step 3: D < 0 for certain.  The coefficient bits
    # his header shows are those of all his models, not of the claimed one's.
    pad = padding_speakers(models, 1, protocol_rng(seed, params.protocol_name, ch.role, "padding"))[0]
    enrolled_bits = enrolled_bits or EnrolledBits()
    kept, own = enrolled_bits.ranges(models, params.feature_bits), _log_density_bounds(pad, params.feature_bits)
    check_models_range((max(kept[0], own[0]), max(kept[1], own[1])), params)  # every model, whatever the claim
    enrolled = params.claim in models.names
    speaker = models.speaker(models.index(params.claim)) if enrolled else pad
    forward = _claim_free_forward(models, pad, params, enrolled_bits)
    if shared:  # --- Step 0 (ubm = "shared", as bob's policy allowed): the UBM to Alice.
        await ch.send(alice, f"{tag}/ubm", ubm_to_proto(models.ubm))
    # --- Steps 1-2.
    pk, lls, offline, online, T = await _bob_forward(
        ch,
        [speaker] if shared else [speaker, models.ubm],
        [params.claim] if shared else [params.claim, "ubm"],
        models,
        params,
        tag,
        seed,
        alice,
        allow_insecure_keys,
        known=models.ubm if shared else None,
        forward=forward,
    )
    # --- Step 3: ξ(D + r), D = ℓ_s − ℓ_UBM − T·fx(θ) (shared UBM: ξ(D + ℓ_UBM + r), Alice takes ℓ_UBM off);
    # a claim of no enrolled speaker: ξ(r − 2^41), so D = −2^41 (shared: −2^41 − ℓ_UBM, |ℓ_UBM| < 2^40).
    t0 = time.perf_counter()
    L, kappa = params.score_bits, params.stat_bits
    r = rng.randrange(0, 1 << (L + kappa))
    n2 = pk.nsquare
    if enrolled:
        shift = (1 + pk.n * pk.raw_plain(r - T * theta)) % n2
        score = lls[0] if shared else lls[0] * gmpy2.invert(lls[1], n2) % n2
        masked = pk.rerandomize(score * shift % n2)
    else:
        masked = pk.rerandomize((1 + pk.n * pk.raw_plain(r - (UNENROLLED_SHIFT_NATS << F))) % n2)
    await ch.send(alice, f"{tag}/masked", ciphertext_to_proto(pk, masked))
    # --- Step 4: the comparison; Alice holds the DGK key and x, Bob y = r: z' = [r ≤ x] = [D ≥ 0].
    z = await compare_holder_a(
        ch,
        alice,
        [r],
        ell=params.ell,
        predicate="le",
        output="b" if params.output == ALICE else "a",
        tag_prefix=f"{tag}/cmp",
        allow_insecure=allow_insecure_keys,
        max_key_bits=params.dgk_bits,
        max_t=params.dgk_t,
        rng=protocol_rng(seed, params.protocol_name, ch.role, "cmp"),
    )
    online["compare"] = time.perf_counter() - t0
    accept = None if z is None else bool(z[0])
    timings = {"offline": offline, "online": _close_clock(online), "frames": T, "total": time.perf_counter() - t_start}
    return VerifyResult(accept, T, timings, ch.stats.as_dict())


# =============================================================================== identification
def _label(i: int) -> bytes:
    return struct.pack(">H", i)


async def identify_alice(
    ch: Channel,
    X: npt.ArrayLike,
    params: IdentifyParams,
    *,
    private_key: PrivateKey | None = None,
    bob: str = BOB,
    seed: SeedLike = None,
    allow_insecure_keys: bool = False,
    dgk_key: dgk.DGKPrivateKey | None = None,
) -> IdentifyResult:
    """Role Alice of ``speaker-identify``: the utterance; learns the speaker only with ``output = "alice"``."""
    params.validate()
    t_start = time.perf_counter()
    X = _frames(X, params)
    tag = "si"
    # --- Steps 1-2: her key, the secure forward algorithm on Bob's models.
    sk, offline, online, frames, sizes = await _alice_forward(
        ch, X, params, tag, seed, bob, allow_insecure_keys, private_key
    )
    t0 = time.perf_counter()
    rng = protocol_rng(seed, params.protocol_name, ch.role)
    # --- Step 4: a_j = v_j + r_j; the shuffle of Bob's masks under his key ζ.
    perm, x, zeta_pk = await _alice_step4_shuffle(ch, params, sk, rng, bob, tag, allow_insecure_keys)
    # --- Step 5: the tournament, each match's winner selected obliviously.
    if dgk_key is None:
        dgk_key = _alice_dgk_key(params, seed, ch.role, allow_insecure_keys)
    await _alice_step5_tournament(ch, params, x, zeta_pk, dgk_key, rng, bob, tag)
    online["rank"] = time.perf_counter() - t0
    # --- Step 6: the outcome to the designated party.
    t0 = time.perf_counter()
    speaker, learned = await _alice_step6_outcome(ch, params, perm, seed, bob, tag)
    online["output"] = time.perf_counter() - t0
    timings = {
        "offline": offline,
        "online": _close_clock(online),
        "frames": frames,
        "total": time.perf_counter() - t_start,
    }
    return IdentifyResult(learned, speaker, frames, timings, ch.stats.as_dict(), prepare_next=sizes)


async def _recv_vector(ch: Channel, peer: str, tag: str, pk: PublicKey, length: int) -> list[mpz]:
    """The ``length`` unpacked integer ciphertexts under ``pk`` of message ``tag`` from ``peer``, validated."""
    return EncryptedVector.from_proto(
        await ch.recv(peer, tag, pb.CiphertextVector),
        pk,
        length=length,
        exponent=0,
        packing=UNPACKED,
        what=f"{tag} from {peer}",
    ).ciphertexts


async def _send_vector(ch: Channel, peer: str, tag: str, pk: PublicKey, cts: list[mpz]) -> bytes:
    """``cts`` (unpacked integer ciphertexts under ``pk``) to ``peer`` as message ``tag``; the bytes that went
    out (a replayed role's are its journal's)."""
    return await ch.send(peer, tag, EncryptedVector(pk, cts, len(cts), 0, UNPACKED).to_proto())


def _pick_context(session_id: str, tag: str, level: int, match: int) -> bytes:
    """What the proof that Bob's selector ζ(z) of a match is a bit is bound to: the session, the step, the level,
    the match."""
    return f"smcdp/speaker-identify/pick/{session_id}/{tag}/{level}/{match}".encode()


#: the integers of one selector's proof (:func:`~smcdp.crypto.zkp.prove_bit_any_key`)
_PICK_PROOF_INTS = 4 * ANY_KEY_CHUNKS


def _zeta_context(session_id: str, tag: str) -> bytes:
    """What Bob's proof that ζ's modulus is square-free is bound to: the session and the step."""
    return f"smcdp/speaker-identify/zeta-modulus/{session_id}/{tag}".encode()


async def _alice_step4_shuffle(
    ch: Channel,
    params: IdentifyParams,
    sk: PrivateKey,
    rng: random.Random,
    bob: str,
    tag: str,
    allow_insecure_keys: bool,
) -> tuple[list[int], list[int], PublicKey]:
    """Step 4 (Alice's half): a_j = v_j + r_j; the shuffle of Bob's masks under his key ζ, returned in π's
    order.  Returns (π, x, ζ) with x_j = a_{π(j)} + s_j."""
    n = params.candidates
    pk = sk.public_key
    # ζ is Bob's own key: she raises his selectors to her shares' differences, so its modulus must be one under
    # which his bit proofs hold and his ciphertexts carry nothing a character of the group could read
    zeta_pk = await recv_owned_key(
        ch,
        bob,
        f"{tag}/zeta",
        _zeta_context(ch.session_id, tag),
        bits=params.key_bits,
        allow_insecure=allow_insecure_keys,
    )
    Lv, kappa = params.value_bits, params.stat_bits
    if zeta_pk.max_int.bit_length() < Lv + 2 * kappa + 8:
        raise InvalidMessage(f"{bob}'s key is too small for the masked scores")
    a = [sk.raw_decrypt_signed(c) for c in await _recv_vector(ch, bob, f"{tag}/masked", pk, n)]
    if any(not -(1 << Lv) < v < (1 << (Lv + kappa)) + (1 << Lv) for v in a):
        raise InvalidMessage(f"{tag}/masked from {bob} holds values outside the masked scores' range")
    zr = await _recv_vector(ch, bob, f"{tag}/zeta-r", zeta_pk, n)
    perm = list(range(n))
    rng.shuffle(perm)
    s = [rng.randrange(0, 1 << (Lv + 2 * kappa)) for _ in range(n)]
    shuffled = [zeta_pk.raw_add(zr[perm[j]], zeta_pk.raw_encrypt_textbook(s[j])) for j in range(n)]
    await _send_vector(ch, bob, f"{tag}/shuffled", zeta_pk, shuffled)
    return perm, [a[perm[j]] + s[j] for j in range(n)], zeta_pk


async def _alice_step5_tournament(
    ch: Channel,
    params: IdentifyParams,
    x: list[int],
    zeta_pk: PublicKey,
    dgk_key: dgk.DGKPrivateKey,
    rng: random.Random,
    bob: str,
    tag: str,
) -> None:
    """Step 5 (Alice's half), per level: the comparisons of each match's two slots (the bits to Bob); then,
    for Bob's ζ(z) of each match, ζ(x_a + z·(x_b − x_a) + s) with a fresh s, her share of the winner −s."""
    Lv, kappa = params.value_bits, params.stat_bits
    slots = list(x)
    with CryptoThreads(priority="urgent", name="smcdp-rank") as threads:  # every level's chunks on every core
        for level, m in enumerate(params.levels()):
            # she holds the DGK key and x_a − x_b; Bob learns z' = [y_a − y_b ≤ x_a − x_b] = 1 − z, she nothing
            await compare_holder_b(
                ch,
                bob,
                [slots[2 * i] - slots[2 * i + 1] for i in range(m)],
                ell=params.ell,
                key=dgk_key,
                predicate="le",
                output="a",
                tag_prefix=f"{tag}/cmp/{level}",
                executor=threads.executor,
            )
            picks = await _recv_vector(ch, bob, f"{tag}/pick/{level}", zeta_pk, m)
            proof = from_bigints(
                await ch.recv(bob, f"{tag}/pick-proof/{level}", pb.BigInts),
                count=_PICK_PROOF_INTS * m,
                bound_bits=zeta_pk.bits,
                what=f"{tag}/pick-proof/{level} from {bob}",
                nonnegative=True,
            )
            # a proof that holds whatever ζ's modulus (a one-challenge proof passed for a non-bit under a crafted
            # one, and her reply then showed her shares' difference modulo its small factor): a match a thread
            size = _PICK_PROOF_INTS
            statements = [
                (zeta_pk, picks[i], proof[size * i : size * (i + 1)], _pick_context(ch.session_id, tag, level, i))
                for i in range(m)
            ]
            verified = await threads.amap(lambda args: verify_bit_any_key(*args), statements)
            if not all(verified):
                raise InvalidMessage(
                    f"{tag}/pick/{level} from {bob} is not proven to encrypt bits: refusing a selection that "
                    "could carry a multiple of her shares' difference"
                )
            s = [rng.randrange(0, 1 << (Lv + kappa)) for _ in range(m)]
            picked = [
                zeta_pk.raw_add(
                    zeta_pk.raw_mul(picks[i], slots[2 * i + 1] - slots[2 * i]),
                    zeta_pk.raw_encrypt_textbook(slots[2 * i] + s[i]),
                )
                for i in range(m)
            ]
            await _send_vector(ch, bob, f"{tag}/picked/{level}", zeta_pk, picked)
            slots = [-si for si in s] + slots[2 * m :]


async def _alice_step6_outcome(
    ch: Channel, params: IdentifyParams, perm: list[int], seed: SeedLike, bob: str, tag: str
) -> tuple[str | None, bool]:
    """Step 6 (Alice's half): the outcome to the designated party.  Returns (speaker, whether she learned it):
    to bob she sends every position's candidate index by OT; to alice she gets the winner's name by OT."""
    n = params.candidates
    ot_rng = protocol_rng(seed, params.protocol_name, ch.role, "label-ot")
    if params.output == BOB:
        await ot_send(ch, bob, [[_label(perm[j]) for j in range(n)]], tag_prefix=f"{tag}/label", rng=ot_rng)
        return None, False
    w = (await ch.recv(bob, f"{tag}/winner", pb.Ints)).values
    if len(w) != 1 or not 0 <= w[0] < n:
        raise InvalidMessage(f"{tag}/winner from {bob} is not a position in 0..{n - 1}")
    (name,) = await ot_choose(ch, bob, [perm[w[0]]], n, tag_prefix=f"{tag}/label", rng=ot_rng)
    return _parse_name(name, bob), True


def _parse_name(raw: bytes, bob: str) -> str | None:
    try:
        name = raw.rstrip(b"\0").decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidMessage(f"the speaker label from {bob} is not UTF-8") from None
    if name == "":
        return None
    return check_name(name)


async def identify_bob(
    ch: Channel,
    models: SpeakerModels,
    params: IdentifyParams,
    *,
    alice: str = ALICE,
    seed: SeedLike = None,
    allow_insecure_keys: bool = False,
    zeta_key: PrivateKey | None = None,
    enrolled_bits: EnrolledBits | None = None,
) -> IdentifyResult:
    """Role Bob of ``speaker-identify``: the UBM, the enrolled models, θ; learns the speaker (or "none")
    with ``output = "bob"`` (the default) and nothing else.  ``enrolled_bits``: where his enrolled models'
    range bound is kept between sessions (:class:`EnrolledBits`; made while he is idle)."""
    params.validate()
    t_start = time.perf_counter()
    _check_models(models, params)
    K, Kbar = models.n_speakers, params.max_speakers
    if Kbar < K:
        raise InputRejected("more enrolled speakers than the session's public bound max_speakers", f"{K} > {Kbar}")
    theta = _threshold_int(models.threshold, params.log_frac_bits)  # checked before any message
    rng = protocol_rng(seed, params.protocol_name, ch.role)
    tag = "si"
    # --- Steps 1-2: the padded speakers and the UBM.  A dummy is a speaker of its own, made for the session
    # (padding_speakers): its score is replaced in step 3.  (A copy of the first speaker, as dummies were, had
    # zero deltas from its rows -- cheaper rows for Bob, so his time a block grew with K -- and the same forms
    # as that speaker's, which Alice could tell: a review.)
    # All K̄ are drawn and the first K̄ − K used (a stream's first n pads are the same whatever the count): drawing
    # K̄ − K made Bob's time before his first message shrink as K grew (210 ms a pad at C = 64, d = 39), which
    # showed Alice how many speakers are enrolled, the number K̄ hides (a review).
    drawn = padding_speakers(models, Kbar, protocol_rng(seed, params.protocol_name, ch.role, "padding"))
    gmms = [models.speaker(k) for k in range(K)] + drawn[: Kbar - K] + [models.ubm]
    # every model he holds and every pad drawn, whatever K: the enrolled ones' bound kept per model set (made while
    # he is idle), the K̄ pads' bounded here -- bounding the K enrolled ones each session made his time before
    # his first message grow with K again (2.4 ms a speaker: a review of the change that drew every pad)
    kept = (enrolled_bits or EnrolledBits()).ranges(models, params.feature_bits)
    pads = models_range(drawn, params.feature_bits) if drawn else kept
    check_models_range((max(kept[0], pads[0]), max(kept[1], pads[1])), params)
    labels = [models.names[k] if k < K else f"~pad{k}" for k in range(Kbar)] + ["~ubm"]
    pk, lls, offline, online, T = await _bob_forward(
        ch, gmms, labels, models, params, tag, seed, alice, allow_insecure_keys
    )
    t0 = time.perf_counter()
    # --- Step 3: candidates, ξ(v_j + r_j) and ζ(r_j).
    if zeta_key is None:
        _, zeta_key = generate_keypair(
            params.key_bits,
            allow_insecure=allow_insecure_keys,
            rng=protocol_rng(seed, params.protocol_name, ch.role, "zeta-key"),
        )
    await _bob_step3_candidates(ch, params, models, pk, lls, T, theta, zeta_key, rng, alice, tag)
    # --- Step 4 (Bob's half): y_j = r_{π(j)} + s_j.
    y = await _bob_step4_shares(ch, params, zeta_key, alice, tag)
    # --- Step 5: the tournament; each match's z = [v_a < v_b] to Bob, its winner selected under ζ.
    w = await _bob_step5_rank(ch, params, y, zeta_key, seed, alice, tag, allow_insecure_keys)
    online["rank"] = time.perf_counter() - t0
    # --- Step 6: the outcome to the designated party.
    t0 = time.perf_counter()
    speaker, learned = await _bob_step6_outcome(ch, params, models, w, seed, alice, tag)
    online["output"] = time.perf_counter() - t0
    timings = {"offline": offline, "online": _close_clock(online), "frames": T, "total": time.perf_counter() - t_start}
    return IdentifyResult(learned, speaker, T, timings, ch.stats.as_dict())


async def _bob_step3_candidates(
    ch: Channel,
    params: IdentifyParams,
    models: SpeakerModels,
    pk: PublicKey,
    lls: list[mpz],
    T: int,
    theta: int,
    zeta_key: PrivateKey,
    rng: random.Random,
    alice: str,
    tag: str,
) -> None:
    """Step 3: the candidates' ξ(v_j + r_j) and, under Bob's own key (its public key and the proof that its modulus
    is square-free first), ζ(r_j); ``theta``: fx(θ) on the grid."""
    K, n = models.n_speakers, params.candidates
    n2 = pk.nsquare
    zeta_pk = zeta_key.public_key
    await send_owned_key(ch, [alice], f"{tag}/zeta", zeta_key, _zeta_context(ch.session_id, tag))
    L, Lv, kappa = params.score_bits, params.value_bits, params.stat_bits
    inv_ubm = gmpy2.invert(lls[-1], n2)
    masked, r = [], []
    for j in range(n):
        rj = rng.randrange(0, 1 << (Lv + kappa))
        r.append(rj)
        if j == 0:  # "none": D = 0, tie offset 0
            c = pk.raw_encrypt(rj)
        elif j - 1 < K:  # speaker j − 1: (K̄+1)·(ℓ_k − ℓ_UBM − T·fx(θ)) + (K̄+1 − j)
            d = lls[j - 1] * inv_ubm % n2
            c = pk.rerandomize(
                gmpy2.powmod(d, n, n2) * ((1 + pk.n * pk.raw_plain(-n * T * theta + (n - j) + rj)) % n2) % n2
            )
        else:  # a dummy: below every real score
            c = pk.raw_encrypt(-n * (1 << L) + (n - j) + rj)
        masked.append(c)
    await ch.send(alice, f"{tag}/masked", EncryptedVector(pk, masked, n, 0, UNPACKED).to_proto())
    zr = [zeta_pk.raw_encrypt_textbook(rj) for rj in r]
    await ch.send(alice, f"{tag}/zeta-r", EncryptedVector(zeta_pk, zr, n, 0, UNPACKED).to_proto())


async def _bob_step4_shares(
    ch: Channel, params: IdentifyParams, zeta_key: PrivateKey, alice: str, tag: str
) -> list[int]:
    """Step 4 (Bob's half): y_j = r_{π(j)} + s_j, decrypted from Alice's shuffle."""
    Lv, kappa = params.value_bits, params.stat_bits
    sh = await _recv_vector(ch, alice, f"{tag}/shuffled", zeta_key.public_key, params.candidates)
    y = [zeta_key.raw_decrypt_signed(c) for c in sh]
    if any(not 0 <= v < (1 << (Lv + kappa)) + (1 << (Lv + 2 * kappa)) for v in y):
        raise InvalidMessage(f"{tag}/shuffled from {alice} holds values outside the shares' range")
    return y


async def _bob_step5_rank(
    ch: Channel,
    params: IdentifyParams,
    y: list[int],
    zeta_key: PrivateKey,
    seed: SeedLike,
    alice: str,
    tag: str,
    allow_insecure_keys: bool,
) -> int:
    """Step 5 (Bob's half), per level: z = [v_a < v_b] for each match of slots (a, b), ζ(z) to Alice, her
    ζ(x_w + s) back; his share of the winner y_w − X.  Returns the position that wins the last match."""
    Lv, kappa = params.value_bits, params.stat_bits
    low, high = (1 << (Lv + kappa)) + (1 << Lv), 1 << Lv  # a winner's new share, −(v_w + s), lies between
    zeta_pk = zeta_key.public_key
    slots, pos = list(y), list(range(params.candidates))
    with CryptoThreads(priority="urgent", name="smcdp-rank") as threads:  # every level's chunks on every core
        for level, m in enumerate(params.levels()):
            # Alice holds the DGK key (docs/primitives.md: a crafted key reads the other side's input whole, so
            # the key is hers, whose inputs the comparisons are about); Bob receives z' = [y_a − y_b ≤ x_a − x_b]
            zp = await compare_holder_a(
                ch,
                alice,
                [slots[2 * i] - slots[2 * i + 1] for i in range(m)],
                ell=params.ell,
                predicate="le",
                output="a",
                tag_prefix=f"{tag}/cmp/{level}",
                allow_insecure=allow_insecure_keys,
                max_key_bits=params.dgk_bits,
                max_t=params.dgk_t,
                rng=protocol_rng(seed, params.protocol_name, ch.role, "cmp", str(level)),
                executor=threads.executor,
            )
            assert zp is not None  # output="a": this party, a, receives the bits
            z = [1 - int(bool(b)) for b in zp]  # [v_a < v_b] (the v are distinct: never equal)
            bits = z
            sent = await _send_vector(
                ch, alice, f"{tag}/pick/{level}", zeta_pk, [zeta_pk.raw_encrypt_textbook(b) for b in bits]
            )
            # the proof is about the ciphertexts that went out (a replayed Bob re-sends his first ones), its nonces
            # from his root, one stream a statement -- match, ciphertext and bit: a replay sends the same proof, and
            # a selector sent anew (its journal record lost) gets other nonces, never the old ones for a new c
            picks = EncryptedVector.from_proto(pb.CiphertextVector.FromString(sent), zeta_pk).ciphertexts
            # the proof that holds whatever the modulus (what Alice checks: she cannot trust his key's), a match a
            # thread
            statements = [
                (
                    zeta_key,
                    c,
                    b,
                    _pick_context(ch.session_id, tag, level, i),
                    protocol_rng(
                        seed, params.protocol_name, ch.role, "pick-proof", str(level), str(i), str(int(c)), str(b)
                    ),
                )
                for i, (c, b) in enumerate(zip(picks, bits))
            ]
            proofs = await threads.amap(lambda args: prove_bit_any_key(*args), statements)
            await ch.send(alice, f"{tag}/pick-proof/{level}", bigints([x for p in proofs for x in p]))
            X = [
                zeta_key.raw_decrypt_signed(c)
                for c in await _recv_vector(ch, alice, f"{tag}/picked/{level}", zeta_pk, m)
            ]
            win = [2 * i + 1 if z[i] else 2 * i for i in range(m)]
            new = [slots[w] - X[i] for i, w in enumerate(win)]  # −(v_w + s): in (−2^{L'+κ} − 2^{L'}, 2^{L'})
            if any(not -low < v < high for v in new):
                raise InvalidMessage(f"{tag}/picked/{level} from {alice} holds values outside the shares' range")
            slots = new + slots[2 * m :]
            pos = [pos[w] for w in win] + pos[2 * m :]
    return pos[0]


async def _bob_step6_outcome(
    ch: Channel, params: IdentifyParams, models: SpeakerModels, w: int, seed: SeedLike, alice: str, tag: str
) -> tuple[str | None, bool]:
    """Step 6 (Bob's half): to bob, π(w) by OT (a speaker or "none"); to alice, w and every candidate's name
    by OT.  Returns (speaker, whether he learned it)."""
    K, Kbar, n = models.n_speakers, params.max_speakers, params.candidates
    ot_rng = protocol_rng(seed, params.protocol_name, ch.role, "label-ot")
    if params.output == BOB:
        (lab,) = await ot_choose(ch, alice, [w], n, tag_prefix=f"{tag}/label", rng=ot_rng)
        if len(lab) != 2:
            raise InvalidMessage(f"the candidate label from {alice} is not a 2-byte index")
        c = struct.unpack(">H", lab)[0]
        if not 0 <= c <= K:
            raise InvalidMessage(f"the candidate obtained from {alice} is {c}: not a speaker nor 'none'")
        return (None if c == 0 else models.names[c - 1]), True
    names = [b""] + [models.names[k].encode() if k < K else b"" for k in range(Kbar)]
    await ch.send(alice, f"{tag}/winner", pb.Ints(values=[w]))
    if max(len(x) for x in names) > MAX_NAME_BYTES:  # enrolment keeps names within it; a broken store is refused
        raise InvalidMessage(f"an enrolled speaker's name is longer than {MAX_NAME_BYTES} bytes")
    # every label padded to the public MAX_NAME_BYTES, not to the longest name: the OT's sizes showed Alice the
    # byte length of Bob's longest enrolled name (with one speaker, that name's length; a review)
    await ot_send(ch, alice, [[x.ljust(MAX_NAME_BYTES, b"\0") for x in names]], tag_prefix=f"{tag}/label", rng=ot_rng)
    return None, False


__all__ = (
    "ALICE",
    "BOB",
    "AliceSizes",
    "IdentifyParams",
    "IdentifyResult",
    "VerifyParams",
    "VerifyResult",
    "identify_alice",
    "identify_bob",
    "prepare_alice",
    "verify_alice",
    "verify_bob",
)
