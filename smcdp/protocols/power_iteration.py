"""Privacy-preserving power iteration with an untrusted arbitrator (seed 003 §4.1.1), for the top r
principal components.

N >= 2 data parties (roles ``party1`` … ``partyN``) hold column blocks A_i (k × n_i) of
M = [A_1 … A_N]; the arbitrator Trent (role ``trent``) coordinates and decrypts nothing.  Outputs, in
decreasing eigenvalue order: u_1 … u_r, the unit leading eigenvectors of MMᵀ (k entries, known to every
data party), and x_1 … x_r, those of MᵀM (gathered by Trent).  Sign convention: the first non-zero
entry of every vector is positive.  With ``components = 1`` the outputs are the seed's u and x.

The algorithm is **subspace (block power) iteration with a Rayleigh–Ritz step every round**, block size
b = components + oversample, carried out so that every protection of the seed stays in place:

* one Paillier key shared by the data parties only (party1 makes it; Trent gets the public key);
* data padding Ā_i = [A_i  ρ_i I] with a secret ρ_i per party (M̄M̄ᵀ = MMᵀ + Σρ_i² I: the same
  eigenvectors, shifted eigenvalues);
* Trent's secret scale r_t on every block he returns, and Bernoulli decoys: with probability 1 − p a
  random positive combination of recent real states, followed by a replay of the last real state;
* Trent sees ciphertexts only, except the final σ-blinded output blocks.

What changed against the seed's algebra, and why (docs/protocols/power-iteration.md §"Today's leak"):
the seed's normalisation sum S = ‖Āᵀv‖² let every data party compute Trent's secret scale exactly,
r_t = ⟨v_{t−1}, v_t⟩/√S_{t−1}, hence the other parties' summed contribution, and the final step
revealed λ₁.  Here (1) the parties orthonormalise the received block themselves and Trent returns
their summed Gram matrix **blinded by a fresh secret factor m_t**, so they learn only r_{t+1}/m_t;
(2) the final x blocks are sent multiplied by factors σ_j known to the data parties only, so nobody
learns λ_j; (3) convergence is decided from one local flag per party per round (no encrypted step sum).

Every data party computes on its matrix through a compute engine (:mod:`smcdp.compute`): one pass
over its column blocks per round, never an n-sized iterate in the party process; batch encryption and
packed decryption go through the same engine.  The steps below are numbered as in
docs/protocols/power-iteration.md.

Hardening (docs/security.md): the final block must be a positive multiple of a block the
parties received in one of the last two rounds (so Trent cannot pick the projection the parties
reveal in clear); keys of another size than ``key_bits`` are refused; the public bounds ``rows`` and
``max_samples`` size every message (:meth:`PowerIterationParams.traffic_envelope`); a party's own
data breaking a rule raises :class:`~smcdp.errors.InputRejected` (peers learn the rule, not the data).

DP modes (``epsilon`` and ``delta`` given): the noisy power method (T noisy releases of
Ã_iÃ_iᵀQ_t) or, ``dp_method = "covariance"`` (``auto`` up to k = 255), one noisy release of Ã_iÃ_iᵀ per party
that Trent sums and returns (Analyze Gauss); sigma from the tighter of the zCDP and exact-PLD accountants
(:func:`dp_calibration`).

Replay (docs/fault-tolerance.md): every random draw of a role -- party1's key and σ's, ρ_i,
the start block X⁽⁰⁾, Trent's scales, blindings and decoys -- comes from the role's randomness root
``seed`` (:mod:`smcdp.primitives.rng`), so a role replayed after a crash recomputes exactly what it
sent before.  Only Paillier obfuscators are fresh, and replayed sends reuse the journaled bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NoReturn, SupportsInt, TypeAlias

import numpy as np
import numpy.typing as npt

from smcdp._numbers import real
from smcdp.compute.base import ComputeEngine, ComputeSession
from smcdp.compute.kernels import PADDING_STREAM_INDEX, keyed_gaussian, reduction_depth
from smcdp.compute.local import TABLE_BATCHES, LocalEngine
from smcdp.compute.sources import ArraySource, MatrixSource
from smcdp.crypto.codec import (
    bigints,
    keypair_from_proto,
    keypair_to_proto,
    public_key_from_proto,
    public_key_to_proto,
)
from smcdp.crypto.encoding import Packing, decode_fixed
from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.paillier import (
    PrivateKey,
    PublicKey,
    check_key_bits,
)
from smcdp.crypto.vector import EncryptedVector
from smcdp.crypto.zkp import combination_proof_size
from smcdp.dp.accountants import ZCDPAccountant
from smcdp.dp.conversions import gaussian_composition_epsilon, gaussian_composition_multiplier, rho_capacity
from smcdp.dp.events import GaussianEvent
from smcdp.dp.mechanisms import GaussianMechanism
from smcdp.errors import CryptoOverflow, InputRejected, InvalidMessage
from smcdp.net.channel import Channel
from smcdp.net.limits import TrafficEnvelope, ciphertext_vector_bytes
from smcdp.primitives.rng import (
    Randomness,
    SeedLike,
    noise_source,
    prepare_session_keypair,
    protocol_rng,
    session_keypair,
    stream_key,
)
from smcdp.protocols.base import ProtocolParams
from smcdp.protocols.power_iteration_threshold import (
    EXACT_WINDOW,
    FIRST_ECHO_BYTES,
    PLAINTEXT_KNOWLEDGE,
    GroupKey,
    Tags,
    check_combination,
    check_distributed_noise,
    check_group_key,
    check_noise_share,
    checked_sum,
    combination_context,
    digest_set_bytes,
    echo_relay_bytes,
    echo_to_trent_bytes,
    key_summary,
    proof_from_proto,
    proven_combination,
    refuse_seeded,
    relay_entry_bytes,
    relay_envelope,
    release_and_commit,
    threshold_decrypt,
    threshold_decrypt_many,
    trent_deliver,
    validate_group_params,
)
from smcdp.v1 import messages_pb2 as pb

TRENT = "trent"
#: receives a data party's blocks of its final projections: (first column, n_b × r block)
XSink: TypeAlias = Callable[[int, np.ndarray], None]
#: weights of a decoy combination sum to about 2^DECOY_WEIGHT_BITS
DECOY_WEIGHT_BITS = 8
#: how many recent real states a decoy combines
DECOY_HISTORY = 5
#: largest block size b = components + oversample
MAX_BLOCK = 64
#: public bounds on k (rows, shared by every party) and on one party's n_i (samples; Trent keeps x in
#: memory, and ``max_samples``, at most this, bounds what he accepts)
MAX_ROWS = 1_000_000
MAX_SAMPLES = 50_000_000
#: max_samples when a proposal does not say
DEFAULT_MAX_SAMPLES = 1_000_000
#: values of one final/x message (a public chunking, so that its size and count follow from the params)
FINAL_CHUNK_VALUES = 1 << 16
#: a data party keeps its own block of x_1 in its result only up to this many columns
ALPHA_INLINE_MAX = 100_000
#: a Ritz vector whose overlap with the previous round's is below this is sign-fixed by its largest entry
SIGN_OVERLAP_MIN = 1e-6
#: DP mode: the tag of a data party's noisy contribution of round t ("noisy/<t>"), its release
NOISY_TAG = "noisy"
#: DP mode: rounds T when the session does not say ``iterations``, and the most it may say
DP_ITERATIONS = 10
MAX_DP_ITERATIONS = 1000
#: DP mode: the noise is calibrated to a sensitivity C²·(1 + DP_FP_MARGIN + fp_error_margin(…)): this margin
#: covers Q's orthonormality and the clipping's and the covariance packing's rounding, :func:`fp_error_margin`
#: the worst-case rounding error of computing Ã Ãᵀ Q for up to ``max_samples`` samples
#: (docs/protocols/power-iteration.md, "Sensitivity")
DP_FP_MARGIN = 2.0**-20
#: the unit roundoff of float64, in which every party computes its contribution
UNIT_ROUNDOFF = 2.0**-53
#: DP mode: the PLD calibration aims at epsilon·(1 − DP_PLD_MARGIN), so that independent PLD
#: computations (dp-accounting's discretised accountant: ~1e-11 relative above the exact value) certify it too
DP_PLD_MARGIN = 2.0**-20
#: DP mode: the one-release ("covariance") mode's tags: a data party's noisy upper triangle to Trent
#: (its release) and the sum of them back (the only message Trent sends a data party in that mode)
COV_TAG = "noisy/cov"
COV_SUM_TAG = "final/cov"
#: DP modes: "covariance" (one noisy release of ÃÃᵀ, Analyze Gauss), "power" (the noisy power method) or "auto"
DP_METHODS = ("auto", "covariance", "power")
#: ``auto`` picks the covariance mode while its release has at most this many values (k <= 255): about 1,100
#: ciphertexts of 2048 bits (560 KB) per party and k² floats of memory; the noisy power method beyond
COV_AUTO_VALUES = 1 << 15
#: the covariance mode is refused above this k: 8k² bytes (128 MiB) of memory per copy of the k × k matrix,
#: and a release of ~280,000 ciphertexts (145 MB at 2048 bits) in one message, below the 256 MiB message limit
COV_MAX_ROWS = 4096
#: the DP releases' clamp without a stated ``value_bits`` (:meth:`PowerIterationParams.dp_value_bits`): this many
#: standard deviations of a party's noise above its noiseless bound (a draw beyond it: probability < 10^-56)
CLAMP_SIGMAS = 16
#: ... and at least this many bits: Trent's start block (N(0, 1) entries scaled by 2^min(frac_bits − f, v − 5),
#: never below 2^0) stays below the clamp unless an entry reaches 32 (below v = 5 a small column_norm made
#: |g| >= 4 enough: a failed session in a few per cent at k = 500)
MIN_DP_VALUE_BITS = 5
#: power mode, with ``gap_ratio`` γ and no ``iterations``: T is the least with γ^T·√k <= DP_GAP_TARGET (the
#: noiseless error of a random start, tan θ_0 ~ √k, falls like γ^T; docs/protocols/power-iteration.md)
DP_GAP_TARGET = 0.01


@dataclass
class PowerIterationParams(ProtocolParams):
    """Public parameters, agreed by every participant."""

    protocol_name = "power-iteration"

    n_parties: int = 2
    p: float = 0.9  # probability that Trent sends the real block
    tol: float = 1e-9  # stop when Σ_j ‖û_j − û_j^prev‖² < tol² between consecutive real states
    max_iterations: int = 2000  # rounds, decoys included
    key_bits: int = 3072
    frac_bits: int = 40  # fixed-point precision 2^-frac_bits
    value_bits: int | None = None  # DP mode: public bound 2^value_bits on every noisy value; None: from the
    # noiseless bound and the noise level (dp_value_bits).  The exact mode's contributions are Gram products,
    # bounded by gram_bits
    scale_bits: int = 24  # Trent's r_t is log-uniform in [2^8, 2^scale_bits]
    padding: float = 0.1  # ρ_i ≈ padding · ‖A_i‖_F / √k, times a secret factor in [0.5, 1]
    packed: bool = True  # pack values into few ciphertexts
    # --- top-r components and the blindings of the Ritz step
    components: int = 1  # r: how many leading eigenvectors
    oversample: int = 0  # extra block columns: faster when λ_r ≈ λ_{r+1}, but every data party
    # then also learns approximations of components r+1 … r+oversample
    blind_bits: int = 16  # Trent's Gram blinding m_t is log-uniform in [1, 2^blind_bits)
    blind_offset_bits: int = 48  # … sent as the integer m_t·2^blind_offset_bits
    gram_bits: int = 48  # public bound: every |entry| of one party's Gram H_i and of its
    # contributions (scaled Gram products Ā_iĀ_iᵀQ_t) < 2^gram_bits
    sigma_bits: int = 16  # the final blocks' factors σ_j are log-uniform in [2^-σ, 2^σ]
    # --- public bounds that size every message (traffic envelope)
    rows: int | None = None  # k, if the initiator states it: checked by everyone, sizes the traffic
    max_samples: int = DEFAULT_MAX_SAMPLES  # public bound on each party's n_i (its blocks of x are sent in clear)
    # --- k is bounded even when rows is not stated, so that the byte envelope is too
    max_rows: int = 1_000  # public bound on k when rows is unset (state rows, or raise this, above)
    # --- the differentially private mode (the noisy power method); epsilon and delta select it
    epsilon: float | None = None  # (epsilon, delta)-DP for one column (sample) of each party's matrix
    delta: float | None = None
    column_norm: float = 1.0  # C: each party clips every column of its matrix to norm <= C
    iterations: int | None = None  # T: the fixed number of rounds (default DP_ITERATIONS)
    noise_parties: int | None = None  # h: each party adds noise of variance sigma^2/h; None: 1, or n − t
    # with a group key (noise_share); h > 1 with the single key needs h honest parties and a semi-honest Trent
    # --- the one-release mode and rounds from public parameters
    dp_method: str = "auto"  # "covariance": one noisy release of ÃÃᵀ; "power": the noisy power method;
    # "auto": covariance while it fits (COV_AUTO_VALUES), power beyond
    gap_ratio: float | None = None  # power mode: a public bound on λ_{b+1}/λ_r assumed for the data; without
    # ``iterations`` it sets T (dp_rounds_for_gap), never the data
    # --- a group (threshold) key instead of party1's key pair (covariance mode; power_iteration_threshold)
    key_group: str | None = None  # the key group every data party holds a share of (smcdp keys generate)
    key_threshold: int | None = None  # t of that group: any t + 1 data parties decrypt, no t of them can

    def validate(self) -> PowerIterationParams:
        def bad(msg: str) -> NoReturn:
            raise InvalidMessage(f"power-iteration parameter {msg}")

        def integer(name: str, lo: int, hi: int) -> None:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                bad(f"{name}={v!r} must be an integer in [{lo}, {hi}]")

        integer("n_parties", 2, 64)
        real(self.p, "power-iteration parameter p", 0.0, 1.0, lo_open=True)
        real(self.tol, "power-iteration parameter tol", 0.0, 1.0, lo_open=True, hi_open=True)
        integer("max_iterations", 1, 100_000)
        integer("key_bits", 256, 16384)
        integer("frac_bits", 8, 64)
        if self.value_bits is not None:
            integer("value_bits", 1, 128)
        integer("scale_bits", DECOY_WEIGHT_BITS + 1, 64)
        real(self.padding, "power-iteration parameter padding", 0.0, 10.0, lo_open=True)
        if not isinstance(self.packed, bool):
            bad("packed must be a boolean")
        integer("components", 1, MAX_BLOCK)
        integer("oversample", 0, MAX_BLOCK)
        if self.block_size > MAX_BLOCK:
            bad(f"components + oversample = {self.block_size} must be at most {MAX_BLOCK}")
        integer("blind_bits", 1, 32)
        integer("blind_offset_bits", 16, 128)
        integer("gram_bits", 1, 128)
        integer("sigma_bits", 1, 32)
        if not self.dp and self.blind_bits > self.scale_bits - DECOY_WEIGHT_BITS:
            # a data party learns r_{t+1}/m_t: r_t is hidden by the narrower of the two ranges, so blind_bits above
            # scale_bits − 8 would promise more hiding than it gives
            bad(
                f"blind_bits = {self.blind_bits} needs scale_bits >= blind_bits + {DECOY_WEIGHT_BITS} = "
                f"{self.blind_bits + DECOY_WEIGHT_BITS} (a data party learns r_(t+1)/m_t: Trent's scale r_t, "
                f"log-uniform in [2^{DECOY_WEIGHT_BITS}, 2^scale_bits], is hidden by the narrower range)"
            )
        if self.rows is not None:
            integer("rows", 1, MAX_ROWS)
            if self.block_size > self.rows:
                bad(f"components + oversample = {self.block_size} exceeds rows = {self.rows}")
        integer("max_samples", 1, MAX_SAMPLES)
        integer("max_rows", 1, MAX_ROWS)
        if self.noise_parties is not None:  # before the group key's check compares it with n − t
            integer("noise_parties", 1, self.n_parties)
        self._validate_key_group(bad)
        self._validate_dp(bad, integer)
        return self

    def _validate_key_group(self, bad: Callable[[str], NoReturn]) -> None:
        """A group key: its name and threshold t together; in a DP mode, a noise share h ≤ n − t."""
        if not validate_group_params(bad, self.key_group, self.key_threshold, self.n_parties) or not self.dp:
            return
        assert self.key_threshold is not None
        check_noise_share(bad, self.noise_share, self.n_parties, self.key_threshold, "trent")

    @property
    def noise_share(self) -> int:
        """h: each data party adds σ²/h of the noise.  ``noise_parties`` if stated; else n − t with a group
        key (the n − t parties outside any coalition of t add σ² together), 1 with the single key."""
        if self.noise_parties is not None:
            return self.noise_parties
        if self.key_group is not None and self.key_threshold is not None:
            return max(1, self.n_parties - self.key_threshold)
        return 1

    @property
    def key_kind(self) -> str:
        """ "threshold" (a group key, no party holds the private key) or "single" (party1's key pair)."""
        return "threshold" if self.key_group is not None else "single"

    def _validate_dp(self, bad: Callable[[str], NoReturn], integer: Callable[[str, int, int], None]) -> None:
        """The DP mode's parameters: both epsilon and delta, or neither (the exact mode)."""
        if (self.epsilon is None) != (self.delta is None):
            bad("epsilon and delta go together: both select the differentially private mode")

        def number(name: str, lo: float, hi: float) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo < v < hi:
                bad(f"{name}={v!r} must be a number in ({lo:g}, {hi:g})")
            setattr(self, name, float(v))

        # above 2^-64: smaller ones' squares (the sensitivity) and noise variances underflowed (1e-260: sigma 0,
        # 1e-124: sigma² 0 -- INTERNAL), and a noise grid that fine lies far below any fixed point 2^-frac_bits
        number("column_norm", 2.0**-64, 2.0**20)
        if self.dp_method not in DP_METHODS:
            bad(f"dp_method={self.dp_method!r} must be one of {', '.join(DP_METHODS)}")
        if not self.dp:
            if (
                self.iterations is not None
                or self.noise_parties not in (None, 1)
                or self.column_norm != 1.0
                or self.dp_method != "auto"
                or self.gap_ratio is not None
            ):
                bad(
                    "iterations, noise_parties, column_norm, dp_method and gap_ratio belong to the differentially "
                    "private mode: give epsilon and delta too"
                )
            return
        if self.gap_ratio is not None:
            number("gap_ratio", 0.0, 1.0)
        if self.dp_method == "covariance":
            if self.iterations is not None or self.gap_ratio is not None:
                bad(
                    "iterations and gap_ratio belong to the noisy power method (dp_method power), not to the "
                    "one-release covariance mode"
                )
            if self.max_dp_rows > COV_MAX_ROWS:
                bad(
                    f"dp_method covariance needs k <= {COV_MAX_ROWS} (the k × k matrix in memory, its "
                    f"k(k+1)/2 values in one message); state rows, or use dp_method power "
                    f"(k <= {self.max_dp_rows} here)"
                )
        number("epsilon", 2.0**-40, 100.0)  # as dp-aggregate's: far below it the calibrations refuse anyway
        number("delta", 0.0, 1.0)
        if self.iterations is not None:
            integer("iterations", 1, MAX_DP_ITERATIONS)
        if self.value_bits is None:  # from the noise level, above the noiseless bounds by construction
            v = self.dp_value_bits()  # runs the calibration: refused if no noise level exists
            if v > 128:
                bad(
                    f"the releases' clamp from the noise level, value_bits = {v}, exceeds 128: lower max_samples or column_norm"
                )
            return
        if self.max_samples * self.column_norm**2 >= 2.0 ** (self.value_bits - 1):
            bad(
                f"max_samples·column_norm² = {self.max_samples * self.column_norm**2:g} must stay below "
                f"2^(value_bits - 1) = 2^{self.value_bits - 1}, the bound on a party's noiseless contribution"
            )
        if self.dp_mode == "covariance" and math.sqrt(2) * self.max_samples * self.column_norm**2 >= 2.0 ** (
            self.value_bits - 1
        ):
            bad(
                f"√2·max_samples·column_norm² = {math.sqrt(2) * self.max_samples * self.column_norm**2:g} "
                f"must stay below 2^(value_bits - 1) = 2^{self.value_bits - 1} in the covariance mode (its "
                "off-diagonal values are scaled by √2)"
            )
        dp_calibration(self)  # a noise level exists for (epsilon, delta) over the rounds (else refused)
        if self.noise_share > 1 and self.value_bits < (need := self.noise_clamp_bits()):
            # with h > 1 each party clamps its own share of the noise: the sum of clamped shares is no function of
            # the honest parties' noisy sum, so the clamp is not post-processing, and only a clamp that no draw
            # reaches (CLAMP_SIGMAS party standard deviations out) keeps the guarantee
            bad(
                f"value_bits = {self.value_bits} would clamp within {CLAMP_SIGMAS} standard deviations of a party's "
                f"noise (its share σ²/h, h = {self.noise_share}): with the noise shared each party's clamp is not "
                f"post-processing of the honest sum and would weaken (epsilon, delta); state value_bits >= {need} "
                "or leave it out (then it is derived from the noise level)"
            )

    @property
    def dp(self) -> bool:
        """The differentially private mode: the noisy power method, T fixed rounds."""
        return self.epsilon is not None

    @property
    def dp_rounds(self) -> int:
        """T: the DP mode's number of releases by every data party: 1 in the covariance mode; in the power
        mode ``iterations``, else the rounds the public ``gap_ratio`` needs (:func:`dp_rounds_for_gap`),
        else DP_ITERATIONS.  Public parameters only, never the data."""
        if self.dp_mode == "covariance":
            return 1
        if self.iterations is not None:
            return self.iterations
        if self.gap_ratio is not None:
            return dp_rounds_for_gap(self.gap_ratio, self.max_dp_rows)
        return DP_ITERATIONS

    @property
    def max_dp_rows(self) -> int:
        """The public bound on k: ``rows`` if stated, else ``max_rows``."""
        return self.rows if self.rows is not None else self.max_rows

    @property
    def covariance_length(self) -> int:
        """Values of the covariance mode's release: the upper triangle of a k × k matrix (k: the public bound)."""
        k = self.max_dp_rows
        return k * (k + 1) // 2

    @property
    def dp_mode(self) -> str | None:
        """The DP mode that runs, from public parameters only: ``dp_method`` if it names one;
        ``auto`` -> "power" when the session states a power-mode parameter (``iterations``, ``gap_ratio``) or
        when the release of k(k+1)/2 values exceeds COV_AUTO_VALUES (k > 255), else "covariance".  None in
        the exact mode."""
        if not self.dp:
            return None
        if self.dp_method != "auto":
            return self.dp_method
        if self.iterations is not None or self.gap_ratio is not None:
            return "power"
        return "covariance" if self.covariance_length <= COV_AUTO_VALUES else "power"

    @property
    def data_roles(self) -> list[str]:
        return [f"party{i}" for i in range(1, self.n_parties + 1)]

    @property
    def block_size(self) -> int:
        """b: columns of the iterated block."""
        return self.components + self.oversample

    @property
    def gram_length(self) -> int:
        """Values in a packed Gram message: the upper triangle of a b × b matrix."""
        b = self.block_size
        return b * (b + 1) // 2

    # -- fixed-point layout shared by everyone ---------------------------------
    def contribution_bits(self) -> int:
        """The public bound on a contribution's values, 2^this.  Exact mode: ``gram_bits``, since from round 1
        on a contribution is the Gram product Ā_iĀ_iᵀQ_t, raw in round 1 and scaled by the previous round's
        blinded Ritz values Θ'^{−1/2} after that (it leaves with the Gram, before this round's Ritz
        step); either way far below 2^gram_bits when the party's Gram entries are.  DP mode: the clamp of the noisy
        release (:meth:`dp_value_bits`)."""
        return self.dp_value_bits() if self.dp else self.gram_bits

    def dp_value_bits(self) -> int:
        """The DP mode's clamp 2^v of every noisy value: ``value_bits`` if stated, else the smallest v with
        2^(v−1) above a party's noiseless bound -- max_samples·column_norm², √2 times that in the covariance mode
        (its off-diagonal values are scaled by √2) -- plus CLAMP_SIGMAS of its noise's standard deviation.  A
        release is clamped there (post-processing: the privacy claim does not depend on it), and no noise draw
        reaches it but with probability below 10^-56 a value; the slots are as narrow as that allows (k = 500,
        100 samples, ε = 1: v = 10 instead of 24, 58 values a ciphertext instead of 41).  At least
        MIN_DP_VALUE_BITS, so that Trent's Gaussian start block, scaled by at most 2^(v−5), fits below 2^v (its
        entries below 32 in magnitude).  Public parameters only."""
        if self.value_bits is not None:
            return self.value_bits
        return self.noise_clamp_bits()

    def noise_clamp_bits(self) -> int:
        """The clamp :meth:`dp_value_bits` derives from the noise level when ``value_bits`` is not stated."""
        scale = math.sqrt(2) if self.dp_mode == "covariance" else 1.0
        key = self._calibration_key()

        def derive() -> int:
            bound = scale * self.max_samples * self.column_norm**2 + CLAMP_SIGMAS * dp_calibration(self).party_sigma
            # 2^(e−1) <= bound < 2^e for e = frexp(bound)[1], exactly (no libm log2 at a power of two): v = e + 1
            return max(MIN_DP_VALUE_BITS, math.frexp(bound)[1] + 1)

        return self._memo("_dp_value_bits", key, derive)

    def _calibration_key(self) -> tuple[object, ...]:
        """Every field :func:`dp_calibration` reads (the noise level, its sensitivity's rounding margin)."""
        return (
            self.epsilon,
            self.delta,
            self.dp_rounds,
            self.column_norm,
            self.noise_share,
            self.dp_mode,
            self.max_samples,
            self.rows,
            self.max_rows,
            self.block_size,
        )

    def _memo(self, name: str, key: tuple[object, ...], derive: Callable[[], int]) -> int:
        """``derive()``, kept on this object for the parameters ``key`` it was computed from (a field changed
        since -- ``dataclasses.replace`` or an assignment -- computes it again)."""
        known = self.__dict__.get(name)
        if known is None or known[0] != key:
            known = self.__dict__[name] = (key, int(derive()))
        return int(known[1])

    def slot_bits(self) -> int:
        """Contribution slots: value (``contribution_bits``), fraction (:meth:`release_frac_bits`), sum over
        parties, decoy weights + scale (not in the DP mode, where Trent only adds), sign, guard."""
        scale = 0 if self.dp else self.scale_bits
        return self.contribution_bits() + self.release_frac_bits() + math.ceil(math.log2(self.n_parties)) + scale + 2

    def release_frac_bits(self) -> int:
        """The fixed point 2^-f of the contributions (and, in the DP modes, of every block and sum made of them):
        ``frac_bits`` in the exact mode.  In a DP mode every noisy value is a multiple of its noise grid's 2^e
        (the mechanism adds integer noise to the value rounded to that grid; the clamp is on this fixed point
        too), and the grid of a release no larger than the public bound (k·b values, k(k+1)/2 in the covariance
        mode) is no finer than the bound's: f = min(frac_bits, −e at the bound), at least 0.  The sums decode to
        the very values 2^-frac_bits would give, in slots frac_bits − f bits narrower -- more values a
        ciphertext (k = 500: 41 instead of 30).  From public parameters only."""
        if not self.dp:
            return self.frac_bits
        d = self.covariance_length if self.dp_mode == "covariance" else self.max_dp_rows * self.block_size
        key = (*self._calibration_key(), d)

        def derive() -> int:
            cal = dp_calibration(self)
            e = GaussianMechanism.from_sigma(cal.party_sigma, cal.sensitivity).grid_exponent((d,))
            return max(0, min(self.frac_bits, -e))

        return self._memo("_release_frac", (*key, self.frac_bits), derive)

    def packing(self, pk: PublicKey) -> Packing:
        return Packing.for_key(pk, self.slot_bits()) if self.packed else Packing()

    def contribution_bound(self) -> int:
        return (1 << (self.contribution_bits() + self.release_frac_bits())) - 1

    def gram_slot_bits(self) -> int:
        """Gram slots: value, fraction, sum over parties, the blinding m_t·2^a, sign, guard."""
        return (
            self.gram_bits
            + self.frac_bits
            + math.ceil(math.log2(self.n_parties))
            + self.blind_offset_bits
            + self.blind_bits
            + 2
        )

    def gram_packing(self, pk: PublicKey) -> Packing:
        return Packing.for_key(pk, self.gram_slot_bits()) if self.packed else Packing()

    def gram_bound(self) -> int:
        return (1 << (self.gram_bits + self.frac_bits)) - 1

    @property
    def final_chunk_rows(self) -> int:
        """Rows (samples) of one final/x message: FINAL_CHUNK_VALUES values of r columns."""
        return max(1, FINAL_CHUNK_VALUES // self.components)

    def final_chunks(self, n_i: int) -> int:
        """How many final/x messages a party with ``n_i`` samples sends."""
        return -(-n_i // self.final_chunk_rows)

    def traffic_envelope(self, role: str) -> TrafficEnvelope:
        """What ``role`` receives at most in one session (smcdp.net.limits): from key_bits, rows (or
        max_rows), block size b = components + oversample, max_iterations, n_parties, max_samples, the
        packing and the chunking of the final blocks."""
        k = self.rows if self.rows is not None else self.max_rows
        B = self.key_bits
        b, r = self.block_size, self.components

        def slots(slot_bits: int) -> int:
            return max(1, (B - 5) // slot_bits) if self.packed else 1

        def n_cts(values: int, slot_bits: int) -> int:
            return -(-values // slots(slot_bits))

        def cts(values: int, slot_bits: int) -> int:
            return ciphertext_vector_bytes(n_cts(values, slot_bits), B)

        block = cts(k * b, self.slot_bits())  # contrib/0, v/t (DP: noisy/t, final/v too)
        gram = cts(self.gram_length, self.gram_slot_bits())
        both = block + gram + 16  # round/t and reply/t: a block, a Gram, a flag, and the fields' framing
        proof = 4 * B // 8 + 64  # a release's proof of plaintext knowledge (group key): a < N², z, w < N

        def relay(values: int, slot_bits: int, times: int = 1) -> tuple[int, int, int]:
            """Trent's relays (group key) of ``times`` releases of ``values`` each: every data party's release and
            proof of plaintext knowledge, one message a release unless they are large (relay_envelope)."""
            ints = PLAINTEXT_KNOWLEDGE.size(n_cts(values, slot_bits))
            count, largest, total = relay_envelope(self.n_parties, relay_entry_bytes(B, n_cts(values, slot_bits), ints))
            return (times * count, largest, times * total)

        rounds = self.dp_rounds if self.dp else self.max_iterations
        msgs: list[tuple[int, ...]]
        if self.dp_mode == "covariance":  # one release each to Trent; its sum and the key pair to a party
            cov = cts(self.covariance_length, self.slot_bits())
            N = self.n_parties
            if role == TRENT:
                msgs = [(N, cov), (N, 24), (1, B // 8 + 16)]
                if self.key_group is not None:  # and every release's proof and digest
                    msgs += [(N, proof), (N, 128), (N, 64)]  # 64: an echo
            elif self.key_group is not None:  # every release and proof (one relay); Trent's relay of the digests;
                # the others' echoes; partials
                partial = cov + (4 * B + 5000) // 8 + 64  # a value per ciphertext (mod N²), the proof's e and z
                msgs = [
                    relay(self.covariance_length, self.slot_bits()),
                    (1, digest_set_bytes(N)),
                    (N - 1, FIRST_ECHO_BYTES),
                    (N - 1, partial),
                ]
            else:
                msgs = [(1, cov), (1, 3 * (B // 8) + 32)]
        elif self.dp and self.key_group is not None and role != TRENT:  # v/0 in clear; per round: every
            # release and proof (one relay), the others' digests and partial decryptions (docs: the group key)
            N, partial = self.n_parties, block + (4 * B + 5000) // 8 + 64
            msgs = [
                (1, 9 * k * b + 64),
                relay(k * b, self.slot_bits(), rounds),
                (rounds, digest_set_bytes(N)),  # Trent's relay of the digests
                (N - 1, FIRST_ECHO_BYTES),  # the first round's echoes, from the other data parties
                (max(rounds - 1, 0), echo_relay_bytes(N)),  # later ones: Trent's relay of their MACs
                (rounds * (N - 1), partial),
            ]
        elif self.dp:  # noisy/t to Trent; v/t and final/v to the parties (and the key pair)
            msgs = (
                [(rounds * self.n_parties, block), (self.n_parties, 24), (1, B // 8 + 16)]
                if role == TRENT
                else [(rounds + 1, block), (1, 3 * (B // 8) + 32)]
            )
            if role == TRENT and self.key_group is not None:  # every release's proof, digest and echo
                msgs += [(rounds * self.n_parties, size) for size in (proof, 128, echo_to_trent_bytes(self.n_parties))]
        elif role == TRENT:
            # final/x: the public chunking of at most max_samples samples, r floats each (the
            # chunks' sizes follow max_samples, not the chunk size alone -- 512 KB a message before)
            chunks, n = self.final_chunks(self.max_samples), self.max_samples
            finals = (chunks, 8 * min(n, self.final_chunk_rows) * r + 32, 8 * n * r + 32 * chunks)
            if self.key_group is not None:  # the exact mode under a group key: per round every party's two
                # releases, proofs, digests and echoes, and its flag
                R, P = rounds + 1, self.n_parties
                per: list[tuple[int, ...]] = [(R, block), (R, proof), (R, gram), (R, proof), (2 * R, 128)]
                echoes = (2 * R, echo_to_trent_bytes(P))
                per += [echoes, (R, 24), (1, 24), (1, 40), finals]  # echoes, flags, dims, final/cols, final/x
                msgs = [(m[0] * P, m[1], *(v * P for v in m[2:])) for m in per] + [(1, B // 8 + 16)]
                return TrafficEnvelope.from_messages(
                    msgs,
                    f"power-iteration parameters (k <= {k}, b = {b}, "
                    f"{rounds} rounds, {B}-bit key, n_i <= {self.max_samples}, group key)",
                )
            # contrib/0, then round/t: each round's Gram comes with the next contribution
            per_party = [
                (1, block),
                (rounds, both),
                (1, 24),  # dims
                (1, 40),
                finals,
            ]  # final/cols, final/x
            P = self.n_parties  # each party's messages: (count, largest[, total]) times P
            msgs = [(m[0] * P, m[1], *(t * P for t in m[2:])) for m in per_party] + [(1, B // 8 + 16)]  # key
        elif self.key_group is not None:  # the exact mode under a group key, per round: every party's two
            # releases and proofs as Trent relays them (one message each), Trent's relays of the digests, the others'
            # echoes and partial decryptions of the block and the Gram; Trent's reply and its proofs
            R, N = rounds + 1, self.n_parties
            blocks_ct, grams_ct = (
                -(-k * b // slots(self.slot_bits())),
                -(-self.gram_length // slots(self.gram_slot_bits())),
            )
            ints = 2 * B // 8 + 8  # an integer of a proof (< N²) and its framing
            proofs = (2 * blocks_ct + EXACT_WINDOW + 2 * grams_ct + 1) * ints + 64
            partial = block + gram + (4 * B + 5000) // 8 + 64  # a reply's block and Gram in one
            msgs = [
                relay(k * b, self.slot_bits(), R),
                relay(self.gram_length, self.gram_slot_bits(), R),
                (2 * R, digest_set_bytes(N)),
                (N - 1, FIRST_ECHO_BYTES),  # the first release's echoes; the later ones' MACs, relayed by Trent
                (2 * R - 1, echo_relay_bytes(N)),
                (R * (N - 1), partial),
                (R * (N - 1), 64),  # with each partial, the digest of what it decrypts
                (R, both),
                (R, proofs),
                (1, 8 * r + 16),  # sigma
            ]
        else:
            msgs = [
                (1, block),
                (rounds, both),  # v/0, reply/t (the last: the final block)
                (1, 3 * (B // 8) + 32),
                (1, 8 * r + 16),
            ]  # keypair, sigma
        mode = f", DP {self.dp_mode}" if self.dp else ""
        return TrafficEnvelope.from_messages(
            msgs,
            f"power-iteration parameters (k <= {k}, b = {b}, "
            f"{rounds} rounds, {B}-bit key, n_i <= {self.max_samples}{mode})",
        )


@dataclass(frozen=True)
class DPCalibration:
    """The DP mode's noise and privacy cost, from public parameters only (docs/protocols/power-iteration.md,
    "Privacy proof sketch").

    Every release of a data party (T of them in the power mode, one in the covariance mode; under encryption,
    then summed) is a Gaussian mechanism of L2 sensitivity ``sensitivity`` to adding or removing one column m
    (‖m‖ <= C): ‖m mᵀQ_t‖_F <= C² in the power mode, ‖m mᵀ‖_F = ‖m‖² <= C² for the covariance mode's
    isometric upper triangle.  Two accountants bound T such mechanisms with noise ``sigma``: zCDP, rho =
    T·sensitivity²/(2·sigma²) converted by Canonne–Kamath–Steinke, and the exact privacy-loss distribution
    (PLD) of T composed Gaussians; sigma is the smaller of the two noise levels that certify (``epsilon``,
    ``delta``), and ``accountant`` says which ("pld" or "zcdp").  ``certified_epsilon`` is what that
    accountant certifies at ``delta``; ``epsilon_zcdp`` and ``epsilon_pld`` what each certifies for sigma."""

    epsilon: float
    delta: float
    rounds: int  # T: releases per data party
    sensitivity: float  # C²·(1 + DP_FP_MARGIN + fp_error_margin(max_samples, k, b, mode))
    sigma: float  # the noise that protects one party in one release (std, per value)
    party_sigma: float  # the noise each party adds: sigma / sqrt(noise_parties)
    rho: float  # zCDP of the T releases (what a zcdp ledger is charged)
    certified_epsilon: float  # the chosen accountant's epsilon at delta; <= epsilon
    method: str = "power"  # the DP mode: "covariance" or "power"
    accountant: str = "zcdp"  # which accountant certified the smaller sigma: "pld" or "zcdp"
    epsilon_zcdp: float = math.nan  # zCDP (CKS conversion) of this sigma at delta
    epsilon_pld: float = math.nan  # exact PLD of the T composed Gaussians at delta

    def as_dict(self) -> dict[str, object]:
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rounds": self.rounds,
            "sensitivity": self.sensitivity,
            "sigma": self.sigma,
            "party_sigma": self.party_sigma,
            "rho": self.rho,
            "certified_epsilon": self.certified_epsilon,
            "dp_method": self.method,
            "accountant": self.accountant,
            "epsilon_zcdp": self.epsilon_zcdp,
            "epsilon_pld": self.epsilon_pld,
        }


def dp_calibration(params: PowerIterationParams) -> DPCalibration:
    """sigma for (epsilon, delta) over the T releases, by the tighter of two accountants:

    * zCDP: the largest rho whose CKS conversion stays within epsilon (:func:`~smcdp.dp.conversions.rho_capacity`),
      split evenly over the releases, checked with :class:`~smcdp.dp.accountants.ZCDPAccountant`;
    * PLD: the smallest noise multiplier whose exact privacy-loss distribution of T composed Gaussians
      is (epsilon, delta)-DP (:func:`~smcdp.dp.conversions.gaussian_composition_multiplier`), checked with
      :func:`~smcdp.dp.conversions.gaussian_composition_epsilon`.

    The smaller sigma wins (the PLD's, for these pure Gaussian compositions: it is exact where the zCDP
    conversion is a bound).  tests/unit/protocols/test_power_iteration_dp.py certifies the result
    independently with dp-accounting's PLD and RDP accountants."""
    if params.epsilon is None or params.delta is None or params.dp_mode is None:
        raise InvalidMessage("the exact mode of power iteration has no privacy calibration")
    rows = params.rows if params.rows is not None else params.max_rows
    margin = DP_FP_MARGIN + fp_error_margin(params.max_samples, rows, params.block_size, params.dp_mode)
    return _dp_calibration(
        float(params.epsilon),
        float(params.delta),
        params.dp_rounds,
        params.column_norm,
        params.noise_share,
        params.dp_mode,
        margin,
    )


def _gamma(m: int) -> float:
    """γ_m = m·u/(1 − m·u): a sum of m + 1 terms, in any order, is within γ_m·Σ|terms| (Higham, *Accuracy and
    Stability of Numerical Algorithms*, §3.1 and §4.2: any summation tree of depth ≤ m)."""
    mu = m * UNIT_ROUNDOFF
    if not mu < 0.5:
        raise InvalidMessage(f"power-iteration: {m} terms are beyond float64's error bound")
    return mu / (1.0 - mu)


def fp_error_margin(max_samples: int, rows: int, block: int, method: str) -> float:
    """A worst-case bound, relative to C², on how far the *computed* contributions of two neighbouring data
    sets can differ beyond the exact C² -- twice the rounding error ‖fl(Z) − Z‖_F of one party's contribution.

    Power mode, Z = Ã(ÃᵀQ) with every column of Ã of norm ≤ C, n ≤ ``max_samples`` columns, k ≤ ``rows`` rows
    and Q (k × b) orthonormal: Y = fl(ÃᵀQ) = ÃᵀQ + F with |F| ≤ γ_{k+2}|Ã|ᵀ|Q| (the inner products and the
    clipping's scale), fl(ÃY) = ÃY + G with |G| ≤ γ_{h+2}|Ã||Y|, h = :func:`~smcdp.compute.kernels.reduction_depth`
    (n) the most additions a product goes through in the engines' column sums (a summation tree of depth h is
    within γ_h of the sum of magnitudes, whatever its shape); since ‖|Ã||Ã|ᵀ‖₂ ≤ trace = Σ_j ‖ã_j‖² ≤ nC² and
    ‖|Q|‖_F = √b, ‖fl(Z) − Z‖_F ≤ (γ_{h+2} + γ_{k+2} + γ_{h+2}γ_{k+2})·n·C²·√b.  Covariance mode (Q = I: the
    inner products are exact but for the scale; ‖|Ã||Ã|ᵀ‖_F ≤ trace, no √k): (γ_{h+2} + γ_2 + γ_{h+2}γ_2)·n·C².
    Public bounds only: about 2.5·10⁻⁷·√b at the default ``max_samples`` = 10⁶ with k = 30 (4.7·10⁻⁷·√b with
    k = 1,000, the default ``max_rows``), 1.3·10⁻⁵·√b at 5·10⁷ (2.4·10⁻⁵·√b) -- far above the errors measured
    (8.2·10⁻¹⁰ on random data at 10⁶), which would need all rounding errors to align."""
    n = int(max_samples)
    if method == "covariance":
        inner, width = _gamma(2), 1.0
    else:
        inner, width = _gamma(int(rows) + 2), math.sqrt(block)
    outer = _gamma(reduction_depth(n) + 2)
    return 2.0 * (outer + inner + outer * inner) * n * width


def _dp_calibration(
    eps: float,
    delta: float,
    T: int,
    column_norm: float,
    noise_parties: int,
    method: str,
    margin: float = DP_FP_MARGIN,
) -> DPCalibration:
    sens = column_norm**2 * (1.0 + margin)
    try:
        rho = rho_capacity(eps, delta)
        mult_zcdp = math.sqrt(T / (2.0 * rho)) if rho > 0 else math.inf  # sigma / sensitivity
    except (ArithmeticError, ValueError):
        mult_zcdp = math.inf
    try:
        mult_pld = gaussian_composition_multiplier(eps * (1.0 - DP_PLD_MARGIN), delta, T)
    except (ArithmeticError, ValueError):
        mult_pld = math.inf
    multiplier = min(mult_zcdp, mult_pld)
    if not math.isfinite(multiplier * sens):
        # epsilon and delta so small (5e-233, say) that no noise level certifies them
        raise InvalidMessage(
            f"power-iteration: epsilon={eps!r} with delta={delta!r} over {T} releases leaves no "
            "finite noise level (the privacy budget underflows); choose a larger epsilon or delta"
        )
    acc = ZCDPAccountant(conversion="cks").compose(GaussianEvent(multiplier), count=T)
    eps_zcdp = acc.get_epsilon(delta)
    eps_pld = gaussian_composition_epsilon(delta, multiplier, T)
    accountant = "pld" if mult_pld <= mult_zcdp else "zcdp"
    certified = eps_pld if accountant == "pld" else eps_zcdp
    if not certified <= eps:  # both calibrations stay inside by construction; kept as the certificate
        raise InvalidMessage(f"power-iteration: the {accountant} accountant certifies epsilon={certified!r} > {eps!r}")
    sigma = multiplier * sens
    return DPCalibration(
        epsilon=eps,
        delta=delta,
        rounds=T,
        sensitivity=sens,
        sigma=sigma,
        party_sigma=sigma / math.sqrt(noise_parties),
        rho=acc.get_rho(),
        certified_epsilon=certified,
        method=method,
        accountant=accountant,
        epsilon_zcdp=eps_zcdp,
        epsilon_pld=eps_pld,
    )


def dp_rounds_for_gap(gap_ratio: float, k: int) -> int:
    """T for the power mode from public parameters: the least T with gap_ratio^T·√k <=
    DP_GAP_TARGET, within [1, MAX_DP_ITERATIONS].  ``gap_ratio`` is the session's public bound γ on
    λ_{b+1}/λ_r; the noiseless part of the error (tan of the angle to the top-r subspace, ~√k from a random
    start) falls like γ^T (Hardt & Price 2014), while the noise grows like √T: no more rounds than γ needs."""
    t = math.log(math.sqrt(k) / DP_GAP_TARGET) / -math.log(gap_ratio)
    return max(1, min(MAX_DP_ITERATIONS, math.ceil(t - 1e-9)))


@dataclass
class DataPartyResult:
    u: list[float]  # u_1
    alpha: list[float] | None  # this party's block of x_1 up to a positive factor common to all
    # parties (None above ALPHA_INLINE_MAX columns: see x_sink); in the DP
    # mode A_iᵀu_1 itself, computed locally and never sent
    rounds: int
    components: list[dict[str, list[float]]] = field(default_factory=list)  # [{"u": u_j}] for j = 1 … r
    stats: dict[str, object] = field(default_factory=dict)
    dp: dict[str, object] | None = None  # DP mode: the calibration (DPCalibration.as_dict) and clipped_columns
    prepare_next: Party1KeySizes | None = None  # what party1's next key is prepared for (prepare_party1)


@dataclass
class TrentResult:
    x: list[float] | None  # x_1 (None in the DP mode: x is not released)
    n_per_party: list[int]  # (empty in the DP mode: the parties' n_i are not revealed)
    rounds: int  # all rounds, decoys included
    real_rounds: int
    decoys: int
    converged: bool | None  # None in the DP mode: T fixed rounds, no data-dependent stopping
    round_seconds: list[float] = field(default_factory=list)  # wall time of each round at Trent
    components: list[dict[str, list[float]]] = field(default_factory=list)  # [{"x": x_j}] for j = 1 … r
    stats: dict[str, object] = field(default_factory=dict)


def sign_convention(v: np.ndarray) -> np.ndarray:
    """Flip ``v`` so that its first non-zero entry is positive."""
    nz = np.flatnonzero(np.abs(v) > 0)
    if nz.size and v[nz[0]] < 0:
        return -v
    return v


def _ints(values: Iterable[SupportsInt]) -> pb.Ints:
    return pb.Ints(values=[int(v) for v in values])


def check_matrix(A: npt.ArrayLike) -> np.ndarray:
    A = np.asarray(A)
    if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] < 1:
        raise InputRejected("data must be a non-empty 2-D matrix", f"shape {A.shape}")
    if A.dtype.kind not in "fiu":
        raise InputRejected("data must be numeric", f"dtype {A.dtype}")
    A = A.astype(np.float64)
    if not np.all(np.isfinite(A)):
        raise InputRejected("data must not contain NaN or infinite values")
    return A


def check_source(source: MatrixSource, params: PowerIterationParams, role: str) -> None:
    """This party's matrix against the session's public bounds (before any message depends on it)."""
    k, n_i = source.shape
    if params.rows is not None and k != params.rows:
        raise InputRejected(f"{role}: the data's number of rows differs from the session's rows parameter", f"k = {k}")
    if params.rows is None and k > params.max_rows:
        raise InputRejected(f"{role}: the data has more rows than the session's max_rows (state rows = k)", f"k = {k}")
    if k > MAX_ROWS:
        raise InputRejected(f"{role}: the data has more rows than power iteration accepts ({MAX_ROWS})", f"k = {k}")
    if n_i > params.max_samples:
        raise InputRejected(f"{role}: the data has more samples than the session's max_samples", f"n = {n_i}")
    if params.block_size > k:
        raise InputRejected(
            f"{role}: components + oversample = {params.block_size} exceeds the number of rows k of the data",
            f"k = {k}",
        )


# =============================================================================== the parties' linear algebra
def orthonormal_basis(V: np.ndarray, what: str) -> np.ndarray:
    """Q of V = QR with diag(R) > 0: the same Q at every party, whatever V's (secret) scale."""
    if not np.all(np.isfinite(V)):
        raise InvalidMessage(f"{what} holds values that are not finite")
    Q, R = np.linalg.qr(V)
    d = np.diag(R)
    if not np.all(np.abs(d) > 1e-12 * max(1e-300, float(np.max(np.abs(d))))):
        raise InvalidMessage(f"{what} does not have full column rank")
    return Q * np.sign(d)


def rayleigh_ritz(Gp: np.ndarray, Q: np.ndarray, previous: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(Ritz vectors Û = QY, Θ') from the blinded Gram G' = m·Qᵀ M̄M̄ᵀ Q, in descending order.

    Each column's sign follows the previous round's column (or, without a usable one, makes its
    largest-magnitude entry positive), so that consecutive rounds are comparable and every party,
    holding the same Q and G', makes the same choice."""
    theta, Y = np.linalg.eigh((Gp + Gp.T) / 2)
    order = np.argsort(theta)[::-1]
    theta, Y = theta[order], Y[:, order]
    U = Q @ Y
    for j in range(U.shape[1]):
        d = float(U[:, j] @ previous[:, j]) if previous is not None else 0.0
        s = np.sign(d) if abs(d) >= SIGN_OVERLAP_MIN else np.sign(U[np.argmax(np.abs(U[:, j])), j])
        if s < 0:
            U[:, j] = -U[:, j]
    return U, theta


def _triu(H: np.ndarray) -> np.ndarray:
    return H[np.triu_indices(H.shape[0])]


def _from_triu(values: np.ndarray, b: int) -> np.ndarray:
    H = np.zeros((b, b))
    H[np.triu_indices(b)] = values
    return H + np.triu(H, 1).T


# =============================================================================== data party
async def data_party(
    ch: Channel,
    data: MatrixSource | npt.ArrayLike,
    params: PowerIterationParams,
    *,
    engine: ComputeEngine | None = None,
    private_key: PrivateKey | None = None,
    seed: SeedLike = None,
    allow_insecure_keys: bool = False,
    x_sink: XSink | None = None,
    group_key: GroupKey | None = None,
) -> DataPartyResult:
    """Role ``party<i>``: holds A_i (k × n_i) and the shared Paillier private key.

    ``data``: a :class:`~smcdp.compute.sources.MatrixSource` (a file, a shard folder, a Zarr array)
    or an in-memory matrix.  ``engine``: where the plaintext passes and the batch crypto run (default:
    the local engine, in this process).  ``x_sink(col0, block)``: receives this party's blocks of
    σ_j·A_iᵀu_j (n_b × r) as they are computed in the final step.  ``seed``: the role's randomness
    root (:class:`~smcdp.primitives.rng.Randomness`, an experiment seed or None).  ``group_key``: this
    party's share of the session's ``key_group`` (:mod:`smcdp.protocols.power_iteration_threshold`).
    """
    params.validate()
    refuse_seeded(params, seed)
    source = data if isinstance(data, MatrixSource) else ArraySource(check_matrix(data))
    k, _n_i = source.shape
    r = params.components
    rng = protocol_rng(seed, "power-iteration", ch.role)
    data_roles = params.data_roles
    if ch.role not in data_roles:
        raise InvalidMessage(f"role {ch.role!r} is not a data party role of this session")
    check_source(source, params, ch.role)

    if params.key_group is not None:  # a group key: no party holds the private key
        if group_key is None:
            raise InvalidMessage(f"{ch.role}: the session uses key group {params.key_group!r}; no share of it given")
        check_group_key(params, group_key, ch.role)
        return await _threshold_data_party(ch, source, params, engine, group_key, seed, x_sink)
    # --- Setup 1: the data parties share one Paillier key and (exact mode) the final factors σ_1 … σ_r;
    # Trent gets only the public key.
    sigma = None
    if ch.role == data_roles[0]:
        if private_key is None:  # from the role's root: a replayed party1 regenerates the same key
            private_key, _ = session_keypair(
                seed,
                "power-iteration",
                ch.role,
                params.key_bits,
                allow_insecure=allow_insecure_keys,
            )  # taken from the shelf if the party made it ahead while idle
        check_key_bits(private_key.public_key.bits, allow_insecure_keys)
        await ch.send_many(data_roles[1:], "keypair", keypair_to_proto(private_key))
        if not params.dp:
            sigma = np.array([2.0 ** rng.uniform(-params.sigma_bits, params.sigma_bits) for _ in range(r)])
            await ch.send_many(data_roles[1:], "sigma", pb.Floats(values=sigma.tolist()))
        await ch.send(TRENT, "public_key", public_key_to_proto(private_key.public_key))
    else:
        msg = await ch.recv(data_roles[0], "keypair", pb.PaillierKeyPair)
        private_key = keypair_from_proto(msg, allow_insecure=allow_insecure_keys)
        if private_key.public_key.bits != params.key_bits:
            raise InvalidMessage(
                f"the key pair from {data_roles[0]} has {private_key.public_key.bits} bits; "
                f"the session agreed on {params.key_bits}"
            )
        if not params.dp:
            sigma = _check_sigma(await ch.recv(data_roles[0], "sigma", pb.Floats), params, ch.role)

    # --- Setup 2: tell Trent k (public: every party must have the same number of rows).
    await ch.send(TRENT, "dims", _ints([k]))

    own_engine = engine is None
    engine = engine or LocalEngine(1)
    try:
        if params.dp:
            return await _dp_data_party_rounds(ch, source, params, engine, private_key, seed, x_sink)
        assert sigma is not None  # the exact mode: party1 drew it, every other party received it (Setup 1)
        return await _data_party_rounds(ch, source, params, engine, private_key, sigma, rng, seed, x_sink)
    finally:
        if own_engine:
            await engine.aclose()


async def _data_party_rounds(
    ch: Channel,
    source: MatrixSource,
    params: PowerIterationParams,
    engine: ComputeEngine,
    private_key: PrivateKey,
    sigma: np.ndarray,
    rng: random.Random,
    seed: SeedLike,
    x_sink: XSink | None,
) -> DataPartyResult:
    """Setup 3, the rounds and the final step of a data party, on its compute engine."""
    k, n_i = source.shape
    b, r = params.block_size, params.components
    pk = private_key.public_key
    packing, gram_packing = params.packing(pk), params.gram_packing(pk)
    sizes = Party1KeySizes(key_bits=pk.bits, uses=TABLE_BATCHES * packing.n_ciphertexts(k * b))  # the next one alike
    async with engine.session(source, private_key, label=f"{ch.session_id}/{ch.role}") as cs:
        rho, C = await _setup3_padding_and_start(ch, cs, params, rng, seed, k)
        party = _DataParty(ch, cs, params, pk, packing, gram_packing, rho)
        t, ints, what, recent = await _rounds(ch, party, params, C)
        ch.progress(round=t, step="final")
        us = _final_check_block(ints, what, recent, r)
        alpha = await _final_send_projections(ch, cs, params, us, sigma, n_i, x_sink)
        compute_stats = await cs.astats()
    stats = dict(ch.stats.as_dict(), compute=compute_stats)
    return DataPartyResult(
        u=us[:, 0].tolist(),
        alpha=None if alpha is None else alpha.tolist(),
        rounds=t,
        components=[{"u": us[:, j].tolist()} for j in range(r)],
        stats=stats,
        prepare_next=sizes,
    )


async def _setup3_padding_and_start(
    ch: Channel, cs: ComputeSession, params: PowerIterationParams, rng: random.Random, seed: SeedLike, k: int
) -> tuple[float, np.ndarray]:
    """Setup 3: padding Ā_i = [A_i  ρ_i I] (ρ_i secret) and the start block C⁽⁰⁾ = Ā_i X⁽⁰⁾: (ρ_i, C⁽⁰⁾)."""
    b = params.block_size
    fro2 = await cs.frobenius_sq()
    rho = params.padding * (math.sqrt(fro2 / k) if fro2 > 0 else 1.0) * rng.uniform(0.5, 1.0)
    key = stream_key(seed, "power-iteration", ch.role, "start")
    Z0, sq = await cs.initial_product(key, b)
    X0_pad = keyed_gaussian(key, PADDING_STREAM_INDEX, (k, b))
    C = (Z0 + rho * X0_pad) / np.sqrt(sq + np.einsum("ij,ij->j", X0_pad, X0_pad))
    return rho, C


async def _rounds(
    ch: Channel, party: _DataParty, params: PowerIterationParams, C: np.ndarray
) -> tuple[int, list[int], str, list[tuple[bytes | None, np.ndarray]]]:
    """Round steps 1, 3 and 5 until Trent's stop bit: (rounds, the final block Trent sent with it and its
    description, the last two rounds' (direction of V_t, Ritz vectors))."""
    b, r = params.block_size, params.components
    D: float | None = None
    recent: list[tuple[bytes | None, np.ndarray]] = []  # the last two rounds: (direction of V_t, Ritz vectors)
    # --- Round step 1 of round 0: E[C_i⁽⁰⁾] to Trent.  Every later contribution leaves in step 3.
    await party.send_contribution(C, "contrib/0")
    scale = np.ones(b)  # Θ'^{−1/2} of the last blinded Gram: every party's same column scaling
    ints, what = await party.recv_block("v/0"), "v/0 from trent"
    t = 0
    while True:
        ch.progress(round=t, step="iterate")
        # --- Round step 3: orthonormalise V_t, one pass: Z_i = Ā_iĀ_iᵀQ, H_i = (Ā_iᵀQ)ᵀ(Ā_iᵀQ); E[H_i] and
        # the local flag "D⁽ᵗ⁻¹⁾ < tol²" to Trent, and in the same message round t + 1's step 1:
        # E[C_i⁽ᵗ⁺¹⁾] = E[Z_i·diag(Θ'_{t−1})^{−1/2}].  It does not wait for the blinded Gram, so a round
        # costs one message each way: one network round trip.  Trent ignores it when he stops.
        Q, Z, direction, gram = await party.gram_step(ints, what)
        await ch.send(
            TRENT,
            f"round/{t}",
            pb.PowerIterationRound(
                gram=gram,
                converged=D is not None and params.tol**2 > D,
                contribution=await party.contribution(Z * scale),
            ),
        )
        # --- Round step 5: Rayleigh–Ritz on the blinded Gram G': round t's Ritz vectors and D⁽ᵗ⁾.  With
        # G' and the stop bit comes the next block: V_{t+1}, or after the stop bit the final block.
        reply = await ch.recv(TRENT, f"reply/{t}", pb.PowerIterationReply)
        Gp = await party.blinded_gram(reply.blinded_gram, f"reply/{t} from trent (its blinded Gram)")
        what = f"reply/{t} from trent (its block)"
        ints = await party.decrypt_block(reply.block, what)
        scale, D, recent = _ritz_step(Gp, Q, direction, recent, D, r)
        t += 1
        if reply.stop:
            return t, ints, what, recent


Recent: TypeAlias = list[tuple[bytes | None, np.ndarray]]


def _ritz_step(
    Gp: np.ndarray, Q: np.ndarray, direction: bytes | None, recent: Recent, D: float | None, r: int
) -> tuple[np.ndarray, float | None, Recent]:
    """Round step 5: the Ritz vectors of G' (signs following the last round's), the next contribution's column
    scaling Θ'^{−1/2}, D⁽ᵗ⁾ (None in round 0) and the last two rounds' (direction, Ritz vectors)."""
    previous = recent[-1][1] if recent else None
    U, theta = rayleigh_ritz(Gp, Q, previous)
    if previous is not None:
        D = float(np.sum((U[:, :r] - previous[:, :r]) ** 2))
    return 1.0 / np.sqrt(theta), D, (recent + [(direction, U)])[-2:]


def _final_check_block(ints: list[int], what: str, recent: list[tuple[bytes | None, np.ndarray]], r: int) -> np.ndarray:
    """Final 1–2: the last real state Trent sent, freshly scaled (it came with the stop bit), and u_1 … u_r.

    Check (docs/security.md): it must be a positive multiple of a block this party received in one of
    the last two rounds (the last real state is one of them).  Anything else -- a block of standard
    basis vectors, say -- would make the blocks sent in clear below projections of Trent's choosing.
    Checked before anything leaves this party.  u_1 … u_r are the Ritz vectors this party computed for
    that block in its round: the same vectors a fresh Gram of it would give, without another pass over
    the data and another round trip."""
    direction = _direction(ints)
    chosen = [U for d, U in recent if d is not None and d == direction]
    if not chosen:
        raise InvalidMessage(
            f"the final block ({what}) is not the direction of a block of the last two "
            "rounds: refusing to reveal projections Trent chose"
        )
    return np.column_stack([sign_convention(chosen[-1][:, j]) for j in range(r)])


async def _final_send_projections(
    ch: Channel,
    cs: ComputeSession,
    params: PowerIterationParams,
    us: np.ndarray,
    sigma: np.ndarray,
    n_i: int,
    x_sink: XSink | None,
) -> np.ndarray | None:
    """Final 3: σ_j·A_iᵀu_j in clear to Trent, in messages of params.final_chunk_rows samples; Trent
    normalises x_j.  Returns this party's block of x_1 up to σ_1 (None above ALPHA_INLINE_MAX columns)."""
    r = params.components
    rows, chunks = params.final_chunk_rows, params.final_chunks(n_i)
    await ch.send(TRENT, "final/cols", _ints([n_i, chunks]))
    alpha = np.empty(n_i) if n_i <= ALPHA_INLINE_MAX else None
    pending: list[np.ndarray] = []
    held = c = 0
    async for blk, out in cs.project(us):
        out = out * sigma
        if alpha is not None:
            alpha[blk.col0 : blk.col1] = out[:, 0]
        if x_sink is not None:
            x_sink(blk.col0, out)
        pending.append(out)
        held += out.shape[0]
        while held >= rows or (held and blk.col1 == n_i):
            cat = pending[0] if len(pending) == 1 else np.concatenate(pending)
            part, rest = cat[:rows], cat[rows:]
            await ch.send(TRENT, f"final/x/{c}", pb.Matrix(rows=part.shape[0], cols=r, values=part.ravel().tolist()))
            c += 1
            pending, held = ([rest] if rest.shape[0] else []), rest.shape[0]
    if c != chunks or held:
        raise AssertionError(f"{ch.role}: sent {c} final blocks for {chunks} announced")
    return alpha


@dataclass(frozen=True)
class Party1KeySizes:
    """What a data party's last session used (:attr:`DataPartyResult.prepare_next`): party1's next key is
    prepared alike; before any session the demos' 2048-bit key, tables for 32 rounds of one ciphertext."""

    key_bits: int = 2048
    uses: int = TABLE_BATCHES


def prepare_party1(
    root: Randomness,
    *,
    key_bits: int = Party1KeySizes.key_bits,
    uses: int = Party1KeySizes.uses,
    allow_insecure_keys: bool = False,
) -> None:
    """The key pair a session with root ``root`` makes if this party is its ``party1``, and the
    key's CRT tables for ``uses``, started now in the background (the caller passes the key size and table
    uses of its last session as a data party, :class:`Party1KeySizes`).  A session in another role, or with
    another key size, finds nothing and makes its key itself."""
    prepare_session_keypair(
        root, "power-iteration", "party1", int(key_bits), uses=int(uses), allow_insecure=allow_insecure_keys
    )


# =============================================================================== DP mode
def noisy_limit(params: PowerIterationParams) -> float:
    """The largest magnitude a noisy contribution is clamped to: below 2^v (:meth:`PowerIterationParams.dp_value_bits`), on the release's fixed point
    (:meth:`PowerIterationParams.release_frac_bits`)."""
    v, f = params.dp_value_bits(), params.release_frac_bits()
    return math.ldexp(1.0, v) - math.ldexp(1.0, max(-f, v - 53))


def dp_noise(
    params: PowerIterationParams, cal: DPCalibration, shape: tuple[int, ...], seed: SeedLike, role: str, t: int | str
) -> GaussianMechanism:
    """Round ``t``'s noise of data party ``role``: an exact discrete Gaussian of std
    ``party_sigma`` (:class:`~smcdp.dp.mechanisms.GaussianMechanism`, whose grid rounding it accounts
    for), drawn from the role's randomness root in a stream of its own per round -- a replayed round
    draws the same noise, so a restart never releases a second noisy copy."""
    mech = GaussianMechanism.from_sigma(
        cal.party_sigma, cal.sensitivity, random_state=noise_source(seed, "power-iteration", "dp-noise", role, str(t))
    )
    e = mech.grid_exponent(shape)
    if e < -params.frac_bits:
        raise InvalidMessage(
            f"power-iteration: the noise grid 2^{e} of column_norm={params.column_norm:g} is finer "
            f"than the fixed point 2^-{params.frac_bits}: raise frac_bits or column_norm"
        )
    return mech


def release_noise(
    params: PowerIterationParams, cal: DPCalibration, shape: tuple[int, ...], seed: SeedLike, role: str, t: int | str
) -> GaussianMechanism:
    """:func:`dp_noise` of a release, whose grid must be no finer than the releases' fixed point
    (:meth:`PowerIterationParams.release_frac_bits`) -- by construction it never is (a release is no larger than
    the public bound), and the encoding would round it otherwise."""
    mech = dp_noise(params, cal, shape, seed, role, t)
    e, f = mech.grid_exponent(shape), params.release_frac_bits()
    if e < -f:
        raise InvalidMessage(
            f"power-iteration: the noise grid 2^{e} of a release of shape {shape} is finer than the releases' "
            f"fixed point 2^-{f} (the grid at the public bound on their size)"
        )
    return mech


def dp_components(Y: np.ndarray, r: int) -> np.ndarray:
    """u_1 … u_r from the last noisy aggregate Y = MMᵀQ + G (k × b): its leading left singular vectors,
    with the sign convention (post-processing of a release)."""
    if not np.all(np.isfinite(Y)):
        raise InvalidMessage("final/v from trent holds values that are not finite")
    U = np.linalg.svd(Y, full_matrices=False)[0]
    return np.column_stack([sign_convention(U[:, j]) for j in range(r)])


async def _dp_data_party_rounds(
    ch: Channel,
    source: MatrixSource,
    params: PowerIterationParams,
    engine: ComputeEngine,
    private_key: PrivateKey,
    seed: SeedLike,
    x_sink: XSink | None,
) -> DataPartyResult:
    """The DP mode of a data party: T rounds of the noisy power method, then u from the last aggregate.

    What leaves this party's data: E[Ã_iÃ_iᵀQ_t + η_t] to Trent, once per round t < T -- T releases,
    counted here: the loop is the count, and after it the party only receives.  Nothing depends on its
    data otherwise (no Gram, no padding, no flag, no x block: its own block A_iᵀu_j stays here)."""
    if params.dp_mode == "covariance":
        return await _cov_data_party(ch, source, params, engine, private_key, seed, x_sink)
    k, n_i = source.shape
    b, r, T = params.block_size, params.components, params.dp_rounds
    pk = private_key.public_key
    sizes = Party1KeySizes(key_bits=pk.bits, uses=TABLE_BATCHES * params.packing(pk).n_ciphertexts(k * b))
    cal = dp_calibration(params)
    limit = noisy_limit(params)
    async with engine.session(source, private_key, label=f"{ch.session_id}/{ch.role}") as cs:
        party = _DataParty(ch, cs, params, pk, params.packing(pk))
        clipped = 0
        for t in range(T):
            ch.progress(round=t, step="iterate")
            # --- DP round step 2: decrypt V_t and orthonormalise it; Q_t is this party's own, so the
            # sensitivity bound holds whatever Trent sent.
            Q = orthonormal_basis(party.block(await party.recv_block(f"v/{t}")), f"v/{t} from trent")
            # --- DP round step 3: one pass, Z_i = Ã_iÃ_iᵀQ_t with every column clipped to column_norm;
            # E[Z_i + η_t] to Trent (η_t exact discrete Gaussian; the clamp is post-processing).
            Z, clipped = await cs.clipped_gram_pass(Q, params.column_norm)
            W = np.clip(release_noise(params, cal, Z.shape, seed, ch.role, t).randomise(Z), -limit, limit)
            await party.send_contribution(W, f"{NOISY_TAG}/{t}")
        # --- DP final: Y = Σ_i(Z_i + η_i) of the last round; u_j its leading left singular vectors.
        ch.progress(round=T, step="final")
        us = dp_components(party.block(await party.recv_block("final/v")), r)
        alpha = await _own_block(cs, us, n_i, x_sink)
        compute_stats = await cs.astats()
    stats = dict(ch.stats.as_dict(), compute=compute_stats)
    return DataPartyResult(
        u=us[:, 0].tolist(),
        alpha=None if alpha is None else alpha.tolist(),
        rounds=T,
        components=[{"u": us[:, j].tolist()} for j in range(r)],
        stats=stats,
        dp=dict(
            cal.as_dict(), column_norm=params.column_norm, noise_parties=params.noise_share, clipped_columns=clipped
        ),
        prepare_next=sizes,
    )


# =============================================================================== DP covariance mode
def covariance_pack(S: np.ndarray) -> np.ndarray:
    """The isometric upper triangle of a symmetric k × k matrix: its diagonal entries and √2 times the entries
    above it (row by row), so that the vector's L2 norm is S's Frobenius norm.  Adding or removing a column
    m moves it by the packing of m mᵀ, of norm ‖m mᵀ‖_F = ‖m‖²: the same sensitivity C² as the full matrix,
    with k(k+1)/2 values, and noise σ on the diagonal and σ/√2 above it once unpacked (the Gaussian
    orthogonal ensemble: rotation invariant, the least noise for this sensitivity)."""
    k = S.shape[0]
    iu = np.triu_indices(k)
    return S[iu] * np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))


def covariance_unpack(values: np.ndarray, k: int) -> np.ndarray:
    """The symmetric k × k matrix of :func:`covariance_pack`'s vector (post-processing)."""
    iu = np.triu_indices(k)
    if values.shape != (iu[0].size,):
        raise InvalidMessage(f"a covariance release of k = {k} has {iu[0].size} values, got {values.shape}")
    U = np.zeros((k, k))
    U[iu] = values / np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))
    return U + np.triu(U, 1).T


def covariance_components(S: np.ndarray, r: int) -> np.ndarray:
    """u_1 … u_r of the noisy aggregate S = MMᵀ + E: its leading eigenvectors, with the sign convention."""
    if not np.all(np.isfinite(S)):
        raise InvalidMessage(f"{COV_SUM_TAG} from trent holds values that are not finite")
    _, V = np.linalg.eigh(S)
    return np.column_stack([sign_convention(V[:, -1 - j]) for j in range(r)])


async def _cov_data_party(
    ch: Channel,
    source: MatrixSource,
    params: PowerIterationParams,
    engine: ComputeEngine,
    private_key: PrivateKey,
    seed: SeedLike,
    x_sink: XSink | None,
) -> DataPartyResult:
    """The covariance mode of a data party ("Analyze Gauss"): one noisy release of its clipped
    Ã_iÃ_iᵀ, then u from the sum of every party's release.

    What leaves this party's data: E[pack(Ã_iÃ_iᵀ) + η] to Trent, once.  It receives nothing from Trent
    before that release, so nothing Trent sends can shape it; afterwards only the sum of the releases."""
    k, n_i = source.shape
    r, L = params.components, k * (k + 1) // 2
    pk = private_key.public_key
    packing = params.packing(pk)
    sizes = Party1KeySizes(key_bits=pk.bits, uses=TABLE_BATCHES * packing.n_ciphertexts(L))  # the next one alike
    cal = dp_calibration(params)
    limit = noisy_limit(params)
    async with engine.session(source, private_key, label=f"{ch.session_id}/{ch.role}") as cs:
        party = _DataParty(ch, cs, params, pk, packing)
        # --- Covariance step 1: one pass, S_i = Ã_iÃ_iᵀ with every column clipped to column_norm.
        ch.progress(round=0, step="release")
        S, clipped = await cs.clipped_gram_pass(np.eye(k), params.column_norm)
        # --- Covariance step 2: its isometric upper triangle plus an exact discrete Gaussian of std party_sigma
        # (stream "cov" of the role's root: a replay draws the same noise), clamped (post-processing),
        # encrypted, to Trent: the release.
        v = covariance_pack(S)
        W = np.clip(release_noise(params, cal, v.shape, seed, ch.role, "cov").randomise(v), -limit, limit)
        await party.send_contribution(W, COV_TAG)
        # --- Covariance step 4: the sum of every party's release, decrypted; u_1 … u_r its top eigenvectors.
        ch.progress(round=1, step="final")
        msg = await ch.recv(TRENT, COV_SUM_TAG, pb.CiphertextVector)
        f = params.release_frac_bits()
        vec = EncryptedVector.from_proto(
            msg, pk, length=L, exponent=-f, packing=packing, what=f"{COV_SUM_TAG} from trent"
        )
        total = decode_fixed(await vec.decrypt_ints_with(cs.decrypt), -f)
        us = covariance_components(covariance_unpack(np.asarray(total, dtype=np.float64), k), r)
        alpha = await _own_block(cs, us, n_i, x_sink)
        compute_stats = await cs.astats()
    stats = dict(ch.stats.as_dict(), compute=compute_stats)
    return DataPartyResult(
        u=us[:, 0].tolist(),
        alpha=None if alpha is None else alpha.tolist(),
        rounds=1,
        components=[{"u": us[:, j].tolist()} for j in range(r)],
        stats=stats,
        dp=dict(
            cal.as_dict(), column_norm=params.column_norm, noise_parties=params.noise_share, clipped_columns=clipped
        ),
        prepare_next=sizes,
    )


async def _threshold_data_party(
    ch: Channel,
    source: MatrixSource,
    params: PowerIterationParams,
    engine: ComputeEngine | None,
    key: GroupKey,
    seed: SeedLike,
    x_sink: XSink | None,
) -> DataPartyResult:
    """A session under a group key: the exact mode (docs/protocols/power-iteration.md, "The exact mode with a
    group key": every contribution and Gram committed, relayed to every data party and summed there, Trent's
    blocks and blinded Grams decrypted together only with his proof that they are combinations of those sums),
    or a DP mode ("The covariance mode with a group key"): the covariance mode's one release or the power
    method's T, each by steps 1–6 of :mod:`smcdp.protocols.power_iteration_threshold`."""
    k, n_i = source.shape
    r = params.components
    roles = params.data_roles
    # --- Setup: Trent gets the group's public key from party1 (he only checks, relays and combines ciphertexts);
    # in the exact mode party1 draws σ_1 … σ_r for the data parties; every party sends Trent its k.
    sigma = None
    rng = protocol_rng(seed, "power-iteration", ch.role)
    if ch.role == roles[0]:
        await ch.send(TRENT, "public_key", public_key_to_proto(key.public.public_key))
        if not params.dp:
            sigma = np.array([2.0 ** rng.uniform(-params.sigma_bits, params.sigma_bits) for _ in range(r)])
            await ch.send_many(roles[1:], "sigma", pb.Floats(values=sigma.tolist()))
    elif not params.dp:
        sigma = _check_sigma(await ch.recv(roles[0], "sigma", pb.Floats), params, ch.role)
    await ch.send(TRENT, "dims", _ints([k]))
    own_engine = engine is None
    engine = engine or LocalEngine(1)
    dp: dict[str, object] | None = None
    try:
        async with engine.session(source, None, label=f"{ch.session_id}/{ch.role}") as cs:
            if sigma is not None:  # the exact mode
                rho, C = await _setup3_padding_and_start(ch, cs, params, rng, seed, k)
                rounds, ints, what, recent = await _GroupParty(ch, cs, params, key, seed, rho).rounds(C)
                ch.progress(round=rounds, step="final")
                us = _final_check_block(ints, what, recent, r)
                alpha = await _final_send_projections(ch, cs, params, us, sigma, n_i, x_sink)
            else:
                cal = dp_calibration(params)
                if params.dp_mode == "covariance":
                    us, clipped = await _threshold_cov_release(ch, cs, params, key, cal, seed)
                else:
                    us, clipped = await _threshold_power_rounds(ch, cs, params, key, cal, seed)
                alpha = await _own_block(cs, us, n_i, x_sink)
                rounds = params.dp_rounds
                dp = dict(
                    cal.as_dict(),
                    column_norm=params.column_norm,
                    noise_parties=params.noise_share,
                    clipped_columns=clipped,
                    key=key_summary(params, key),
                )
            compute_stats = await cs.astats()
    finally:
        if own_engine:
            await engine.aclose()
    stats = dict(ch.stats.as_dict(), compute=compute_stats)
    if dp is None:  # the exact mode's record of its key: no noise share (it adds no noise)
        stats["key"] = exact_key_summary(params, key)
    return DataPartyResult(
        u=us[:, 0].tolist(),
        alpha=None if alpha is None else alpha.tolist(),
        rounds=rounds,
        components=[{"u": us[:, j].tolist()} for j in range(r)],
        stats=stats,
        dp=dp,
    )


async def _threshold_release(
    ch: Channel,
    params: PowerIterationParams,
    key: GroupKey,
    W: np.ndarray,
    tags: Tags,
    seed: SeedLike,
) -> np.ndarray:
    """One release under the group key, steps 2–6: commit, release, check what Trent relays, recompute the sum
    and decrypt it with t + 1 parties.  Returns the sum's values (flat)."""
    pk = key.public.public_key
    packing = params.packing(pk)
    digests, echo = await release_and_commit(ch, params, key, W, packing, TRENT, tags, seed)
    total = await checked_sum(ch, params, key, packing, digests, W.size, TRENT, tags)
    return decode_fixed(await threshold_decrypt(ch, params, key, total, tags, seed, echo), -params.release_frac_bits())


async def _threshold_cov_release(
    ch: Channel, cs: ComputeSession, params: PowerIterationParams, key: GroupKey, cal: DPCalibration, seed: SeedLike
) -> tuple[np.ndarray, int]:
    """The covariance mode's one release under the group key: (u_1 … u_r, clipped columns)."""
    k = cs.source.k
    # --- Step 1: S_i clipped, packed, plus an exact discrete Gaussian of variance σ²/h, clamped.
    ch.progress(round=0, step="release")
    S, clipped = await cs.clipped_gram_pass(np.eye(k), params.column_norm)
    v = covariance_pack(S)
    mech = release_noise(params, cal, v.shape, seed, ch.role, "cov")
    check_distributed_noise(params, mech, v.shape)
    W = np.clip(mech.randomise(v), -noisy_limit(params), noisy_limit(params))
    # --- Steps 2–6: committed, released, every release checked, the sum recomputed and decrypted here.
    total = await _threshold_release(ch, params, key, W, Tags.covariance(), seed)
    ch.progress(round=1, step="final")
    return covariance_components(covariance_unpack(total, k), params.components), clipped


async def _threshold_power_rounds(
    ch: Channel, cs: ComputeSession, params: PowerIterationParams, key: GroupKey, cal: DPCalibration, seed: SeedLike
) -> tuple[np.ndarray, int]:
    """The noisy power method under the group key: Trent's start block in clear (public randomness: the
    sensitivity bound holds for any block), then T releases, each round's decrypted sum -- which every party
    recomputed from committed releases -- being the next round's block.  (u_1 … u_r, clipped columns)."""
    k, b, T = cs.source.k, params.block_size, params.dp_rounds
    msg = await ch.recv(TRENT, "v/0", pb.Matrix)
    if (msg.rows, msg.cols, len(msg.values)) != (k, b, k * b):
        raise InvalidMessage(f"v/0 from trent must be a {k} × {b} matrix")
    V = np.asarray(msg.values, dtype=np.float64).reshape((k, b))
    clipped = 0
    for t in range(T):
        ch.progress(round=t, step="iterate")
        # --- DP round steps 2–3 as with the single key: Q_t of the block, Z_i, its noise (σ²/h), clamped.
        Q = orthonormal_basis(V, f"the block of round {t}")
        Z, clipped = await cs.clipped_gram_pass(Q, params.column_norm)
        mech = release_noise(params, cal, Z.shape, seed, ch.role, t)
        check_distributed_noise(params, mech, Z.shape)
        W = np.clip(mech.randomise(Z), -noisy_limit(params), noisy_limit(params))
        # --- Steps 2–6 of the group key: the sum of the round's releases, recomputed here, decrypted.
        V = (await _threshold_release(ch, params, key, W.ravel(order="F"), Tags.power_round(t), seed)).reshape(
            (k, b), order="F"
        )
    ch.progress(round=T, step="final")
    return dp_components(V, params.components), clipped


async def _own_block(cs: ComputeSession, us: np.ndarray, n_i: int, x_sink: XSink | None) -> np.ndarray | None:
    """This party's own block A_iᵀu_j in the DP modes, computed here and never sent: its first column
    returned when it fits inline (ALPHA_INLINE_MAX), every block handed to ``x_sink`` as it comes."""
    alpha = np.empty(n_i) if n_i <= ALPHA_INLINE_MAX else None
    async for blk, out in cs.project(us):
        if alpha is not None:
            alpha[blk.col0 : blk.col1] = out[:, 0]
        if x_sink is not None:
            x_sink(blk.col0, out)
    return alpha


async def _cov_trent(ch: Channel, params: PowerIterationParams, pk: PublicKey, k: int) -> TrentResult:
    """Trent in the covariance mode: waits for every party's one release, sums them under encryption and
    sends the sum back.  He sends a data party nothing before its release, and never decrypts.  With a group
    key he sends every party every release instead (its step 4): each data party sums them itself."""
    roles, L = params.data_roles, k * (k + 1) // 2
    if params.key_group is not None:
        t0 = time.perf_counter()
        ch.progress(round=0, step="release")
        await trent_deliver(ch, params, pk, L, Tags.covariance())
        return TrentResult(None, [], 1, 1, 0, None, [time.perf_counter() - t0], [], ch.stats.as_dict())
    packing, bound_c = params.packing(pk), params.contribution_bound()
    t0 = time.perf_counter()
    ch.progress(round=0, step="release")
    # --- Covariance step 3: E[Σ_i W_i] = Π_i E[W_i].
    noisy = await ch.recv_all(roles, COV_TAG, pb.CiphertextVector)
    total = _sum(
        [
            EncryptedVector.from_proto(
                noisy[role],
                pk,
                length=L,
                exponent=-params.release_frac_bits(),
                packing=packing,
                bound=bound_c,
                what=f"{COV_TAG} from {role}",
            )
            for role in roles
        ]
    )
    ch.progress(round=1, step="final")
    await ch.send_many(roles, COV_SUM_TAG, total.to_proto())
    return TrentResult(
        x=None,
        n_per_party=[],
        rounds=1,
        real_rounds=1,
        decoys=0,
        converged=None,
        round_seconds=[time.perf_counter() - t0],
        components=[],
        stats=ch.stats.as_dict(),
    )


def dp_release_tag(params: PowerIterationParams) -> str:
    """The tag of a data party's first DP release (its release point: the budget is committed just before)."""
    return COV_TAG if params.dp_mode == "covariance" else f"{NOISY_TAG}/0"


class _DataParty:
    """A data party's messages of one session: encrypt and send, receive and decrypt, validated."""

    def __init__(
        self,
        ch: Channel,
        cs: ComputeSession,
        params: PowerIterationParams,
        pk: PublicKey,
        packing: Packing,
        gram_packing: Packing | None = None,
        rho: float = 0.0,
    ) -> None:
        self.ch, self.cs, self.params, self.pk = ch, cs, params, pk
        self.packing, self.gram_packing, self.rho = packing, gram_packing, rho
        self.k = cs.source.k
        self.b = params.block_size

    def check_contribution(self, C: np.ndarray) -> None:
        """A contribution must stay below the agreed bound (it sizes the slots)."""
        bits = self.params.contribution_bits()
        if not np.all(np.abs(C) < 2.0**bits):
            name = "value_bits" if self.params.dp else "gram_bits"
            raise InputRejected(
                f"{self.ch.role}: a contribution value reaches the agreed bound 2^{bits}; "
                f"scale the data or raise {name}",
                f"max |contribution| = {np.max(np.abs(C)):.3g}",
            )

    async def contribution(self, C: np.ndarray) -> pb.CiphertextVector:
        """E[C] of a k × b contribution, within the agreed bound."""
        self.check_contribution(C)
        vec = await EncryptedVector.encrypt_with(
            self.cs.encrypt,
            self.pk,
            C.ravel(order="F"),
            frac_bits=self.params.release_frac_bits(),
            packing=self.packing,
            bound=self.params.contribution_bound(),
        )
        return vec.to_proto()

    async def send_contribution(self, C: np.ndarray, tag: str) -> None:
        await self.ch.send(TRENT, tag, await self.contribution(C))

    async def recv_block(self, tag: str) -> list[int]:
        """A k × b block from Trent, decrypted: its fixed-point integers (column by column)."""
        return await self.decrypt_block(await self.ch.recv(TRENT, tag, pb.CiphertextVector), f"{tag} from trent")

    async def decrypt_block(self, msg: pb.CiphertextVector, what: str) -> list[int]:
        vec = EncryptedVector.from_proto(
            msg,
            self.pk,
            length=self.k * self.b,
            exponent=-self.params.release_frac_bits(),
            packing=self.packing,
            what=what,
        )
        return await vec.decrypt_ints_with(self.cs.decrypt)

    def block(self, ints: list[int]) -> np.ndarray:
        return decode_fixed(ints, -self.params.release_frac_bits()).reshape((self.k, self.b), order="F")

    async def gram_step(
        self, ints: list[int], what: str
    ) -> tuple[np.ndarray, np.ndarray, bytes | None, pb.CiphertextVector]:
        """From V's decrypted integers: (Q, Z_i, the direction of V, E[H_i])."""
        Q, Z, direction, H = await self.gram_pass(ints, what)
        assert self.gram_packing is not None  # the exact mode's rounds (_data_party_rounds) set it
        gram = await EncryptedVector.encrypt_with(
            self.cs.encrypt,
            self.pk,
            _triu(H),
            frac_bits=self.params.frac_bits,
            packing=self.gram_packing,
            bound=self.params.gram_bound(),
        )
        return Q, Z, direction, gram.to_proto()

    async def gram_pass(self, ints: list[int], what: str) -> tuple[np.ndarray, np.ndarray, bytes | None, np.ndarray]:
        """From V's decrypted integers, in one pass over the data: (Q, Z_i, the direction of V, H_i), H_i within
        the agreed bound."""
        direction = _direction(ints)
        Q = orthonormal_basis(self.block(ints), what)
        Z, H = await self.cs.gram_pass(Q)
        rho2 = self.rho**2
        Z = Z + rho2 * Q
        H = H + rho2 * (Q.T @ Q)
        limit = 2.0**self.params.gram_bits
        if not np.all(np.abs(H) < limit):
            raise InputRejected(
                f"{self.ch.role}: a Gram entry reaches the agreed bound 2^{self.params.gram_bits}; "
                "scale the data or raise gram_bits",
                f"max |H| = {np.max(np.abs(H)):.3g}",
            )
        return Q, Z, direction, H

    def blinded_gram_vector(self, msg: pb.CiphertextVector, what: str) -> EncryptedVector:
        """E[G'] as Trent sends it, its layout checked."""
        p = self.params
        return EncryptedVector.from_proto(
            msg,
            self.pk,
            length=p.gram_length,
            exponent=-(p.frac_bits + p.blind_offset_bits),
            packing=self.gram_packing,
            what=what,
        )

    async def blinded_gram(self, msg: pb.CiphertextVector, what: str) -> np.ndarray:
        """G' = m_t·Σ_i H_i (symmetric, positive definite: padding makes it so)."""
        vec = self.blinded_gram_vector(msg, what)
        return self.gram_matrix(await vec.decrypt_with(self.cs.decrypt), what)

    def gram_matrix(self, values: Iterable[float], what: str) -> np.ndarray:
        """The symmetric b × b G' from its decrypted upper triangle; refused unless positive definite."""
        Gp = _from_triu(np.asarray(list(values), dtype=np.float64), self.b)
        if not np.all(np.isfinite(Gp)) or not np.min(np.linalg.eigvalsh(Gp)) > 0:
            raise InvalidMessage(f"{what} is not a positive definite Gram matrix")
        return Gp


# =============================================================================== the exact mode under a group key
@contextlib.contextmanager
def _in_overflow_region(name: str) -> Iterator[None]:
    """A proven combination whose packed value decrypts into the overflow region: refused as an invalid message
    (the proof shows a combination of the sums with coefficients mod N, not bounded ones, and the data parties'
    releases carry no range proofs: Trent, or a data party, deviated).  A carry between slots decrypts without
    an error -- to values that are functions of the sums all the same."""
    try:
        yield
    except CryptoOverflow as exc:
        raise InvalidMessage(
            f"{name} from {TRENT} decrypts into the overflow region ({exc}): {TRENT} combined the sums with "
            "coefficients the protocol does not use, or a data party released values beyond the agreed bound"
        ) from None


def exact_key_summary(params: PowerIterationParams, key: GroupKey) -> dict[str, object]:
    """The exact mode's record of its group key: :func:`key_summary` without a noise share (it adds no noise)."""
    return {k: v for k, v in key_summary(params, key).items() if k not in ("noise_share", "honest_noise_sigma2")}


class _GroupParty(_DataParty):
    """A data party's messages in the exact mode under a group key: its releases committed and checked, every
    round's sums recomputed here, Trent's ciphertexts decrypted with the other data parties after his proofs."""

    def __init__(
        self, ch: Channel, cs: ComputeSession, params: PowerIterationParams, key: GroupKey, seed: SeedLike, rho: float
    ) -> None:
        pk = key.public.public_key
        super().__init__(ch, cs, params, pk, params.packing(pk), params.gram_packing(pk), rho)
        self.key, self.seed = key, seed
        #: every round's sum of contributions Π_j E[C_j⁽ᵗ⁾], recomputed here: the bases of Trent's blocks
        self.aggregates: list[EncryptedVector] = []

    async def release(self, W: np.ndarray, what: str, t: int) -> tuple[EncryptedVector, bytes]:
        """Steps 1–5 of the release flow for this party's ``what`` (``contrib``: C⁽ᵗ⁾, ``gram``: H of round t):
        encrypted and proven, committed, echoed, sent to Trent, then every party's as Trent relays them checked
        and summed here.  (The sum, the agreed echo.)"""
        tags = Tags.exact_release(what, t)
        packing = self.packing if what == "contrib" else self.gram_packing
        assert packing is not None
        digests, echo = await release_and_commit(self.ch, self.params, self.key, W, packing, TRENT, tags, self.seed)
        total = await checked_sum(self.ch, self.params, self.key, packing, digests, W.size, TRENT, tags)
        return total, echo

    async def contribute(self, C: np.ndarray, t: int) -> bytes:
        """Round step 1: C⁽ᵗ⁾ released; its sum over the parties joins :attr:`aggregates`.  (The echo.)"""
        self.check_contribution(C)
        total, echo = await self.release(C.ravel(order="F"), "contrib", t)
        self.aggregates.append(total)
        del self.aggregates[:-EXACT_WINDOW]  # the bases of Trent's blocks: older sums are never used again
        return echo

    def block_vector(self, msg: pb.CiphertextVector, name: str) -> EncryptedVector:
        """Trent's block ``name`` as it arrives, its layout checked."""
        return EncryptedVector.from_proto(
            msg,
            self.pk,
            length=self.k * self.b,
            exponent=-self.params.frac_bits,
            packing=self.packing,
            what=f"{name} from {TRENT}",
        )

    async def open_block(self, msg: pb.CiphertextVector, proof: Sequence[int], name: str, echo: bytes) -> list[int]:
        """Trent's block ``name``: checked to be a combination of the last EXACT_WINDOW sums (else nothing is
        decrypted, :class:`BadCombination`), then decrypted with the other data parties: its integers."""
        vec = self.block_vector(msg, name)
        await self.check(self.aggregates, vec, proof, name, self.params.scale_bits + 1)
        (ints,) = await self.decrypt_proven(name, [vec], echo)
        return ints

    async def decrypt_proven(self, name: str, vecs: list[EncryptedVector], echo: bytes) -> list[list[int]]:
        """Trent's ciphertexts of message ``name``, their proofs checked, decrypted with the other data parties in
        one partial decryption of its share of them (``partial/<name>``, with the digest of what this party decrypts
        beside it); every partial it receives is verified and used (a wrong one named).  Each vector's integers."""
        with _in_overflow_region(name):
            return await threshold_decrypt_many(
                self.ch,
                self.params,
                self.key,
                vecs,
                Tags.decryption(name),
                self.seed,
                echo,
                agree=TRENT,
            )

    async def open_reply(
        self, t: int, reply: pb.PowerIterationReply, gram_total: EncryptedVector, proofs: list[list[int]], echo: bytes
    ) -> tuple[np.ndarray, list[int]]:
        """Round t's reply: the blinded Gram checked to be a multiple of the Gram sum recomputed here and the
        block a combination of the last EXACT_WINDOW sums (else nothing is decrypted: :class:`BadCombination`),
        then both decrypted with the other data parties in one partial decryption (``partial/reply/<t>``).
        (G', refused unless positive definite; the block's integers.)"""
        p = self.params
        gram_name, block_name = f"reply/{t}/gram", f"reply/{t}/block"
        gram = self.blinded_gram_vector(reply.blinded_gram, f"{gram_name} from {TRENT}")
        block = self.block_vector(reply.block, block_name)
        await self.check([gram_total], gram, proofs[0], gram_name, p.blind_offset_bits + p.blind_bits)
        await self.check(self.aggregates, block, proofs[1], block_name, p.scale_bits + 1)
        g_ints, b_ints = await self.decrypt_proven(f"reply/{t}", [gram, block], echo)
        what = (
            f"{gram_name} from {TRENT} (a proven multiple of the Gram sum: {TRENT} deviated, or a data party "
            "released a Gram that is not one)"
        )
        return self.gram_matrix(decode_fixed(g_ints, gram.exponent), what), b_ints

    async def check(
        self, rows: list[EncryptedVector], vec: EncryptedVector, proof: Sequence[int], name: str, bits: int
    ) -> None:
        context = combination_context(self.ch.session_id, name)
        await asyncio.to_thread(check_combination, self.ch, self.pk, rows, vec, proof, context, bits, name, TRENT)

    async def recv_proof(self, tag: str, sizes: list[int]) -> list[list[int]]:
        """Trent's proofs for one message (``<tag>/proof``), split by ``sizes``."""
        flat = proof_from_proto(
            await self.ch.recv(TRENT, f"{tag}/proof", pb.BigInts), self.pk, f"{tag}/proof from {TRENT}", sum(sizes)
        )
        out, at = [], 0
        for size in sizes:
            out.append(flat[at : at + size])
            at += size
        return out

    def block_proof_size(self) -> int:
        return combination_proof_size(
            min(len(self.aggregates), EXACT_WINDOW), self.packing.n_ciphertexts(self.k * self.b)
        )

    def gram_proof_size(self) -> int:
        assert self.gram_packing is not None
        return combination_proof_size(1, self.gram_packing.n_ciphertexts(self.params.gram_length))

    async def rounds(self, C: np.ndarray) -> tuple[int, list[int], str, Recent]:
        """Round steps 1, 3 and 5 under the group key until Trent's stop bit: as :func:`_rounds`."""
        ch, params, r = self.ch, self.params, self.params.components
        D: float | None = None
        recent: Recent = []
        # --- Round step 1 of round 0: C⁽⁰⁾ released; every later contribution leaves in step 3.
        echo = await self.contribute(C, 0)
        what = "v/0"
        (proof,) = await self.recv_proof(what, [self.block_proof_size()])
        ints = await self.open_block(await ch.recv(TRENT, what, pb.CiphertextVector), proof, what, echo)
        scale = np.ones(self.b)
        t = 0
        while True:
            ch.progress(round=t, step="iterate")
            # --- Round step 3: Q, Z_i, H_i in one pass; H_i and round t + 1's contribution C⁽ᵗ⁺¹⁾ released
            # (committed, relayed, summed at every data party), the flag to Trent.
            Q, Z, direction, H = await self.gram_pass(ints, what)
            gram_total, _ = await self.release(_triu(H), "gram", t)
            echo = await self.contribute(Z * scale, t + 1)
            await ch.send(TRENT, f"flag/{t}", pb.PowerIterationRound(converged=D is not None and params.tol**2 > D))
            # --- Round step 5: G' and the next block (or, after the stop bit, the final one), each decrypted only
            # with Trent's proof that it is a combination of sums recomputed here.
            reply = await ch.recv(TRENT, f"reply/{t}", pb.PowerIterationReply)
            gram_proof, block_proof = await self.recv_proof(
                f"reply/{t}", [self.gram_proof_size(), self.block_proof_size()]
            )
            Gp, ints = await self.open_reply(t, reply, gram_total, [gram_proof, block_proof], echo)
            what = f"reply/{t}/block"
            scale, D, recent = _ritz_step(Gp, Q, direction, recent, D, r)
            t += 1
            if reply.stop:
                return t, ints, what, recent


def _direction(ints: list[int]) -> bytes | None:
    """A digest of the direction of an integer vector: x and y get the same digest iff x = c·y for a
    rational c > 0 (both divided by the gcd of their entries, which keeps the signs).  Exact, on the
    decrypted fixed-point integers; None for the zero vector."""
    g = math.gcd(*ints) if ints else 0
    if g == 0:
        return None
    h = hashlib.sha256()
    for v in ints:
        h.update(b"%d," % (v // g))
    return h.digest()


def _check_sigma(msg: pb.Floats, params: PowerIterationParams, role: str) -> np.ndarray:
    s = np.asarray(msg.values, dtype=np.float64)
    lim = 2.0**params.sigma_bits
    if s.shape != (params.components,) or not np.all(np.isfinite(s)) or not np.all((s >= 1 / lim) & (s <= lim)):
        raise InvalidMessage(
            f"{role}: sigma from party1 must be {params.components} factors in "
            f"[2^-{params.sigma_bits}, 2^{params.sigma_bits}]"
        )
    return s


# =============================================================================== Trent
async def trent(
    ch: Channel, params: PowerIterationParams, *, seed: SeedLike = None, allow_insecure_keys: bool = False
) -> TrentResult:
    """Role ``trent``: sums encrypted contributions, scales, sends decoys, blinds the Gram; never decrypts."""
    obfuscators = _Obfuscators()
    try:
        return await _trent(ch, params, seed, allow_insecure_keys, obfuscators)
    finally:
        obfuscators.close()


class _Obfuscators:
    """Trent's re-randomisations: obfuscators made ahead on a background thread (at the lowest
    priority: the parties' work on the same host comes first) while he waits for the parties, from a table
    sized for the session's rounds instead of the largest one the memory budget allows (172 MB, 2 s at
    2048 bits: most of a k = 500 session)."""

    #: the table is sized for this many rounds' re-randomisations (more rounds still work)
    ROUNDS = 32

    def __init__(self) -> None:
        self.pool: ObfuscatorPool | None = None

    def start(self, pk: PublicKey, per_round: int) -> None:
        self.pool = ObfuscatorPool.for_public_key(pk, capacity=2 * per_round, uses=self.ROUNDS * per_round, nice=True)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


async def _trent(
    ch: Channel, params: PowerIterationParams, seed: SeedLike, allow_insecure_keys: bool, obfuscators: _Obfuscators
) -> TrentResult:
    params.validate()
    refuse_seeded(params, seed)
    if ch.role != TRENT:
        raise InvalidMessage(f"role {ch.role!r} is not trent")
    pk, k = await _trent_setup(ch, params, allow_insecure_keys)
    if params.dp:
        return await _dp_trent(ch, params, pk, k, seed)
    rng = protocol_rng(seed, "power-iteration", ch.role)
    if params.key_group is not None:
        return await _GroupTrent(ch, params, rng, pk, k, seed).run()
    return await _Trent(ch, params, rng, pk, k, obfuscators).run()


async def _trent_setup(ch: Channel, params: PowerIterationParams, allow_insecure_keys: bool) -> tuple[PublicKey, int]:
    """Setup: the public key from party1, and k from everyone (must agree; b ≤ k)."""
    roles = params.data_roles
    pk = public_key_from_proto(
        await ch.recv(roles[0], "public_key", pb.PaillierPublicKey), allow_insecure=allow_insecure_keys
    )
    if pk.bits != params.key_bits:
        raise InvalidMessage(
            f"the public key from {roles[0]} has {pk.bits} bits; the session agreed on {params.key_bits}"
        )
    dims = await ch.recv_all(roles, "dims", pb.Ints)
    ks = {role: list(m.values) for role, m in dims.items()}
    if any(len(v) != 1 or not 1 <= v[0] <= MAX_ROWS for v in ks.values()):
        raise InvalidMessage(f"malformed dimensions from the data parties: {ks}")
    if params.rows is not None and any(v[0] != params.rows for v in ks.values()):
        raise InvalidMessage("a data party reported a number of rows other than the session's rows parameter")
    if len({v[0] for v in ks.values()}) != 1:
        raise InvalidMessage(
            "mismatched dimensions: the data parties' matrices have different numbers of rows "
            f"({', '.join(f'{role}: k={v[0]}' for role, v in sorted(ks.items()))})"
        )
    k = ks[roles[0]][0]
    if params.block_size > k:
        raise InvalidMessage(f"components + oversample = {params.block_size} exceeds the number of rows k = {k}")
    return pk, k


class _Trent:
    """Trent in the exact mode, the mirror of :class:`_DataParty`: the real states he has summed, which state
    each round's block carried (None: a decoy), and the rounds' steps 2 and 4 and the final steps."""

    def __init__(
        self,
        ch: Channel,
        params: PowerIterationParams,
        rng: random.Random,
        pk: PublicKey,
        k: int,
        obfuscators: _Obfuscators | None,
    ) -> None:
        self.ch, self.params, self.rng, self.pk, self.k = ch, params, rng, pk, k
        self.roles = params.data_roles
        self.packing, self.gram_packing = params.packing(pk), params.gram_packing(pk)
        self.bound_c = params.contribution_bound()
        self.obfuscators = obfuscators
        if obfuscators is not None:
            obfuscators.start(
                pk,
                self.packing.n_ciphertexts(k * params.block_size) + self.gram_packing.n_ciphertexts(params.gram_length),
            )
        # E[U] of every real state, unscaled; None once older than any block can use (the last DECOY_HISTORY)
        self.states: list[EncryptedVector | None] = []
        self.sent_state: list[int | None] = []  # which state each round's block carries (None = decoy)
        self.decoys = 0
        self.round_seconds: list[float] = []
        self._t_round = time.perf_counter()

    async def run(self) -> TrentResult:
        ch, params, roles = self.ch, self.params, self.roles
        converged = False
        t = 0
        self._t_round = time.perf_counter()
        contribs = await ch.recv_all(roles, "contrib/0", pb.CiphertextVector)
        await ch.send_many(roles, "v/0", self.next_block(contribs, lambda role: f"contrib/0 from {role}").to_proto())
        while True:
            ch.progress(round=t, step="iterate")
            # --- Round step 4: the blinded Gram and the stop bit.  The flags of round t compare the Ritz
            # vectors of rounds t−2 and t−1: they measure convergence only if those rounds carried
            # consecutive real states.
            ups = await ch.recv_all(roles, f"round/{t}", pb.PowerIterationRound)
            gp = self.blinded_gram(t, ups)
            converged = converged or self.converged(t, ups)
            stop = converged or t + 1 >= params.max_iterations
            if stop:
                # --- Final 1–2: with the stop bit, the last real state *sent* (if the last round was a decoy,
                # the one before), freshly scaled.  The data parties check that it is the direction of a block
                # of the last two rounds and take the Ritz vectors they computed for it.  The contributions
                # that came with the last Grams, before the parties knew of the stop, are ignored.
                block = self.real_block(self.last_sent())
            else:
                # --- Round t + 1's step 2, from the contributions that came with the Grams.
                block = self.next_block(
                    {role: up.contribution for role, up in ups.items()}, functools.partial(_contribution_of_round, t)
                )
            t = await self.reply(t, gp, stop, block)
            if stop:
                break
        return await self.finish(t, converged)

    async def reply(self, t: int, gp: EncryptedVector, stop: bool, block: EncryptedVector) -> int:
        """Round t's reply: the blinded Gram, the stop bit and the next (or the final) block, in one message; the
        round's seconds for the record.  Returns the next round's number."""
        await self.ch.send_many(
            self.roles,
            f"reply/{t}",
            pb.PowerIterationReply(blinded_gram=gp.to_proto(), stop=stop, block=block.to_proto()),
        )
        now = time.perf_counter()
        self.round_seconds.append(now - self._t_round)
        self._t_round = now
        return t + 1

    def converged(self, t: int, ups: Mapping[str, pb.PowerIterationRound]) -> bool:
        """Every flag of round t says converged, and rounds t − 2 and t − 1 carried consecutive real states
        (only then do the flags, which compare their Ritz vectors, measure convergence)."""
        before, last = (self.sent_state[t - 2], self.sent_state[t - 1]) if t >= 2 else (None, None)
        meaningful = before is not None and last is not None and last == before + 1
        return meaningful and all(up.converged for up in ups.values())

    def last_sent(self) -> int:
        """Final 1: the last real state *sent* (if the last round was a decoy, the one before)."""
        return next(j for j in reversed(self.sent_state) if j is not None)

    def next_round_tag(self, t: int) -> str:
        """What a data party sends first in round t: a party that did not take the stop bit sends it instead of
        its final block."""
        return f"round/{t}"

    async def finish(self, t: int, converged: bool) -> TrentResult:
        """Final 3: x_1 … x_r from the parties' blocks, and the session's record."""
        ch = self.ch
        ch.progress(round=t, step="final")
        xs, n_per_party = await _gather_x(ch, self.params, self.next_round_tag(t))
        return TrentResult(
            x=xs[0],
            n_per_party=n_per_party,
            rounds=t,
            real_rounds=sum(s is not None for s in self.sent_state),
            decoys=self.decoys,
            converged=converged,
            round_seconds=self.round_seconds,
            components=[{"x": x} for x in xs],
            stats=ch.stats.as_dict(),
        )

    def scale_r(self, lo_bits: int, hi_bits: int) -> int:
        """A secret integer log-uniform in [2^lo, 2^hi]."""
        return max(1, int(2.0 ** self.rng.uniform(lo_bits, hi_bits)))

    def real_block(self, j: int) -> EncryptedVector:
        return self.emit([(j, self.scale_r(DECOY_WEIGHT_BITS, self.params.scale_bits))])

    def decoy_block(self) -> EncryptedVector:
        first = max(0, len(self.states) - DECOY_HISTORY)
        recent = range(first, len(self.states))
        cuts = sorted(self.rng.randrange(1, 1 << DECOY_WEIGHT_BITS) for _ in range(len(recent) - 1))
        weights = [hi - lo for lo, hi in zip([0] + cuts, cuts + [1 << DECOY_WEIGHT_BITS])]
        scale = self.scale_r(0, self.params.scale_bits - DECOY_WEIGHT_BITS)
        # the weights add up to 2^DECOY_WEIGHT_BITS: one of them is not 0
        return self.emit([(j, w * scale) for j, w in zip(recent, weights) if w])

    def emit(self, terms: list[tuple[int, int]]) -> EncryptedVector:
        """Σ_j a_j·E[state j] for ``terms`` (j, a_j), re-randomised."""
        acc = None
        for j, a in terms:
            state = self.states[j]
            assert state is not None  # blocks use the last DECOY_HISTORY states only
            term = state.mul_int(a)
            acc = term if acc is None else acc + term
        assert acc is not None and self.obfuscators is not None
        return acc.rerandomize(self.obfuscators.pool)

    def blinded_gram(self, t: int, ups: dict[str, pb.PowerIterationRound]) -> EncryptedVector:
        """Step 4: E[G'] = (Π_i E[H_i])^{m_int}, declared with exponent −(frac + a): G' = m_t·ΣH_i."""
        params, pk = self.params, self.pk
        total = _sum(
            [
                EncryptedVector.from_proto(
                    ups[role].gram,
                    pk,
                    length=params.gram_length,
                    exponent=-params.frac_bits,
                    packing=self.gram_packing,
                    bound=params.gram_bound(),
                    what=f"round/{t} from {role} (its Gram)",
                )
                for role in self.roles
            ]
        )
        m_int = blind_multiplier(self.rng, params.blind_offset_bits, params.blind_bits)
        assert self.obfuscators is not None  # the single key's Trent has them
        prod = total.mul_int(m_int).rerandomize(self.obfuscators.pool)
        return EncryptedVector(
            pk, prod.ciphertexts, prod.length, prod.exponent - params.blind_offset_bits, prod.packing, prod.bound
        )

    def next_block(self, contribs: dict[str, pb.CiphertextVector], what: Callable[[str], str]) -> EncryptedVector:
        """Step 2: the next round's block V from the parties' E[C_i] (round 0: the start blocks; afterwards
        they came with the last round's Grams).  ``what(role)`` names a contribution in errors."""
        params = self.params
        cvecs = [
            EncryptedVector.from_proto(
                contribs[role],
                self.pk,
                length=self.k * params.block_size,
                exponent=-params.frac_bits,
                packing=self.packing,
                bound=self.bound_c,
                what=what(role),
            )
            for role in self.roles
        ]
        return self.step2(lambda: _sum(cvecs))

    def step2(self, aggregate: Callable[[], EncryptedVector]) -> EncryptedVector:
        """Step 2 on this round's sum of contributions E[U] (computed only if it becomes a state)."""
        params = self.params
        if self.sent_state and self.sent_state[-1] is None:
            # --- 2b: the block sent last round was a decoy: ignore contributions computed from it and
            # replay the last real state.
            j = len(self.states) - 1
            self.sent_state.append(j)
            return self.real_block(j)
        # --- 2a: Π_i E[C_i] = E[U] is a new real state; with probability p send the real r_t·U,
        # otherwise a decoy.
        self.states.append(aggregate())
        if len(self.states) > DECOY_HISTORY:  # never used again: a long session's memory stays bounded
            self.states[-DECOY_HISTORY - 1] = None
        if len(self.states) >= 2 and self.rng.random() >= params.p:
            self.sent_state.append(None)
            self.decoys += 1
            return self.decoy_block()
        self.sent_state.append(len(self.states) - 1)
        return self.real_block(len(self.states) - 1)


class _GroupTrent(_Trent):
    """Trent in the exact mode under a group key: the same decisions (real, decoy, replay, stop) from the same
    root, but the releases are relayed to every data party (each sums them itself), and each block and blinded
    Gram is a combination of those sums made with his own re-randomisers and sent with his proof of it
    (:func:`~smcdp.protocols.power_iteration_threshold.proven_combination`).  He decrypts nothing."""

    def __init__(
        self, ch: Channel, params: PowerIterationParams, rng: random.Random, pk: PublicKey, k: int, seed: SeedLike
    ) -> None:
        super().__init__(ch, params, rng, pk, k, None)
        self.key = stream_key(seed, "power-iteration", TRENT, "combination")
        #: every round's sum of contributions, as every data party recomputes it (the states are among them)
        self.aggregates: list[EncryptedVector] = []
        self.tag = ""  # the message the next emitted block goes in
        self.proof: list[int] = []  # the last emitted block's proof

    def next_round_tag(self, t: int) -> str:
        """A data party's first message to Trent in round t: the digest of its Gram release."""
        return Tags.exact_release("gram", t).digest

    def emit(self, terms: list[tuple[int, int]]) -> EncryptedVector:
        """Σ_j a_j·E[state j] as a combination of the last EXACT_WINDOW sums, re-randomised, and its proof."""
        rows = list(self.aggregates)  # the last EXACT_WINDOW sums, as every data party holds them
        exps = [0] * len(rows)
        for j, a in terms:
            pos = next((i for i, row in enumerate(rows) if row is self.states[j]), None)
            if pos is None:  # pragma: no cover - decoys mix the last DECOY_HISTORY states, all in the window
                raise AssertionError(f"state {j} is not among the last {EXACT_WINDOW} sums")
            exps[pos] += a
        context = combination_context(self.ch.session_id, self.tag)
        vec, self.proof = proven_combination(
            self.pk, rows, exps, self.key, self.tag, context, self.params.scale_bits + 1
        )
        return vec

    def proven_gram(self, t: int, total: EncryptedVector) -> tuple[EncryptedVector, list[int]]:
        """Step 4: E[G'] = E[Σ_i H_i]^{m_int}·s^N, declared with exponent −(frac + a), and its proof."""
        p = self.params
        m_int = blind_multiplier(self.rng, p.blind_offset_bits, p.blind_bits)
        tag = f"reply/{t}/gram"
        context = combination_context(self.ch.session_id, tag)
        vec, proof = proven_combination(
            self.pk, [total], [m_int], self.key, tag, context, p.blind_offset_bits + p.blind_bits
        )
        return vec._with_exponent(vec.exponent - p.blind_offset_bits), proof

    def block(self, tag: str, final: bool) -> tuple[EncryptedVector, list[int]]:
        """Step 2 on the newest sum (or, ``final``, Final 1) for the message ``tag``: the block and its proof."""
        self.tag = tag
        vec = self.real_block(self.last_sent()) if final else self.step2(lambda: self.aggregates[-1])
        return vec, self.proof

    def add_sum(self, total: EncryptedVector) -> None:
        """A round's sum of contributions: the newest base (older than the window: never used again)."""
        self.aggregates.append(total)
        del self.aggregates[:-EXACT_WINDOW]

    async def deliver(self, what: str, t: int) -> EncryptedVector:
        """Steps 2b and 4 of the release flow for every data party's ``what`` of round t: echoed, checked against
        the commitments, relayed.  Returns their sum (which every data party recomputes)."""
        length = self.k * self.params.block_size if what == "contrib" else self.params.gram_length
        packing = self.packing if what == "contrib" else self.gram_packing
        _, vecs = await trent_deliver(
            self.ch, self.params, self.pk, length, Tags.exact_release(what, t), packing=packing
        )
        return _sum(list(vecs.values()))

    async def run(self) -> TrentResult:
        ch, params, roles = self.ch, self.params, self.roles
        converged = False
        self._t_round = time.perf_counter()
        self.add_sum(await self.deliver("contrib", 0))
        block, proof = await asyncio.to_thread(self.block, "v/0", False)
        await ch.send_many(roles, "v/0/proof", bigints(proof))
        await ch.send_many(roles, "v/0", block.to_proto())
        t = 0
        while True:
            ch.progress(round=t, step="iterate")
            gram_total = await self.deliver("gram", t)
            self.add_sum(await self.deliver("contrib", t + 1))
            flags = await ch.recv_all(roles, f"flag/{t}", pb.PowerIterationRound)
            # --- Round step 4: the blinded Gram, the stop bit; then round t + 1's step 2 (or Final 1), both proven.
            gp, gram_proof = await asyncio.to_thread(self.proven_gram, t, gram_total)
            converged = converged or self.converged(t, flags)
            stop = converged or t + 1 >= params.max_iterations
            block, block_proof = await asyncio.to_thread(self.block, f"reply/{t}/block", stop)
            await ch.send_many(roles, f"reply/{t}/proof", bigints([*gram_proof, *block_proof]))
            t = await self.reply(t, gp, stop, block)
            if stop:
                break
        return await self.finish(t, converged)


async def _gather_x(ch: Channel, params: PowerIterationParams, next_round: str) -> tuple[list[list[float]], list[int]]:
    """Final 3: gather σ_j·A_iᵀu_j from every party; x_j is their concatenation, normalised.  Returns
    (x_1 … x_r, each party's number of columns).  A party whose message ``next_round`` comes instead of its final
    block did not take the stop bit (a reply altered on its way, or a Trent that told parties different things):
    the session fails at once instead of both sides waiting for each other until the deadline."""
    roles, r = params.data_roles, params.components
    sizes = []
    for role in roles:
        why = "it did not take the stop bit of the last reply and began another round"
        cols = list((await ch.recv_unless(role, "final/cols", pb.Ints, next_round, why)).values)
        if len(cols) != 2 or not 1 <= cols[0] <= params.max_samples or cols[1] != params.final_chunks(cols[0]):
            raise InvalidMessage(
                f"final/cols from {role} must be [columns in 1..{params.max_samples} (max_samples), "
                f"their number of chunks of {params.final_chunk_rows}], got {cols}"
            )
        sizes.append(cols)
    X = np.empty((sum(n for n, _ in sizes), r))
    c0 = 0
    for role, (n_i, chunks) in zip(roles, sizes):
        got = 0
        for c in range(chunks):
            m = await ch.recv(role, f"final/x/{c}", pb.Matrix)
            want = min(params.final_chunk_rows, n_i - got)
            if m.cols != r or m.rows != want or len(m.values) != m.rows * r:
                raise InvalidMessage(
                    f"final/x/{c} from {role}: expected at most {params.final_chunk_rows} rows "
                    f"({want} here) × {r} columns, got {m.rows} × {m.cols} with "
                    f"{len(m.values)} values"
                )
            rows_x = np.asarray(m.values, dtype=np.float64).reshape(m.rows, r)
            if not np.all(np.isfinite(rows_x)):
                raise InvalidMessage(f"final/x/{c} from {role} holds values that are not finite")
            X[c0 + got : c0 + got + m.rows] = rows_x
            got += m.rows
        if got != n_i:
            raise InvalidMessage(f"{role} announced {n_i} columns but sent {got}")
        c0 += n_i
    xs = []
    for j in range(r):
        # normalised after scaling by the largest entry: finite blocks near 1e308 overflowed the norm to inf and
        # made x zero (reported as converged), subnormal ones underflowed it to 0
        top = float(np.max(np.abs(X[:, j]))) if len(X) else 0.0
        if not top > 0:
            raise InvalidMessage(f"the gathered eigenvector x_{j + 1} is zero")
        col = X[:, j] / top
        xs.append(sign_convention(col / np.linalg.norm(col)).tolist())
    return xs, [n for n, _ in sizes]


async def _dp_trent(ch: Channel, params: PowerIterationParams, pk: PublicKey, k: int, seed: SeedLike) -> TrentResult:
    """Trent in the DP mode: sends a random start block, then each round the sum of the parties' noisy
    contributions.  He never decrypts and stops after T rounds, whatever the data."""
    if params.dp_mode == "covariance":
        return await _cov_trent(ch, params, pk, k)
    if params.key_group is not None:
        return await _threshold_power_trent(ch, params, pk, k, seed)
    roles = params.data_roles
    T, b = params.dp_rounds, params.block_size
    packing, bound_c = params.packing(pk), params.contribution_bound()
    # --- DP round step 1 (t = 0): a Gaussian start block V_0 from Trent's root (public to the parties).
    start = keyed_gaussian(stream_key(seed, "power-iteration", TRENT, "dp-start"), 0, (k, b))
    # a table for these few encryptions, not the largest one the budget allows (2 s, 172 MB)
    await asyncio.to_thread(pk.prepare, packing.n_ciphertexts(k * b))
    # the start block is on the releases' fixed point too (the sums that follow it are), scaled up by what the
    # fixed point gave up (at most to 2^(v − 5), v the clamp's bits): a coarse grid (f small) would round a Gaussian block to
    # few values, even to one without full rank; the parties orthonormalise it, so its scale changes nothing
    f = params.release_frac_bits()
    start = np.ldexp(start, max(0, min(params.frac_bits - f, params.dp_value_bits() - 5)))
    v = await asyncio.to_thread(
        EncryptedVector.encrypt, pk, start.ravel(order="F"), frac_bits=f, packing=packing, bound=bound_c
    )
    round_seconds: list[float] = []
    for t in range(T):
        ch.progress(round=t, step="iterate")
        t_round = time.perf_counter()
        await ch.send_many(roles, f"v/{t}", v.to_proto())
        # --- DP round step 4: E[Y_t] = Π_i E[Z_i + η_i], next round's block.
        noisy = await ch.recv_all(roles, f"{NOISY_TAG}/{t}", pb.CiphertextVector)
        v = _sum(
            [
                EncryptedVector.from_proto(
                    noisy[role],
                    pk,
                    length=k * b,
                    exponent=-f,
                    packing=packing,
                    bound=bound_c,
                    what=f"{NOISY_TAG}/{t} from {role}",
                )
                for role in roles
            ]
        )
        round_seconds.append(time.perf_counter() - t_round)
    # --- DP final: the last aggregate, from which every data party takes u_1 … u_r.
    ch.progress(round=T, step="final")
    await ch.send_many(roles, "final/v", v.to_proto())
    return TrentResult(
        x=None,
        n_per_party=[],
        rounds=T,
        real_rounds=T,
        decoys=0,
        converged=None,
        round_seconds=round_seconds,
        components=[],
        stats=ch.stats.as_dict(),
    )


async def _threshold_power_trent(
    ch: Channel, params: PowerIterationParams, pk: PublicKey, k: int, seed: SeedLike
) -> TrentResult:
    """Trent in the noisy power method under a group key: the start block in clear, then every round's releases
    relayed to every data party (each sums and decrypts them itself).  He decrypts nothing."""
    T, b = params.dp_rounds, params.block_size
    start = keyed_gaussian(stream_key(seed, "power-iteration", TRENT, "dp-start"), 0, (k, b))
    await ch.send_many(params.data_roles, "v/0", pb.Matrix(rows=k, cols=b, values=start.ravel().tolist()))
    round_seconds = []
    for t in range(T):
        ch.progress(round=t, step="iterate")
        t0 = time.perf_counter()
        await trent_deliver(ch, params, pk, k * b, Tags.power_round(t))
        round_seconds.append(time.perf_counter() - t0)
    return TrentResult(None, [], T, T, 0, None, round_seconds, [], ch.stats.as_dict())


def blind_multiplier(rng: random.Random, offset_bits: int, bits: int) -> int:
    """Trent's Gram blinding as an integer m_int = m_t·2^offset_bits, m_t log-uniform in [1, 2^bits).

    The float draw fixes the top 53 bits; the bits below are filled uniformly."""
    lo, hi = 1 << offset_bits, (1 << (offset_bits + bits)) - 1
    m = int(2.0 ** rng.uniform(offset_bits, offset_bits + bits))
    low = max(0, m.bit_length() - 53)
    if low:
        m = (m >> low << low) | rng.getrandbits(low)
    return min(hi, max(lo, m))


def _contribution_of_round(t: int, role: str) -> str:
    """What a contribution that came with round ``t``'s Gram is called in an error."""
    return f"round/{t} from {role} (its contribution)"


def _sum(vecs: list[EncryptedVector]) -> EncryptedVector:
    acc = vecs[0]
    for v in vecs[1:]:
        acc = acc + v
    return acc


# =============================================================================== plaintext reference
def plaintext_components(blocks: list[np.ndarray], r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(eigenvalues of MMᵀ in decreasing order, U (k × r), X (n × r)) from numpy.linalg.eigh, with the
    protocol's sign convention on every column."""
    M = np.concatenate([np.asarray(b, dtype=np.float64) for b in blocks], axis=1)
    lam, U = np.linalg.eigh(M @ M.T)
    _, X = np.linalg.eigh(M.T @ M)
    U = np.column_stack([sign_convention(U[:, -1 - j]) for j in range(r)])
    X = np.column_stack([sign_convention(X[:, -1 - j]) for j in range(r)])
    return lam[::-1], U, X


def plaintext_reference(blocks: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(u, x) from numpy.linalg.eigh with the same sign convention."""
    _, U, X = plaintext_components(blocks, 1)
    return U[:, 0], X[:, 0]
