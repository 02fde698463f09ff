"""Synthetic data shared by the learner tests."""

import numpy as np


def gmm_data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.4, 0.0, 0.0], [-0.4, 0.1, 0.0], [0.0, -0.4, 0.2]])
    y = rng.integers(0, 3, size=n)
    X = centres[y] + 0.08 * rng.normal(size=(n, 3))
    X /= max(1.0, np.linalg.norm(X, axis=1).max())
    return X
