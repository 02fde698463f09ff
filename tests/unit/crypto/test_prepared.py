"""Keys prepared before their session (issue 27): taken once, by label, with tables and obfuscators of
that key; evicted beyond capacity; a failed preparation leaves the session to do the work itself."""

import threading

import pytest

from smcdp.crypto.paillier import generate_keypair
from smcdp.crypto.prepared import KeyShelf


def _key():
    return generate_keypair(512, allow_insecure=True)[1]


def test_a_prepared_key_is_taken_once_with_its_tables_and_its_own_obfuscators():
    shelf = KeyShelf()
    sk = _key()
    shelf.prepare(b"a" * 32, lambda: sk, uses=100, obfuscators=40)
    shelf._jobs[b"a" * 32].thread.join(60)  # all made (a session may also come earlier)
    assert shelf.take(b"b" * 32) is None  # nothing under another label
    got = shelf.take(b"a" * 32)
    assert got is not None and got.key is sk and sk.tables_ready
    assert shelf.take(b"a" * 32) is None  # one session only
    assert got.stock == 40
    pk = sk.public_key
    for m in (0, 5, -7, 2**200):
        assert sk.raw_decrypt_signed(got.obfuscators.encrypt(m)) == m  # obfuscators are n-th residues of sk's n
    stats = got.obfuscators.stats()
    assert stats["inline"] == 0 and stats["precomputed"] >= 4 and got.obfuscators.pk == pk


def test_take_waits_for_a_key_still_being_made():
    shelf = KeyShelf()
    sk = _key()
    gate = threading.Event()

    def slow():
        gate.wait(10)
        return sk

    shelf.prepare(b"k" * 32, slow, uses=10, obfuscators=5)
    threading.Timer(0.2, gate.set).start()
    got = shelf.take(b"k" * 32)
    assert got is not None and got.key is sk


def test_the_oldest_entry_goes_beyond_capacity_and_clear_drops_everything():
    shelf = KeyShelf(capacity=2)
    keys = [_key() for _ in range(3)]
    for i, sk in enumerate(keys):
        shelf.prepare(bytes([i]) * 32, lambda sk=sk: sk, uses=10, obfuscators=4)
    assert len(shelf) == 2
    assert shelf.take(bytes([0]) * 32) is None
    assert shelf.take(bytes([2]) * 32).key is keys[2]
    shelf.clear()
    assert len(shelf) == 0 and shelf.take(bytes([1]) * 32) is None


def test_a_failed_preparation_gives_nothing_to_take(caplog):
    shelf = KeyShelf()

    def broken():
        raise RuntimeError("no entropy today")

    shelf.prepare(b"x" * 32, broken, uses=10, obfuscators=4)
    assert shelf.take(b"x" * 32) is None
    assert "preparing a session key failed" in caplog.text


@pytest.mark.parametrize("count", [0, 1])
def test_tiny_stocks(count):
    shelf = KeyShelf()
    sk = _key()
    shelf.prepare(b"t" * 32, lambda: sk, uses=1, obfuscators=count)
    got = shelf.take(b"t" * 32)
    assert got is not None and got.stock <= max(1, count)


def test_a_pool_filled_behind_a_session_makes_exactly_what_it_was_asked_for():
    from smcdp.crypto.obfuscation import ObfuscatorPool

    sk = _key()
    pool = ObfuscatorPool.for_private_key(sk, capacity=10, background=False)
    pool.fill_behind(37, step=8).join(60)
    assert pool.stats() == {"precomputed": 37, "inline": 0, "stock": 37}  # not kept full: exactly 37
    stop = threading.Event()
    stop.set()
    assert pool.fill(100, stop=stop) == 0
    pool.close()
    assert pool.fill(5) == 0  # a closed pool makes nothing


def test_a_job_dropped_while_its_key_is_made_builds_no_tables_but_a_taken_one_does():
    """KeyShelf.discard (a session took the root for the other kind of key) stops a job that is still making
    its key before its tables; a take of a job still making its key waits for it and gets it whole."""
    for action in ("discard", "take"):
        shelf, go, sk = KeyShelf(capacity=2), threading.Event(), _key()

        def make(go=go, sk=sk):
            go.wait(10)
            return sk

        shelf.prepare(b"label", make, uses=10, obfuscators=4)
        job = shelf._jobs[b"label"]
        if action == "discard":
            shelf.discard(b"label")
            go.set()
            job.thread.join(10)
            assert not sk.tables_ready and len(shelf) == 0 and shelf.take(b"label") is None
        else:
            threading.Timer(0.05, go.set).start()
            got = shelf.take(b"label")  # waits for the key and its tables
            assert got is not None and got.key is sk and sk.tables_ready
            job.thread.join(10)
