"""A party's store of threshold keys: one directory per group, written by the key ceremony.

Layout (docs/crypto.md, "The key ceremony as an operation")::

    <data_dir>/keys/                  0700
        <group>/                      0700
            share.json                0600  this party's key share (with the public key)
            group.json                0600  the public key, threshold, parties by index, key size,
                                            when and by which session it was made, how long it took

A group name is validated like a party name (lowercase letters, digits and '-'), so it is a plain
directory name.  A group is written whole or not at all: the ceremony's files go into a fresh
directory beside it, which then takes the group's name (a refresh swaps the old one out the same
way).  Nothing here reads a key share except :meth:`KeyStore.load_share`; listing a group reads
``group.json`` only.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from smcdp._files import atomic_write_json, json_loads
from smcdp.crypto.threshold import KeyShare, ThresholdPublicKey, load_key_share, save_key_share
from smcdp.errors import InvalidMessage, PreconditionFailed, naming_file
from smcdp.net.tls import validate_party_name
from smcdp.protocols.power_iteration_threshold import GroupKey

if TYPE_CHECKING:  # pragma: no cover
    from smcdp.plugins.base import SessionContext

GROUP_FILE = "group.json"
SHARE_FILE = "share.json"
KIND = "smcdp-key-group"
log = logging.getLogger("smcdp.keys")


class GroupExists(PreconditionFailed):
    """A ceremony would overwrite an existing group without ``replace``."""


def validate_group_name(name: object) -> str:
    """``name`` if it is a valid group name (the rules of a party name), else InvalidMessage."""
    return validate_party_name(name, "group name")


@dataclass(frozen=True)
class KeyGroup:
    """What ``group.json`` says of one group (public: no private material)."""

    group: str
    public: ThresholdPublicKey
    #: this party's share index
    index: int
    #: share index -> party name
    parties: Mapping[int, str]
    key_bits: int
    #: when the ceremony ended (UTC, ISO 8601)
    created: str
    session_id: str
    generation_seconds: float
    candidates: int = 0

    @property
    def threshold(self) -> int:
        return self.public.threshold

    @property
    def fingerprint(self) -> str:
        return self.public.fingerprint.hex()

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "version": 1,
            "group": self.group,
            "public": self.public.to_json(),
            "fingerprint": self.fingerprint,
            "index": self.index,
            "parties": {str(i): name for i, name in sorted(self.parties.items())},
            "threshold": self.threshold,
            "key_bits": self.key_bits,
            "created": self.created,
            "session_id": self.session_id,
            "generation_seconds": self.generation_seconds,
            "candidates": self.candidates,
        }

    def summary(self) -> dict[str, Any]:
        """One line of ``smcdp keys list``: everything but the key's numbers."""
        d = self.to_json()
        del d["public"], d["kind"], d["version"]
        d["parties"] = [self.parties[i] for i in sorted(self.parties)]
        return d

    @classmethod
    def from_json(cls, obj: object, allow_insecure: bool = False) -> KeyGroup:
        if not isinstance(obj, dict) or obj.get("kind") != KIND:
            raise InvalidMessage(f"not an smcdp key group ({GROUP_FILE})")
        try:
            public = ThresholdPublicKey.from_json(obj["public"], allow_insecure)
            parties = {int(i): validate_party_name(p) for i, p in obj["parties"].items()}
            group = cls(
                group=validate_group_name(obj["group"]),
                public=public,
                index=int(obj["index"]),
                parties=parties,
                key_bits=int(obj["key_bits"]),
                created=str(obj["created"]),
                session_id=str(obj["session_id"]),
                generation_seconds=float(obj["generation_seconds"]),
                candidates=int(obj.get("candidates", 0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
            raise InvalidMessage(f"{GROUP_FILE} is missing or has malformed fields") from None
        if group.key_bits <= 0 or group.candidates < 0:
            raise InvalidMessage(f"{GROUP_FILE}: key_bits must be > 0 and candidates >= 0")
        if not (math.isfinite(group.generation_seconds) and group.generation_seconds >= 0):
            raise InvalidMessage(f"{GROUP_FILE}: generation_seconds must be a finite number >= 0")
        if sorted(parties) != list(range(1, public.parties + 1)) or group.index not in parties:
            raise InvalidMessage(f"{GROUP_FILE} does not name one party per share index 1..{public.parties}")
        if obj.get("fingerprint") != group.fingerprint:
            raise InvalidMessage(f"{GROUP_FILE}'s fingerprint does not match its public key")
        return group


class KeyStore:
    """The groups under one party's ``<data_dir>/keys``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def group_dir(self, group: str) -> Path:
        return self.root / validate_group_name(group)

    def exists(self, group: str) -> bool:
        return (self.group_dir(group) / GROUP_FILE).exists()

    def groups(self) -> list[str]:
        """The names of the stored groups, sorted (directories being written are not groups yet)."""
        if not self.root.is_dir():
            return []
        return sorted(d.name for d in self.root.iterdir() if not d.name.startswith(".") and (d / GROUP_FILE).is_file())

    def load(self, group: str, allow_insecure: bool = False) -> KeyGroup:
        path = self.group_dir(group) / GROUP_FILE
        try:
            obj = json_loads(path.read_text())
        except FileNotFoundError:
            raise InvalidMessage(f"no key group {group!r} in {self.root}") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise InvalidMessage(f"{path} is not valid JSON") from None
        with naming_file(path):
            return KeyGroup.from_json(obj, allow_insecure)

    def load_share(self, group: str, allow_insecure: bool = False) -> KeyShare:
        """This party's key share of ``group`` (refused if group or others may read it)."""
        share = load_key_share(self.group_dir(group) / SHARE_FILE, allow_insecure)
        info = self.load(group, allow_insecure)
        if share.public != info.public or share.index != info.index:
            raise InvalidMessage(f"the key share of group {group!r} does not belong to its {GROUP_FILE}")
        return share

    def check_writable(self, group: str, *, replace: bool, session_id: str) -> None:
        """Raise :class:`GroupExists` if ``group`` exists, unless ``replace`` or it was written by this very
        session (a replay of the ceremony after a restart writes the same group again)."""
        if not self.exists(group) or replace:
            return
        try:
            made_by = json.loads((self.group_dir(group) / GROUP_FILE).read_text()).get("session_id")
        except (OSError, ValueError, AttributeError):
            made_by = None
        if made_by != session_id:
            raise GroupExists(
                f"key group {group!r} exists already (made by session {made_by}); "
                'give "replace": true to refresh it with a new key'
            )

    def save(self, info: KeyGroup, share: KeyShare, *, replace: bool) -> Path:
        """Write ``group.json`` and ``share.json`` of a new group whole, or replace an existing one."""
        if share.public != info.public or share.index != info.index:
            raise ValueError("the share does not belong to the group record")
        self.check_writable(info.group, replace=replace, session_id=info.session_id)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        target = self.group_dir(info.group)
        fresh = Path(tempfile.mkdtemp(prefix=f".{info.group}.", dir=self.root))  # mode 0700
        try:
            save_key_share(share, fresh / SHARE_FILE)
            atomic_write_json(fresh / GROUP_FILE, info.to_json(), 0o600)
            if target.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{info.group}.old.", dir=self.root))
                os.replace(target, old / info.group)
                os.replace(fresh, target)
                shutil.rmtree(old)
            else:
                os.replace(fresh, target)
        finally:
            if fresh.exists():
                shutil.rmtree(fresh)
        return target


def stored_groups(root: str | os.PathLike[str], allow_insecure: bool = False) -> dict[str, tuple[str, ...]]:
    """The key groups under ``root``: name -> their parties by share index (one that does not load is left
    out, with a warning: a policy's default then treats it as absent)."""
    store = KeyStore(root)
    out = {}
    for name in store.groups():
        try:
            info = store.load(name, allow_insecure)
        except InvalidMessage as exc:
            log.warning("key group %s does not load: %s", name, exc)
            continue
        out[name] = tuple(info.parties[i] for i in sorted(info.parties))
    return out


def utc_now() -> str:
    """Now, as ``group.json``'s ``created`` says it (ISO 8601, UTC, seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def session_group_key(ctx: SessionContext, group: str, data_roles: list[str], role: str) -> GroupKey:
    """This party's share of the session's key ``group``, from its key store, and each data role's share index
    (power iteration's and dp-aggregate's group-key modes): the session's data roles must be held by exactly
    the group's parties (refused otherwise, before anything is sent)."""
    if ctx.keys_dir is None:
        raise PreconditionFailed(f"{ctx.roles[role]} has no key store for key group {group!r}")
    store = KeyStore(ctx.keys_dir)
    if not store.exists(group):
        raise PreconditionFailed(
            f"{ctx.roles[role]} holds no key group {group!r} (smcdp keys list; smcdp keys generate makes one)"
        )
    info = store.load(group, ctx.allow_insecure_keys)
    share = store.load_share(group, ctx.allow_insecure_keys)
    index_of = {name: i for i, name in info.parties.items()}
    holders = {r: ctx.roles[r] for r in data_roles}
    if sorted(holders.values()) != sorted(index_of):
        raise PreconditionFailed(
            f"key group {group!r} belongs to {', '.join(sorted(index_of))}; the session's data roles are held "
            f"by {', '.join(sorted(holders.values()))}: they must be exactly the group's parties"
        )
    return GroupKey(share, {r: index_of[name] for r, name in holders.items()}, group)
