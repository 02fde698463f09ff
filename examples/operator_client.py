# %% [markdown]
# # Operating a party from Python: `smcdp.client.PartyClient`
#
# An operator talks to *their own* party with *their own* certificate: `PartyClient.from_config(
# "trent.toml")` reads the party's TOML (address, `[tls]` CA, certificate and key) and makes operator
# calls on its `Control` service -- start a session, watch it, fetch its record, list the proposals
# other parties sent, approve or reject them.  Answers are frozen dataclasses with states as enums;
# failures are the typed exceptions of `smcdp.errors`.  The `smcdp session …` commands are a thin
# layer over the same class.
#
# This notebook-style script (`# %%` cells: run it in VS Code / Jupyter with jupytext, or simply
# `python examples/operator_client.py`) starts its own federation on loopback -- Trent and two
# data parties, alice and bob, as separate OS processes with fresh certificates and mutual TLS --
# and runs privacy-preserving power iteration twice: once approved by alice's operator, once rejected.
# 512-bit keys keep it quick; they are insecure (real parties refuse them unless configured otherwise).

# %%
from __future__ import annotations

import atexit
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from smcdp.client import PartyClient, ProposalState, SessionState, SessionStatus
from smcdp.errors import PermissionDenied
from smcdp.plugins.registry import get_plugin
from smcdp.runtime.governance.policy import Policy, rules_for_layout
from smcdp.runtime.local import LocalCluster

work = Path(tempfile.mkdtemp(prefix="smcdp-operator-"))
rng = np.random.default_rng(7)
A = rng.normal(size=(6, 9))  # k = 6 features, n = 9 samples, split by columns
np.save(work / "alice.npy", A[:, :4])
np.save(work / "bob.npy", A[:, 4:])

ROLES = {"trent": "trent", "party1": "alice", "party2": "bob"}
PARAMS = {"n_parties": 2, "rows": 6, "key_bits": 512, "tol": 1e-9}

# Every party admits exactly this layout ([policy] written by the cluster); alice's operator
# wants to approve each power-iteration session by hand.
plugin = get_plugin("power-iteration")
summary = plugin.summary(plugin.validate_params(PARAMS, ROLES), ROLES)
rules = rules_for_layout(ROLES, initiators=["trent"], coordinating_roles=plugin.coordinating_roles, summary=summary)
rules["alice"] = replace(rules["alice"], approval="operator")
policies = {p: Policy(protocols={"power-iteration": r}) for p, r in rules.items()}

cluster = LocalCluster(
    {
        "trent": {},
        "alice": {"power-iteration": {"data": work / "alice.npy"}},
        "bob": {"power-iteration": {"data": work / "bob.npy"}},
    },
    allow_insecure_keys=True,
    workdir=work / "cluster",
    session_seconds=120,
    policies=policies,
)
cluster.start()
atexit.register(cluster.stop)  # the party processes go away however this script ends
print("party configs:", {p: str(c) for p, c in cluster.configs.items()})

# %% [markdown]
# ## Clients: one per operator
# Each operator holds only their own party's configuration and certificate.

# %%
trent = PartyClient.from_config(cluster.configs["trent"])
alice = PartyClient.from_config(cluster.configs["alice"])
print(trent, alice, sep="\n")
print("trent health:", trent.health(), "| trent sees alice:", trent.health("alice"))

# %% [markdown]
# ## Trent starts a session without waiting
# `wait=False` returns a `SessionHandle` at once; the session waits for alice's operator.

# %%
handle = trent.start_session("power-iteration", ROLES, PARAMS, wait=False, timeout=120)
print("started", handle.session_id)

# %% [markdown]
# ## Alice's operator reviews the proposal and approves it

# %%
proposal = alice.wait_for_proposal(handle.session_id, timeout=60)
assert proposal.state is ProposalState.PENDING
print(
    f"{proposal.session_id}: {proposal.protocol} from {proposal.initiator}, alice as {proposal.role}, "
    f"roles {dict(proposal.roles)}, epsilon {proposal.epsilon}"
)
decision = alice.approve(proposal.session_id)
print("decision:", decision.state.value)


# %% [markdown]
# ## Trent waits, watching rounds go by, and reads the result


# %%
def show(st: SessionStatus) -> None:
    print(f"  {st.session_id}: {st.state.value}, round {st.round}, step {st.step or '-'}")


result = handle.wait(on_status=show, poll=0.5)
assert result.state is SessionState.SUCCEEDED
x = np.array(result.result["x"])
top = np.linalg.svd(A, full_matrices=False)[2][0]  # x: the principal right singular vector of A
print(
    f"{result.session_id}: {result.state.value} in {result.seconds:.1f} s, {result.result['rounds']} rounds "
    f"({result.result['decoys']} decoys); |cos(x, x_true)| = {abs(x @ top) / np.linalg.norm(x):.6f}"
)
assert abs(x @ top) / np.linalg.norm(x) > 0.999

# %% [markdown]
# ## The same session as alice sees it: status, record, list

# %%
print("alice's status:", alice.status(result.session_id).state.value)
rec = alice.wait(result.session_id, timeout=30)  # alice's record (her outputs: u and her x block)
print("alice's record:", rec.state.value, "role", rec.role, "keys:", sorted(rec.result))
for info in alice.sessions():
    print(f"  {info.kind:<8} {info.session_id:<40} {info.state.value}")

# %% [markdown]
# ## A second session: alice's operator says no
# The initiator's wait raises the typed error, naming the party and the reason.

# %%
second = trent.start_session("power-iteration", ROLES, PARAMS, wait=False, timeout=60)
alice.wait_for_proposal(second.session_id, timeout=60)
refused = alice.reject(second.session_id, "no second run this week")
print("decision:", refused.state.value, "-", refused.reason)
try:
    second.wait()
    raise SystemExit("the rejected session ran")
except PermissionDenied as exc:
    print(f"trent was told: [{exc.code}] {exc}")
print("trent's record:", trent.result(second.session_id).state.value)

# %%
cluster.stop()
print("operator client example: OK")
sys.exit(0)
