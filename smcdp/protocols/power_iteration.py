"""Privacy-preserving power iteration with an untrusted arbitrator (seed 003 §4.1.1).

N >= 2 data parties (roles ``party1`` … ``partyN``) hold column blocks A_i
(k × n_i) of M = [A_1 … A_N]; the arbitrator Trent (role ``trent``)
coordinates and never sees a plaintext.  Outputs: u, the unit principal
eigenvector of MMᵀ (k entries, known to every data party) and x, the unit
principal eigenvector of MᵀM (the α blocks in party order, gathered by
Trent).  Sign convention for both: the first non-zero entry is positive.

Every modification of the seed is here:

* homomorphic encryption under a key shared by the data parties only
  (party1 generates it and sends it to the other data parties over their
  mutually authenticated channels; Trent gets the public key);
* random scaling: Trent multiplies the encrypted u by a fresh secret r each
  round.  The parties' normalisation term Σ‖Āᵢᵀ(r u)‖² already carries r²,
  so Trent does *not* scale it again (the seed's extra r² would leave the
  iterate scaled by 1/r);
* data padding Ā_i = [A_i  ρ_i I_k] with a secret ρ_i per party: M̄M̄ᵀ =
  MMᵀ + (Σρ_i²) I has the same eigenvectors, every eigenvalue shifted by
  Σρ_i² (the seed writes r_a + r_b; it is the sum of squares).  We report no
  eigenvalue;
* Bernoulli decoys: with probability 1 − p Trent sends, instead of the real
  r u, a decoy -- a random positive combination of earlier real states with a
  fresh scale, built homomorphically (Trent cannot see plaintexts, so he
  cannot add noise of the right size; a combination of earlier states has the
  distributional properties of real vectors and carries no information
  beyond them).  The round after a decoy Trent ignores the contributions and
  replays the last real state, freshly scaled;
* the N-party extension.

Convergence: each party also sends E[‖α_i^(t) − α_i^(t−1)‖²]; Trent sums the
encryptions and sends the sum back; the parties decrypt it and answer with one
bit "below tol²".  Trent stops only on a bit that belongs to two consecutive
real states.  docs/protocols/power-iteration.md says who learns what.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from smcdp.crypto.codec import (
    keypair_from_proto,
    keypair_to_proto,
    public_key_from_proto,
    public_key_to_proto,
)
from smcdp.crypto.encoding import Packing, decode_fixed
from smcdp.crypto.paillier import (
    PrivateKey,
    PublicKey,
    check_key_bits,
    generate_keypair,
)
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import InputRejected, InvalidMessage
from smcdp.net.channel import Channel
from smcdp.net.limits import TrafficEnvelope, ciphertext_vector_bytes
from smcdp.primitives.rng import SeedLike, protocol_rng
from smcdp.protocols.base import ProtocolParams
from smcdp.v1 import messages_pb2 as pb

TRENT = "trent"
#: weights of a decoy combination sum to about 2^DECOY_WEIGHT_BITS
DECOY_WEIGHT_BITS = 8
#: how many recent real states a decoy combines
DECOY_HISTORY = 5
#: public bounds on k (rows, shared by every party) and on one party's n_i (samples)
MAX_ROWS = 1_000_000
MAX_SAMPLES = 10_000_000


@dataclass
class PowerIterationParams(ProtocolParams):
    """Public parameters, agreed by every participant."""

    protocol_name = "power-iteration"

    n_parties: int = 2
    p: float = 0.9                # probability that Trent sends the real vector
    tol: float = 1e-9             # stop when ‖x_t − x_{t−1}‖ < tol between real states
    max_iterations: int = 2000    # rounds, decoys included
    key_bits: int = 3072
    frac_bits: int = 40           # fixed-point precision 2^-frac_bits
    value_bits: int = 24          # public bound: every |(Ā_i α_i)_j| < 2^value_bits
    scale_bits: int = 24          # Trent's r is log-uniform in [2^8, 2^scale_bits]
    padding: float = 0.1          # ρ_i ≈ padding · ‖A_i‖_F / √k, times a secret factor in [0.5, 1]
    packed: bool = True           # pack contributions into few ciphertexts
    rows: int | None = None       # k, if the initiator states it: checked by everyone, sizes the traffic
    max_samples: int = 1_000_000  # public bound on each party's n_i (its block of x is sent in clear)

    def validate(self) -> "PowerIterationParams":
        def bad(msg):
            raise InvalidMessage(f"power-iteration parameter {msg}")

        if not isinstance(self.n_parties, int) or not 2 <= self.n_parties <= 64:
            bad(f"n_parties={self.n_parties!r} must be an integer in [2, 64]")
        if not (0.0 < float(self.p) <= 1.0):
            bad(f"p={self.p!r} must lie in (0, 1]")
        if not (0.0 < float(self.tol) < 1.0):
            bad(f"tol={self.tol!r} must lie in (0, 1)")
        if not isinstance(self.max_iterations, int) or not 1 <= self.max_iterations <= 100_000:
            bad(f"max_iterations={self.max_iterations!r} must be an integer in [1, 100000]")
        if not isinstance(self.key_bits, int) or not 256 <= self.key_bits <= 16384:
            bad(f"key_bits={self.key_bits!r} must be an integer in [256, 16384]")
        if not isinstance(self.frac_bits, int) or not 8 <= self.frac_bits <= 64:
            bad(f"frac_bits={self.frac_bits!r} must be an integer in [8, 64]")
        if not isinstance(self.value_bits, int) or not 1 <= self.value_bits <= 128:
            bad(f"value_bits={self.value_bits!r} must be an integer in [1, 128]")
        if not isinstance(self.scale_bits, int) or not DECOY_WEIGHT_BITS + 1 <= self.scale_bits <= 64:
            bad(f"scale_bits={self.scale_bits!r} must be an integer in [{DECOY_WEIGHT_BITS + 1}, 64]")
        if not (0.0 < float(self.padding) <= 10.0):
            bad(f"padding={self.padding!r} must lie in (0, 10]")
        if not isinstance(self.packed, bool):
            bad("packed must be a boolean")
        if self.rows is not None and (isinstance(self.rows, bool) or not isinstance(self.rows, int)
                                      or not 1 <= self.rows <= MAX_ROWS):
            bad(f"rows={self.rows!r} must be unset or an integer in [1, {MAX_ROWS}]")
        if isinstance(self.max_samples, bool) or not isinstance(self.max_samples, int) \
                or not 1 <= self.max_samples <= MAX_SAMPLES:
            bad(f"max_samples={self.max_samples!r} must be an integer in [1, {MAX_SAMPLES}]")
        return self


    @property
    def data_roles(self) -> list[str]:
        return [f"party{i}" for i in range(1, self.n_parties + 1)]

    # -- fixed-point layout shared by everyone ---------------------------------
    def slot_bits(self) -> int:
        """Bits per packed slot: value, fraction, sum over parties, decoy weights + scale, sign, guard."""
        return self.value_bits + self.frac_bits + math.ceil(math.log2(self.n_parties)) + self.scale_bits + 2

    def packing(self, pk: PublicKey) -> Packing:
        return Packing.for_key(pk, self.slot_bits()) if self.packed else Packing()

    def contribution_bound(self) -> int:
        return (1 << (self.value_bits + self.frac_bits)) - 1

    def scalar_bound(self, pk: PublicKey) -> int:
        """Declared bound on the single-value messages (squared norms, step sizes)."""
        return pk.max_int // (4 * self.n_parties)

    def traffic_envelope(self, role: str) -> TrafficEnvelope:
        """What ``role`` receives at most in one session (smcdp.net.limits): from key_bits, rows
        (or MAX_ROWS), max_iterations, n_parties, max_samples and the packing."""
        k = self.rows if self.rows is not None else MAX_ROWS
        B = self.key_bits
        slots = max(1, (B - 5) // self.slot_bits()) if self.packed else 1
        vec = ciphertext_vector_bytes(-(-k // slots), B)
        one = ciphertext_vector_bytes(1, B)
        rounds = self.max_iterations
        if role == TRENT:
            per_party = [(rounds, vec), (3 * rounds, one), (rounds, 16), (1, 24), (1, one),
                         (1, 8 * self.max_samples + 16)]
            msgs = [(c * self.n_parties, size) for c, size in per_party] + [(1, B // 8 + 16)]
        else:
            msgs = [(rounds + 1, vec), (2 * rounds + 1, one), (rounds, 16), (1, 3 * (B // 8) + 32)]
        return TrafficEnvelope.from_messages(msgs, f"power-iteration parameters (k <= {k}, "
                                             f"{rounds} rounds, {B}-bit key)")


@dataclass
class DataPartyResult:
    u: list[float]
    alpha: list[float]            # this party's block of x up to one sign common to all parties
                                  # (Trent applies the sign convention to the whole x)
    rounds: int
    stats: dict = field(default_factory=dict)


@dataclass
class TrentResult:
    x: list[float]
    n_per_party: list[int]
    rounds: int                   # all rounds, decoys included
    real_rounds: int
    decoys: int
    converged: bool
    round_seconds: list[float] = field(default_factory=list)   # wall time of each round at Trent
    stats: dict = field(default_factory=dict)


def sign_convention(v: np.ndarray) -> np.ndarray:
    """Flip ``v`` so that its first non-zero entry is positive."""
    nz = np.flatnonzero(np.abs(v) > 0)
    if nz.size and v[nz[0]] < 0:
        return -v
    return v


def _ints(values) -> pb.Ints:
    return pb.Ints(values=[int(v) for v in values])


# =============================================================================== data party
async def data_party(ch: Channel, A: np.ndarray, params: PowerIterationParams, *,
                     private_key: PrivateKey | None = None, seed: SeedLike = None,
                     allow_insecure_keys: bool = False) -> DataPartyResult:
    """Role ``party<i>``: holds A_i (k × n_i) and the shared Paillier private key."""
    params.validate()
    A = check_matrix(A)
    k, n_i = A.shape
    if params.rows is not None and k != params.rows:
        raise InputRejected(f"{ch.role}: the data's number of rows differs from the session's rows parameter",
                            f"k = {k}")
    if n_i > params.max_samples:
        raise InputRejected(f"{ch.role}: the data has more samples than the session's max_samples",
                            f"n = {n_i}")
    rng = protocol_rng(seed, "power-iteration", ch.role)
    data_roles = params.data_roles
    if ch.role not in data_roles:
        raise InvalidMessage(f"role {ch.role!r} is not a data party role of this session")

    # --- Setup 1: the data parties share one Paillier key; Trent gets only the public key.
    if ch.role == data_roles[0]:
        if private_key is None:
            _, private_key = generate_keypair(params.key_bits, allow_insecure=allow_insecure_keys,
                                              rng=protocol_rng(seed, "power-iteration", ch.role, "key"))
        check_key_bits(private_key.public_key.bits, allow_insecure_keys)
        await ch.send_many(data_roles[1:], "keypair", keypair_to_proto(private_key))
        await ch.send(TRENT, "public_key", public_key_to_proto(private_key.public_key))
    else:
        msg = await ch.recv(data_roles[0], "keypair", pb.PaillierKeyPair)
        private_key = keypair_from_proto(msg, allow_insecure=allow_insecure_keys)
        if private_key.public_key.bits != params.key_bits:
            raise InvalidMessage(f"the key pair from {data_roles[0]} has {private_key.public_key.bits} bits; "
                                 f"the session agreed on {params.key_bits}")
    pk = private_key.public_key
    packing = params.packing(pk)

    # --- Setup 2: tell Trent k (public: every party must have the same number of rows).
    await ch.send(TRENT, "dims", _ints([k]))

    # Data padding: Ā_i = [A_i  ρ_i I_k]; ρ_i is known to this party only.
    scale = np.linalg.norm(A) / math.sqrt(k) if np.any(A) else 1.0
    rho = params.padding * scale * rng.uniform(0.5, 1.0)

    def a_bar_T(v: np.ndarray, padded: bool = True) -> np.ndarray:
        """Āᵢᵀ v = [A_iᵀ v; ρ_i v]."""
        return np.concatenate([A.T @ v, rho * v]) if padded else A.T @ v

    alpha = np.array([rng.gauss(0.0, 1.0) for _ in range(n_i + k)])
    alpha /= np.linalg.norm(alpha)
    alpha_prev = np.zeros_like(alpha)
    bound_c = params.contribution_bound()
    sbound = params.scalar_bound(pk)
    fb = params.frac_bits
    recent: list[list[int]] = []
    t = 0
    while True:
        ch.progress(round=t, step="iterate")
        # --- Step 1: send E[Ā_i α_i] and E[‖α_i − α_i^prev‖²] to Trent.
        contribution = A @ alpha[:n_i] + rho * alpha[n_i:]
        limit = 2.0 ** params.value_bits
        if not np.all(np.abs(contribution) < limit):
            raise InputRejected(
                f"{ch.role}: a contribution |Āα| reaches the agreed bound 2^{params.value_bits}; scale the "
                "data or raise value_bits", f"max |Āα| = {np.max(np.abs(contribution)):.3g}")
        c = EncryptedVector.encrypt(pk, contribution, frac_bits=fb, packing=packing, private_key=private_key,
                                    bound=bound_c)
        d = EncryptedVector.encrypt(pk, [float(np.sum((alpha - alpha_prev) ** 2))], frac_bits=fb,
                                    private_key=private_key)
        await ch.send(TRENT, f"contrib/{t}", c.to_proto())
        await ch.send(TRENT, f"delta/{t}", d.to_proto())

        # --- Step 2: receive E[v] (r·u or a decoy) and E[D]; decrypt; send E[‖Āᵢᵀv‖²] and the bit D < tol².
        v_ints, v_exp = _recv_vector_ints(await ch.recv(TRENT, f"v/{t}", pb.CiphertextVector), pk, k, packing,
                                          private_key, f"v/{t} from trent")
        recent = (recent + [v_ints])[-2:]          # the last two rounds' vectors (consistency check)
        v = decode_fixed(v_ints, v_exp)
        D = _recv_scalar(await ch.recv(TRENT, f"D/{t}", pb.CiphertextVector), pk, sbound, private_key,
                         f"D/{t} from trent")
        a = a_bar_T(v)
        s = EncryptedVector.encrypt(pk, [float(a @ a)], frac_bits=fb, private_key=private_key)
        await ch.send(TRENT, f"norm/{t}", s.to_proto())
        await ch.send(TRENT, f"flag/{t}", pb.Flag(value=bool(D < params.tol ** 2)))

        # --- Step 3: receive E[S] = E[Σ_i ‖Āᵢᵀv‖²] and the stop bit; update α_i = Āᵢᵀv / √S.
        S = _recv_normaliser(await ch.recv(TRENT, f"S/{t}", pb.CiphertextVector), pk, sbound, private_key,
                             s.decrypt_ints(private_key)[0], fb, f"S/{t} from trent")
        stop = (await ch.recv(TRENT, f"stop/{t}", pb.Flag)).value
        if not S > 0:
            raise InvalidMessage(f"{ch.role}: normalisation term is not positive (all data zero?)")
        alpha_prev, alpha = alpha, a / math.sqrt(S)
        t += 1
        if stop:
            break

    # --- Final: Trent sends the last real state, freshly scaled; the data part of α is normalised
    # without padding and sent in clear to Trent (x is Trent's output); u is ours.
    v_ints, v_exp = _recv_vector_ints(await ch.recv(TRENT, "final/v", pb.CiphertextVector), pk, k, packing,
                                      private_key, "final/v from trent")
    # Check (issue 19, docs/security.md): the final vector is the last real state, which this party
    # received in one of the last two rounds; anything else (a standard basis vector, say) would
    # make the block sent in clear below a projection of Trent's choosing.
    if not any(_positively_parallel(v_ints, w) for w in recent):
        raise InvalidMessage("final/v from trent is not the direction of a vector of the last two rounds: "
                             "refusing to reveal a projection Trent chose")
    v = sign_convention(decode_fixed(v_ints, v_exp))  # every party flips the same way: one common sign
    a = a_bar_T(v, padded=False)
    s = EncryptedVector.encrypt(pk, [float(a @ a)], frac_bits=fb, private_key=private_key)
    await ch.send(TRENT, "final/norm", s.to_proto())
    S = _recv_normaliser(await ch.recv(TRENT, "final/S", pb.CiphertextVector), pk, sbound, private_key,
                         s.decrypt_ints(private_key)[0], fb, "final/S from trent")
    if not S > 0:
        raise InvalidMessage(f"{ch.role}: final normalisation term is not positive")
    block = a / math.sqrt(S)
    await ch.send(TRENT, "final/alpha", pb.Floats(values=block.tolist()))
    u = sign_convention(v / np.linalg.norm(v))
    return DataPartyResult(u=u.tolist(), alpha=block.tolist(), rounds=t, stats=ch.stats.as_dict())


def check_matrix(A) -> np.ndarray:
    A = np.asarray(A)
    if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] < 1:
        raise InputRejected("data must be a non-empty 2-D matrix", f"shape {A.shape}")
    if A.dtype.kind not in "fiu":
        raise InputRejected("data must be numeric", f"dtype {A.dtype}")
    A = A.astype(np.float64)
    if not np.all(np.isfinite(A)):
        raise InputRejected("data must not contain NaN or infinite values")
    return A


def _recv_vector_ints(msg, pk, k, packing, sk, what) -> tuple[list[int], int]:
    vec = EncryptedVector.from_proto(msg, pk, length=k, packing=packing, what=what)
    return vec.decrypt_ints(sk), vec.exponent


def _recv_scalar(msg, pk, bound, sk, what) -> float:
    vec = EncryptedVector.from_proto(msg, pk, length=1, packing=Packing(), bound=bound, what=what)
    return float(vec.decrypt(sk)[0])


def _recv_normaliser(msg, pk, bound, sk, own: int, frac_bits: int, what: str) -> float:
    """E[S] = E[Σ_i ‖Āᵢᵀv‖²]: S is a sum of non-negative terms, one of them ours (``own`` at 2^-frac_bits),
    so S < own means Trent did not send the sum (a normaliser of 1 would make the clear block the
    projection itself).  Exact comparison of the fixed-point integers."""
    vec = EncryptedVector.from_proto(msg, pk, length=1, packing=Packing(), bound=bound, what=what)
    (s_int,) = vec.decrypt_ints(sk)
    shift = vec.exponent + frac_bits          # compare s_int·2^e with own·2^-frac_bits exactly
    lhs, rhs = (s_int << shift, own) if shift >= 0 else (s_int, own << -shift)
    if lhs < rhs:
        raise InvalidMessage(f"{what} is smaller than this party's own term of the sum")
    return float(decode_fixed([s_int], vec.exponent)[0])


def _positively_parallel(x: list[int], y: list[int]) -> bool:
    """x = c·y for some rational c > 0 (exact, on the decrypted integers)."""
    pivot = next((i for i, v in enumerate(y) if v), None)
    if pivot is None or len(x) != len(y) or (x[pivot] > 0) != (y[pivot] > 0) or x[pivot] == 0:
        return False
    xp, yp = x[pivot], y[pivot]
    return all(xi * yp == yi * xp for xi, yi in zip(x, y))


# =============================================================================== Trent
async def trent(ch: Channel, params: PowerIterationParams, *, seed: SeedLike = None,
                allow_insecure_keys: bool = False) -> TrentResult:
    """Role ``trent``: sums encrypted contributions, scales, sends decoys; never decrypts."""
    params.validate()
    rng = protocol_rng(seed, "power-iteration", ch.role)
    roles = params.data_roles
    if ch.role != TRENT:
        raise InvalidMessage(f"role {ch.role!r} is not trent")

    # --- Setup: the public key from party1, and k from everyone (must agree).
    pk = public_key_from_proto(await ch.recv(roles[0], "public_key", pb.PaillierPublicKey),
                               allow_insecure=allow_insecure_keys)
    if pk.bits != params.key_bits:
        raise InvalidMessage(f"the public key from {roles[0]} has {pk.bits} bits; the session agreed on "
                             f"{params.key_bits}")
    dims = await ch.recv_all(roles, "dims", pb.Ints)
    ks = {r: list(m.values) for r, m in dims.items()}
    if any(len(v) != 1 or not 1 <= v[0] <= MAX_ROWS for v in ks.values()):
        raise InvalidMessage(f"malformed dimensions from the data parties: {ks}")
    if params.rows is not None and any(v[0] != params.rows for v in ks.values()):
        raise InvalidMessage("a data party reported a number of rows other than the session's rows parameter")
    if len({v[0] for v in ks.values()}) != 1:
        raise InvalidMessage("mismatched dimensions: the data parties' matrices have different numbers of rows "
                             f"({', '.join(f'{r}: k={v[0]}' for r, v in sorted(ks.items()))})")
    k = ks[roles[0]][0]
    packing = params.packing(pk)
    bound_c = params.contribution_bound()
    sbound = params.scalar_bound(pk)

    states: list[EncryptedVector] = []     # E[u_j] of every real state, unscaled
    sent_state: list[int | None] = []      # which state each round's vector carries (None = decoy)
    decoys = 0
    converged = False
    t = 0
    round_seconds: list[float] = []

    def scale_r(lo_bits: int, hi_bits: int) -> int:
        """A secret integer log-uniform in [2^lo, 2^hi]."""
        return max(1, int(2.0 ** rng.uniform(lo_bits, hi_bits)))

    def real_vector(j: int) -> EncryptedVector:
        return states[j].mul_int(scale_r(DECOY_WEIGHT_BITS, params.scale_bits))

    def decoy_vector() -> EncryptedVector:
        recent = states[-DECOY_HISTORY:]
        cuts = sorted(rng.randrange(1, 1 << DECOY_WEIGHT_BITS) for _ in range(len(recent) - 1))
        weights = [b - a for a, b in zip([0] + cuts, cuts + [1 << DECOY_WEIGHT_BITS])]
        acc = None
        for w, s in zip(weights, recent):
            if w:
                term = s.mul_int(w)
                acc = term if acc is None else acc + term
        return acc.mul_int(scale_r(0, params.scale_bits - DECOY_WEIGHT_BITS)).rerandomize()

    while True:
        ch.progress(round=t, step="iterate")
        t_round = time.perf_counter()
        # --- Step 1: collect E[Ā_i α_i] and E[step_i]; if the last vector sent was real, Π E[Ā_i α_i] = E[u_new].
        contribs = await ch.recv_all(roles, f"contrib/{t}", pb.CiphertextVector)
        deltas = await ch.recv_all(roles, f"delta/{t}", pb.CiphertextVector)
        cvecs = [EncryptedVector.from_proto(contribs[r], pk, length=k, exponent=-params.frac_bits,
                                            packing=packing, bound=bound_c, what=f"contrib/{t} from {r}")
                 for r in roles]
        D = _sum([EncryptedVector.from_proto(deltas[r], pk, length=1, packing=Packing(), bound=sbound,
                                             what=f"delta/{t} from {r}") for r in roles])
        previous_was_decoy = bool(sent_state) and sent_state[-1] is None
        if previous_was_decoy:
            # --- Step 2b: ignore contributions computed from a decoy; replay the last real state.
            j = len(states) - 1
            v = real_vector(j)
            sent_state.append(j)
        else:
            states.append(_sum(cvecs))
            j = len(states) - 1
            # --- Step 2a: with probability p the real r·u, otherwise a decoy.
            if len(states) >= 2 and rng.random() >= params.p:
                v = decoy_vector()
                sent_state.append(None)
                decoys += 1
            else:
                v = real_vector(j)
                sent_state.append(j)
        await ch.send_many(roles, f"v/{t}", v.to_proto())
        await ch.send_many(roles, f"D/{t}", D.to_proto())

        # --- Step 3: Π E[‖Āᵢᵀv‖²] back to everyone (no second scaling: v already carries r).
        norms = await ch.recv_all(roles, f"norm/{t}", pb.CiphertextVector)
        flags = await ch.recv_all(roles, f"flag/{t}", pb.Flag)
        S = _sum([EncryptedVector.from_proto(norms[r], pk, length=1, packing=Packing(), bound=sbound,
                                             what=f"norm/{t} from {r}") for r in roles])
        # The step size of round t compares α from round t−1's vector with α from round t−2's: it
        # measures convergence only if those two vectors were consecutive real states.
        meaningful = (t >= 2 and sent_state[t - 1] is not None and sent_state[t - 2] is not None
                      and sent_state[t - 1] == sent_state[t - 2] + 1)
        if meaningful and all(f.value for f in flags.values()):
            converged = True
        t += 1
        stop = converged or t >= params.max_iterations
        await ch.send_many(roles, f"S/{t - 1}", S.to_proto())
        await ch.send_many(roles, f"stop/{t - 1}", pb.Flag(value=stop))
        round_seconds.append(time.perf_counter() - t_round)
        if stop:
            break

    # --- Final: the last real state, freshly scaled; gather the α blocks (data part only).
    # the last real state *sent* (if the last round was a decoy, that is the round before): the data
    # parties check that the final vector is the direction of one of the last two rounds' vectors
    last_sent = next(j for j in reversed(sent_state) if j is not None)
    await ch.send_many(roles, "final/v", real_vector(last_sent).to_proto())
    norms = await ch.recv_all(roles, "final/norm", pb.CiphertextVector)
    S = _sum([EncryptedVector.from_proto(norms[r], pk, length=1, packing=Packing(), bound=sbound,
                                         what=f"final/norm from {r}") for r in roles])
    await ch.send_many(roles, "final/S", S.to_proto())
    blocks = await ch.recv_all(roles, "final/alpha", pb.Floats)
    parts = []
    for r in roles:
        b = np.asarray(blocks[r].values, dtype=np.float64)
        if b.size < 1 or b.size > params.max_samples or not np.all(np.isfinite(b)):
            raise InvalidMessage(f"final/alpha from {r} is empty, longer than max_samples or not finite")
        parts.append(b)
    x = np.concatenate(parts)
    nx = np.linalg.norm(x)
    if not nx > 0:
        raise InvalidMessage("the gathered eigenvector is zero")
    x = sign_convention(x / nx)
    return TrentResult(x=x.tolist(), n_per_party=[p.size for p in parts], rounds=t,
                       real_rounds=sum(s is not None for s in sent_state), decoys=decoys,
                       converged=converged, round_seconds=round_seconds, stats=ch.stats.as_dict())


def _sum(vecs: list[EncryptedVector]) -> EncryptedVector:
    acc = vecs[0]
    for v in vecs[1:]:
        acc = acc + v
    return acc


# =============================================================================== plaintext reference
def plaintext_reference(blocks: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(u, x) from numpy.linalg.eigh with the same sign convention."""
    M = np.concatenate([np.asarray(b, dtype=np.float64) for b in blocks], axis=1)
    _, U = np.linalg.eigh(M @ M.T)
    _, X = np.linalg.eigh(M.T @ M)
    return sign_convention(U[:, -1]), sign_convention(X[:, -1])
