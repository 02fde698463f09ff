"""A party's governance: what it joins and what it pays for (docs/governance.md).

* :mod:`.policy` -- the ``[policy]`` and its evaluation on a proposal's summary;
* :mod:`.approvals` -- proposals waiting for the operator;
* :mod:`.decisions` -- what becomes of a waiting proposal: approved, rejected, withdrawn, expired, started;
* :mod:`.charges` -- the ``[budget]`` and a session's reservation and charge;
* :mod:`.audit` -- the hash-chained audit trail (and how many of one peer's refusals it records);
* :mod:`.witness` -- audit heads signed for the peers, what a witness keeps, checking a log against them;
* :mod:`.gate` -- the gate on ``Propose`` (and on resumes and restores) that runs them in order.
"""
