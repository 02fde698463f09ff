"""Two-party and multiparty building blocks that protocols compose.

Each primitive is a pair (or set) of role coroutines over a
:class:`~smcdp.net.channel.Channel`, like a protocol, but with no session of
its own: DGK secure comparison, secure argmin (blind, permute, tournament), secure
exponent / logarithm / LOGSUM, Naor–Pinkas oblivious transfer; plus the one
module that derives protocol randomness (:mod:`smcdp.primitives.rng`).
"""
