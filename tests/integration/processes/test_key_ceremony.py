"""The key ceremony between three party processes over gRPC with mutual TLS: ``smcdp keys generate``
at one party, ``smcdp keys list`` at every party (512-bit keys: a test-only opt-in)."""

import json
import os
import stat

from smcdp.cli import main as cli_main
from smcdp.plugins.keystore import GROUP_FILE, SHARE_FILE, KeyStore
from smcdp.runtime.governance.policy import Policy, ProtocolRules
from smcdp.runtime.local import LocalCluster

NAMES = ["alice", "bob", "carol"]


def _policy(initiators):
    rules = ProtocolRules(roles=("party*",), initiators=tuple(initiators), min_key_bits=512)
    return Policy(protocols={"key-ceremony": rules})


def _list(cluster, name, capsys):
    capsys.readouterr()
    assert cli_main(["keys", "list", "--config", str(cluster.configs[name])]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_keys_generate_then_list_at_every_party(tmp_path, capsys):
    # bob joins ceremonies alice or carol propose, carol those of alice or bob, alice only bob's
    policies = {"alice": _policy(["bob"]), "bob": _policy(["alice", "carol"]), "carol": _policy(["alice", "bob"])}
    with LocalCluster(
        {n: {} for n in NAMES}, allow_insecure_keys=True, workdir=tmp_path / "run", policies=policies
    ) as cluster:
        generate = ["keys", "generate", "--group", "hospitals", "--threshold", "1", "--key-bits", "512"]
        assert cli_main([*generate, "--config", str(cluster.configs["alice"]), "--parties", "alice,bob,carol"]) == 0
        captured = capsys.readouterr()
        made = json.loads(captured.out)
        assert "candidate moduli expected" in captured.err
        assert made["group"] == "hospitals" and made["threshold"] == 1
        assert made["parties"] == NAMES and made["generation_seconds"] > 0
        listed = {n: _list(cluster, n, capsys) for n in NAMES}
        for i, n in enumerate(NAMES, 1):
            (g,) = listed[n]
            assert g["fingerprint"] == made["fingerprint"] and g["index"] == i
            assert g["parties"] == NAMES and g["key_bits"] == 512 and g["threshold"] == 1
            assert "secret" not in json.dumps(g) and "public" not in g
            group = cluster.data_dir(n) / "keys" / "hospitals"
            assert stat.S_IMODE(os.stat(group).st_mode) == 0o700
            assert stat.S_IMODE(os.stat(group / SHARE_FILE).st_mode) == 0o600
            assert stat.S_IMODE(os.stat(group / GROUP_FILE).st_mode) == 0o600
        # any t + 1 = 2 of the stored shares decrypt a ciphertext under the group key
        from smcdp.crypto.threshold import combine, partial_decrypt

        shares = [KeyStore(cluster.data_dir(n) / "keys").load_share("hospitals", allow_insecure=True) for n in NAMES]
        pub = shares[0].public
        c = pub.public_key.raw_encrypt(31337)
        for a, b in ((0, 1), (1, 2), (0, 2)):
            parts = [partial_decrypt(shares[x], [c], b"it") for x in (a, b)]
            assert combine(pub, [c], parts, b"it") == [31337]

        # the group exists: refused at once without --replace; carol's ceremony is refused by alice's policy
        assert cli_main([*generate, "--config", str(cluster.configs["bob"]), "--parties", "alice,bob,carol"]) == 2
        assert "--replace" in capsys.readouterr().err
        args = [*generate, "--replace", "--parties", "alice,bob,carol"]
        assert cli_main([*args, "--config", str(cluster.configs["carol"])]) != 0
        assert "policy.key-ceremony.initiators" in capsys.readouterr().err
        # bob refreshes the group (he holds party2, his place in --parties): a new key everywhere
        assert cli_main([*args, "--config", str(cluster.configs["bob"])]) == 0
        fresh = json.loads(capsys.readouterr().out)
        assert fresh["fingerprint"] != made["fingerprint"]
        assert {_list(cluster, n, capsys)[0]["fingerprint"] for n in NAMES} == {fresh["fingerprint"]}


def test_a_party_killed_mid_ceremony_replays_and_every_party_stores_the_same_key(tmp_path):
    """bob is killed in the ceremony's third batch of candidates and restarted: he replays his role
    from his checkpoint and journal (every value he drew comes from the session's root), the session
    succeeds, and the key is the one the same seeded ceremony makes undisturbed."""
    from smcdp.net.server import new_session_id
    from smcdp.runtime.chaos import Chaos, ChaosAction

    roles = {"party1": "alice", "party2": "bob", "party3": "carol"}
    params = {"parties": 3, "threshold": 1, "key_bits": 512, "batch": 16}
    seed = 7
    with LocalCluster(
        {n: {} for n in NAMES},
        allow_insecure_keys=True,
        workdir=tmp_path / "run",
        peer_grace_seconds=30.0,
        allow_seeded=True,
        open_policy=True,
    ) as cluster:
        calm = cluster.run("key-ceremony", roles, {**params, "group": "calm"}, initiator="alice", seed=seed)
        assert {r["state"] for r in calm.values()} == {"succeeded"}
        assert calm["bob"]["result"]["sieve_batches"] >= 4  # long enough to be killed in batch 3
        sid = new_session_id("key-ceremony")
        chaos = Chaos(cluster, [ChaosAction.parse("kill:bob:round=3")], sid).start()
        try:
            recs = cluster.run(
                "key-ceremony", roles, {**params, "group": "killed"}, initiator="alice", seed=seed, session_id=sid
            )
        finally:
            chaos.finish()
        assert chaos.error is None and chaos.restarts == 1
        assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
        assert recs["bob"]["restarts"] == 1
        fps = {n: KeyStore(cluster.data_dir(n) / "keys").load("killed", allow_insecure=True).fingerprint for n in NAMES}
        assert set(fps.values()) == {calm["alice"]["result"]["fingerprint"]}
