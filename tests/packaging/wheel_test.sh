#!/usr/bin/env bash
# The wheel as users get it (issue 39): build the sdist and, from it, the wheel (python -m build), install
# the wheel into a fresh venv in a temporary directory outside the repository, and from there
#   1. check the wheel holds the C accelerator, py.typed, the generated protobuf modules and stubs, the
#      bundled example data and the `smcdp` entry point;
#   2. run `smcdp --version` (must print the wheel's version);
#   3. run `smcdp demo power-iteration` on the bundled data (no --data) and compare its u with numpy's
#      leading eigenvector of the plaintext matrix;
#   4. import and fit a DP learner and read its budget from the accountant;
#   5. delete the accelerator from the installed package and check the pure gmpy2 fallback: the native
#      module reports unavailable, and Paillier encryption, homomorphic addition and decryption still work.
# Usage: tests/packaging/wheel_test.sh [PYTHON]     (make wheel-test; .ci/run runs it)
# KEEP=1 keeps the temporary directory.  PIP_ARGS adds pip options (e.g. a local index).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${1:-${PYTHON:-python3}}"
WORK="$(mktemp -d /tmp/smcdp-wheel-test.XXXXXX)"
cleanup() { if [ "${KEEP:-0}" = "1" ]; then echo "wheel test: kept $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
say() { echo "wheel test: $*"; }
fail() { echo "wheel test: FAILED: $*" >&2; exit 1; }

say "building sdist and wheel from $REPO"
"$PYTHON" -m build --outdir "$WORK/dist" "$REPO" >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; fail "python -m build"; }
WHEEL="$(ls "$WORK"/dist/smcdp-*.whl)"
say "built $(basename "$WHEEL")"

# 1. What the wheel must hold (listed from the archive, before anything is installed).
"$PYTHON" - "$WHEEL" <<'EOF' || fail "wheel contents"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = {
    "C accelerator": lambda n: n.startswith("smcdp/crypto/_mont.") and n.endswith(".so"),
    "py.typed": lambda n: n == "smcdp/py.typed",
    "protobuf modules": lambda n: n == "smcdp/v1/transport_pb2.py",
    "gRPC stubs": lambda n: n == "smcdp/v1/transport_pb2_grpc.py",
    "protobuf type stubs": lambda n: n == "smcdp/v1/transport_pb2.pyi",
    "accelerator stub": lambda n: n == "smcdp/crypto/_mont.pyi",
    "smcdp.crypto export stub": lambda n: n == "smcdp/crypto/__init__.pyi",
    "smcdp.dp export stub": lambda n: n == "smcdp/dp/__init__.pyi",
    "bundled data (hospital_a)": lambda n: n == "smcdp/_bundled/power_iteration/hospital_a.npy",
    "bundled data (hospital_b)": lambda n: n == "smcdp/_bundled/power_iteration/hospital_b.npy",
    "entry points": lambda n: n.endswith(".dist-info/entry_points.txt"),
}
missing = [what for what, ok in need.items() if not any(ok(n) for n in names)]
if missing:
    sys.exit(f"missing from the wheel: {', '.join(missing)}")
if any(n.startswith(("tests/", "examples/", "bench/")) for n in names):
    sys.exit("the wheel carries repository folders (tests/, examples/ or bench/)")
print(f"wheel test: the wheel holds {', '.join(need)} ({len(names)} files)")
EOF

say "installing into a fresh venv in $WORK/venv"
"$PYTHON" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
# shellcheck disable=SC2086
"$VPY" -m pip install --quiet ${PIP_ARGS:-} "$WHEEL" >"$WORK/pip.log" 2>&1 || { tail -40 "$WORK/pip.log"; fail "pip install"; }
cd "$WORK"            # outside the repository: nothing may be imported from the source tree
export PYTHONPATH=""  # and nothing from the caller's path either

# The installed package, not the tree.
"$VPY" -c "import smcdp, sys; p = smcdp.__file__; sys.exit(0 if p.startswith('$WORK/venv/') else f'imported from {p}')" \
  || fail "smcdp is not imported from the venv"

# 2. The entry point and its version.
VERSION="$("$WORK/venv/bin/smcdp" --version)"
WANT="smcdp $(basename "$WHEEL" | cut -d- -f2)"
[ "$VERSION" = "$WANT" ] || fail "smcdp --version printed '$VERSION', expected '$WANT'"
say "smcdp --version: $VERSION"

# The accelerator was built into the wheel and loads from it.
"$VPY" -c "from smcdp.crypto import native; assert native.AVAILABLE, 'accelerator did not load'" \
  || fail "the C accelerator does not load from the wheel"
say "the C accelerator loads"

# 3. The demo on the bundled data (three party processes over mutual TLS on loopback).
"$WORK/venv/bin/smcdp" demo power-iteration --out "$WORK/pi.json" 2>"$WORK/demo.log" \
  || { cat "$WORK/demo.log"; fail "smcdp demo power-iteration"; }
"$VPY" - "$WORK/pi.json" <<'EOF' || fail "demo result"
import json, sys
from importlib import resources
import numpy as np
out = json.load(open(sys.argv[1]))
root = resources.files("smcdp") / "_bundled" / "power_iteration"
M = np.hstack([np.load(root / "hospital_a.npy"), np.load(root / "hospital_b.npy")])
w, V = np.linalg.eigh(M @ M.T)
u_true, u = V[:, -1], np.asarray(out["u"], dtype=float)
cos = abs(u @ u_true) / np.linalg.norm(u)
if not out["converged"] or cos < 0.999:
    sys.exit(f"demo u is not the leading eigenvector: converged={out['converged']}, |cos|={cos:.6f}")
print(f"wheel test: demo power-iteration converged in {out['iterations']} rounds, |cos(u, numpy)| = {cos:.6f}")
EOF

# 4. A DP learner: import, fit, predict, and its spend recorded by the accountant.
"$VPY" - <<'EOF' || fail "DP learner"
import numpy as np
from smcdp.dp import BudgetAccountant, LogisticRegression
rng = np.random.default_rng(0)
X = rng.normal(size=(400, 3))
X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
y = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int)
acc = BudgetAccountant(epsilon=2.0)
clf = LogisticRegression(epsilon=1.0, data_norm=1.0, accountant=acc).fit(X, y)
accuracy = float((clf.predict(X) == y).mean())
status = acc.status()
assert accuracy > 0.6, f"accuracy {accuracy}"
assert abs(float(status.spent_epsilon) - 1.0) < 1e-9, f"spent {status}"
print(f"wheel test: DP LogisticRegression accuracy {accuracy:.2f}, accountant spent epsilon={status.spent_epsilon:g}")
EOF

# 5. The pure fallback: remove the accelerator from the installed package, as if it had not built.
SITE="$("$VPY" -c 'import smcdp.crypto, os; print(os.path.dirname(smcdp.crypto.__file__))')"
rm -f "$SITE"/_mont.*.so
"$VPY" - <<'EOF' || fail "pure fallback"
from smcdp.crypto import native
assert not native.AVAILABLE, "the accelerator still loads after it was removed"
import numpy as np
from smcdp.crypto.paillier import generate_keypair
from smcdp.crypto.vector import EncryptedVector
pk, sk = generate_keypair(1024, allow_insecure=True)   # a small test key: this checks arithmetic, not security
a = EncryptedVector.encrypt(pk, [1.5, -2.25, 3.0])
b = EncryptedVector.encrypt(pk, [0.5, 0.25, -1.0])
assert np.allclose((a + b).decrypt(sk), [2.0, -2.0, 2.0])
print("wheel test: without the accelerator, Paillier runs on the pure gmpy2 path")
EOF
say "passed"
