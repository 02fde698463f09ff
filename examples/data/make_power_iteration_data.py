"""Regenerate the bundled power-iteration example (deterministic).

Two hospitals each hold measurements of the same k = 30 features for their
own patients (columns).  The data have a dominant direction plus noise, the
situation in which the principal eigenvector is worth computing jointly.
Run: python examples/data/make_power_iteration_data.py
"""

from pathlib import Path

import numpy as np

rng = np.random.default_rng(20101)
k, n_a, n_b = 30, 80, 120
direction = rng.normal(size=k)
direction /= np.linalg.norm(direction)
scores = rng.normal(scale=4.0, size=n_a + n_b)
M = np.outer(direction, scores) + rng.normal(scale=1.0, size=(k, n_a + n_b))
out = Path(__file__).parent / "power_iteration"
out.mkdir(exist_ok=True)
np.save(out / "hospital_a.npy", M[:, :n_a])
np.save(out / "hospital_b.npy", M[:, n_a:])
print(f"wrote {out}/hospital_a.npy ({k}×{n_a}) and hospital_b.npy ({k}×{n_b})")
