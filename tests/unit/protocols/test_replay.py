"""Resume by deterministic replay, protocol by protocol, in memory.

Each protocol runs once with a journal and a randomness root per role.  Then
every role is replayed *alone* -- the others gone, as after a crash of that
role -- from its journal and its root: it must reach exactly the result it
reached before (same decrypted values, same noise, same keys) and transmit
nothing, because every message it sends was acknowledged already.  This is
what docs/fault-tolerance.md relies on: a replay reveals nothing a completed
run would not, and never re-draws a mask, a scaling or DP noise.

The same runs' journals then serve an offline damage campaign: truncations, bit flips, zeroed blocks,
deleted files and older copies, each of which a party must name as damage -- never accept silently as a
shorter (torn) journal.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import asdict

import numpy as np
import pytest

from smcdp.crypto.paillier import generate_keypair
from smcdp.net.channel import InMemoryNetwork
from smcdp.primitives.rng import Randomness
from smcdp.protocols.dp_aggregate import DPAggregateParams, charlie, data_party, dave
from smcdp.protocols.keygen import KeygenParams, party_roles
from smcdp.protocols.keygen import party as keygen_party
from smcdp.protocols.keyword import KeywordParams, keyword_alice, keyword_bob
from smcdp.protocols.power_iteration import PowerIterationParams, trent
from smcdp.protocols.power_iteration import data_party as pi_party
from smcdp.runtime.durability.integrity import Mac
from smcdp.runtime.durability.journal import FileJournal, JournalDamaged
from tests.unit.protocols.keyword_util import synthetic_models


def _comparable(result):
    d = asdict(result) if not isinstance(result, dict) else dict(result)
    for k in ("stats", "timings", "round_seconds", "share_file", "model_file"):
        d.pop(k, None)
    return d


def _journal(path, **kw) -> FileJournal:
    """A session's journal as a checkpoint opens it: authenticated, with its head."""
    return FileJournal(path, Mac(bytes(range(32)), "journal", path.stem), head=True, **kw)


def _run(tmp_path, roles: dict[str, str], make_fns):
    """Run every role once, each with a journal; returns (the roots, the results, the network)."""
    roots = {r: Randomness.fresh() for r in roles}
    journals = {r: _journal(tmp_path / f"{r}.log") for r in roles}
    net = InMemoryNetwork(roles, journals=journals)
    first = asyncio.run(net.run(make_fns(roots)))
    for j in journals.values():
        j.close()
    return roots, first, net


def _run_and_replay(tmp_path, roles: dict[str, str], make_fns):
    roots, first, net = _run(tmp_path, roles, make_fns)
    for role in roles:
        replay = InMemoryNetwork(roles, journals={role: _journal(tmp_path / f"{role}.log")})
        ch = replay.channels[role]
        fns = make_fns({r: Randomness(k.key) for r, k in roots.items()})
        again = asyncio.run(fns[role](ch))
        assert _comparable(again) == _comparable(first[role]), f"replayed role {role} reached another result"
        assert replay.transcript == [], f"replayed role {role} sent {len(replay.transcript)} message(s) again"
        assert ch.replayed_sends == sum(1 for sender, *_ in net.transcript if sender == role)
    return first


def _power_iteration():
    rng = np.random.default_rng(5)
    blocks = [rng.normal(size=(5, 4)), rng.normal(size=(5, 6))]
    params = PowerIterationParams(n_parties=2, key_bits=512, p=0.7, tol=1e-8, max_iterations=300)
    roles = {"trent": "trent", "party1": "alice", "party2": "bob"}

    def fns(roots):
        return {
            "trent": lambda ch: trent(ch, params, seed=roots["trent"], allow_insecure_keys=True),
            "party1": lambda ch: pi_party(ch, blocks[0], params, seed=roots["party1"], allow_insecure_keys=True),
            "party2": lambda ch: pi_party(ch, blocks[1], params, seed=roots["party2"], allow_insecure_keys=True),
        }

    return roles, fns


def test_power_iteration_replays(tmp_path):
    first = _run_and_replay(tmp_path, *_power_iteration())
    assert first["trent"].converged


def _dp_aggregate(**mode):
    K = 3
    p = DPAggregateParams(
        n_parties=K, dim=3, epsilon=1.0, lam=0.1, max_sensitivity=0.5, key_bits=768, dgk_bits=512, dgk_t=64, **mode
    ).validate()
    weights = [np.array([0.3, -0.2, 0.1]), np.array([0.25, -0.1, 0.05]), np.array([-0.1, 0.4, 0.0])]
    sens = [0.05, 0.08, 0.06]
    roles = {"charlie": "charlie", "dave": "dave", **{f"party{j + 1}": f"p{j + 1}" for j in range(K)}}

    def fns(roots):
        return {
            "charlie": lambda ch: charlie(ch, p, seed=roots["charlie"], allow_insecure_keys=True),
            "dave": lambda ch: dave(ch, p),
            **{
                f"party{j + 1}": lambda ch, j=j: data_party(
                    ch, weights[j], sens[j], p, seed=roots[f"party{j + 1}"], allow_insecure_keys=True
                )
                for j in range(K)
            },
        }

    return roles, fns


@pytest.mark.parametrize(
    "mode", [{}, {"calibration": "gaussian", "delta": 1e-6, "noise_parties": 2}], ids=["single-noise", "shared-noise"]
)
def test_dp_aggregate_replays_with_the_same_noise(tmp_path, mode):
    """Every role replayed from its journal re-sends nothing and reaches the same result -- with shared noise
    too, where a party's masked selected key must be the journaled ciphertext Charlie opened (a fresh
    encryption of it failed the opening check on every replay)."""
    first = _run_and_replay(tmp_path, *_dp_aggregate(**mode))
    assert np.all(np.isfinite(first["dave"].weights))


def _keyword(kind: str = "diag", m: int = 1, key_kind: str = "standard"):
    rng = np.random.default_rng(7)
    models = synthetic_models(kind, rng, D=3, N=3, d=4, M=5)
    X = rng.integers(0, 5, size=12) if kind == "discrete" else rng.normal(size=(12, 4))
    params = KeywordParams(key_bits=768, debug_reveal=True, frames_per_round=m, key_kind=key_kind)
    # a subgroup key (docs/crypto.md) is derived from alice's root, so the replay must derive it again
    sk = None if key_kind == "subgroup" else generate_keypair(768, allow_insecure=True)[1]
    roles = {"alice": "alice", "bob": "bob"}

    def fns(roots):
        return {
            "alice": lambda ch: keyword_alice(
                ch, X, params, private_key=sk, seed=roots["alice"], allow_insecure_keys=True
            ),
            "bob": lambda ch: keyword_bob(ch, models, params, seed=roots["bob"], allow_insecure_keys=True),
        }

    return roles, fns


@pytest.mark.parametrize(
    "kind,m,key_kind",
    [("discrete", 1, "standard"), ("diag", 1, "standard"), ("diag", 2, "standard"), ("diag", 1, "subgroup")],
)
def test_keyword_replays(tmp_path, kind, m, key_kind):
    """Also with rounds of 2 frames (12 frames: five full rounds and a last one of 1 step), and with Alice's
    subgroup key derived from her root."""
    roles, fns = _keyword(kind, m, key_kind)
    first = _run_and_replay(tmp_path, roles, fns)
    assert first["alice"].keyword in synthetic_models(kind, np.random.default_rng(7), D=3, N=3, d=4, M=5).words


#: damages per protocol: with the three protocols, over 2,000 damaged journals
CAMPAIGN = 700


def _damage(rng: random.Random, raw: bytes) -> tuple[str, bytes]:
    """One damage to a journal's bytes: a truncation, a flipped bit or a zeroed block."""
    how = rng.choice(("truncate", "flip", "zero"))
    if how == "truncate":
        cut = rng.randrange(len(raw))
        return f"truncated at {cut}", raw[:cut]
    out = bytearray(raw)
    if how == "flip":
        pos = rng.randrange(len(raw))
        out[pos] ^= 1 << rng.randrange(8)
        return f"bit flipped at {pos}", bytes(out)
    pos = rng.randrange(len(raw))
    size = rng.randint(1, 64)
    out[pos : pos + size] = bytes(len(out[pos : pos + size]))
    return f"{size} bytes zeroed at {pos}", bytes(out)


@pytest.mark.parametrize("scenario", [_power_iteration, _dp_aggregate, _keyword], ids=lambda f: f.__name__[1:])
def test_no_damage_to_a_closed_journal_is_taken_for_a_torn_tail(tmp_path, scenario):
    """Offline damage campaign on the journals of a real run: every truncation, flipped bit or zeroed block
    of a journal whose records were all made durable (and acknowledged) is named as damage, never read as
    a shorter journal; so are a deleted journal, a deleted head and an older copy of the journal."""
    roles, fns = scenario()
    _run(tmp_path, roles, fns)
    rng = random.Random(f"campaign/{scenario.__name__}")
    names = sorted(roles)
    originals = {r: (tmp_path / f"{r}.log").read_bytes() for r in names}
    silent = []
    for i in range(CAMPAIGN):
        role = names[i % len(names)]
        path = tmp_path / f"{role}.log"
        what, raw = _damage(rng, originals[role])
        if raw == originals[role]:
            continue  # zeros written over zeros: nothing changed
        path.write_bytes(raw)
        try:
            _journal(path).close()
        except JournalDamaged as exc:
            assert str(path) in str(exc) and exc.damage, what
        else:
            silent.append(f"{role}: {what}")
        path.write_bytes(originals[role])
    assert silent == [], f"{len(silent)} of {CAMPAIGN} damages accepted silently: {silent[:5]}"
    role = names[0]
    path = tmp_path / f"{role}.log"
    head = path.with_name(path.name + ".head")
    path.unlink()  # deleted: it must not be recreated empty
    with pytest.raises(JournalDamaged, match="the journal is missing but its head is not"):
        _journal(path)
    assert not path.exists()
    path.write_bytes(originals[role])
    saved = head.read_bytes()
    head.unlink()
    with pytest.raises(JournalDamaged, match=r"its head \S+\.head is missing"):
        _journal(path)
    head.write_bytes(saved[:-1] + bytes([saved[-1] ^ 1]))
    with pytest.raises(JournalDamaged, match="does not verify"):
        _journal(path)
    head.write_bytes(saved)
    _journal(path).close()  # intact again


def test_a_crash_still_leaves_a_torn_tail_and_a_repair_takes_a_truncated_journal(tmp_path):
    """The head is written after each sync: what a crash cuts (records written after the last sync) is a
    torn tail, dropped as before; a cut into what the head covers is damage, and a resumed session's
    repair keeps the intact records and names the loss."""
    path = tmp_path / "s.log"
    j = _journal(path)
    j.record_inbound("b", "x/0", "smcdp.v1.Ints", b"in0")  # durable: synced, head updated
    j.record_outbound("b", "y/0", "smcdp.v1.Ints", b"out0")
    durable = path.stat().st_size
    head = path.with_name(path.name + ".head").read_bytes()
    j.record_inbound("b", "x/1", "smcdp.v1.Ints", b"in1", durable=False)  # written, never synced
    crashed = path.read_bytes()
    j.close()
    for cut in range(durable, len(crashed)):  # the process died while writing the last record
        path.write_bytes(crashed[:cut])
        path.with_name(path.name + ".head").write_bytes(head)
        again = _journal(path)
        assert [t for _, t, _, _ in again.inbound()] == ["x/0"], cut
        again.close()
    path.write_bytes(crashed[: durable - 1])
    path.with_name(path.name + ".head").write_bytes(head)
    with pytest.raises(JournalDamaged, match=r"(are|is) missing") as e:
        _journal(path, owner="alice")
    assert "alice" in str(e.value) and "not a torn tail" in str(e.value)
    repaired = _journal(path, repair=True)
    assert repaired.repaired and [t for _, t, _, _ in repaired.inbound()] == ["x/0"]
    repaired.close()
    _journal(path).close()  # the repaired journal and its head agree


@pytest.mark.parametrize("n,t", [(2, 1), (3, 1)])
def test_key_ceremony_replays_every_message(tmp_path, n, t):
    """Every party of the dealer-free key ceremony, replayed alone from its journal and root, re-sends
    exactly what it sent (the channel checks each message; n = 2's ephemeral-key ciphertexts may differ
    only in their fresh encryption randomness) and ends with the same key share."""
    params = KeygenParams(parties=n, threshold=t, key_bits=256, allow_insecure=True).validate()
    roles = {r: f"org{r[5:]}" for r in party_roles(n)}

    def fns(roots):
        return {r: (lambda ch, r=r: keygen_party(ch, params, seed=roots[r])) for r in roles}

    roots, first, net = _run(tmp_path, roles, fns)
    assert len({first[r].public.fingerprint for r in roles}) == 1
    for role in roles:
        replay = InMemoryNetwork(roles, journals={role: _journal(tmp_path / f"{role}.log")})
        ch = replay.channels[role]
        again = asyncio.run(fns({r: Randomness(k.key) for r, k in roots.items()})[role](ch))
        assert again.share.to_json() == first[role].share.to_json(), f"replayed {role} holds another share"
        assert again.candidates == first[role].candidates
        assert replay.transcript == [], f"replayed {role} sent {len(replay.transcript)} message(s) again"
        assert ch.replayed_sends == sum(1 for sender, *_ in net.transcript if sender == role)
