"""Differentially private aggregation of locally trained classifiers (seed 003 §4.1.3).

K parties (roles ``party1`` … ``partyK``) each train a linear model ŵ_j on their
own data; a curator Charlie (role ``charlie``) helps; a user Dave (role
``dave``) receives the K + 1 published additive shares and reassembles

    ŵˢ = (1/K) Σ_j ŵ_j + η,

where η is the noise of the party with the *largest sensitivity* (for logistic
regression with a common λ: the smallest data set, n_(1) = min_j n_j), chosen
obliviously: nobody learns any n_j or which party is smallest.

Stages (docs/protocols/dp-aggregate.md has the derivations and "who learns what"):

Stage 1 (``smcdp.primitives.argmin``): blind, permute and a tournament of K − 1
    DGK comparisons over the parties' integer keys k_j = ⌊2^G / Δ_j⌋ (Δ_j = party
    j's L2 sensitivity; for logistic regression k_j = ⌊2^G λ n_j⌋, a public
    increasing function of n_j, so the argmin is the seed's smallest database).
    Charlie ends with the winner's position in the parties' secret order π₁.
Stage 2: Charlie encrypts the indicator of that position under his own key ζ
    and sends entry k, with a zero-knowledge proof that it is 0 or 1, to party
    k, which forwards it to the party whose value sits at position k.  Party j
    contributes ζ(v_j·N_j + Y_j) -- its own fixed-point noise vector N_j
    (packed into few ciphertexts) and Y_j = W_j − t_j + z_j mod M, its rounded
    model minus the share t_j it will publish, plus a zero-sum ring mask z_j --
    and ζ(v_j·k_j); the parties multiply everything up a binary tree.  party1
    checks that the indicator's entries add up to 1 (Charlie opens their
    product), so the product keeps exactly one party's noise, and the selected
    key ζ(k_sel) goes back down the tree.
Stage 2½ (``smcdp.primitives.argmin.check_selection_*``): every party checks
    k_sel ≤ k_j with the next party in a ring and a verifiable decryption by
    Charlie; a party whose data needs more noise than the selected one refuses
    (a malicious Charlie cannot pick a less noisy party).
Stage 3: party1 adds a fresh ζ(s) (s uniform with κ extra bits), Charlie
    decrypts X + s = Σ_j Y_j + N_sel + s; the K + 1 published shares are
    Charlie's (X + s) mod M, party1's t_1 − s and party j's t_j: a uniformly
    random additive sharing of T = Σ_j W_j + N_sel modulo the public M = 2^m,
    after O(K·d) values sent in all (K(K+1) vectors when Charlie sent every party the whole selection vector).  Each
    participant writes its share durably and publishes it (to Dave).  Dave adds
    the shares mod M and divides by 2^F·K: ŵˢ.

Noise calibration (docs/protocols/dp-aggregate.md, "Sensitivity of the released average and the
noise"): ν = K·η is drawn by the party as
``VectorMechanism(ε, Δ̂_j + √d·2^-F)`` -- density ∝ exp(−ε‖ν‖/Δ) -- on the sum,
i.e. η on the average is calibrated to Δ̂_j/K, the exact sensitivity of the
released average (``calibration="exact"``, the default).  ``calibration="seed"``
reproduces the seed (per-coordinate Laplace with scale 2Δ/ε on the average,
i.e. 2/(n_(1) ε λ) for logistic regression) for Fig. 4.6 only.  The public
fixed-point grid 2^-F is chosen from public parameters so that every party's
noise lattice is at least as fine as it: the release is then an exact
post-processing of the mechanism's output (no floating-point side channel, and
the grid reveals nothing about n_(1)).

Shared noise (``calibration="gaussian"``, docs/protocols/dp-aggregate.md, "Shared
noise"): the selection runs as above, but then every party learns k_sel itself
(Charlie opens it masked), refuses a k_sel above its own key, and adds a share
N_j ~ N_Z(0, σ²/h)^d of (ε, δ) Gaussian noise for Δ̂_sel, drawn on the grid, to its
own contribution; T = Σ_j W_j + Σ_j N_j.  No coalition of Charlie and up to K − h
data parties can subtract the honest parties' shares, which carry at least one
curator's σ² (Kairouz, Liu & Steinke's distributed discrete Gaussian).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any, NoReturn

import gmpy2
import numpy as np
from gmpy2 import mpz
from numpy.typing import ArrayLike

from smcdp._files import atomic_write_json
from smcdp._numbers import real
from smcdp.crypto.codec import bigints, ciphertext_from_proto, ciphertext_to_proto, from_bigints
from smcdp.crypto.dgk import DGKPrivateKey
from smcdp.crypto.encoding import Packing
from smcdp.crypto.paillier import PrivateKey, PublicKey
from smcdp.crypto.vector import EncryptedVector
from smcdp.crypto.zkp import (
    ANY_KEY_CHUNKS,
    bit_proof_any_key_size,
    modulus_proof_size,
    open_ciphertext,
    prove_bit_any_key,
    verify_bit_any_key,
    verify_opening,
)
from smcdp.dp.conversions import distributed_gaussian_tau, rho_capacity
from smcdp.dp.learners.logistic_bounds import certified_slack, certified_tolerance
from smcdp.dp.mechanisms import (
    LaplaceMechanism,
    VectorMechanism,
)
from smcdp.dp.samplers import ceil_sqrt, discrete_gaussian, resolve_rng
from smcdp.dp.validation import InvalidParameter, check_positive, clip_rows_to_norm
from smcdp.errors import CryptoOverflow, InputRejected, InvalidMessage
from smcdp.net.channel import Channel
from smcdp.net.limits import TrafficEnvelope, ciphertext_vector_bytes
from smcdp.primitives.argmin import (
    CHARLIE as CHARLIE,  # the curator's role name, part of this protocol's interface
)
from smcdp.primitives.argmin import (
    MAX_PARTIES,
    PartyArgminResult,
    SecureMinParams,
    argmin_curator,
    argmin_party,
    check_selection_curator,
    check_selection_helper,
    check_selection_party,
    party_dgk_key,
    reveal_selection_party,
    tree_children,
    tree_parent,
    tree_size,
)
from smcdp.primitives.rng import Drbg, DrbgRandom, SeedLike, noise_source, protocol_rng
from smcdp.protocols.base import ProtocolParams
from smcdp.protocols.power_iteration_threshold import (
    FIRST_ECHO_BYTES,
    check_noise_share,
    digest_set_bytes,
    echo_relay_bytes,
    echo_to_trent_bytes,
    relay_entry_bytes,
    relay_envelope,
    validate_group_params,
)
from smcdp.v1 import messages_pb2 as pb

# scipy and the learners (scikit-learn) are imported where they are used: every party process imports
# this plug-in at start-up, and those imports cost more than a second of CPU there, mostly in parties that
# never train a classifier.  The first session that needs them pays it once.

DAVE = "dave"
PROTOCOL = "dp-aggregate"
CALIBRATIONS = ("exact", "seed", "gaussian")
#: calibration "gaussian": the public grid resolves the largest admissible sensitivity to this many bits
GAUSSIAN_GRID_BITS = 40
#: calibration "gaussian": sigma is raised by this factor beyond what the zCDP capacity needs (the capacity's
#: floating-point root finding, the Kairouz–Liu–Steinke correction, the rounding of sigma^2 to integers)
GAUSSIAN_MARGIN = 2.0**-20
#: the Kairouz–Liu–Steinke correction τ√d may add at most this fraction of Δ/σ (as in power iteration)
KLS_MARGIN = 2.0**-30
#: the tag of a publisher's share to Dave.  For a data party this is the release point: before
#: it, nothing that leaves the party lets anyone (short of collusion) compute the noisy model;
#: once it is sent, Dave may hold every share (see docs/governance.md)
SHARE_TAG = "s3/share"
#: k_j = floor(2^SENS_PRECISION_BITS / Δ_j)
SENS_PRECISION_BITS = 48
#: k_j < 2^SENS_KEY_BITS
SENS_KEY_BITS = 80
#: the noise bound is exceeded with probability below 2^-NOISE_TAIL_BITS
NOISE_TAIL_BITS = 64
#: safety factor on the largest sensitivity used to choose the public grid
_GRID_SLACK = 1.0 + 2.0**-14


# =============================================================================== parameters
@dataclass
class DPAggregateParams(ProtocolParams):
    """Public parameters, agreed by every participant."""

    protocol_name = "dp-aggregate"

    n_parties: int = 3
    dim: int = 2  # d: length of every model vector
    epsilon: float = 1.0
    lam: float = 0.01  # λ of the local logistic objective (plugin) / default bound
    calibration: str = "exact"  # "exact" (default), "seed" (reproduces the seed, not ε-DP in general), or
    # "gaussian": every party adds a share of (ε, δ) Gaussian noise, so no coalition removes it (below)
    delta: float | None = None  # "gaussian": the δ of the release
    noise_parties: int = 1  # "gaussian": h, each party adds 1/h of the noise's variance (any h honest carry it)
    min_records: int = 1  # public lower bound on every n_j
    max_sensitivity: float | None = None  # public bound on every Δ_j (default fit_sensitivity(min_records, λ, d))
    weight_bound: float | None = None  # public bound on |ŵ_j| per coordinate (default √(ln 2/λ))
    mask_bits: int = 40  # κ, statistical hiding of every mask
    key_bits: int = 2048  # Paillier ξ (parties) and ζ (Charlie)
    dgk_bits: int = 2048
    dgk_t: int = 224
    packed: bool = True  # pack Stage-2 noise into few ciphertexts
    # --- a group (threshold) key among the data parties instead of party1's xi (calibration "gaussian" only;
    # smcdp.protocols.dp_aggregate_threshold): no Charlie-and-t-parties coalition learns any n_j
    key_group: str | None = None  # the key group every data party holds a share of (smcdp keys generate)
    key_threshold: int | None = None  # t of that group: any t + 1 data parties decrypt, no t of them can
    size_levels: int = 33  # group key: the public levels the selected sensitivity key is rounded down to
    levels_per_octave: int = 4  # group key: levels per doubling of the key (the noise's granularity)

    def validate(self) -> DPAggregateParams:
        def bad(msg: str) -> NoReturn:
            raise InvalidMessage(f"dp-aggregate parameter {msg}")

        for name in ("n_parties", "dim", "min_records", "mask_bits", "key_bits", "dgk_bits", "dgk_t"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                bad(f"{name}={v!r} must be an integer")
        if not 2 <= self.n_parties <= MAX_PARTIES:
            bad(f"n_parties={self.n_parties} must lie in [2, {MAX_PARTIES}]")
        if not 1 <= self.dim <= 100_000:
            bad(f"dim={self.dim} must lie in [1, 100000]")
        # bounded, not only positive and finite: 1e308 overflowed inside the mechanism (INTERNAL), and
        # 1e-308 made the noise bound infinite.  2^-40 .. 2^40 spans every meaningful (and test) value.
        for name in ("epsilon", "lam"):
            real(getattr(self, name), f"dp-aggregate parameter {name}", 2.0**-40, 2.0**40)
        if self.calibration not in CALIBRATIONS:
            bad(f"calibration={self.calibration!r} must be one of {CALIBRATIONS}")
        if not 1 <= self.min_records <= 1 << 40:
            bad(f"min_records={self.min_records} must lie in [1, 2^40]")
        for name in ("max_sensitivity", "weight_bound"):
            v = getattr(self, name)
            if v is not None:
                real(v, f"dp-aggregate parameter {name} (a number, or unset)", 0.0, 2.0**128, lo_open=True)
        if not isinstance(self.packed, bool):
            bad("packed must be a boolean")
        if isinstance(self.noise_parties, bool) or not isinstance(self.noise_parties, int):
            bad(f"noise_parties={self.noise_parties!r} must be an integer")
        if self.calibration == "gaussian":
            if self.delta is None:
                bad("delta must be set with calibration='gaussian' (the release is (epsilon, delta)-DP)")
            real(self.delta, "dp-aggregate parameter delta", 2.0**-1000, 0.5)
            if not 1 <= self.noise_parties <= self.n_parties:
                bad(f"noise_parties={self.noise_parties} must lie in [1, n_parties={self.n_parties}]")
            if not self.rho_capacity > 0:  # (1e-12, 1e-300), say: no ρ whose conversion stays within ε
                bad(
                    f"epsilon={self.epsilon!r} with delta={self.delta!r} leaves no finite noise level (no zCDP "
                    "rho converts to within it); choose a larger epsilon or delta"
                )
        elif self.delta is not None or self.noise_parties != 1:
            bad(
                "delta and noise_parties belong to calibration='gaussian' (the shared noise); "
                f"calibration={self.calibration!r} draws one party's noise"
            )
        try:  # the local fit's certified tolerance: float64 cannot certify a solve at a tiny λ (public: λ and d)
            local_fit_tolerance(self.dim, float(self.lam))
        except InvalidParameter as exc:
            bad(f"lam={self.lam!r} is too small for the local fit with dim={self.dim}: {exc}")
        if not 2.0 ** (SENS_PRECISION_BITS - SENS_KEY_BITS) <= self.sensitivity_bound <= 2.0**28:
            bad(f"the sensitivity bound {self.sensitivity_bound:g} must lie in [2^-32, 2^28]")
        if self.weight_limit > 2.0**60:
            bad("weight_bound must be below 2^60")
        self._validate_key_group(bad)
        self.secure_min_params().validate()
        F = self.frac_bits
        if not 1 <= F <= 512:
            bad(
                f"the noise scale gives a public grid of 2^-{F}; it must lie in [2^-512, 2^-1] "
                "(epsilon too small or the sensitivity bound too large)"
            )
        if self.slot_bits + 8 > self.key_bits - 4:
            bad(f"key_bits={self.key_bits} is too small for {self.modulus_bits}-bit shares")
        return self

    def _validate_key_group(self, bad: Callable[[str], NoReturn]) -> None:
        """A group key: its name and threshold t together, shared noise only, at most n − t noise parties."""
        for name, lo, hi in (("size_levels", 2, 256), ("levels_per_octave", 1, 64)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                bad(f"{name}={v!r} must be an integer in [{lo}, {hi}]")
        if not validate_group_params(bad, self.key_group, self.key_threshold, self.n_parties):
            return
        if self.calibration != "gaussian":
            bad(
                "key_group needs calibration='gaussian': under a group key every data party adds a share of the "
                "noise (one party's noise would be removed by that party and whoever learns the selection)"
            )
        assert self.key_threshold is not None
        check_noise_share(bad, self.noise_parties, self.n_parties, self.key_threshold, "charlie")

    @property
    def key_kind(self) -> str:
        """ "threshold" (a group key, no party holds the private key) or "single" (party1's key pair ξ)."""
        return "threshold" if self.key_group is not None else "single"

    @property
    def level_keys(self) -> list[int]:
        """Group key: K(0) < K(1) < … < K(L − 1), the public levels a sensitivity key is rounded down to:
        K(ℓ) = ⌊k_0·2^(ℓ/s)⌋ (exact integer roots), k_0 = the key of the largest admissible sensitivity Δ_max,
        which every admissible party's key is at least, s = ``levels_per_octave``."""
        k0, _ = sensitivity_key(self.sensitivity_bound)
        s = self.levels_per_octave
        out = [int(gmpy2.iroot(mpz(k0) ** s << ell, s)[0]) for ell in range(self.size_levels)]
        if any(b <= a for a, b in zip(out, out[1:])):
            raise InvalidMessage("dp-aggregate: the size levels are not distinct; lower levels_per_octave")
        return out

    # -- public derived quantities -------------------------------------------------
    @property
    def party_roles(self) -> list[str]:
        return [f"party{i}" for i in range(1, self.n_parties + 1)]

    @property
    def publishers(self) -> list[str]:
        """The K + 1 participants of the secure sum, in share order."""
        return [CHARLIE, *self.party_roles]

    @property
    def sensitivity_bound(self) -> float:
        """Δ_max: public bound on every party's L2 sensitivity."""
        if self.max_sensitivity is not None:
            return float(self.max_sensitivity)
        # fit_sensitivity of min_records records: every data set of min_records records or more meets it
        return fit_sensitivity(self.min_records, float(self.lam), int(self.dim))

    @property
    def weight_limit(self) -> float:
        """Public bound on every |ŵ_j,i|; for the logistic objective λ‖ŵ‖² ≤ J(0) = ln 2."""
        if self.weight_bound is not None:
            return float(self.weight_bound)
        return math.sqrt(math.log(2.0) / float(self.lam))

    def mechanism(self, sensitivity: float, random_state: Any = None) -> VectorMechanism | LaplaceMechanism:
        """The noise mechanism on the *sum* Σ_j ŵ_j for a party of L2 sensitivity ``sensitivity``."""
        if self.calibration == "exact":
            return VectorMechanism(float(self.epsilon), sensitivity, random_state=random_state)
        return LaplaceMechanism(float(self.epsilon), sensitivity, random_state=random_state)

    def mechanism_sensitivity(self, delta: float, F: int | None = None) -> float:
        """Sensitivity handed to the mechanism for a party with Δ̂ = ``delta`` (rounding up).

        exact: Δ̂ + √d·2^-F -- the released sum moves by ≤ Δ̂ when one record of
        that party changes, plus ≤ √d·2^-F from rounding ŵ_j onto the grid.
        seed:  2K·Δ̂ + d·2^-F -- the seed's Laplace scale 2Δ/ε on the average
        (2/(nελ) for logistic regression), i.e. 2KΔ/ε on the sum.
        """
        F = self.frac_bits if F is None else F
        d = self.dim
        if self.calibration == "exact":
            v = Fraction(delta) + Fraction(math.isqrt(d - 1) + 1, 1 << F)  # ⌈√d⌉·2^-F
        else:
            v = 2 * self.n_parties * Fraction(delta) + d * Fraction(1, 1 << F)
        return _float_up(v)

    @cached_property
    def frac_bits(self) -> int:
        """F: the public grid 2^-F, as coarse as the coarsest noise lattice any allowed party can have
        ("gaussian": the shares are drawn on the grid itself, which resolves Δ_max to GAUSSIAN_GRID_BITS bits)."""
        if self.calibration == "gaussian":
            return GAUSSIAN_GRID_BITS - math.floor(math.log2(self.sensitivity_bound))
        bound = self.sensitivity_bound * _GRID_SLACK
        if self.calibration == "seed":
            bound *= 2 * self.n_parties
        return -self.mechanism(bound, random_state=0).grid_exponent(self.dim)

    @cached_property
    def rho_capacity(self) -> float:
        """ "gaussian": the zCDP ρ whose conversion (Canonne, Kamath & Steinke) is (ε, δ)-DP."""
        assert self.delta is not None
        return rho_capacity(float(self.epsilon), float(self.delta))

    def share_parameters(self, delta_hat: float) -> tuple[int, int]:
        """ "gaussian": (t, q) of one party's share, a discrete Gaussian on the grid with σ_p² = t·q (in grid
        steps) and h·t·q ≥ σ², σ the noise one trusted curator would add to the sum for (ε, δ) when the selected
        sensitivity is ``delta_hat``: σ = (1 + GAUSSIAN_MARGIN)·Δ_g/√(2ρ), Δ_g = Δ̂·2^F + ⌈√d⌉ (one record moves
        ŵ_j by ≤ Δ̂, its rounding onto the grid by ≤ ½ a step per coordinate)."""
        sens = Fraction(delta_hat) * (1 << self.frac_bits) + ceil_sqrt(self.dim)
        sigma2 = sens**2 * Fraction((1.0 + GAUSSIAN_MARGIN) ** 2) / (2 * Fraction(self.rho_capacity))
        share2 = math.ceil(sigma2 / self.noise_parties)
        t = math.isqrt(share2) + 1
        return t, max(-(-share2 // t), 1)

    def check_shared_noise(self, delta_hat: float) -> None:
        """ "gaussian": refuse unless the honest parties' sum of shares protects like one discrete Gaussian of
        their summed variance, up to KLS_MARGIN (Kairouz, Liu & Steinke 2021, Thm. 1), for any number of
        honest parties from h to K: τ_K·√d ≤ KLS_MARGIN·Δ_g/σ."""
        t, q = self.share_parameters(delta_hat)
        sens = delta_hat * 2.0**self.frac_bits + ceil_sqrt(self.dim)
        tau = distributed_gaussian_tau(math.sqrt(t * q), self.n_parties)
        if tau * math.sqrt(self.dim) > KLS_MARGIN * sens / math.sqrt(self.noise_parties * t * q):
            raise InvalidMessage(
                f"dp-aggregate: the selected sensitivity {delta_hat:g} is too small for the public grid 2^-"
                f"{self.frac_bits} (the parties' noise shares would be {math.sqrt(t * q):.3g} grid steps); "
                "lower max_sensitivity"
            )

    @cached_property
    def share_noise_int_bound(self) -> int:
        """ "gaussian": public bound on |N_j,i| (grid steps) of one party's share for any admissible selection,
        exceeded in some coordinate with probability < 2^-64: a discrete Gaussian of parameter σ_p² is
        σ_p²-subgaussian (Canonne, Kamath & Steinke), P[|Y| ≥ x] ≤ 2e^(−x²/2σ_p²)."""
        t, q = self.share_parameters(self.sensitivity_bound * _GRID_SLACK)
        z = math.sqrt(2.0 * (NOISE_TAIL_BITS * math.log(2.0) + math.log(2.0 * self.dim)))
        return math.ceil(math.sqrt(t * q) * z * 1.01) + 1

    @cached_property
    def noise_bound(self) -> float:
        """Public bound on |ν_i| (noise on the sum) a party aborts beyond ("gaussian": the K shares together).

        exact, seed: the noise's 2^-64 tail quantile for any allowed party (``noise_tail_bound``) plus the
        largest shift of the sum one record can cause (``mechanism_sensitivity`` of the largest allowed Δ̂,
        at least the shift in every coordinate).  The margin is what keeps the truncation's cost at the tail's
        chance: a draw within the tail quantile is one the neighbouring data set's mechanism produces too (its
        noise, shifted, stays within the bound), so only draws beyond the quantile -- probability < 2^-64 --
        lack a counterpart, and the release is (ε, 2^-64)-DP; without it, a draw near the bound had none, and
        the cost was e^ε times the abort chance (``smcdp.plugins.dp_aggregate.abort_delta``)."""
        F = self.frac_bits
        if self.calibration == "gaussian":
            return math.ldexp(float(self.n_parties * self.share_noise_int_bound), -F)
        margin = self.mechanism_sensitivity(self.sensitivity_bound * _GRID_SLACK, F) * (1 + 2.0**-20)
        return self.noise_tail_bound + margin

    @cached_property
    def noise_tail_bound(self) -> float:
        """exact, seed: a bound on |ν_i| for every coordinate at once, exceeded with probability < 2^-64 for any
        allowed party (its noise scale is at most the largest allowed sensitivity's)."""
        F = self.frac_bits
        delta = self.sensitivity_bound * _GRID_SLACK
        if self.calibration == "exact":
            s = self.mechanism_sensitivity(delta, F) / float(self.epsilon) * (1 + 2.0**-10)
            from scipy.special import gammainccinv  # lazily: see the imports

            # the Gamma(dim, s) tail of the radius (which bounds every coordinate): stats.gamma.isf(q, dim,
            # scale=s), without importing scipy.stats
            return float(s * gammainccinv(self.dim, 2.0**-NOISE_TAIL_BITS)) * 1.01 + 2.0**-F
        b = self.mechanism_sensitivity(delta, F) / float(self.epsilon) * (1 + 2.0**-10)
        return b * (NOISE_TAIL_BITS * math.log(2.0) + math.log(self.dim)) * 1.01 + 2.0**-F

    @cached_property
    def value_bits(self) -> int:
        """B: |T_i|·2^-F = |Σ_j ŵ_j,i + ν_i| < 2^B."""
        return max(1, math.ceil(math.log2(self.n_parties * self.weight_limit + self.noise_bound)) + 1)

    @property
    def modulus_bits(self) -> int:
        """m: the shares live in Z_M, M = 2^m, and |T| < M/2."""
        return self.frac_bits + self.value_bits + 1

    @property
    def noise_int_bound(self) -> int:
        """2^(F+B) = M/2: every party's |N_i| (and |W_i|) is below it."""
        return 1 << (self.frac_bits + self.value_bits)

    def contribution_bound(self, parties: int) -> int:
        """Bound on a slot of the product of ``parties`` contributions ζ(v_j·N_j + Y_j), Y_j ∈ [0, M)."""
        return parties * ((1 << self.modulus_bits) + self.noise_int_bound)

    @property
    def share_mask_bits(self) -> int:
        """Bits of party1's mask s: κ + 1 beyond |X| < 2K·M ≤ 2^(m + ⌈log₂(K+1)⌉ + 1)."""
        return self.modulus_bits + self.mask_bits + self.n_parties.bit_length() + 1

    @property
    def slot_bits(self) -> int:
        """Packed Stage-2 slots hold X + s with |X| ≤ contribution_bound(K) < 2^share_mask_bits, s < 2^share_mask_bits."""
        return self.share_mask_bits + 2

    def packing(self, pk: PublicKey) -> Packing:
        return Packing.for_key(pk, self.slot_bits) if self.packed else Packing()

    def traffic_envelope(self, role: str) -> TrafficEnvelope:
        """What ``role`` receives at most in one session (smcdp.net.limits), from K, d, the key
        sizes and the derived bit widths; measured transcripts stay below it (tests)."""
        if self.key_group is not None:
            return self._group_envelope(role)
        K, d = self.n_parties, self.dim
        P, Dk = self.key_bits, self.dgk_bits
        sm = self.secure_min_params()
        dgk_ct = Dk // 8 + 8

        def dgk_batch(ell: int) -> int:  # one comparison's largest message
            return (ell + 1) * dgk_ct + 128

        slots = max(1, (P - 5) // self.slot_bits) if self.packed else 1
        psi = ciphertext_vector_bytes(-(-d // slots), P)
        ints = d * (self.modulus_bits // 8 + 4) + 32  # BigInts of d residues mod M
        key = 4 * (max(P, Dk) // 8) + 256
        small = 256
        ct = ciphertext_vector_bytes(1, P)
        if role == DAVE:
            msgs = [(K + 1, ints)]
        elif role == CHARLIE:
            # ξ(a), β(b) and the check's masked key (shared noise: masked k_sel) from every party; from each of
            # the K − 1 evaluators its DGK public key and encrypted bits (it holds the match's key)
            # (its header, key, bits and the output's delta)
            msgs = [(K - 1, dgk_batch(sm.ell)), (K - 1, key), (2 * (K - 1), small), (1, psi), (3 * K, ct), (1, key)]
        else:
            proof = bit_proof_any_key_size(P)
            msgs = [
                (2, dgk_batch(sm.ell)),
                (4, dgk_batch(sm.check_ell)),
                (4, key),  # ξ's key pair, ζ, β and the DGK public key of the party we help check
                (1, proof),
                (1, modulus_proof_size(P)),  # Charlie's proof that ζ's modulus is square-free
                (2, psi),
                (9, ct),
                (2, ciphertext_vector_bytes(2, P)),
                (2, 2 * (P // 8 + 8)),
                (16, small),
            ]
            if self.calibration == "gaussian":  # a mask seed from every other party (_mask_seeds)
                msgs.append((K, small))
        return TrafficEnvelope.from_messages(
            msgs, f"dp-aggregate parameters (K = {K}, d = {d}, {P}-bit Paillier, {Dk}-bit DGK keys)"
        )

    def _group_envelope(self, role: str) -> TrafficEnvelope:
        """What ``role`` receives under a group key (smcdp.protocols.dp_aggregate_threshold): two zero tests and
        the release, each stage committed and relayed by Charlie -- every party's level bits with their bit
        proofs, blinded counts with their scaling proofs, release with its proof of plaintext knowledge -- the
        digests and echoes, the zero tests' partial decryptions, Charlie's partials of the releases' sum."""
        K, d, B = self.n_parties, self.dim, self.key_bits
        s, L = self.levels_per_octave, self.size_levels
        tested = [n for n in (-(-L // s) - 1, s - 1) if n]  # the two zero tests' numbers of levels
        slots = max(1, (B - 5) // self.slot_bits) if self.packed else 1
        release = ciphertext_vector_bytes(-(-d // slots), B)
        pok = 4 * B // 8 + 64  # a proof of plaintext knowledge: a < N², z, w < N
        ct = 2 * B // 8 + 8

        def partial(n_cts: int) -> int:  # a value mod N² per ciphertext, the proof's e and z
            return n_cts * ct + (4 * B + 5000) // 8 + 64

        small, stages = 256, len(tested) * 2 + 1
        msgs: list[tuple[int, ...]]
        where = f"dp-aggregate under a group key (K = {K}, d = {d}, {B}-bit key, {L} size levels)"
        if role == DAVE:
            return TrafficEnvelope.from_messages([(K + 1, d * (self.modulus_bits // 8 + 4) + 32)], where)

        def received(release: int, proof: int, cts: int, proof_ints: int) -> tuple[int, ...]:
            """A stage's releases (``release`` bytes, ``cts`` ciphertexts) and proofs (``proof`` bytes, ``proof_ints``
            integers): Charlie gets K of each from their owners, a data party Charlie's relay of all K
            (RelayedReleases: one message unless they are large, relay_envelope)."""
            if role == CHARLIE:
                return (2 * K, max(release, proof), K * (release + proof))
            return relay_envelope(K, relay_entry_bytes(B, cts, proof_ints))

        # per stage: digests and echoes (Charlie: every party's digest and echo; a data party: Charlie's relay of
        # the digests, the first stage's echoes from the others and the later stages' MACs as Charlie relays
        # them); every party's level bits and bit proofs, blinded counts and scaling proofs, release and proof
        if role == CHARLIE:
            commits = [(stages * K, small), (stages * K, max(small, echo_to_trent_bytes(K)))]
        else:
            commits = [(stages, digest_set_bytes(K)), (K - 1, FIRST_ECHO_BYTES), (stages - 1, echo_relay_bytes(K))]
        msgs = [*commits, received(release, pok, -(-d // slots), 3), (8, small)]
        for n in tested:
            counts = ciphertext_vector_bytes(n, B)
            msgs += [
                received(counts, n * 5 * ct + 64, n, 5 * n),  # level bits and their bit proofs
                received(counts, n * (2 * ct + (B + 280) // 8 + 8) + 32, n, 3 * n),  # blinded counts, scaling proofs
            ]
        if role == CHARLIE:  # party1's key (N, theta, K verification keys mod N², as hex) and share map, the
            # others' hashes of theirs
            msgs += [(1, (K + 2) * (4 * B // 8 + 8) + 1024), (K, small), (K, partial(-(-d // slots)))]
        else:
            msgs += [(K - 1, partial(n)) for n in tested]
        return TrafficEnvelope.from_messages(msgs, where)

    def secure_min_params(self) -> SecureMinParams:
        return SecureMinParams(
            n_parties=self.n_parties,
            value_bits=SENS_KEY_BITS,
            mask_bits=self.mask_bits,
            key_bits=self.key_bits,
            dgk_bits=self.dgk_bits,
            dgk_t=self.dgk_t,
            curator=CHARLIE,
        )


# =============================================================================== results
@dataclass
class PartyResult:
    share: list[str]  # this participant's published share (residues mod 2^m, decimal)
    share_file: str | None
    stats: dict[str, Any] = field(default_factory=dict)
    #: under a group key: the session's key (kind, group, threshold, parties, fingerprint, noise share) and the
    #: smallest party's size level the noise was drawn for (selected, levels, levels_per_octave)
    key: dict[str, Any] | None = None
    size_level: dict[str, Any] | None = None


@dataclass
class CharlieResult:
    share: list[str]
    share_file: str | None
    comparisons: int
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class DaveResult:
    weights: list[float]  # ŵˢ
    shares: list[list[float]]  # K + 1 representatives (× 2^-F) whose plain sum is K·ŵˢ
    shares_mod: list[list[str]]  # the published residues mod 2^m (decimal strings)
    share_modulus: float  # 2^m · 2^-F: shares are defined modulo this
    frac_bits: int
    modulus_bits: int
    n_parties: int
    calibration: str
    epsilon: float
    model_file: str | None
    test_error: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)


# =============================================================================== exact fixed point
def _float_up(x: Fraction) -> float:
    f = float(x)
    if Fraction(f) < x:
        f = math.nextafter(f, math.inf)
    return f


def to_fixed(x: float, F: int) -> int:
    """⌊x·2^F + 1/2⌋ exactly (half-up rounding commutes with shifts by grid points)."""
    num, den = float(x).as_integer_ratio()
    return (2 * num * (1 << F) + den) // (2 * den)


def sensitivity_key(delta: float) -> tuple[int, float]:
    """(k, Δ̂): k = ⌊2^G/Δ⌋ compared in Stage 1, and Δ̂ = 2^G/k ≥ Δ (rounded up)."""
    num, den = float(delta).as_integer_ratio()
    k = ((1 << SENS_PRECISION_BITS) * den) // num
    if not 1 <= k < 1 << SENS_KEY_BITS:
        raise InvalidMessage(f"sensitivity {delta:g} is outside the supported range")
    return k, _float_up(Fraction(1 << SENS_PRECISION_BITS, k))


def indicator_context(session_id: str, position: int) -> bytes:
    """What the proof of the Stage-2 indicator's entry ``position`` is bound to (no replay into
    another session or another entry)."""
    return f"smcdp/dp-aggregate/s2/u/{session_id}".encode() + position.to_bytes(4, "big")


def ring_mask(seed: bytes, d: int, M: int) -> list[int]:
    """The d residues mod M a ring seed expands to (ChaCha20, ``smcdp.primitives.rng``)."""
    rs = DrbgRandom(Drbg(seed))
    return [rs.randrange(M) for _ in range(d)]


def write_durable(path: Path, obj: Any) -> str:
    """Atomic, durable, owner-only (0600) write of a published JSON object (see smcdp._files)."""
    return str(atomic_write_json(path, obj, 0o600))


# =============================================================================== Stage 3 (everyone but Dave)
async def publish_share(
    ch: Channel, share: list[int], params: DPAggregateParams, output_dir: Path | None, session: str
) -> tuple[list[str], str | None]:
    """Write this publisher's share durably and send it to Dave."""
    share_s = [str(v) for v in share]
    path = None
    if output_dir is not None:
        path = write_durable(
            Path(output_dir) / f"dp-aggregate-share-{ch.role}.json",
            {
                "kind": "smcdp-dp-aggregate-share",
                "version": 1,
                "session_id": session,
                "publisher": ch.role,
                "index": params.publishers.index(ch.role),
                "n_parties": params.n_parties,
                "frac_bits": params.frac_bits,
                "modulus_bits": params.modulus_bits,
                "share": share_s,
            },
        )
    await ch.send(DAVE, SHARE_TAG, bigints(share))
    return share_s, path


# =============================================================================== data party
async def data_party(
    ch: Channel,
    weights: ArrayLike,
    sensitivity: float,
    params: DPAggregateParams,
    *,
    seed: SeedLike = None,
    allow_insecure_keys: bool = False,
    output_dir: Path | None = None,
    noise_random_state: Any = None,
    dgk_key: DGKPrivateKey | None = None,
) -> PartyResult:
    """Role ``party<j>``: holds a locally trained linear model ŵ_j and its L2 sensitivity Δ_j.

    ``sensitivity`` is the largest ‖ŵ_j − ŵ_j'‖₂ over data sets that differ from
    this party's in one record (for the logistic objective: 1/(n_j λ)).
    ``noise_random_state``: overrides the noise source (tests); default: the
    OS CSPRNG, or a per-role generator derived from ``seed``.  ``dgk_key``: this
    party's DGK key pair for its Stage 1 match and the selection check (default: a fresh one).
    """
    params.validate()
    roles = params.party_roles
    if ch.role not in roles:
        raise InvalidMessage(f"role {ch.role!r} is not a data party of this session")
    me, F = roles.index(ch.role), params.frac_bits
    w, sensitivity = checked_model(ch.role, weights, sensitivity, params)
    key, delta_hat = sensitivity_key(sensitivity)
    rng = protocol_rng(seed, "dp-aggregate", ch.role)
    sm = params.secure_min_params()

    # --- Stage 1: secure argmin of the keys (largest sensitivity = smallest key).
    ch.progress(round=1, step="secure-min")
    if dgk_key is None:  # one key pair for its Stage 1 match and its Stage 2½ check (the holder in both)
        dgk_key = party_dgk_key(sm, seed, ch.role, allow_insecure_keys)
    s1 = await argmin_party(ch, key, sm, seed=seed, dgk_key=dgk_key, allow_insecure_keys=allow_insecure_keys)
    zeta_pk = s1.zeta_pk

    if noise_random_state is None:
        noise_random_state = noise_source(seed, "dp-aggregate", "noise", ch.role)
    W = [to_fixed(x, F) for x in w]
    if params.calibration == "gaussian":
        t, agg = await _shared_noise_stages(ch, rng, zeta_pk, s1, W, key, me, params, noise_random_state, seed)
    else:
        # Our own noise ν_j for the sum, calibrated to our own Δ̂_j, on the public grid 2^-F.
        N = [to_fixed(x, F) for x in _own_noise(ch.role, params, delta_hat, noise_random_state)]

        # --- Stage 2, steps 1-2: our entry of Charlie's indicator, checked and forwarded; v_j.
        ch.progress(round=2, step="noise-selection")
        u_mine, v_j = await _indicator_entry(ch, zeta_pk, me, s1, roles)
        # --- Stage 2, step 3: our contribution and the selection check's ζ(v_j·k_j).
        seeds = await _mask_seeds(ch, rng, me, params, pairwise=False)
        agg, t, sel = _contribution(rng, zeta_pk, v_j, N, W, key, params, seeds)
        assert sel is not None  # one party's noise: the contribution comes with ζ(v_j·k_j)
        # --- Stage 2, steps 4-5: multiply up the parties' tree; party1 checks the indicator; the selected key
        # comes back down.
        agg = await _add_up_the_tree(ch, zeta_pk, agg, me, params)
        sel = await _select_up_the_tree(ch, zeta_pk, *_masked_selection(zeta_pk, seeds, sel, u_mine), me, params)

        # --- Stage 2½: the selected key is at most ours, whatever Charlie did (with the next party in the ring).
        ch.progress(step="selection-check")
        await _check_the_selection(ch, sel, key, sm, zeta_pk, dgk_key, seed, allow_insecure_keys)
    await _everyone_passed(ch, me, params)

    # --- Stage 3: party1 masks the total with s (κ bits beyond its range) for Charlie; the shares.
    ch.progress(round=3, step="publish")
    if me == 0:
        t = await _mask_total_for_charlie(ch, rng, zeta_pk, agg, t, params)
    share, path = await publish_share(ch, t, params, output_dir, ch.session_id)
    return PartyResult(share=share, share_file=path, stats=ch.stats.as_dict())


def checked_model(
    role: str, weights: ArrayLike, sensitivity: float, params: DPAggregateParams
) -> tuple[np.ndarray, float]:
    """The party's model and sensitivity, within the session's public bounds.

    A weight beyond the public bound is clipped to it, not refused: a refusal would end the session on whether the
    data met a bound the proposer chose -- one bit a session, and a proposer moving ``weight_bound`` from session to
    session read the largest weight (a review: to ten digits in 40 sessions).  Clipping each coordinate to
    [−B, B] is the projection onto a box, which moves no two models further apart in any coordinate, so the noise
    calibrated to the sensitivity still covers it."""
    d = params.dim
    w = np.asarray(weights, dtype=np.float64).reshape(-1) if np.ndim(weights) else None
    if w is None or w.size != d:
        raise InvalidMessage(f"{role}: the model must be a vector of length {d}")
    if not np.all(np.isfinite(w)):
        raise InvalidMessage(f"{role}: the model contains NaN or infinite values")
    w = np.clip(w, -params.weight_limit, params.weight_limit)
    try:
        sensitivity = float(sensitivity)
    except (TypeError, ValueError):
        raise InvalidMessage(f"{role}: sensitivity must be a number") from None
    if not (math.isfinite(sensitivity) and 0 < sensitivity <= params.sensitivity_bound):
        raise InputRejected(
            f"{role}: the model's sensitivity must lie in (0, {params.sensitivity_bound:g}] "
            "(too few records for the public min_records?)",
            f"sensitivity {sensitivity!r}",
        )
    return w, sensitivity


def _own_noise(role: str, params: DPAggregateParams, delta_hat: float, random_state: Any) -> np.ndarray:
    """ν_j: this party's noise for the sum, calibrated to its own Δ̂_j, on the public grid 2^-F."""
    d, F = params.dim, params.frac_bits
    mech = params.mechanism(params.mechanism_sensitivity(delta_hat), random_state=random_state)
    if mech.grid_exponent(d) > -F:
        raise InvalidMessage(f"{role}: internal error: the noise lattice is coarser than the public grid")
    nu = np.asarray(mech.sample(d), dtype=np.float64).reshape(-1)
    if not np.all(np.abs(nu) <= params.noise_bound):
        raise InvalidMessage(
            f"{role}: the noise exceeded its public bound (probability < 2^-{NOISE_TAIL_BITS}); run the session again"
        )
    return nu


async def _indicator_entry(
    ch: Channel, zeta_pk: PublicKey, me: int, s1: PartyArgminResult, roles: list[str]
) -> tuple[mpz, mpz]:
    """Stage 2, steps 1-2: entry ``me`` of Charlie's indicator (position order) with its proof that it is 0 or
    1; it belongs to the party whose value sits at position ``me`` (π₁⁻¹(me)), ours comes from the party at
    our position π₁(me).  Returns (the entry Charlie sent us, ours: v_j)."""
    u_mine = ciphertext_from_proto(await ch.recv(CHARLIE, "s2/u", pb.CiphertextVector), zeta_pk, "s2/u from charlie")
    proof = from_bigints(
        await ch.recv(CHARLIE, "s2/u-proof", pb.BigInts),
        count=4 * ANY_KEY_CHUNKS,
        bound_bits=zeta_pk.bits,
        what="s2/u-proof from charlie",
        nonnegative=True,
    )
    # ζ is Charlie's own key, checked for its size only: the proof must hold whatever its modulus (a crafted one
    # passed a 128-bit-challenge proof by grinding and let him read our exponents modulo a small factor of it)
    if not verify_bit_any_key(zeta_pk, u_mine, proof, indicator_context(ch.session_id, me)):
        raise InvalidMessage(
            "s2/u from charlie is not proven to encrypt 0 or 1 (or his key ζ has a prime factor below "
            "2^16): refusing a noise selection that may add no noise, a multiple of one, or read our values"
        )
    if s1.source != me:  # re-randomised: our masked term ζ(u)·g^μ' must not reveal μ' to the receiver
        await ch.send(roles[s1.source], "s2/v", ciphertext_to_proto(zeta_pk, zeta_pk.rerandomize_textbook(u_mine)))
    v_j = (
        u_mine
        if s1.position == me
        else ciphertext_from_proto(
            await ch.recv(roles[s1.position], "s2/v", pb.CiphertextVector), zeta_pk, f"s2/v from {roles[s1.position]}"
        )
    )
    return u_mine, v_j


def _contribution(
    rng: random.Random,
    zeta_pk: PublicKey,
    v_j: mpz | None,
    N: list[int],
    W: list[int],
    key: int,
    params: DPAggregateParams,
    seeds: list[tuple[bytes, int]],
) -> tuple[EncryptedVector, list[int], mpz | None]:
    """Stage 2, step 3: our contribution ζ(v_j·N_j + Y_j), Y_j = W_j − t_j + ρ_j − ρ_(j−1) mod M, where t_j is
    the share we will publish and ρ_j, ρ_(j−1) are expanded from the ring seeds we share with our neighbours
    (they cancel in the sum); and ζ(v_j·k_j) for the selection check.  Returns (ζ(…), t_j, ζ(v_j·k_j)).
    Shared noise (``v_j`` None): ζ(Y_j) with our share N_j inside Y_j = W_j + N_j − t_j + Σ_k ±ρ_{jk}, masks
    from a seed shared with *every* other party, and no ζ(v_j·k_j).  ``seeds``: our mask seeds, exchanged
    already (:func:`_mask_seeds`: the selection's masks come from them too)."""
    d, F = params.dim, params.frac_bits
    M = 1 << params.modulus_bits
    packing = params.packing(zeta_pk)
    mask = zero_sum_mask(seeds, d, M)
    t = [rng.randrange(M) for _ in range(d)]
    inside = [0] * d if v_j is not None else N  # the shared noise share travels inside Y_j
    Y = [(Wi + ni - ti + mi) % M for Wi, ni, ti, mi in zip(W, inside, t, mask)]
    plain_y = packing.pack(Y) if packing.packed else Y
    if v_j is None:
        cts = [zeta_pk.raw_encrypt_textbook(b) for b in plain_y]
    else:
        plain_n = packing.pack(N) if packing.packed else N
        cts = [
            zeta_pk.raw_add(zeta_pk.raw_mul(v_j, a), zeta_pk.raw_encrypt_textbook(b)) for a, b in zip(plain_n, plain_y)
        ]
    agg = EncryptedVector(zeta_pk, cts, d, -F, packing, params.contribution_bound(1))
    sel = None if v_j is None else zeta_pk.rerandomize_textbook(zeta_pk.raw_mul(v_j, key))
    return agg, t, sel


async def _mask_seeds(
    ch: Channel, rng: random.Random, me: int, params: DPAggregateParams, *, pairwise: bool
) -> list[tuple[bytes, int]]:
    """The seeds of our zero-sum masks, each with its sign (+1: ours, −1: a lower party's): the K parties' masks add
    up to 0.  The ring (one party's noise): ρ_j − ρ_(j−1), ρ_j from the seed we send our successor -- Charlie with
    our tree parent and both ring neighbours can remove it, which leaves W_j + v_j·N_j.  Pairwise (shared noise):
    Σ_{k>j} ρ_{jk} − Σ_{i<j} ρ_{ij}, one seed per pair of parties drawn by the lower index -- any sum of
    contributions the coalition can see is masked unless every party outside it colludes, so it always carries
    every honest party's share (K − 1 seeds a party)."""
    roles, K = params.party_roles, params.n_parties
    ours = [rng.randbytes(32) for _ in range(me + 1, K)] if pairwise else [rng.randbytes(32)]
    to = list(range(me + 1, K)) if pairwise else [(me + 1) % K]
    await asyncio.gather(*(ch.send(roles[k], "s2/seed", pb.Blobs(values=[sd])) for k, sd in zip(to, ours)))
    theirs = []
    for i in range(me) if pairwise else [(me - 1) % K]:
        got = list((await ch.recv(roles[i], "s2/seed", pb.Blobs)).values)
        if len(got) != 1 or len(got[0]) != 32:
            raise InvalidMessage(f"s2/seed from {roles[i]} must be one 32-byte seed")
        theirs.append(got[0])
    return [(x, 1) for x in ours] + [(x, -1) for x in theirs]


def zero_sum_mask(seeds: list[tuple[bytes, int]], d: int, M: int, purpose: bytes = b"") -> list[int]:
    """Our mask: d residues mod M from the signed ``seeds`` (:func:`_mask_seeds`); the K parties' masks add up to
    0 mod M.  ``purpose``: another, independent mask from the same seeds (its expansion's seed is
    SHA-256(purpose ‖ seed)); empty: the contributions' mask."""
    mask = [0] * d
    for sd, sign in seeds:
        if purpose:
            sd = hashlib.sha256(purpose + sd).digest()
        mask = [(m + sign * r) % M for m, r in zip(mask, ring_mask(sd, d, M))]
    return mask


async def _add_up_the_tree(
    ch: Channel, zeta_pk: PublicKey, agg: EncryptedVector, me: int, params: DPAggregateParams
) -> EncryptedVector:
    """Stage 2, step 4 (the contributions): party i adds the sums of parties 2i and 2i + 1 to its own and passes
    the result on to its parent.  Returns ζ(the subtree's sum) (the whole sum at party1)."""
    roles, K, d, F = params.party_roles, params.n_parties, params.dim, params.frac_bits
    packing = params.packing(zeta_pk)
    for c in tree_children(me, K):
        agg = agg + EncryptedVector.from_proto(
            await ch.recv(roles[c], "s2/agg", pb.CiphertextVector),
            zeta_pk,
            length=d,
            exponent=-F,
            packing=packing,
            bound=params.contribution_bound(tree_size(c, K)),
            what=f"s2/agg from {roles[c]}",
        )
    parent = tree_parent(me)
    if parent is not None:
        await ch.send(roles[parent], "s2/agg", agg.to_proto())
    return agg


async def _select_up_the_tree(
    ch: Channel, zeta_pk: PublicKey, sel: mpz, ind: mpz, me: int, params: DPAggregateParams
) -> mpz:
    """Stage 2, steps 4-5 (the selection): the products of ζ(v_j·k_j) and of the indicator's entries go up the tree;
    party1, at the root, checks Charlie's indicator adds up to 1; the selected key ζ(k_sel) comes back down.
    ``ind``: our entry of the indicator as Charlie sent it (their product opens to 1).  Returns ζ(k_sel)."""
    roles, K = params.party_roles, params.n_parties
    for c in tree_children(me, K):
        pair = EncryptedVector.from_proto(
            await ch.recv(roles[c], "s2/agg-sel", pb.CiphertextVector),
            zeta_pk,
            length=2,
            exponent=0,
            packing=Packing(),
            what=f"s2/agg-sel from {roles[c]}",
        )
        sel, ind = zeta_pk.raw_add(sel, pair.ciphertexts[0]), zeta_pk.raw_add(ind, pair.ciphertexts[1])
    parent = tree_parent(me)
    if parent is not None:
        await ch.send(roles[parent], "s2/agg-sel", EncryptedVector(zeta_pk, [sel, ind], 2, 0, Packing()).to_proto())
        sel = ciphertext_from_proto(
            await ch.recv(roles[parent], "s2/sel", pb.CiphertextVector), zeta_pk, f"s2/sel from {roles[parent]}"
        )
    else:
        # party1: the indicator's K entries add up to 1 (Charlie opens their product), so exactly one
        # party's noise and key survive in the products (each entry is 0 or 1, proven to its receiver)
        (opening,) = from_bigints(
            await ch.recv(CHARLIE, "s2/u-open", pb.BigInts),
            count=1,
            bound_bits=zeta_pk.bits,
            what="s2/u-open from charlie",
            nonnegative=True,
        )
        if not verify_opening(zeta_pk, ind, 1, opening):
            raise InvalidMessage(
                "the indicator charlie sent the parties does not add up to 1 (not proven one-hot): "
                "refusing a noise selection that may add no noise"
            )
    for c in tree_children(me, K):
        await ch.send(roles[c], "s2/sel", ciphertext_to_proto(zeta_pk, sel))
    return sel


async def _check_the_selection(
    ch: Channel,
    sel: mpz,
    key: int,
    sm: SecureMinParams,
    zeta_pk: PublicKey,
    dgk_key: DGKPrivateKey | None,
    seed: SeedLike,
    allow_insecure_keys: bool,
) -> None:
    """Stage 2½: the selected key ζ(k_sel) is at most ours, whatever Charlie did -- checked with the next party
    in the ring as helper (``check_selection_party`` / ``check_selection_helper``).  It stops a malicious
    Charlie; a deviating data party can defeat it (docs/protocols/dp-aggregate.md, "A deviating data party")."""
    ok, _ = await asyncio.gather(
        check_selection_party(
            ch, key, sm, zeta_pk=zeta_pk, dgk_key=dgk_key, seed=seed, allow_insecure_keys=allow_insecure_keys
        ),
        check_selection_helper(ch, sel, sm, zeta_pk=zeta_pk, seed=seed, allow_insecure_keys=allow_insecure_keys),
    )
    if not ok:
        refuse_selection(ch.role)


def refuse_selection(role: str) -> NoReturn:
    raise InvalidMessage(
        f"{role}: the noise charlie selected is calibrated for a smaller sensitivity than "
        "this party's (he did not select the party with the largest sensitivity): refusing to "
        "release"
    )


async def _shared_noise_stages(
    ch: Channel,
    rng: random.Random,
    zeta_pk: PublicKey,
    s1: PartyArgminResult,
    W: list[int],
    key: int,
    me: int,
    params: DPAggregateParams,
    noise_random_state: Any,
    seed: SeedLike,
) -> tuple[list[int], EncryptedVector]:
    """Stages 2 and 2½ with shared noise (``calibration="gaussian"``): the selection (Charlie's indicator, the
    tree's product ζ(k_sel), party1's check that it is one-hot) as in the single-noise stages; then every party
    learns k_sel itself (Charlie opens it masked: :func:`reveal_selection_party`), refuses a k_sel above its own
    key, draws its share N_j of the noise for Δ̂_sel on the grid, and the parties add up ζ(W_j + N_j − t_j + ring
    masks).  Returns (t_j, ζ(the subtree's sum))."""
    roles, sm = params.party_roles, params.secure_min_params()
    ch.progress(round=2, step="noise-selection")
    u_mine, v_j = await _indicator_entry(ch, zeta_pk, me, s1, roles)
    # the pairwise seeds now: they mask the selection's products up the tree as well as the contributions
    seeds = await _mask_seeds(ch, rng, me, params, pairwise=True)
    term = zeta_pk.rerandomize_textbook(zeta_pk.raw_mul(v_j, key))
    sel = await _select_up_the_tree(ch, zeta_pk, *_masked_selection(zeta_pk, seeds, term, u_mine), me, params)
    ch.progress(step="selection-check")
    k_sel = await reveal_selection_party(ch, sel, sm, zeta_pk=zeta_pk, seed=seed)
    if not 1 <= k_sel <= key:
        refuse_selection(ch.role)
    N = shared_noise(ch.role, params, k_sel, noise_random_state)
    agg, t, _ = _contribution(rng, zeta_pk, None, N, W, key, params, seeds)
    return t, await _add_up_the_tree(ch, zeta_pk, agg, me, params)


#: the selection's masks: a subtree's products ζ(Σ v_i·k_i) and ζ(Σ u_i) -- 0, k_sel or 1, read by whoever had
#: Charlie open or publish them (a parent holds its children's) -- carry the subtree's share of a zero-sum mask mod
#: n, so a value Charlie opens is one of them only with probability about 2^(check_mask_bits + 1)/n
SELECTION_MASK = b"smcdp/dp-aggregate/selection-mask/"


def _masked_selection(pk: PublicKey, seeds: list[tuple[bytes, int]], sel: mpz, ind: mpz) -> tuple[mpz, mpz]:
    """Our terms of the selection's two products, ζ(v_j·k_j) and our indicator entry ζ(u), each plus our share of
    a zero-sum mask mod n (:data:`SELECTION_MASK`, from the contributions' seeds)."""
    sel_mask, ind_mask = zero_sum_mask(seeds, 2, pk.n, SELECTION_MASK)
    return _plus(pk, sel, sel_mask), _plus(pk, ind, ind_mask)


def _plus(pk: PublicKey, c: mpz, m: int) -> mpz:
    """c · g^m: ``m`` added to c's plaintext without new randomness (c is randomised already; the K masks'
    product is g^(a multiple of n) = 1, so the indicator's product keeps the opening Charlie sends party1)."""
    return pk.raw_add(c, (1 + pk.n * (mpz(m) % pk.n)) % pk.nsquare)  # g^m = 1 + m·n mod n², g = n + 1


def selected_sensitivity(k_sel: int) -> float:
    """Δ̂_sel = 2^G/k_sel (rounded up): the calibration of the selected key, as its party computed it."""
    return _float_up(Fraction(1 << SENS_PRECISION_BITS, k_sel))


def shared_noise(role: str, params: DPAggregateParams, k_sel: int, random_state: Any) -> list[int]:
    """N_j: this party's share of the noise on the sum, in grid steps -- d draws of the discrete Gaussian of
    :meth:`DPAggregateParams.share_parameters` for the selected calibration (exact sampler, CKS 2020)."""
    delta_hat = selected_sensitivity(k_sel)
    params.check_shared_noise(delta_hat)
    t, q = params.share_parameters(delta_hat)
    N = [int(v) for v in discrete_gaussian(t, q, params.dim, resolve_rng(random_state))]
    if any(abs(v) > params.share_noise_int_bound for v in N):
        raise InvalidMessage(
            f"{role}: the noise exceeded its public bound (probability < 2^-{NOISE_TAIL_BITS}); run the session again"
        )
    return N


async def _everyone_passed(ch: Channel, me: int, params: DPAggregateParams) -> None:
    """Nobody publishes (nor is charged) before every party's selection check passed: "ok" up the tree,
    "go" down."""
    roles, K = params.party_roles, params.n_parties
    for c in tree_children(me, K):
        if not (await ch.recv(roles[c], "s2/ok", pb.Flag)).value:
            raise InvalidMessage(f"s2/ok from {roles[c]} is not a pass")
    parent = tree_parent(me)
    if parent is not None:
        await ch.send(roles[parent], "s2/ok", pb.Flag(value=True))
        if not (await ch.recv(roles[parent], "s2/go", pb.Flag)).value:
            raise InvalidMessage(f"s2/go from {roles[parent]} is not a go")
    for c in tree_children(me, K):
        await ch.send(roles[c], "s2/go", pb.Flag(value=True))


async def _mask_total_for_charlie(
    ch: Channel, rng: random.Random, zeta_pk: PublicKey, agg: EncryptedVector, t: list[int], params: DPAggregateParams
) -> list[int]:
    """Stage 3 at party1: ζ(total + s) to Charlie, s drawn κ bits beyond the total's range; party1's share
    becomes t_1 − s (mod M), so the shares still add up to the released model."""
    d, F, M = params.dim, params.frac_bits, 1 << params.modulus_bits
    packing = params.packing(zeta_pk)
    s = [rng.randrange(1 << params.share_mask_bits) for _ in range(d)]
    masked = agg + EncryptedVector(
        zeta_pk,
        [zeta_pk.raw_encrypt_textbook(P) for P in (packing.pack(s) if packing.packed else s)],
        d,
        -F,
        packing,
        (1 << params.share_mask_bits) - 1,
    )
    await ch.send(CHARLIE, "s2/psi", masked.to_proto())
    return [(ti - si) % M for ti, si in zip(t, s)]


# =============================================================================== Charlie
async def charlie(
    ch: Channel,
    params: DPAggregateParams,
    *,
    seed: SeedLike = None,
    allow_insecure_keys: bool = False,
    output_dir: Path | None = None,
    zeta_key: PrivateKey | None = None,
    dgk_key: DGKPrivateKey | None = None,
    beta_key: PrivateKey | None = None,
) -> CharlieResult:
    """Role ``charlie``: the untrusted curator.  ``zeta_key``, ``beta_key``, ``dgk_key``: his keys ζ, β (the
    secure minimum's shares) and DGK (default: fresh ones)."""
    params.validate()
    if ch.role != CHARLIE:
        raise InvalidMessage(f"role {ch.role!r} is not charlie")
    K, d, F = params.n_parties, params.dim, params.frac_bits
    roles = params.party_roles
    sm = params.secure_min_params()

    # --- Stage 1.
    ch.progress(round=1, step="secure-min")
    s1 = await argmin_curator(
        ch,
        sm,
        seed=seed,
        zeta_key=zeta_key,
        dgk_key=dgk_key,
        allow_insecure_keys=allow_insecure_keys,
        beta_key=beta_key,
    )
    zeta = s1.zeta_key
    pk = zeta.public_key
    packing = params.packing(pk)

    # --- Stage 2, step 1: entry k of the indicator of the winner's position to party k, with a proof that
    # it is 0 or 1 about the ciphertext that went out (a replayed Charlie re-sends his first encryption);
    # to party1 the opening of their product (to 1).
    ch.progress(round=2, step="noise-selection")

    async def entry(k: int) -> mpz:
        sent = await ch.send(roles[k], "s2/u", ciphertext_to_proto(pk, pk.raw_encrypt_textbook(int(k == s1.position))))
        c = ciphertext_from_proto(pb.CiphertextVector.FromString(sent), pk, "s2/u")
        # 16 powers mod n² an entry: on the default executor's threads, so that the K proofs share the cores
        proof = await asyncio.to_thread(
            prove_bit_any_key,
            zeta,
            c,
            int(k == s1.position),
            indicator_context(ch.session_id, k),
            protocol_rng(seed, "dp-aggregate", "s2/u-proof", str(k)),
        )  # replays alike: one nonce stream an entry
        await ch.send(roles[k], "s2/u-proof", bigints(proof))
        return c

    cts = await asyncio.gather(*(entry(k) for k in range(K)))
    product = cts[0]
    for c in cts[1:]:
        product = pk.raw_add(product, c)
    _, opening = open_ciphertext(zeta, product)
    await ch.send(roles[0], "s2/u-open", bigints([opening]))

    # --- Stage 2½: open the masked selected key for every party's check (shared noise: to the party itself).
    await check_selection_curator(ch, sm, zeta_key=zeta, reveal=params.calibration == "gaussian")

    # --- Stage 3: decrypt X + s; our share is its residue mod M.
    ch.progress(round=3, step="publish")
    hi = params.contribution_bound(K) + (1 << params.share_mask_bits)
    msg = await ch.recv(roles[0], "s2/psi", pb.CiphertextVector)
    vec = EncryptedVector.from_proto(
        msg,
        pk,
        length=d,
        exponent=-F,
        packing=packing,
        bound=min(hi, packing.slot_capacity if packing.packed else pk.max_int),
        what="s2/psi from party1",
    )
    try:
        c = vec.decrypt_ints(zeta)
    except CryptoOverflow:  # a plaintext in (n/3, 2n/3): no total ever is
        c = None
    if c is None or any(not -params.noise_int_bound <= x <= hi for x in c):
        raise InvalidMessage("s2/psi from party1 decrypts to values outside the agreed range")
    M = 1 << params.modulus_bits
    share, path = await publish_share(ch, [x % M for x in c], params, output_dir, ch.session_id)
    return CharlieResult(share=share, share_file=path, comparisons=s1.comparisons, stats=ch.stats.as_dict())


# =============================================================================== Dave
def reassemble(shares: list[list[int]], params: DPAggregateParams) -> tuple[np.ndarray, list[list[float]]]:
    """ŵˢ from the K + 1 published shares, and float representatives summing to K·ŵˢ."""
    M = 1 << params.modulus_bits
    F, K, d = params.frac_bits, params.n_parties, params.dim
    T = []
    for i in range(d):
        t = sum(s[i] for s in shares) % M
        T.append(t - M if t >= M // 2 else t)
    weights = np.array([float(Fraction(t, K << F)) for t in T])
    reps = [[(x - M if x >= M // 2 else x) for x in s] for s in shares[:-1]]
    last = [T[i] - sum(r[i] for r in reps) for i in range(d)]
    floats = [[math.ldexp(float(x), -F) for x in s] for s in reps + [last]]
    return weights, floats


def predict(weights: ArrayLike, X: ArrayLike) -> np.ndarray:
    """Dave's classifier: label +1 if sigmoid(wᵀx) > 1/2, else −1."""
    return np.where(np.asarray(X, dtype=np.float64) @ np.asarray(weights, dtype=np.float64) > 0, 1, -1)


async def dave(
    ch: Channel,
    params: DPAggregateParams,
    *,
    output_dir: Path | None = None,
    test_data: tuple[np.ndarray, np.ndarray] | None = None,
) -> DaveResult:
    """Role ``dave``: collects the K + 1 published shares, adds them, divides by K, classifies."""
    params.validate()
    if ch.role != DAVE:
        raise InvalidMessage(f"role {ch.role!r} is not dave")
    shares: list[list[int]] = []
    for r in params.publishers:
        ch.progress(round=len(shares) + 1, step="collect-shares")  # round i: waiting for the i-th share
        shares.append(
            from_bigints(
                await ch.recv(r, SHARE_TAG, pb.BigInts),
                count=params.dim,
                bound_bits=params.modulus_bits,
                what=f"s3/share from {r}",
                nonnegative=True,
            )
        )
    weights, floats = reassemble(shares, params)
    shares_mod = [[str(v) for v in s] for s in shares]
    test_error = None
    if test_data is not None:
        X, y = test_data
        test_error = float(np.mean(predict(weights, X) != y))
    model_file = None
    if output_dir is not None:
        write_durable(
            Path(output_dir) / "dp-aggregate-shares.json",
            {
                "kind": "smcdp-dp-aggregate-shares",
                "version": 1,
                "session_id": ch.session_id,
                "publishers": params.publishers,
                "frac_bits": params.frac_bits,
                "modulus_bits": params.modulus_bits,
                "shares": shares_mod,
            },
        )
        model_file = write_durable(
            Path(output_dir) / "dp-aggregate-model.json",
            {
                "kind": "smcdp-dp-aggregate-model",
                "version": 1,
                "session_id": ch.session_id,
                "weights": weights.tolist(),
                "epsilon": float(params.epsilon),
                "calibration": params.calibration,
                "n_parties": params.n_parties,
                "classifier": "label +1 iff weights·x > 0",
            },
        )
    return DaveResult(
        weights=weights.tolist(),
        shares=floats,
        shares_mod=shares_mod,
        share_modulus=math.ldexp(1.0, params.modulus_bits - params.frac_bits),
        frac_bits=params.frac_bits,
        modulus_bits=params.modulus_bits,
        n_parties=params.n_parties,
        calibration=params.calibration,
        epsilon=float(params.epsilon),
        model_file=model_file,
        test_error=test_error,
        stats=ch.stats.as_dict(),
    )


# =============================================================================== local training
#: the local fit's solver settings (LogisticRegression's defaults)
LOCAL_FIT_TOL, LOCAL_FIT_MAX_ITER = 1e-8, 10_000
#: the rows the local fit's certified tolerance and slack are computed for, whatever a party's n: their
#: floating-point bounds grow (slowly) with the rows, and bounds for this many hold for any fewer, so that the
#: reported sensitivity is 1/(nλ) plus a term of d and λ alone -- monotone in n (``records_needed`` bisects it)
LOCAL_FIT_ROWS_BOUND = 1 << 62


def local_fit_tolerance(dim: int, lam: float) -> float:
    """The gradient norm the local fit certainly reaches: LOCAL_FIT_TOL, or the floor float64 can certify for d and
    λ if that is larger (:func:`~smcdp.dp.learners.logistic_bounds.certified_tolerance`; tiny λ only)."""
    return certified_tolerance(LOCAL_FIT_TOL, LOCAL_FIT_ROWS_BOUND, int(dim), 2.0 * float(lam))


def fit_sensitivity(n: int, lam: float, dim: int) -> float:
    """The L2 sensitivity a party reports for its fit of n records of d features: 1/(nλ) + s/λ.

    1/(nλ) for the exact minimiser; the local fit is the DP learners' certified solve (docs/dp-learners.md, "A
    private fit always arrives"): it always stops at a computed gradient norm ≤ :func:`local_fit_tolerance`, so the
    true one is at most s = :func:`~smcdp.dp.learners.logistic_bounds.certified_slack` of it (the norm's rounding
    and the gradient's floating-point error), the returned point is within s/(2λ) of the minimiser and two
    neighbouring fits within 1/(nλ) + s/λ of each other.  A function of n, d and λ alone, whatever the data --
    a party of :func:`records_needed` records meets the session's bound whatever its data (docs/governance.md,
    "Bounds on a party's data").  (Until 2026-12-05 it was 1/(nλ) + max(g, 10⁻⁸)/λ with g the attained norm: a
    fit that stopped short reported a sensitivity computed from its data, and g's own error was left out.)"""
    return 1.0 / (n * lam) + _slack_term(lam, dim)


def _slack_term(lam: float, dim: int) -> float:
    """s/λ of :func:`fit_sensitivity`: the same for every n."""
    slack = certified_slack(local_fit_tolerance(dim, lam), LOCAL_FIT_ROWS_BOUND, int(dim), 2.0 * float(lam))
    return slack / lam


def records_needed(sensitivity_bound: float, lam: float, dim: int) -> int:
    """The fewest records whose :func:`fit_sensitivity` is within ``sensitivity_bound``, by the same
    floating-point expression the check uses (2^62 when none is).  A bisection over [1, 2^62]: the expression
    is monotone in n, and a proposer's ``max_sensitivity`` a hair above the slack term s/λ puts the answer where
    neighbouring n give the same float (a step-by-step search from an estimate ran for minutes there)."""
    slack = _slack_term(lam, dim)  # fit_sensitivity's expression, with its n-free term computed once

    def sensitivity(n: int) -> float:
        return 1.0 / (n * lam) + slack

    top = 1 << 62
    if not sensitivity(top) <= sensitivity_bound:
        return top
    lo, hi = 0, top  # sensitivity(hi) <= bound; lo is below the answer (0: no fit at all)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if sensitivity(mid) <= sensitivity_bound:
            hi = mid
        else:
            lo = mid
    return hi


def train_local(X: np.ndarray, y: np.ndarray, lam: float) -> tuple[np.ndarray, float]:
    """Non-private fit of (1/n)Σ log(1+exp(−y wᵀx)) + λ‖w‖² and its L2 sensitivity (:func:`fit_sensitivity`).

    Labels in {−1, +1} or {0, 1} (1 is the positive class).  A data set of one label is fitted like any other (the
    regularised objective has its unique minimiser, and the sensitivity's derivation does not need both labels):
    refusing it made replacing a site's only positive record end the session -- a bit about the data that no
    budget covered (a review)."""
    # the solver the DP learners use, without scikit-learn (a data party would import it for this fit alone):
    # the weights of LogisticRegression(epsilon=inf, lam=lam, data_norm=1.0, fit_intercept=False,
    # out_of_bounds="raise", tol=1e-8, max_iter=10_000).fit(X, y) whenever local_fit_tolerance(d, lam) is that
    # 1e-8 and Newton reaches it (a unit test checks them bit for bit), by the certified solve, which also finishes
    # a fit that Newton did not; at a tiny lam (≲ 1e-5) the certified tolerance is above 1e-8 and the fit stops
    # there, sooner than the learner's
    from smcdp.dp.learners.logistic_objective import fit_logistic_objective

    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1 or len(y) != X.shape[0]:
        raise InvalidParameter(f"train_local needs n >= 1 rows with one label each, got X {X.shape}, {len(y)} labels")
    labels = set(np.unique(y).tolist())
    if not (labels <= {-1, 1} or labels <= {0, 1}):
        raise InvalidParameter(f"labels must be in {{-1, +1}} or {{0, 1}}, got {sorted(labels)[:5]}")
    ys = np.where(np.asarray(y) == 1, 1.0, -1.0)
    lam = check_positive(lam, "lam")
    Xs = clip_rows_to_norm(X, 1.0, "raise") / 1.0  # as the learner scales rows into the unit ball (R = 1)
    d = X.shape[1]
    w, _, _ = fit_logistic_objective(
        Xs, ys, lam, tol=local_fit_tolerance(d, lam), max_iter=LOCAL_FIT_MAX_ITER, certain=True
    )
    return w, fit_sensitivity(X.shape[0], lam, d)
