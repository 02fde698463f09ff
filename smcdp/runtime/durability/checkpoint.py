"""A session's checkpoint at one party: what it needs to continue after its process died.

``data_dir/sessions/<id>.d/`` (mode 0700) holds:

* ``checkpoint.json`` -- the agreed session (protocol, roles, parameters,
  timeout, initiator), this party's role, the session's state ("prepared",
  "running", or "failed" with ``resumable``), its wall-clock deadline, how
  often it was restarted, and a fingerprint of the input files the role read;
* ``root.key`` -- the 32-byte root of the role's randomness
  (:class:`smcdp.primitives.rng.Randomness`), drawn by this party from the OS
  CSPRNG when the session was proposed (or derived from an experiment seed the
  party's policy allowed).  Private material: 0600 from creation, like the key
  files, never sent anywhere, deleted with the checkpoint;
* ``journal.log`` -- every message received (stored durably *before* the
  sender is told it was delivered) and every message sent (written *before*
  the first attempt to send it, and synced while it travels), with the
  acknowledgements (:mod:`smcdp.runtime.durability.journal`);
* ``journal.log.head`` -- how much of the journal the last sync covered, so a
  journal cut short behind it (truncated, an older copy, deleted) is damage, not
  a torn tail;
* ``reserve`` -- 256 KiB set aside so that, on a full disk, the session can
  still record how it failed (released then, taken again when it resumes).

``checkpoint.json`` carries a MAC under the party's durability key
(:mod:`smcdp.runtime.durability.integrity`) and a check value of the root key,
so a damaged checkpoint or root key is named as such instead of replaying into
a different result (docs/fault-tolerance.md).

Resume is a **deterministic replay** (docs/fault-tolerance.md): the restarted
role runs again from its first step with the same randomness root, its channel
pre-loaded with every message it had received, and every message it sends
looked up in the journal -- already acknowledged: not sent again; journaled but
not acknowledged: sent again with the *same bytes*.  So no protocol needs code
to save and restore its state, a replay can never send two different messages
under one tag, and it re-draws no mask, key or DP noise.

The checkpoint is removed when the session succeeds, or fails in a way that
cannot be continued; it is kept (state "failed", ``resumable``) when the
session failed because a participant was unreachable or shut down, so that
``smcdp session resume ID`` can continue it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from smcdp._files import atomic_write, fsync_dir, json_loads
from smcdp.errors import PreconditionFailed, resource_failure
from smcdp.primitives.rng import KEY_BYTES, Randomness
from smcdp.runtime.durability.integrity import Mac, durability_key, local_failure
from smcdp.runtime.durability.journal import FileJournal
from smcdp.states import SessionState

META = "checkpoint.json"
ROOT_KEY = "root.key"
JOURNAL = "journal.log"
RESERVE = "reserve"
RESERVE_BYTES = 256 * 1024
#: 3 (2026-12-03): the secure forward's masks are drawn by ``logsum.uniform_below`` (other values for the same
#: root than version 2's ``randrange``), so a version-2 session could not resume bit-identical: it is refused
#: by name instead of diverging.  4 (2026-12-03): a group-key release's encryption randomness is a fixed-base
#: obfuscator of the key's public base (``threshold.encrypt_replayable``), not r^N: other ciphertexts for the
#: same root than version 3's.  5 (2026-12-03): the later changes of that afternoon -- split threshold
#: decryption (other partial messages), group-key proofs' nonces as powers of the key's base, dp-aggregate's
#: blinding exponents -- give other bytes again; a checkpoint of a build between those commits is refused.
#: 6 (2026-12-03): a coordinator relays a group-key stage's releases and proofs in one ``RelayedReleases``
#: message to each data party, not one message per role and kind: a version-5 journal holds the old ones.
#: 7 (2026-12-04): a data party sends its group-key digest to the coordinator only, who relays every party's
#: in one message, and the coordinator sends no echo: a version-6 journal holds the all-to-all digests.
#: 8 (2026-12-04): a session's first echo carries the party's link key, and the later echoes go through the
#: coordinator as pairwise MACs (smcdp.primitives.links): a version-7 journal holds all-to-all echoes
#: 9 (2026-12-05): the secure forward's emission masks have a sub-grid part, keyword's ranked scores a jitter each,
#: identification's padding speakers are drawn for the session, and the key ceremony shares Δ·d: a version-8
#: session would replay other bytes (or, for a ceremony, a share of the old kind), so it is refused by name
#: 10 (2026-12-05): dp-aggregate's default sensitivity bound carries the local fit's tolerance (1/(mλ) + 10⁻⁸/λ),
#: so its noise scale and grid differ from what a version-9 journal's messages were computed with
#: 11 (2026-12-05): a dp-aggregate party reports its sensitivity at the fit's tolerance, speaker-verify's header
#: shows the coefficient bits of all of bob's models, and frames beyond feature_bits are clipped, not refused
#: 12 (2026-12-05): DP power iteration's sensitivity carries the worst-case rounding margin for max_samples
#: (fp_error_margin), so its noise level and grid differ from what a version-11 journal was computed with
#: 13 (2026-12-05): a dp-aggregate party's local fit is the certified solve and reports 1/(nλ) + s/λ (the certified
#: slack, not the attained gradient norm), so the sensitivity keys and the default bound differ from a version-12
#: journal's, and for a tiny λ the weights too
#: 14 (2026-12-05): the Gaussian privacy profile is an upper bound in floating point (conversions.gaussian_delta),
#: so the DP calibrations' σ moves (~1e-12 relative at ordinary (ε, δ), up to ~1e-7 at extreme ones) and a
#: discrete Gaussian's integer parameters may with it:
#: a version-13 journal's noise need not replay bit-identical; and (the same evening) dp-aggregate's "seed"
#: calibration charges eps*max(1, sqrt(d)/(2K)), so its summaries' epsilon differs from a version-13 journal's,
#: and a DP power round scales the clipped columns before the product (other last bits in every entry of a
#: block's Z once one of its columns is clipped)
#: 15 (2026-12-05, later): dp-aggregate's Stage 1 matches are evaluated with the evaluating party holding the DGK
#: key (messages reversed, one key per party for its match and its check), and Bob refuses speaker and keyword
#: models that could leave the score range up front: a version-14 journal's messages no longer replay
#: 16 (2026-12-06): the key ceremony commits to every opening's points before revealing them, opens step 1's x_1 at
#: every party and stops on an opening outside the honest range: a version-15 ceremony's journal holds other messages
#: 17 (2026-12-06): dp-aggregate's Charlie proves each indicator entry with chunked challenges, sound whatever his
#: key ζ (zkp.prove_bit_any_key: 32 integers, not 5): a version-16 journal holds proofs of the old form
#: 18 (2026-12-06, an hour later): Charlie proves ζ's modulus has gcd(n, φ(n)) = 1 (s1/zeta-proof, a new message
#: after s1/zeta-pk): a version-17 journal has no such message
#: 19 (2026-12-06, later still): those two proofs' hashes reuse zkp._challenge and zkp._witness_stream instead of
#: copies of them, so their bytes differ from a version-18 journal's
#: 20 (2026-12-06, next session): speaker identification's Bob proves ζ's modulus (si/zeta-proof, a new message
#: after si/zeta-pk) and each selector with the chunked proof (32 integers a match, not 5)
#: 21 (2026-12-06, same session): speaker's comparisons run under Alice's DGK key (the key, the encrypted bits and
#: the result's share go from alice to bob, the blinded values back): a version-20 journal's go the other way
VERSION = 21
SUFFIX = ".d"
#: an input file larger than this is fingerprinted by its size, mtime and its first and last MiB
#: instead of its whole content (hashing runs at about 1 GB/s)
HASH_WHOLE_FILE = 1 << 30
_EDGE = 1 << 20


class CheckpointError(PreconditionFailed):
    """A checkpoint is missing, damaged or does not match what is being resumed."""

    def __init__(self, message: str, origin: str | None = None) -> None:
        super().__init__(message)
        self.origin = origin


class CheckpointDamaged(CheckpointError):
    """``checkpoint.json`` or ``root.key`` does not verify: the session cannot be continued here.

    ``meta``: the checkpoint's fields when ``checkpoint.json`` itself verified (a damaged root key),
    so that the session's other participants can still be told; None when it did not."""

    meta: dict | None = None


def _file_digest(p: Path) -> list:
    """[size, SHA-256 of the content] (beyond HASH_WHOLE_FILE: of its first and last MiB, with its mtime;
    not a regular file -- a pipe, a device: never opened, its type and mtime)."""
    st = p.stat()
    if not stat.S_ISREG(st.st_mode):
        return [stat.S_IFMT(st.st_mode), st.st_mtime_ns]
    h = hashlib.sha256()
    with open(p, "rb") as f:
        if st.st_size <= HASH_WHOLE_FILE:
            for block in iter(lambda: f.read(_EDGE), b""):
                h.update(block)
            return [st.st_size, h.hexdigest()]
        h.update(f.read(_EDGE))
        f.seek(st.st_size - _EDGE)
        h.update(f.read(_EDGE))
    return [st.st_size, h.hexdigest(), st.st_mtime_ns]


def input_fingerprint(paths: Mapping[str, str]) -> dict[str, list]:
    """name -> [size, SHA-256] of each configured input (every file under a directory input).

    A resume refuses to replay over inputs that changed: the replay would not
    reproduce what the role sent.  The content is hashed, so a file rewritten with
    the same size and modification time is noticed too.  Taken when the role first
    runs (:meth:`Checkpoint.begin`), never at the proposal: a party opens no input for
    a session that is not going to run.
    """
    out: dict[str, list] = {}
    for name, path in sorted(paths.items()):
        p = Path(path)
        try:
            if p.is_dir():
                files = sorted(q for q in p.rglob("*") if q.is_file())
                out[name] = [[str(q.relative_to(p)), *_file_digest(q)] for q in files]
            else:
                out[name] = _file_digest(p)
        except OSError:
            out[name] = ["missing"]
    return out


class Checkpoint:
    """One session's checkpoint directory at this party (see the module docstring)."""

    def __init__(self, directory: Path, meta: dict, key: bytes, owner: str) -> None:
        self.dir = directory
        self.meta = meta
        self.owner = owner
        self._key = key
        self._journal: FileJournal | None = None
        #: open the journal in repair mode (a resumed session: its peers send again what it lost)
        self.repair_journal = False

    # ---------------------------------------------------------------- life cycle
    @staticmethod
    def directory(sessions_dir: Path, session_id: str) -> Path:
        return sessions_dir / f"{session_id}{SUFFIX}"

    @classmethod
    def create(
        cls,
        sessions_dir: Path,
        *,
        session_id: str,
        protocol: str,
        roles: Mapping[str, str],
        params: Mapping[str, Any],
        timeout_seconds: float,
        seed: int | None,
        initiator: str,
        role: str,
        randomness: Randomness,
        inputs: Mapping[str, str] | None = None,
    ) -> Checkpoint:
        if not randomness.replayable:
            raise ValueError("a checkpoint needs a replayable randomness root")
        root = randomness.key
        assert root is not None  # replayable: it has a root key
        owner = roles[role]
        d = cls.directory(sessions_dir, session_id)
        if d.exists():
            raise CheckpointError(f"session {session_id!r} already has a checkpoint here")
        try:
            key = durability_key(sessions_dir, owner)
            d.mkdir(mode=0o700, parents=False)
        except FileExistsError:  # made meanwhile by another creator: its directory, not ours to remove
            raise CheckpointError(f"session {session_id!r} already has a checkpoint here") from None
        except OSError as exc:
            raise local_failure(exc, owner, f"cannot create the checkpoint of session {session_id}") from None
        try:
            os.chmod(d, 0o700)  # whatever the umask
            atomic_write(d / ROOT_KEY, root, 0o600, sync_dir=False, parents=False)  # the directory is synced below
            meta = {
                "kind": "smcdp-session-checkpoint",
                "version": VERSION,
                "session_id": session_id,
                "protocol": protocol,
                "roles": dict(roles),
                "params": dict(params),
                "timeout_seconds": float(timeout_seconds),
                "seed": seed,
                "initiator": initiator,
                "role": role,
                "seeded": randomness.seeded,
                "state": SessionState.PREPARED.value,
                "resumable": False,
                "restarts": 0,
                "deadline_epoch": time.time() + float(timeout_seconds),
                "created": time.time(),
                "inputs": None,
                "error": None,
                "root_check": Mac(key, "root", session_id).tag(root).hex(),
                "journal_head": True,  # the journal keeps journal.head: a truncation is damage, not a torn tail
            }
            cp = cls(d, meta, key, owner)
            cp._write_meta(sync_dir=False)
            cp.ensure_reserve()
            # the root key's and checkpoint's names in the new directory, and the directory's own name in
            # sessions/: without the last, a power cut could lose the whole directory -- records synced in
            # it and acknowledged to the peers included -- and the session with it
            fsync_dir(d)
            fsync_dir(sessions_dir)
        except OSError as exc:
            shutil.rmtree(d, ignore_errors=True)
            raise local_failure(exc, owner, f"cannot create the checkpoint of session {session_id}") from None
        return cp

    @classmethod
    def load(cls, directory: Path, owner: str = "this party") -> Checkpoint:
        """The checkpoint in ``directory``; :class:`CheckpointDamaged` if it or its root key does not verify."""
        session_id = directory.name[: -len(SUFFIX)] if directory.name.endswith(SUFFIX) else directory.name
        path = directory / META
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise CheckpointDamaged(f"the checkpoint {directory} of party {owner} holds no {META}", owner) from None
        except OSError as exc:
            raise CheckpointDamaged(f"party {owner} cannot read {path}: {exc}", owner) from None
        try:
            key = durability_key(directory.parent, owner)
        except OSError as exc:
            raise CheckpointDamaged(f"party {owner} cannot read its durability key: {exc}", owner) from None
        damaged = f"{path} of party {owner} is damaged"
        try:
            meta = json_loads(raw)
        except ValueError:
            raise CheckpointDamaged(f"{damaged} (not JSON)", owner) from None
        if not isinstance(meta, dict) or meta.get("kind") != "smcdp-session-checkpoint":
            raise CheckpointDamaged(f"{damaged} (not an smcdp session checkpoint)", owner)
        if meta.get("version") != VERSION:
            raise CheckpointDamaged(
                f"{path} of party {owner} is not a version-{VERSION} smcdp session checkpoint "
                f"(version {meta.get('version')!r}); this smcdp cannot continue it",
                owner,
            )
        mac = meta.pop("mac", None)
        if not isinstance(mac, str) or not Mac(key, "checkpoint", session_id).verify(
            bytes.fromhex(mac) if _is_hex(mac) else b"", _canonical(meta)
        ):
            raise CheckpointDamaged(
                f"{damaged}: its MAC does not verify (a changed byte, another session's "
                "checkpoint, or a replaced durability.key)",
                owner,
            )
        missing = {
            "session_id",
            "protocol",
            "roles",
            "params",
            "timeout_seconds",
            "initiator",
            "role",
            "state",
            "deadline_epoch",
            "inputs",
            "root_check",
        } - set(meta)
        if missing or meta["session_id"] != session_id:
            raise CheckpointDamaged(f"{damaged} (lacks {sorted(missing)} or names another session)", owner)
        roles = meta["roles"]
        if isinstance(roles, dict) and isinstance(roles.get(meta["role"]), str):
            owner = roles[meta["role"]]  # verified: this party's name as the session knows it
        cp = cls(directory, meta, key, owner)
        try:
            cp.randomness()  # a damaged root key is named now, not after a replay diverged
        except CheckpointDamaged as exc:
            exc.meta = meta
            raise
        return cp

    @classmethod
    def scan(
        cls, sessions_dir: Path, owner: str = "this party", damaged: list[tuple[str, CheckpointError]] | None = None
    ) -> list[Checkpoint]:
        """Every intact checkpoint under ``sessions_dir``.  A damaged one is left out -- and appended to
        ``damaged`` as (session id, error) when a list is given: it fails its own session only."""
        if not sessions_dir.is_dir():
            return []
        out = []
        for d in sorted(sessions_dir.glob(f"*{SUFFIX}")):
            if not d.is_dir():
                continue
            try:
                out.append(cls.load(d, owner))
            except CheckpointError as exc:
                if damaged is not None:
                    damaged.append((d.name[: -len(SUFFIX)], exc))
        return out

    def remove(self) -> None:
        """Delete the checkpoint, root key and journal included.  Not synced: a power cut may bring the
        directory back, and the restart then finds the session's record (written, durably, before this) saying
        it ended and removes it again rather than replaying it (``Recovery._ended_here``)."""
        if self._journal is not None:
            self._journal.close(discard=True)
            self._journal = None
        shutil.rmtree(self.dir, ignore_errors=True)

    # -------------------------------------------------------------------- access
    @property
    def session_id(self) -> str:
        return self.meta["session_id"]

    def randomness(self) -> Randomness:
        path = self.dir / ROOT_KEY
        try:
            key = path.read_bytes()
        except OSError as exc:
            raise CheckpointDamaged(
                f"party {self.owner} cannot read the randomness root {path} of session {self.session_id}: {exc}",
                self.owner,
            ) from None
        check = self.meta.get("root_check", "")
        if (
            len(key) != KEY_BYTES
            or not _is_hex(check)
            or not Mac(self._key, "root", self.session_id).verify(bytes.fromhex(check), key)
        ):
            raise CheckpointDamaged(
                f"the randomness root {path} of party {self.owner} is damaged: it does not "
                "match the check value in its checkpoint, and a replay from it would not "
                "reproduce what this party sent",
                self.owner,
            )
        return Randomness(key, seeded=bool(self.meta.get("seeded")))

    @property
    def journal(self) -> FileJournal:
        """The session's journal (opened on first use; :class:`~.journal.JournalDamaged` if it does not verify)."""
        if self._journal is None:
            self._journal = FileJournal(
                self.dir / JOURNAL,
                Mac(self._key, "journal", self.session_id),
                owner=self.owner,
                repair=self.repair_journal,
                head=bool(self.meta.get("journal_head")),
                begun=self.meta.get("inputs") is not None,  # set by begin(), after the journal was made
            )
        return self._journal

    def begin(self, inputs: Mapping[str, str], **fields: Any) -> None:
        """The role runs (again): state "running" (with ``fields``, e.g. the deadline of a first Begin);
        the first time its inputs are fingerprinted, after that they must be as they were
        (:class:`CheckpointError` naming this party otherwise)."""
        if self.meta.get("inputs") is None:
            self.set_state(
                SessionState.RUNNING.value, resumable=False, error=None, inputs=input_fingerprint(inputs), **fields
            )
        else:
            self.check_inputs(inputs)
            self.set_state(SessionState.RUNNING.value, resumable=False, error=None, **fields)

    def check_inputs(self, inputs: Mapping[str, str]) -> None:
        now = input_fingerprint(inputs)
        if now != self.meta["inputs"]:
            changed = sorted(k for k in set(now) | set(self.meta["inputs"]) if now.get(k) != self.meta["inputs"].get(k))
            raise CheckpointError(
                f"session {self.session_id} cannot resume: its inputs changed at party {self.owner} "
                f"since it started ({', '.join(changed)}); a replay would not reproduce "
                "what this party sent",
                self.owner,
            )

    def set_state(self, state: str, **fields: Any) -> None:
        self.meta["state"] = state
        self.meta.update(fields)
        what = f"cannot update the checkpoint of session {self.session_id}"
        try:
            try:
                self._write_meta()
            except OSError as exc:
                if resource_failure(exc, self.owner, what) is None or not self.release_reserve():
                    raise
                self._write_meta()  # the reserve made room for it
        except OSError as exc:
            raise local_failure(exc, self.owner, what) from None

    def _write_meta(self, sync_dir: bool = True) -> None:
        body = {k: v for k, v in self.meta.items() if k != "mac"}
        body["mac"] = Mac(self._key, "checkpoint", self.session_id).tag(_canonical(body)).hex()
        data = json.dumps(body, indent=2, sort_keys=True).encode() + b"\n"
        atomic_write(self.dir / META, data, 0o600, sync_dir=sync_dir, parents=False)  # never re-made alone

    # ------------------------------------------------------------ disk-full reserve
    def ensure_reserve(self) -> None:
        """Set aside RESERVE_BYTES in the checkpoint directory (best effort: not on a disk that is full)."""
        path = self.dir / RESERVE
        try:
            if path.exists() and path.stat().st_size >= RESERVE_BYTES:
                return
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
            try:
                try:
                    os.posix_fallocate(fd, 0, RESERVE_BYTES)
                except OSError:
                    os.pwrite(fd, bytes(RESERVE_BYTES), 0)  # a file system without fallocate
            finally:
                os.close(fd)
        except OSError:
            try:
                path.unlink()
            except OSError:
                pass

    def release_reserve(self) -> bool:
        """Free the reserve (the disk is full: what follows records how the session failed)."""
        try:
            (self.dir / RESERVE).unlink()
            return True
        except OSError:
            return False

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None


def _canonical(meta: Mapping[str, Any]) -> bytes:
    return json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()


def _is_hex(text: Any) -> bool:
    try:
        bytes.fromhex(text)
    except (TypeError, ValueError):
        return False
    return True
