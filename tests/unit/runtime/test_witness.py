"""Signed audit heads and what a witness keeps (smcdp.runtime.governance.witness, issue 24)."""

from __future__ import annotations

import json

import pytest

from smcdp.errors import SmcdpError
from smcdp.net.tls import TlsMaterial, generate_deployment
from smcdp.runtime.governance.audit import AuditLog
from smcdp.runtime.governance.witness import (
    SignedHead,
    WitnessError,
    WitnessStore,
    check_log,
    heads_from_file,
    sign_head,
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    generate_deployment(d, ["alice", "bob", "eve"])
    other = tmp_path_factory.mktemp("other-ca")
    generate_deployment(other, ["alice"])
    return d, other


def _tls(d, name):
    return TlsMaterial.load(d / "ca.crt", d / f"{name}.crt", d / f"{name}.key")


def _log(tmp_path, n):
    log = AuditLog(tmp_path / "alice", "alice")
    log.open()
    for i in range(n):
        log.append("test", i=i)
    return log


def test_a_signed_head_verifies_only_as_what_it_says(tmp_path, certs):
    d, other = certs
    log = _log(tmp_path, 5)
    head = sign_head(_tls(d, "alice"), log.state(), "bob", "s-1")
    c = head.check(_tls(d, "bob").ca_pem, "alice")
    assert (c["party"], c["to"], c["session"], c["lines"]) == ("alice", "bob", "s-1", 5)
    assert SignedHead.from_dict(json.loads(json.dumps(head.as_dict()))) == head
    with pytest.raises(WitnessError, match="expected 'eve'"):
        head.check(d.joinpath("ca.crt").read_bytes(), "eve")
    with pytest.raises(WitnessError, match="does not verify"):
        SignedHead(head.statement.replace(b'"lines":5', b'"lines":9'), head.signature, head.certificate).check(
            d.joinpath("ca.crt").read_bytes()
        )
    with pytest.raises(WitnessError, match="not issued by the deployment CA"):
        sign_head(_tls(other, "alice"), log.state(), "bob", "s-1").check(d.joinpath("ca.crt").read_bytes())
    # eve cannot pass her head off as alice's: the certificate names its signer
    forged = sign_head(_tls(d, "eve"), log.state(), "bob", "s-1")
    with pytest.raises(WitnessError):
        SignedHead(
            forged.statement.replace(b'"party":"eve"', b'"party":"alice"'), forged.signature, forged.certificate
        ).check(d.joinpath("ca.crt").read_bytes(), "alice")
    with pytest.raises(WitnessError, match="larger"):
        SignedHead(b"x" * 5000, b"", b"").claims()


def test_a_witness_keeps_the_latest_head_and_evidence_of_one_that_went_back(tmp_path, certs):
    d, _ = certs
    log = _log(tmp_path, 3)
    store = WitnessStore(tmp_path / "bob", "bob", _tls(d, "bob").ca_pem)
    alice = _tls(d, "alice")
    assert store.keep("alice", sign_head(alice, log.state(), "bob", "s-1"), True) is None
    with pytest.raises(SmcdpError) as ei:  # not a session alice took part in here
        store.keep("alice", sign_head(alice, log.state(), "bob", "s-x"), False)
    assert ei.value.code == "PERMISSION_DENIED"
    with pytest.raises(WitnessError, match="addressed to 'eve'"):
        store.keep("alice", sign_head(alice, log.state(), "eve", "s-1"), True)
    with pytest.raises(WitnessError):  # bob's certificate on alice's call
        store.keep("alice", sign_head(_tls(d, "bob"), log.state(), "bob", "s-2"), True)
    log.append("more")
    assert store.keep("alice", sign_head(alice, log.state(), "bob", "s-2"), True) is None
    [latest] = store.held_for("alice")
    assert latest.claims()["lines"] == 4
    # alice's log loses lines (truncated and re-headed): her next head goes back, and bob notices
    first, _n, _sha = log.state()
    conflict = store.keep("alice", sign_head(alice, (first, 2, "0" * 64), "bob", "s-3"), True)
    assert conflict is not None and "went back" in conflict
    assert sorted(h.claims()["lines"] for h in store.held_for("alice")) == [2, 4]
    # a repeat for one session changes nothing after two heads (each side's end)
    store.keep("alice", sign_head(alice, log.state(), "bob", "s-2"), True)
    assert store.keep("alice", sign_head(alice, (first, 99, "1" * 64), "bob", "s-2"), True) is None
    assert max(h.claims()["lines"] for h in store.held_for("alice")) == 4
    assert (tmp_path / "bob" / "witness" / "alice.json").stat().st_mode & 0o777 == 0o600
    assert [h.claims()["lines"] for h in heads_from_file(tmp_path / "bob" / "witness" / "alice.json")] == [4, 2]


def test_heads_of_concurrent_sessions_that_cross_on_the_way_are_no_conflict(tmp_path, certs):
    # two sessions end at once: alice reads her head for s-1 (3 lines), appends, reads it for s-2 (4
    # lines); bob receives s-2's first.  That is old news, not a log that went back.
    d, _ = certs
    log = _log(tmp_path, 3)
    store = WitnessStore(tmp_path / "bob", "bob", _tls(d, "bob").ca_pem)
    alice = _tls(d, "alice")
    early = sign_head(alice, log.head(), "bob", "s-1")
    log.append("more")
    late = sign_head(alice, log.head(), "bob", "s-2")
    assert store.keep("alice", late, True) is None
    assert store.keep("alice", early, True) is None
    assert [h.claims()["lines"] for h in store.held_for("alice")] == [4]  # the longest is kept
    # a shorter head signed after the longer one is a log that went back, in whichever order they come
    first, _n, _sha, _t = log.head()
    back = sign_head(alice, (first, 2, "0" * 64), "bob", "s-3")
    assert "went back" in store.keep("alice", back, True)
    store2 = WitnessStore(tmp_path / "carol", "bob", _tls(d, "bob").ca_pem)
    assert store2.keep("alice", back, True) is None
    conflict = store2.keep("alice", late, True)
    assert conflict is not None and "signed an audit head of 2 lines" in conflict and "after one of 4" in conflict
    assert max(h.claims()["lines"] for h in store2.held_for("alice")) == 4
    # the same length with another last line conflicts whenever it was signed
    same = sign_head(alice, (first, 4, "1" * 64), "bob", "s-4")
    assert "went back" in store.keep("alice", same, True)


def test_a_head_whose_time_is_not_a_time_is_refused(tmp_path, certs):
    # heads are ordered by their time: one a peer signed with a time that does not parse is refused
    # (two such heads of the same length used to make keep() compare None with None: TypeError)
    d, _ = certs
    log = _log(tmp_path, 3)
    first, lines, sha, _t = log.head()
    bad = sign_head(_tls(d, "alice"), (first, lines, sha, "yesterday"), "bob", "s-1")
    with pytest.raises(WitnessError, match="time"):
        bad.check(_tls(d, "bob").ca_pem, "alice")
    store = WitnessStore(tmp_path / "bob", "bob", _tls(d, "bob").ca_pem)
    with pytest.raises(WitnessError, match="time"):
        store.keep("alice", bad, True)


def test_a_nested_statement_is_refused_before_it_is_parsed(monkeypatch):
    """A head is one flat object: a statement nested 999 deep reached the JSON parser, near the recursion limit (the
    RPC fuzz failed once in CI on what was finalised there); it is refused by a scan, the parser never called."""
    import smcdp.runtime.governance.witness as witness

    def parser(_text):
        raise AssertionError("the parser was called")

    monkeypatch.setattr(witness, "json_loads", parser)
    head = SignedHead(statement=b"[" * 999 + b"]" * 999, signature=b"", certificate=b"")
    with pytest.raises(WitnessError, match="nests deeper than 32 levels"):
        head.claims()


def test_check_log_names_truncation_rewrite_and_replacement(tmp_path, certs):
    d, _ = certs
    log = _log(tmp_path, 6)
    alice = _tls(d, "alice")
    state = log.state()
    head = sign_head(alice, state, "bob", "s-1")
    log.close()
    data_dir = tmp_path / "alice"
    [ok] = check_log(data_dir, "alice", d / "ca.crt", [("peer bob", head)])
    assert ok.ok and "matches" in ok.message
    raw = (data_dir / "audit.jsonl").read_bytes()
    lines = raw.splitlines(keepends=True)
    (data_dir / "audit.jsonl").write_bytes(b"".join(lines[:4]))
    [f] = check_log(data_dir, "alice", d / "ca.crt", [("peer bob", head)])
    assert not f.ok and "truncated" in f.message
    (data_dir / "audit.jsonl").write_bytes(b"".join(lines[:5]) + lines[5].replace(b'"i":5', b'"i":7'))
    [f] = check_log(data_dir, "alice", d / "ca.crt", [("peer bob", head)])
    assert not f.ok and "rewritten" in f.message
    (data_dir / "audit.jsonl").write_bytes(lines[1])
    [f] = check_log(data_dir, "alice", d / "ca.crt", [("peer bob", head)])
    assert not f.ok and "another log" in f.message
    [f] = check_log(data_dir, "alice", d / "ca.crt", [("file x", sign_head(_tls(d, "eve"), state, "bob", "s"))])
    assert not f.ok and f.lines is None and "unusable" in f.message


def test_an_unreadable_witness_file_is_kept_aside_and_a_new_one_starts(tmp_path, certs):
    d, _ = certs
    log = _log(tmp_path, 2)
    store = WitnessStore(tmp_path / "bob", "bob", _tls(d, "bob").ca_pem)
    (tmp_path / "bob" / "witness").mkdir(parents=True)
    (tmp_path / "bob" / "witness" / "alice.json").write_text("{damaged")
    assert store.keep("alice", sign_head(_tls(d, "alice"), log.state(), "bob", "s-1"), True) is None
    assert [h.claims()["lines"] for h in store.held_for("alice")] == [2]
    [aside] = (tmp_path / "bob" / "witness").glob("alice.json.unreadable-*")
    assert aside.read_text() == "{damaged"


def test_a_witness_file_this_party_cannot_open_stays_and_the_call_fails_naming_why(tmp_path, certs, monkeypatch):
    """Under a connection flood the party ran out of file descriptors: EMFILE moved an intact witness file aside
    as "unreadable" and the peer's heads were forgotten.  Not being able to open a file (out of descriptors, or
    not its owner after a restore) says nothing of its content: it stays, and the call fails naming the cause
    (UNAVAILABLE for a resource); afterwards the heads are all there.  Only content that does not parse is
    moved aside."""
    import errno
    import pathlib

    from smcdp.errors import DataLoss, NoSpace

    d, _ = certs
    log = _log(tmp_path, 2)
    store = WitnessStore(tmp_path / "bob", "bob", _tls(d, "bob").ca_pem)
    alice = _tls(d, "alice")
    assert store.keep("alice", sign_head(alice, log.state(), "bob", "s-1"), True) is None
    real = pathlib.Path.read_text

    def no_descriptors(self, *a, **kw):
        if self.name == "alice.json":
            raise OSError(errno.EMFILE, "Too many open files", str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(pathlib.Path, "read_text", no_descriptors)
    with pytest.raises(NoSpace, match=r"no file descriptors left \(process limit\) at bob: cannot read its witness"):
        store.keep("alice", sign_head(alice, log.state(), "bob", "s-2"), True)

    def not_ours(self, *a, **kw):  # a restore with the wrong owner: the file is not this process's to read
        if self.name == "alice.json":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(pathlib.Path, "read_text", not_ours)
    with pytest.raises(DataLoss, match=r"party bob cannot read its witness file alice\.json"):
        store.held_for("alice")
    monkeypatch.setattr(pathlib.Path, "read_text", real)
    assert list((tmp_path / "bob" / "witness").glob("alice.json.unreadable-*")) == []
    assert [h.claims()["lines"] for h in store.held_for("alice")] == [2]


def test_a_witness_counts_once_however_many_heads_it_returns(tmp_path, certs):
    """One hostile peer returning 2,003 copies of a head made 2,003 "agreements": the verdict is per witness."""
    from smcdp.runtime.governance.witness import verdicts

    d, _ = certs
    log = _log(tmp_path, 3)
    alice, state = _tls(d, "alice"), log.state()
    head, forged = sign_head(alice, state, "bob", "s-1"), sign_head(_tls(d, "eve"), state, "bob", "s")
    log.close()
    data_dir = tmp_path / "alice"
    findings = check_log(
        data_dir, "alice", d / "ca.crt", [("peer mallory", head)] * 2003 + [("peer bob", head)] + [("file x", forged)]
    )
    by = verdicts(findings)
    assert {s: v["verdict"] for s, v in by.items()} == {
        "peer mallory": "agrees",
        "peer bob": "agrees",
        "file x": "unusable",
    }
    assert by["peer mallory"]["heads"] == 2003 and by["peer bob"]["heads"] == 1
    lines = (data_dir / "audit.jsonl").read_bytes().splitlines(keepends=True)
    (data_dir / "audit.jsonl").write_bytes(b"".join(lines[:2]))  # truncated: bob's one head says so
    by = verdicts(check_log(data_dir, "alice", d / "ca.crt", [("peer mallory", head), ("peer bob", head)]))
    assert by["peer bob"]["verdict"] == "contradicts" and by["peer bob"]["contradicting"] == 1
