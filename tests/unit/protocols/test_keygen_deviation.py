"""The key ceremony against a party that deviates during it (docs/crypto.md, "Assumptions": the ceremony is
semi-honest; the malicious version, Nishide–Sakurai / Hazay et al., is not implemented).

A strict expected failure: the attack below -- found by a review -- succeeds today, and this test asserts that
it does not.  Whoever makes the ceremony withstand it (verifiable sharing of every BGW input, or a check of the
opened points' degree where n > 2t + 1) sees it pass and must remove the mark and the limitation from the docs."""

from __future__ import annotations

import asyncio

import gmpy2
import pytest

import smcdp.protocols.keygen as kg
from smcdp.net.channel import InMemoryNetwork

ATTACKER, TARGET = 2, 3


def _ceremony_with_a_deviating_party(monkeypatch, key_bits: int):
    """n = 3, t = 1: party 2 follows the ceremony except in step 5 (gcd(N, p + q − 1)), where it sends party 3 a
    share of its mask r shifted by 2^L·λ_3⁻¹: the opened value then carries party 3's point Y(3) of the ψ sharing
    rotated by L bits (the field is a Mersenne prime) into bits the honest value does not fill.  Nothing notices:
    the echo agrees, w mod N is a unit, and the opened value is never used again."""
    seen: dict[str, tuple[int, int, int, int]] = {}

    class Deviating(kg._Ceremony):
        async def open_products(self, step, xs, ys, P, mask=0, s=None):
            if self.me != ATTACKER or not step.startswith("gcd/"):
                return await super().open_products(step, xs, ys, P, mask, s)
            L = P.bit_length() - (self.params.half_bits + 8)
            bump = pow(2, L, P) * pow(self.lam(P)[TARGET - 1], -1, P) % P
            honest_share, first = self.share, [True]

            def share(secret, degree, field):
                points = honest_share(secret, degree, field)
                if first[0] and degree == self.t:  # the sharing of r: party 3's point only
                    first[0] = False
                    points[TARGET - 1] = (points[TARGET - 1] + bump) % field
                return points

            self.share = share
            try:
                got = await self.shared(step, [(xs, self.t), (ys, self.t), ([0], 2 * self.t), (s, self.t)], P)
            finally:
                del self.share
            X, Y, Z, S = (sum(got[k][i][0] for i in range(self.n)) for k in range(4))
            points = await self.broadcast(step + "/open", [(X * Y + mask * S + Z) % P], P.bit_length())
            W = self.open([points[j][0] for j in range(self.n)], P)
            seen[step] = (W % P, Y % P, P, L)
            return [W]

    monkeypatch.setattr(kg, "_Ceremony", Deviating)
    params = kg.KeygenParams(parties=3, threshold=1, key_bits=key_bits, allow_insecure=True).validate()
    roles = kg.party_roles(3)
    net = InMemoryNetwork({r: f"org{r[5:]}" for r in roles}, timeout=300)
    res = asyncio.run(net.run({r: (lambda ch: kg.party(ch, params)) for r in roles}))
    return int(res["party1"].public.n), seen[list(seen)[-1]]


def _factor(N: int, W: int, Y_own: int, P: int, L: int) -> tuple[int, int] | None:
    """ψ = λ_2·Y(2) + λ_3·Y(3) (degree 1), Y(3) = 2^−L·(W − w) with w below 2^(e − L): ψ mod 2^(e − L), then p + q."""
    l_own = TARGET * pow(TARGET - ATTACKER, -1, P) % P
    l_target = ATTACKER * pow(ATTACKER - TARGET, -1, P) % P
    C = (l_own * Y_own + l_target * pow(2, -L, P) * W) % P
    C = C if C <= P // 2 else C - P
    room = 1 << (P.bit_length() - L)
    for psi in (C % room, C % room - room, C % room + room):
        total = psi + 1
        disc = total * total - 4 * N
        if disc >= 0 and gmpy2.is_square(disc):
            r = int(gmpy2.isqrt(disc))
            return (total - r) // 2, (total + r) // 2
    return None


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,  # the attack's success, not an error of the attack's code
    reason="known limitation (docs/crypto.md, Assumptions): the ceremony is semi-honest; one deviating party "
    "learns p and q through step 5's opening while the ceremony succeeds",
)
def test_a_party_that_deviates_in_the_ceremony_does_not_learn_the_factorization(monkeypatch):
    N, view = _ceremony_with_a_deviating_party(monkeypatch, 256)
    found = _factor(N, *view)
    assert found is None or found[0] * found[1] != N
