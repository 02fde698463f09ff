"""``smcdp keys``: the key ceremony as an operation, and the party's key store.

* ``smcdp keys generate --config X --group NAME --parties a,b,c --threshold T [--key-bits 2048]
  [--replace]`` starts a ``key-ceremony`` session among the named parties, this party holding the role
  of its place in ``--parties`` (party1 for the first name …), shows its progress (the step and the
  candidates tried so far, after an estimate of how many it will take) and prints the new group as
  JSON: group, threshold, parties, fingerprint, generation_seconds.  Every party stores its share in
  ``<data_dir>/keys/<group>/`` (docs/crypto.md, "The key ceremony as an operation").
* ``smcdp keys list --config X`` prints one JSON object per stored group (no private material).
"""

from __future__ import annotations

import argparse
import json
import sys

from smcdp.cli.party import positive_float, wait_watched
from smcdp.client import PartyClient, SessionHandle, SessionState
from smcdp.errors import InvalidMessage, SmcdpError
from smcdp.net.tls import parse_party_list
from smcdp.plugins.keygen import PROTOCOL, KeyCeremonyParams
from smcdp.plugins.keystore import KeyStore
from smcdp.protocols.keygen import expected_candidates, party_roles
from smcdp.runtime.config import load_config

#: what ``keys generate`` prints of the ceremony's result at this party
PRINTED = ("group", "threshold", "parties", "fingerprint", "generation_seconds")


def _fail(exc: BaseException) -> int:
    print(f"smcdp keys: error [{getattr(exc, 'code', 'INTERNAL')}]: {exc}", file=sys.stderr)
    return 2 if isinstance(exc, InvalidMessage) else 1


def ceremony_request(me: str, parties: list[str], group: str, threshold: int, key_bits: int, replace: bool):
    """(roles, validated params) of a ceremony among ``parties`` (in share-index order), started by ``me``."""
    if me not in parties:
        raise InvalidMessage(f"this party ({me}) must be one of --parties {','.join(parties)}: it holds a share")
    if len(set(parties)) != len(parties):
        raise InvalidMessage("--parties names a party twice")
    roles = dict(zip(party_roles(len(parties)), parties))
    params = {"group": group, "parties": len(parties), "threshold": threshold, "key_bits": key_bits}
    if replace:
        params["replace"] = True
    KeyCeremonyParams.from_mapping(params)
    return roles, params


class CeremonyFailed(SmcdpError):
    """The key ceremony session ran and did not succeed (its record says how it ended)."""


def generate(
    client: PartyClient,
    parties: list[str],
    group: str,
    threshold: int,
    key_bits: int = 2048,
    *,
    replace: bool = False,
    timeout: float | None = None,
) -> dict:
    """Run a key ceremony among ``parties`` (share-index order) from ``client``'s party, which takes the role
    of its place in ``parties``: says on stderr how many candidate moduli it expects, shows the session's
    progress, and returns what ``keys generate`` prints (:data:`PRINTED`, session_id, candidates).

    Raises :class:`~smcdp.errors.InvalidMessage` for a request refused before any session starts (the group
    exists and ``replace`` is false, say) and :class:`CeremonyFailed` if the session did not succeed.
    ``smcdp keys generate`` and ``smcdp demo … --threshold`` both run a ceremony through this."""
    roles, params = ceremony_request(client.name, parties, group, threshold, key_bits, replace)
    store = KeyStore(client.config.data_dir / "keys")
    if store.exists(group) and not replace:
        raise InvalidMessage(f"key group {group!r} exists in {store.root}; --replace refreshes it")
    p = KeyCeremonyParams.from_mapping(params)
    expected = expected_candidates(p.key_bits, p.parties)
    print(
        f"key ceremony {group!r}: {p.parties} parties, threshold {p.threshold}, {p.key_bits}-bit key; "
        f"about {expected:.0f} candidate moduli expected (~{expected / p.batch:.0f} batches of {p.batch}; "
        f"the count varies from run to run), at most {p.candidate_budget()}",
        file=sys.stderr,
    )
    handle = client.start_session(PROTOCOL, roles, params, wait=False, timeout=timeout)
    assert isinstance(handle, SessionHandle)
    record = wait_watched(handle, unit="batch")
    if record.state is not SessionState.SUCCEEDED or not isinstance(record.result, dict):
        err = record.error
        raise CeremonyFailed(
            f"the key ceremony (session {record.session_id}) ended {record.state.value}"
            + (f": [{err.code}] {err.message}" + (f" (at {err.origin})" if err.origin else "") if err else "")
        )
    out = {k: record.result[k] for k in PRINTED}
    out["session_id"] = record.session_id
    out["candidates"] = record.result.get("candidates")
    return out


def _cmd_generate(args: argparse.Namespace) -> int:
    try:
        pc = PartyClient.from_config(args.config)
        out = generate(
            pc,
            parse_party_list(args.parties),
            args.group,
            args.threshold,
            args.key_bits,
            replace=args.replace,
            timeout=args.timeout,
        )
    except CeremonyFailed as exc:
        print(f"smcdp keys: {exc}", file=sys.stderr)
        return 1
    except (SmcdpError, OSError) as exc:
        return _fail(exc)
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config)
        store = KeyStore(cfg.data_dir / "keys")
        groups = [store.load(g, cfg.allow_insecure_keys).summary() for g in store.groups()]
    except (SmcdpError, OSError) as exc:
        return _fail(exc)
    for g in groups:
        print(json.dumps(g, sort_keys=True))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "keys", help="threshold keys: run a key ceremony, list this party's key groups (docs/crypto.md)"
    )
    sp = p.add_subparsers(dest="keys_command", required=True)
    g = sp.add_parser(
        "generate",
        help="generate a dealer-free threshold Paillier key among parties and store it under a group name",
    )
    g.add_argument("--config", required=True, help="this party's TOML configuration (it must be in --parties)")
    g.add_argument("--group", required=True, help="the key group's name (lowercase letters, digits, '-')")
    g.add_argument("--parties", required=True, help="comma-separated party names, in share-index order")
    g.add_argument("--threshold", required=True, type=int, help="t: any t + 1 parties decrypt, t learn nothing")
    g.add_argument("--key-bits", type=int, default=2048, help="modulus size (default 2048)")
    g.add_argument("--replace", action="store_true", help="refresh an existing group with a new key")
    g.add_argument("--timeout", type=positive_float, help="session deadline in seconds")
    g.set_defaults(func=_cmd_generate)
    ls = sp.add_parser("list", help="this party's key groups, one JSON object per line (no private material)")
    ls.add_argument("--config", required=True, help="this party's TOML configuration")
    ls.set_defaults(func=_cmd_list)
