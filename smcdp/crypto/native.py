"""The optional C accelerator (``smcdp.crypto._mont``) behind one small interface.

The extension does Montgomery multiplication over GMP's mpn layer for the two
hot loops of the Paillier engine: fixed-base exponentiation (encryption's
obfuscator, DGK and OT tables) and Pippenger multi-exponentiation (homomorphic
dot products).  Why it exists and what it gains: docs/benchmarks.md.

It is optional.  Where it was not built (no C compiler or GMP headers at
install time) or ``SMCDP_NATIVE=0`` is set, :data:`AVAILABLE` is false and the
callers use their pure gmpy2 loops, which compute the same values; the tests
compare the two paths on every operation.

Integers cross into C as little-endian byte strings (``mpz.to_bytes`` /
``mpz.from_bytes``), which costs a few microseconds per call against hundreds
for the work itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from gmpy2 import mpz

try:
    if os.environ.get("SMCDP_NATIVE", "1").strip() == "0":
        raise ImportError("disabled by SMCDP_NATIVE=0")
    from smcdp.crypto import _mont
except ImportError as exc:  # not built here, or switched off
    _mont = None  # type: ignore[assignment]  # the module is optional: None when it did not build
    REASON = str(exc)
else:
    REASON = f"built against GMP {_mont.GMP_VERSION}"

AVAILABLE: bool = _mont is not None
if _mont is not None and hasattr(_mont, "_set_ifma") and os.environ.get("SMCDP_NATIVE_IFMA", "1").strip() == "0":
    _mont._set_ifma(False)  # as SMCDP_NATIVE reads it (the engine itself takes "0" exactly)


def engine_name() -> str:
    return "native (Montgomery over GMP mpn)" if AVAILABLE else "pure gmpy2"


#: the moduli the IFMA products take (from 1400 bits, where they start to beat GMP's, to n^2 of a 3072-bit
#: key); GMP's products take the others
IFMA_MIN_MODULUS_BITS: int = int(getattr(_mont, "IFMA_MIN_MODULUS_BITS", 0)) if _mont is not None else 0
IFMA_MAX_MODULUS_BITS: int = int(getattr(_mont, "IFMA_MAX_MODULUS_BITS", 0)) if _mont is not None else 0
#: the widest moduli whose products :func:`powmod2` interleaves (8 digit vectors: 3326 bits)
IFMA_X2_MAX_MODULUS_BITS: int = int(getattr(_mont, "IFMA_X2_MAX_MODULUS_BITS", 0)) if _mont is not None else 0


def ifma_takes(modulus_bits: int) -> bool:
    """Whether the engine multiplies modulo a ``modulus_bits``-bit (odd) modulus with the IFMA products."""
    return ifma() and IFMA_MIN_MODULUS_BITS <= int(modulus_bits) <= IFMA_MAX_MODULUS_BITS


def ifma() -> bool:
    """Whether the engine's new Montgomery contexts use the AVX-512 IFMA products: the CPU and the OS
    run them and ``SMCDP_NATIVE_IFMA=0`` is not set (docs/crypto.md, "The native engine")."""
    return bool(_mont is not None and hasattr(_mont, "ifma") and _mont.ifma())


def products_name() -> str:
    """Which Montgomery products the engine runs (engine_name() stays one of its two values)."""
    if not AVAILABLE:
        return "none (pure gmpy2)"
    if ifma():
        return f"AVX-512 IFMA for {IFMA_MIN_MODULUS_BITS}..{IFMA_MAX_MODULUS_BITS}-bit moduli, GMP mpn for the others"
    return "GMP mpn"


def residue_bytes(modulus_bits: int) -> int:
    """Bytes the engine holds per residue of a ``modulus_bits``-bit modulus (its tables' entry size):
    64-bit limbs, or with IFMA 8·V 52-bit digits in 64-bit words, V = ⌈(bits + 2)/416⌉."""
    bits = int(modulus_bits)
    if ifma_takes(bits):
        return -(-(bits + 2) // 416) * 64
    return -(-bits // 64) * 8


def powmod(base: int, exp: int, modulus: int) -> mpz:
    """``base^exp mod modulus`` for an odd modulus, 0 <= base < modulus and exp >= 0, by the engine's
    Montgomery products (with IFMA about twice gmpy2's powmod at 2048 bits; without, about the same)."""
    if _mont is None:
        raise RuntimeError(f"the native engine is not available ({REASON})")
    modulus = mpz(modulus)
    nbytes = (modulus.bit_length() + 7) // 8
    return mpz.from_bytes(_mont.powmod(_le(base, nbytes), _le_min(exp), _le(modulus, nbytes)), "little")


def interleaves(bits1: int, bits2: int) -> bool:
    """Whether :func:`powmod2` interleaves the products of two powers modulo (odd) moduli of these sizes:
    both take the IFMA products, of one width, at most :data:`IFMA_X2_MAX_MODULUS_BITS` bits (a 2048-bit
    key's p² and q²: 1.6x two :func:`powmod` calls)."""
    return (
        _mont is not None
        and hasattr(_mont, "powmod2")
        and ifma_takes(bits1)
        and ifma_takes(bits2)
        and max(int(bits1), int(bits2)) <= IFMA_X2_MAX_MODULUS_BITS
        and residue_bytes(bits1) == residue_bytes(bits2)
    )


def powmod2(base1: int, exp1: int, mod1: int, base2: int, exp2: int, mod2: int) -> tuple[mpz, mpz]:
    """``(base1^exp1 mod mod1, base2^exp2 mod mod2)`` for odd moduli, 0 <= base < its modulus, exp >= 0: the
    two powers in lock-step, each product of one interleaved with the other's where :func:`interleaves`
    says so (a Paillier decryption's two CRT halves); otherwise as two :func:`powmod` calls."""
    if _mont is None:
        raise RuntimeError(f"the native engine is not available ({REASON})")
    m1, m2 = mpz(mod1), mpz(mod2)
    n1, n2 = (m1.bit_length() + 7) // 8, (m2.bit_length() + 7) // 8
    r1, r2 = _mont.powmod2(_le(base1, n1), _le_min(exp1), _le(m1, n1), _le(base2, n2), _le_min(exp2), _le(m2, n2))
    return mpz.from_bytes(r1, "little"), mpz.from_bytes(r2, "little")


def _le(x: int, nbytes: int) -> bytes:
    return mpz(x).to_bytes(nbytes, "little")


def _le_min(x: int) -> bytes:
    x = mpz(x)
    return x.to_bytes((x.bit_length() + 7) // 8, "little")


class FixedBase:
    """``base^e mod modulus`` (odd modulus) from a windowed table held in C memory."""

    __slots__ = ("_ebytes", "_mbytes", "_t")

    def __init__(self, base: int, modulus: int, exp_bits: int, window: int) -> None:
        if _mont is None:
            raise RuntimeError(f"the native engine is not available ({REASON})")
        modulus = mpz(modulus)
        nbytes = (modulus.bit_length() + 7) // 8
        self._ebytes = (int(exp_bits) + 7) // 8
        self._mbytes = nbytes
        self._t = _mont.FixedBase(_le(mpz(base) % modulus, nbytes), _le(modulus, nbytes), int(exp_bits), int(window))

    @property
    def table_bytes(self) -> int:
        return self._t.table_bytes

    def pow(self, e: int, factor: int | None = None) -> mpz:
        """``[factor ·] base^e mod modulus`` for 0 <= e < 2^exp_bits (the caller checks the
        range) and 0 <= factor < modulus; the factor costs no extra multiplication."""
        if factor is None:
            return mpz.from_bytes(self._t.pow(_le(e, self._ebytes)), "little")
        return mpz.from_bytes(self._t.pow(_le(e, self._ebytes), _le(factor, self._mbytes)), "little")


def multi_exp(bases: Sequence[int], exps: Sequence[int], modulus: int, window: int) -> mpz:
    """Π bases[j]^exps[j] mod modulus for non-negative exps and bases below the modulus."""
    if _mont is None:
        raise RuntimeError(f"the native engine is not available ({REASON})")
    modulus = mpz(modulus)
    nbytes = (modulus.bit_length() + 7) // 8
    out = _mont.multi_exp(
        [_le(b, nbytes) for b in bases], [_le_min(e) for e in exps], _le(modulus, nbytes), int(window)
    )
    return mpz.from_bytes(out, "little")


#: the most threads one multi_exp_rows call shares its work among: the engine's MAX_ROW_THREADS, or 1 for
#: an engine built before it took ``threads`` (the rows then run on the calling thread; rebuild it)
MAX_ROW_THREADS: int = int(getattr(_mont, "MAX_ROW_THREADS", 1)) if _mont is not None else 1


def multi_exp_rows(
    bases: Sequence[int], rows: Sequence[Sequence[int]], modulus: int, group: int, threads: int = 1
) -> list[mpz]:
    """[Π_j bases[j]^row[j] mod modulus for row in rows] for non-negative exponents and bases below the
    modulus, with subset tables of ``group`` bases shared by the rows (Straus).  ``threads`` > 1: the
    tables, then the rows, are shared among that many threads of the engine (they start with the calling
    thread's scheduling priority), all reading one set of tables."""
    if _mont is None:
        raise RuntimeError(f"the native engine is not available ({REASON})")
    modulus = mpz(modulus)
    nbytes = (modulus.bit_length() + 7) // 8
    args = ([_le(b, nbytes) for b in bases], [[_le_min(e) for e in row] for row in rows], _le(modulus, nbytes))
    threads = max(1, min(int(threads), MAX_ROW_THREADS))
    out = _mont.multi_exp_rows(*args, int(group), threads) if threads > 1 else _mont.multi_exp_rows(*args, int(group))
    return [mpz.from_bytes(x, "little") for x in out]
