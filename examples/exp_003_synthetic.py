"""Seed 003, Fig. 4.4: test error vs epsilon of the DP large-margin Gaussian classifier on synthetic
data -- 5 classes, 10 dimensions, unit-variance Gaussians, 500 training / 500 test points split
equally between the classes, lambda = 0.01.

The seed does not give the class means; we draw them once per run from N(0, I_10) (so classes
overlap moderately).  Rows are scaled into the unit ball by the public constant R = 8 (longer rows,
a fraction of a percent, are clipped), as the privacy analysis requires.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import exp_common as ec

from smcdp.dp import LargeMarginGaussianClassifier

EPSILONS = [0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0]
LAM, C, D, N, R = 0.01, 5, 10, 500, 8.0


#: optional packages this experiment needs (smcdp._optional): checked before it runs
NEEDS = ("plotting",)


def _draw(rng, means, n):
    y = np.repeat(np.arange(C), n // C)
    return means[y] + rng.normal(size=(n, D)), y


def main(argv=None) -> int:
    args = ec.parser(__doc__.splitlines()[0]).parse_args(argv)
    ec.require(NEEDS, __file__)
    ec.quiet()
    out = ec.out_dir(args)
    runs = ec.reps(args, full=100, quick=4)
    rng = np.random.default_rng(args.seed)
    err = np.zeros((runs, len(EPSILONS)))
    nonpriv = np.zeros(runs)
    with ec.Timer() as t:
        for r in ec.track(range(runs), "exp 003 synthetic"):
            means = rng.normal(size=(C, D))
            X, y = _draw(rng, means, N)
            Xt, yt = _draw(rng, means, N)
            m = LargeMarginGaussianClassifier(epsilon=float("inf"), lam=LAM, data_norm=R).fit(X, y)
            nonpriv[r] = 1 - m.score(Xt, yt)
            for j, eps in enumerate(EPSILONS):
                m = LargeMarginGaussianClassifier(
                    epsilon=eps, lam=LAM, data_norm=R, random_state=rng, classes=np.arange(C)
                ).fit(X, y)
                err[r, j] = 1 - m.score(Xt, yt)
    k = m.epsilon_spent_ - EPSILONS[-1]
    rows = [
        [eps, eps + k, err[:, j].mean(), err[:, j].std() / np.sqrt(runs), nonpriv.mean()]
        for j, eps in enumerate(EPSILONS)
    ]
    table = ec.markdown_table(["epsilon (noise)", "epsilon_spent_", "test error", "std. error", "non-private"], rows)
    plt = ec.plt()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.errorbar(EPSILONS, err.mean(0), yerr=err.std(0) / np.sqrt(runs), marker="o", label="DP large margin")
    ax.axhline(nonpriv.mean(), color="k", ls="--", label="non-private")
    ax.set_xscale("log")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("test error")
    ax.set_title(f"synthetic, 5 classes, d=10, lambda={LAM}, {runs} runs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "exp_003_synthetic.png", dpi=120)
    notes = (
        f"{runs} runs per point (`--full`: 100 as in the seed); noise calibrated with the tight gradient "
        f"sensitivity 2G/n; epsilon_spent_ = epsilon + {k:.4f}.  Chance error is 0.8."
    )
    ec.write_report(
        out / "exp_003_synthetic.md",
        "Seed 003 Fig. 4.4: test error vs epsilon (synthetic)",
        notes,
        table,
        "exp_003_synthetic.png",
        t.elapsed,
        __file__,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
