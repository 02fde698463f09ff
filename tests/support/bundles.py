"""What the multi-host and container harnesses read from a party's bundle: its session records."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path


class BundleRecords:
    """Mixin: needs ``bundle(party) -> Path`` (the party's deploy bundle) and ``log(party) -> str``."""

    def bundle(self, party: str) -> Path:  # pragma: no cover - provided by the harness
        raise NotImplementedError

    def log(self, party: str) -> str:  # pragma: no cover - provided by the harness
        raise NotImplementedError

    def record_path(self, party: str, session_id: str) -> Path:
        return self.bundle(party) / "data" / "sessions" / f"{session_id}.json"

    def wait_records(self, parties: Sequence[str], session_id: str, timeout: float) -> dict[str, dict]:
        """Wait until every party has written its final record of ``session_id``."""
        end = time.monotonic() + timeout
        records: dict[str, dict] = {}
        while True:
            for p in parties:
                if p not in records and self.record_path(p, session_id).exists():
                    records[p] = json.loads(self.record_path(p, session_id).read_text())
            if len(records) == len(parties):
                return records
            if time.monotonic() > end:
                missing = sorted(set(parties) - set(records))
                raise AssertionError(
                    f"no final record of {session_id} at {missing} within {timeout:g} s; "
                    + " | ".join(f"{p}: {self.log(p)[-1500:]}" for p in missing)
                )
            time.sleep(0.1)

    def running_at(self, party: str, session_id: str) -> bool:
        """The party's role has started (its output directory exists) and not yet ended."""
        return (self.bundle(party) / "data" / "outputs" / session_id).is_dir() and not self.record_path(
            party, session_id
        ).exists()
