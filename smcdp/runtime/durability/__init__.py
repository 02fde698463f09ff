"""What lets a session survive a crash (docs/fault-tolerance.md).

* :mod:`.checkpoint` -- a session's checkpoint directory: its agreed parameters,
  state, deadline and randomness root;
* :mod:`.journal` -- the messages it received and sent, for a deterministic replay;
* :mod:`.retention` -- how long what an ended session leaves on disk stays there.
"""
