"""Regenerate the bundled dp-aggregate example (deterministic).

Three organisations each hold labelled rows of the same 10 features (rows scaled into the unit ball, as
the protocol's sensitivity requires), with very different sizes: 600, 250 and 120 rows. The smallest
party's size sets the noise. Run: python examples/data/make_aggregate_data.py
"""

from pathlib import Path

import numpy as np

rng = np.random.default_rng(41)
d = 10
w_true = rng.normal(size=d)
out = Path(__file__).parent / "dp_aggregate"
out.mkdir(exist_ok=True)
for name, n in (("org1", 600), ("org2", 250), ("org3", 120), ("test", 500)):
    X = rng.normal(size=(n, d))
    y = np.where(X @ w_true + 0.5 * rng.normal(size=n) > 0, 1, -1)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))  # ‖x‖ ≤ 1
    np.savez(out / f"{name}.npz", X=X, y=y)
    print(f"wrote {out / (name + '.npz')}: {n} rows")
