"""Modular exponentiation engines shared by every scheme (Paillier, DGK, Naor–Pinkas OT).

* :class:`FixedBaseTable` — ``base^e mod m`` for a fixed base by the windowed
  (BGMW) method, exponents below ``2^exp_bits``: one modular multiplication per
  window and no squarings.  It is the one fixed-base loop of smcdp: Paillier's
  obfuscators (public and CRT), DGK's ``g^m h^r`` and the OT group's ``g^e`` all
  use it.
* :class:`FixedBase` — the same table with 8-bit windows, for any signed
  exponent (longer ones fall back to ``powmod``).
* :func:`multi_exp` — ``Π b_i^e_i mod m`` (Straus with subset tables for up to
  32 terms of 65..128 bits; otherwise Bos–Coster, on one-limb chunks of
  exponents up to 640 bits; Pippenger beyond), the homomorphic dot product.

Where the optional C accelerator is built (:mod:`smcdp.crypto.native`, odd
moduli) the loops run there on Montgomery residues; otherwise in gmpy2.  Both
give the same values (tests compare them).
"""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence

import gmpy2
from gmpy2 import mpz

from smcdp.crypto import native

#: exponents up to one limb go to the engine's Bos–Coster as they are
LIMB_BITS = 64
#: native multi-exponentiations with exponents up to this many bits are cut into one-limb chunks
#: (:func:`_multi_exp_limbs`); measured faster up to 600-bit exponents, longer ones keep the bucket method
SPLIT_MAX_BITS = 640
#: native multi-exponentiations of at most this many terms with 65..STRAUS_MAX_BITS-bit exponents go to
#: Straus with subset tables (one row of ``native.multi_exp_rows``): for the keyword rounds' weighted sums
#: (24-28 terms, 86-bit weights) 13-21 % fewer CPU seconds than the one-limb Bos-Coster, for 4-14 terms
#: 28-53 %; from about 50 terms on Bos-Coster is as fast or faster (docs/benchmarks.md, "Keyword online
#: phase: where the time goes")
STRAUS_MAX_TERMS = 32
STRAUS_MAX_BITS = 128


#: the engine's exponent limit (1 MiB); longer exponents stay with gmpy2
EXP_MAX_BITS = 8 << 20


def powmod(base: int, exp: int, modulus: int) -> mpz:
    """``base^exp mod modulus``: the engine's when its IFMA products take the (odd) modulus and the exponent
    is at least 16 -- about twice gmpy2's at 2048 bits, a decryption's CRT half --, gmpy2's otherwise
    (negative exponents included: gmpy2 inverts)."""
    modulus = mpz(modulus)
    if _engine_takes(exp, modulus):
        return native.powmod(mpz(base) % modulus, exp, modulus)
    return gmpy2.powmod(base, exp, modulus)


def _engine_takes(exp: int, modulus: mpz) -> bool:
    # below 16 the engine's Montgomery set-up (about 12 µs at 4096 bits) outweighs the few products: c^1 (a
    # negation's) and c^4 (a partial decryption's check) stay with gmpy2
    return (
        exp >= 16 and exp.bit_length() <= EXP_MAX_BITS and modulus % 2 == 1 and native.ifma_takes(modulus.bit_length())
    )


def powmod2(base1: int, exp1: int, mod1: int, base2: int, exp2: int, mod2: int) -> tuple[mpz, mpz]:
    """``(powmod(base1, exp1, mod1), powmod(base2, exp2, mod2))``: in one call of the engine, the two
    powers' products interleaved, where both moduli take its IFMA products of one width
    (:func:`~smcdp.crypto.native.interleaves`: a 2048-bit key's CRT halves, 1.6x two calls); otherwise
    two :func:`powmod` calls."""
    m1, m2 = mpz(mod1), mpz(mod2)
    if _engine_takes(exp1, m1) and _engine_takes(exp2, m2) and native.interleaves(m1.bit_length(), m2.bit_length()):
        return native.powmod2(mpz(base1) % m1, exp1, m1, mpz(base2) % m2, exp2, m2)
    return powmod(base1, exp1, m1), powmod(base2, exp2, m2)


def table_budget_bytes() -> int:
    """Memory one fixed-base table may take; the window is the largest that fits.

    At most 12-bit windows for the native engine and 10 for the pure one, whose
    lists gain nothing beyond.  Default 192 MB: a 2048-bit key's public table
    (4096-bit residues, 1024-bit exponents) then gets 12-bit windows (172 MB)
    and each CRT table 12-bit windows (86 MB).  ``SMCDP_TABLE_BUDGET_MB`` lowers
    it for small hosts (encryption slows by about a fifth at 64 MB) or raises it.  (With the engine's IFMA
    products a residue takes 25 % more memory, and the public table gets 11-bit windows, 117 MB.)
    """
    raw = os.environ.get("SMCDP_TABLE_BUDGET_MB", "").strip()
    if not raw:
        return 192 << 20
    try:
        mb = int(raw)
    except ValueError:
        raise ValueError(f"SMCDP_TABLE_BUDGET_MB must be a whole number of megabytes, not {raw!r}") from None
    if mb < 1:
        raise ValueError("SMCDP_TABLE_BUDGET_MB must be at least 1")
    return mb << 20


def window_for(
    exp_bits: int, modulus_bits: int, budget_bytes: int | None = None, entry_overhead: int = 32, max_window: int = 10
) -> int:
    """Largest window (<= max_window) whose table fits the memory budget."""
    if budget_bytes is None:
        budget_bytes = table_budget_bytes()
    entry = (native.residue_bytes(modulus_bits) if native.AVAILABLE else (modulus_bits + 63) // 64 * 8) + entry_overhead
    for w in range(max_window, 3, -1):
        if -(-exp_bits // w) * ((1 << w) - 1) * entry <= budget_bytes:
            return w
    return 4


def window_for_uses(exp_bits: int, modulus_bits: int, uses: int) -> int:
    """The window that minimises building a table plus ``uses`` powers, within the memory budget.

    Building costs ⌈b/w⌉·(2^w − 1) modular multiplications, each power ⌈b/w⌉:
    a 1024-bit exponent gets w = 8 for ~600 uses and 10 for ~8 000 (where the
    largest table, w = 12, would cost more to build than it saves).
    """
    cap = window_for(
        exp_bits, modulus_bits, entry_overhead=0 if native.AVAILABLE else 32, max_window=12 if native.AVAILABLE else 10
    )
    uses = max(1, int(operator.index(uses)))  # 2.5 or inf refused (TypeError), not floored
    return min(range(4, cap + 1), key=lambda w: -(-exp_bits // w) * ((1 << w) - 1 + uses))


class FixedBaseTable:
    """``base^e mod m`` for a fixed base by the windowed (BGMW) method.

    ``table[i][d] = base^(d · 2^(w·i))``; an exponent of ``exp_bits`` bits then
    costs ceil(exp_bits / w) modular multiplications and no squarings.

    With the native engine (:mod:`smcdp.crypto.native`, odd moduli) the table
    lives in C memory in Montgomery form and the loop runs there; otherwise it
    is a list of gmpy2 residues and the loop runs here.  Both give the same
    values.
    """

    def __init__(self, base: mpz, modulus: mpz, exp_bits: int, window: int | None = None):
        self.modulus = mpz(modulus)
        self.exp_bits = int(exp_bits)
        g = mpz(base) % self.modulus
        self._native: native.FixedBase | None = None
        if native.AVAILABLE and self.modulus % 2 == 1 and self.modulus > 1:
            self.window = window or window_for(
                self.exp_bits, self.modulus.bit_length(), entry_overhead=0, max_window=12
            )
            self._native = native.FixedBase(g, self.modulus, self.exp_bits, self.window)
            return
        self.window = window or window_for(self.exp_bits, self.modulus.bit_length())
        w = self.window
        self.mask = (1 << w) - 1
        self._rows: list[list[mpz]] = []
        m = self.modulus
        for _ in range(-(-self.exp_bits // w)):
            row = [mpz(1), g]
            acc = g
            for _ in range(2, 1 << w):
                acc = acc * g % m
                row.append(acc)
            self._rows.append(row)
            g = acc * g % m  # base^(2^w) for the next window

    def pow(self, e: int, factor: int | None = None) -> mpz:
        """``base^e mod m``, times ``factor`` (reduced mod m) when one is given."""
        if e < 0 or e.bit_length() > self.exp_bits:
            raise ValueError("exponent out of the table's range")
        m = self.modulus
        f = None if factor is None else mpz(factor) % m
        if self._native is not None:
            return self._native.pow(e, f)
        w, mask = self.window, self.mask
        r = mpz(1) if f is None else f
        i = 0
        e = mpz(e)
        while e:
            d = int(e & mask)
            if d:
                r = r * self._rows[i][d] % m
            e >>= w
            i += 1
        return r


class FixedBase(FixedBaseTable):
    """``base^e mod m`` from 8-bit windows, for any integer e.

    One modular multiplication per non-zero byte of e instead of ~1.2 per bit
    for a general exponentiation (about 5x faster for the 560-bit exponents of
    DGK re-randomisation at 2048 bits).  Memory: ceil(bits/8) rows of 255
    residues (~4.5 MB for 560-bit exponents at 2048 bits); the window stays at
    8 bits because these tables serve short sessions, not millions of
    encryptions.  Negative exponents invert; exponents longer than
    ``max_bits`` fall back to ``gmpy2.powmod``.  The table and its loop are
    :class:`FixedBaseTable` (native engine where built).
    """

    def __init__(self, base: int, modulus: int, max_bits: int) -> None:
        self.base = mpz(base)
        self.max_bits = int(max_bits)
        super().__init__(self.base, mpz(modulus), self.max_bits, window=8)

    def pow(self, e: int, factor: int | None = None) -> mpz:
        e = int(e)
        if e >= 0 and e.bit_length() <= self.max_bits:
            return super().pow(e, factor)
        m = self.modulus
        r = gmpy2.invert(self.pow(-e), m) if e < 0 else gmpy2.powmod(self.base, e, m)
        return r if factor is None else r * factor % m


def multi_exp(bases: Sequence[mpz], exps: Sequence[int], modulus: mpz) -> mpz:
    """Π bases[i]^exps[i] mod modulus, sharing work across the terms.

    Negative exponents: the terms with negative exponents are multiplied out
    separately and their product inverted once (one inversion instead of one
    per term, which at 4096 bits costs as much as six multiplications).
    """
    pos_b: list[mpz] = []
    pos_e: list[int] = []
    neg_b: list[mpz] = []
    neg_e: list[int] = []
    for b, e in zip(bases, exps):
        e = int(e)
        if e > 0:
            pos_b.append(mpz(b))
            pos_e.append(e)
        elif e < 0:
            neg_b.append(mpz(b))
            neg_e.append(-e)
    result = _multi_exp_nonneg(pos_b, pos_e, modulus)
    if neg_b:
        result = result * gmpy2.invert(_multi_exp_nonneg(neg_b, neg_e, modulus), modulus) % modulus
    return result


def _multi_exp_nonneg(bs: list[mpz], es: list[int], modulus: mpz) -> mpz:
    """Π bs[i]^es[i] mod modulus for positive exponents.

    Native engine: Bos–Coster for exponents below 2^64, Pippenger's bucket
    method above.  Pure path: Pippenger (Bos–Coster's heap costs more than it
    saves when every step is interpreted).
    """
    if not bs:
        return mpz(1)
    if len(bs) < 4:  # one power each (the engine's where it takes them: a proof's 4,500-bit response, say)
        r = mpz(1)
        for b, e in zip(bs, es):
            r = r * powmod(b, e, modulus) % modulus
        return r
    maxbits = max(e.bit_length() for e in es)
    c = _pippenger_window(len(bs), maxbits)
    if native.AVAILABLE and modulus % 2 == 1:
        bs = [b % modulus for b in bs]
        if len(bs) <= STRAUS_MAX_TERMS and LIMB_BITS < maxbits <= STRAUS_MAX_BITS:
            return native.multi_exp_rows(bs, [es], modulus, _straus_group(len(bs), maxbits))[0]
        if LIMB_BITS < maxbits <= SPLIT_MAX_BITS:
            return _multi_exp_limbs(bs, es, modulus, maxbits, c)
        return native.multi_exp(bs, es, modulus, c)
    mask = (1 << c) - 1
    windows = -(-maxbits // c)
    result = mpz(1)
    for w in range(windows - 1, -1, -1):
        if result != 1:
            result = gmpy2.powmod(result, 1 << c, modulus)
        shift = w * c
        buckets: list[mpz | None] = [None] * (1 << c)
        for b, e in zip(bs, es):
            d = (e >> shift) & mask
            if d:
                cur = buckets[d]
                buckets[d] = b if cur is None else cur * b % modulus
        running: mpz | None = None
        acc: mpz | None = None
        for d in range(mask, 0, -1):
            bd = buckets[d]
            if bd is not None:
                running = bd if running is None else running * bd % modulus
            if running is not None:
                acc = running if acc is None else acc * running % modulus
        if acc is not None:
            result = result * acc % modulus
    return result


def _multi_exp_limbs(bs: list[mpz], es: list[int], modulus: mpz, maxbits: int, c: int) -> mpz:
    """Native engine, exponents of 65..SPLIT_MAX_BITS bits: cut every exponent into L = ⌈bits/64⌉ chunks
    of s ≤ 64 bits, e = Σ_j e_j 2^{s·j}, and evaluate Π b^e = (…(M_{L−1})^{2^s} · M_{L−2} …)^{2^s} · M_0 with
    M_j = Π b^{e_j} by Bos–Coster (one-limb exponents).  The engine's Bos–Coster needs 25–40 % fewer
    multiplications than its bucket method for these sizes (27 × 86-bit: 4.7 against 6.3 ms at 2048 bits,
    docs/crypto.md); the L − 1 chains of s squarings are what the bucket method pays too."""
    L = -(-maxbits // LIMB_BITS)
    s = -(-maxbits // L)
    mask = (1 << s) - 1
    result: mpz | None = None
    for j in range(L - 1, -1, -1):
        part = native.multi_exp(bs, [(e >> (s * j)) & mask for e in es], modulus, c)
        result = part if result is None else powmod(result, 1 << s, modulus) * part % modulus
    return result


def multi_exp_rows(bases: Sequence[mpz], rows: Sequence[Sequence[int]], modulus: mpz, threads: int = 1) -> list[mpz]:
    """``[multi_exp(bases, row, modulus) for row in rows]``: many multi-exponentiations over the same bases.

    With the native engine (odd modulus) the rows share Straus tables of every subset of each group of
    bases (``native.multi_exp_rows``: for 50 rows of 79 terms and 45-bit exponents about half the
    multiplications of one Bos–Coster per row); ``threads`` > 1 shares the tables' making and then the
    rows among that many of the engine's threads, which all read the one set of tables.  Signed exponents are made non-negative by an offset
    E = 2^b ≥ every |e|: Π b^(e+E) = Π b^e · X with X = (Π b)^E, one inversion of X for all rows, which
    also keeps the exponents one bit longer instead of doubling the bases with their inverses.
    Otherwise, and for a handful of rows or terms, one :func:`multi_exp` per row.
    """
    modulus = mpz(modulus)
    rows = [[int(e) for e in row] for row in rows]
    if any(len(row) != len(bases) for row in rows):
        raise ValueError("every row needs one exponent per base")
    if not (native.AVAILABLE and modulus % 2 == 1) or len(rows) < 4 or len(bases) < 4:
        return [multi_exp(bases, row, modulus) for row in rows]
    bs = [mpz(b) % modulus for b in bases]
    maxbits = max((abs(e).bit_length() for row in rows for e in row), default=0)
    neg = any(e < 0 for row in rows for e in row)
    offset = (1 << maxbits) if neg else 0
    exp_bits = maxbits + (1 if neg else 0)
    group = _straus_group(len(bs), exp_bits, len(rows))
    out = native.multi_exp_rows(bs, [[e + offset for e in row] for row in rows], modulus, group, threads)
    if not neg:
        return out
    prod = mpz(1)
    for b in bs:
        prod = prod * b % modulus
    x_inv = gmpy2.invert(gmpy2.powmod(prod, offset, modulus), modulus)
    return [r * x_inv % modulus for r in out]


def _straus_group(terms: int, bits: int, rows: int = 1) -> int:
    """Bases per subset table minimising the multiplications of Straus over ``rows`` rows: the tables,
    ⌈terms/g⌉ · 2^g, and per row and exponent bit one squaring and one multiplication per table."""
    return min(range(1, 13), key=lambda g: rows * bits * (1 + -(-terms // g)) + -(-terms // g) * (1 << g))


def _pippenger_window(terms: int, bits: int) -> int:
    """Window minimising the modular multiplications of the bucket method:
    windows · (terms + 2^(c+1)) (bucket fills plus the running-product combination)."""
    return min(range(2, 13), key=lambda c: -(-bits // c) * (terms + (2 << c)))
