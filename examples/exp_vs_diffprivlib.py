"""Accuracy of smcdp's DP learners against IBM's diffprivlib on the same splits (MASS/biopsy,
583 train / 100 test, epsilon in {0.1, 0.5, 1, 2, 5}).

* LogisticRegression: ours (objective perturbation, CMS 2011 Alg. 2; and output perturbation) vs
  diffprivlib.models.LogisticRegression (also CMS objective perturbation), both without intercept on
  the same unit-ball scaling, same lambda (diffprivlib's C = 1 / (2 lambda n)).
* GaussianBayesClassifier (full or diagonal covariances, query="sum" and query="mean") vs
  diffprivlib.models.GaussianNB (diagonal), same public bounds [1, 10] on every attribute.
Each cell is the mean test accuracy over the runs +- its standard error.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import exp_common as ec

from smcdp.dp import GaussianBayesClassifier, LogisticRegression

EPSILONS = [0.1, 0.5, 1.0, 2.0, 5.0]


#: optional packages this experiment needs (smcdp._optional): checked before it runs
NEEDS = ("plotting", "experiment-data", "diffprivlib")


def run(runs, seed, lam=None):
    import diffprivlib.models as dpl

    X, y = ec.load_biopsy()
    Xraw = X * 13.5 + 5.5
    n = 583
    lam = 1.0 / (2 * n) if lam is None else lam
    C = 1.0 / (2 * lam * n)
    rng = np.random.default_rng(seed)
    names = [
        "LR ours (objective)",
        "LR ours (output)",
        "LR diffprivlib",
        "Bayes ours (sum)",
        "Bayes ours (mean)",
        "Bayes ours (diag, sum)",
        "Bayes ours (diag, mean)",
        "GaussianNB diffprivlib",
    ]
    acc = {k: np.zeros((runs, len(EPSILONS))) for k in names}
    nonpriv = {"LR": [], "Bayes": []}
    bounds = (np.ones(9), np.full(9, 10.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in ec.track(range(runs), "exp vs diffprivlib", unit="split"):
            p = rng.permutation(len(X))
            tr, te = p[:n], p[n:]
            nonpriv["LR"].append(
                LogisticRegression(epsilon=float("inf"), lam=lam).fit(X[tr], y[tr]).score(X[te], y[te])
            )
            nonpriv["Bayes"].append(
                GaussianBayesClassifier(epsilon=float("inf"), bounds=bounds).fit(Xraw[tr], y[tr]).score(Xraw[te], y[te])
            )
            for j, eps in enumerate(EPSILONS):
                s = lambda: int(rng.integers(2**31))
                acc["LR ours (objective)"][r, j] = (
                    LogisticRegression(epsilon=eps, lam=lam, random_state=s()).fit(X[tr], y[tr]).score(X[te], y[te])
                )
                acc["LR ours (output)"][r, j] = (
                    LogisticRegression(epsilon=eps, lam=lam, mechanism="output", random_state=s())
                    .fit(X[tr], y[tr])
                    .score(X[te], y[te])
                )
                acc["LR diffprivlib"][r, j] = (
                    dpl.LogisticRegression(epsilon=eps, data_norm=1.0, C=C, fit_intercept=False, random_state=s())
                    .fit(X[tr], y[tr])
                    .score(X[te], y[te])
                )
                acc["Bayes ours (sum)"][r, j] = (
                    GaussianBayesClassifier(epsilon=eps, bounds=bounds, random_state=s())
                    .fit(Xraw[tr], y[tr])
                    .score(Xraw[te], y[te])
                )
                acc["Bayes ours (mean)"][r, j] = (
                    GaussianBayesClassifier(epsilon=eps, bounds=bounds, query="mean", random_state=s())
                    .fit(Xraw[tr], y[tr])
                    .score(Xraw[te], y[te])
                )
                for q in ("sum", "mean"):
                    acc[f"Bayes ours (diag, {q})"][r, j] = (
                        GaussianBayesClassifier(
                            epsilon=eps, bounds=bounds, query=q, covariance="diag", random_state=s()
                        )
                        .fit(Xraw[tr], y[tr])
                        .score(Xraw[te], y[te])
                    )
                acc["GaussianNB diffprivlib"][r, j] = (
                    dpl.GaussianNB(epsilon=eps, bounds=(1.0, 10.0), random_state=s())
                    .fit(Xraw[tr], y[tr])
                    .score(Xraw[te], y[te])
                )
    return acc, {k: float(np.mean(v)) for k, v in nonpriv.items()}, lam


def main(argv=None) -> int:
    args = ec.parser(__doc__.splitlines()[0]).parse_args(argv)
    ec.require(NEEDS, __file__)
    ec.quiet()
    out = ec.out_dir(args)
    runs = ec.reps(args, full=200, quick=20, tiny=2)
    with ec.Timer() as t:
        acc, nonpriv, lam = run(runs, args.seed)
    rows = []
    for k, a in acc.items():
        rows.append([k] + [f"{a[:, j].mean():.3f} ± {a[:, j].std() / np.sqrt(runs):.3f}" for j in range(len(EPSILONS))])
    rows.append(["LR non-private"] + [f"{nonpriv['LR']:.3f}"] * len(EPSILONS))
    rows.append(["Gaussian Bayes non-private"] + [f"{nonpriv['Bayes']:.3f}"] * len(EPSILONS))
    table = ec.markdown_table(["model"] + [f"eps={e}" for e in EPSILONS], rows)
    plt = ec.plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, a in acc.items():
        ax.errorbar(EPSILONS, a.mean(0), yerr=a.std(0) / np.sqrt(runs), marker="o", label=k, capsize=2)
    ax.set_xscale("log")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"MASS/biopsy, {runs} splits")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "exp_vs_diffprivlib.png", dpi=120)
    import diffprivlib

    notes = (
        f"diffprivlib {diffprivlib.__version__}; {runs} random 583/100 splits (`--full`: 200); "
        f"lambda = 1/(2n) = {lam:.5f} (diffprivlib's default C = 1).  Mean accuracy ± standard error."
    )
    ec.write_report(
        out / "exp_vs_diffprivlib.md",
        "Accuracy against diffprivlib",
        notes,
        table,
        "exp_vs_diffprivlib.png",
        t.elapsed,
        __file__,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
