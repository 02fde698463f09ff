"""Party processes without checkpointing, for bench/checkpoint_bench.py's baseline only.

A party process started with this directory on its PYTHONPATH imports this module first (Python's
``sitecustomize`` hook) and then keeps no journal (every record is dropped, nothing is synced), never
rewrites ``checkpoint.json`` after creating it and fingerprints no inputs.  Such a party cannot
replay anything after a crash: the same sessions, minus what checkpointing costs.  Never use it
outside that benchmark.
"""

import concurrent.futures

from smcdp.runtime.durability import checkpoint as _checkpoint


class NullJournal:
    """A journal that keeps nothing (implements smcdp.net.channel.Journal)."""

    lost_outbound: dict = {}

    def inbound(self):
        return []

    def record_inbound(self, sender_role, tag, type_name, data, durable=True):
        pass

    def sync(self):
        pass

    def durable_future(self):
        fut = concurrent.futures.Future()
        fut.set_result(None)
        return fut

    def outbound(self, to_role, tag):
        return None

    def record_outbound(self, to_role, tag, type_name, data, durable=True):
        pass

    def mark_delivered(self, to_role, tag):
        pass

    def delivered(self, to_role, tag):
        return False

    def stats(self):
        return {
            "journal_bytes": 0,
            "journal_records": 0,
            "journal_syncs": 0,
            "journal_seconds": 0.0,
            "received": 0,
            "sent": 0,
            "acknowledged": 0,
        }

    def close(self):
        pass


_checkpoint.Checkpoint.journal = property(lambda self: NullJournal())
_checkpoint.Checkpoint.set_state = lambda self, state, **fields: self.meta.update(fields, state=state)
_checkpoint.input_fingerprint = lambda paths: {}
