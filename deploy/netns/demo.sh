#!/usr/bin/env bash
# Four "hosts" on one Linux machine: the deploy/README.md walk-through, end to end, in
# network namespaces (needs root and iproute2; no Docker).  Every party runs from the bundle
# `smcdp deploy init` made for it, reachable only at its own private address.
#
#   sudo deploy/netns/demo.sh [WORKDIR]       (default: a new temporary directory)
#
# It creates namespaces trent/alice/bob/charlie on 10.213.7.0/24, generates the bundles,
# starts the four parties, runs privacy-preserving power iteration with trent as initiator,
# prints the result next to numpy's, and removes everything again (also on error or Ctrl-C).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PY=${PYTHON:-$REPO/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
[ "$(id -u)" = 0 ] || { echo "demo.sh: needs root (network namespaces)" >&2; exit 2; }

WORK=${1:-$(mktemp -d /tmp/smcdp-netns-demo.XXXXXX)}
mkdir -p "$WORK"
RUN="$$-$(od -An -N2 -tx2 /dev/urandom | tr -d ' ')"
PREFIX=10.213.7
declare -A IP=([trent]=$PREFIX.11 [alice]=$PREFIX.12 [bob]=$PREFIX.13 [charlie]=$PREFIX.14)
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  "$HERE/netns.sh" down "$RUN" || true
  echo "== namespaces removed; bundles, logs and records kept in $WORK"
}
trap cleanup EXIT INT TERM

"$HERE/netns.sh" cleanup
echo "== 1. four hosts: namespaces on a private bridge"
"$HERE/netns.sh" up "$RUN" "$PREFIX" trent=11 alice=12 bob=13 charlie=14

echo "== 2. data: alice, bob and charlie each hold a column block of M"
"$PY" - "$WORK" <<'EOF'
import sys, numpy as np
rng = np.random.default_rng(1)
for name, cols in (("alice", 3), ("bob", 4), ("charlie", 2)):
    np.save(f"{sys.argv[1]}/{name}.npy", rng.normal(size=(6, cols)))
EOF

echo "== 3. smcdp deploy init (512-bit test keys: quick, INSECURE, opted in explicitly)"
rm -rf "$WORK/deployment"
(cd "$REPO" && "$PY" -m smcdp deploy init --out "$WORK/deployment" --allow-insecure-keys \
  --hosts "trent=${IP[trent]}:50051,alice=${IP[alice]}:50051,bob=${IP[bob]}:50051,charlie=${IP[charlie]}:50051" \
  --inputs "alice:power-iteration:data=$WORK/alice.npy" \
  --inputs "bob:power-iteration:data=$WORK/bob.npy" \
  --inputs "charlie:power-iteration:data=$WORK/charlie.npy" \
  --roles "power-iteration:trent=trent,party1=alice,party2=bob,party3=charlie" \
  --initiator "power-iteration=trent")

echo "== 4. start one party per host"
for p in trent alice bob charlie; do
  "$HERE/netns.sh" exec "$RUN" "$p" "$PY" -m smcdp party --config "$WORK/deployment/$p/party.toml" \
    --ready-file "$WORK/$p.ready" >"$WORK/$p.log" 2>&1 &
  PIDS+=($!)
done
for p in trent alice bob charlie; do
  for _ in $(seq 1 300); do [ -f "$WORK/$p.ready" ] && break; sleep 0.1; done
  [ -f "$WORK/$p.ready" ] || { echo "party $p did not start:"; cat "$WORK/$p.log"; exit 1; }
done
for p in alice bob charlie; do
  echo -n "   trent -> $p: "
  "$HERE/netns.sh" exec "$RUN" trent "$PY" -m smcdp health --config "$WORK/deployment/trent/party.toml" --peer "$p"
done

echo "== 5. trent starts a power-iteration session"
"$HERE/netns.sh" exec "$RUN" trent "$PY" -m smcdp session start \
  --config "$WORK/deployment/trent/party.toml" --protocol power-iteration \
  --role trent=trent --role party1=alice --role party2=bob --role party3=charlie \
  --params '{"n_parties": 3, "key_bits": 512}' --out "$WORK/trent-result.json"

echo "== 6. results next to numpy"
"$PY" - "$WORK" <<'EOF'
import glob, json, sys, numpy as np
from smcdp.protocols.power_iteration import plaintext_reference
w = sys.argv[1]
rec = json.load(open(f"{w}/trent-result.json"))
sid = rec["session_id"]
blocks = [np.load(f"{w}/{n}.npy") for n in ("alice", "bob", "charlie")]
u_ref, x_ref = plaintext_reference(blocks)
x = np.array(rec["result"]["x"])
alice = json.load(open(f"{w}/deployment/alice/data/sessions/{sid}.json"))
u = np.array(alice["result"]["u"])
print(f"   session {sid}: {rec['result']['rounds']} rounds ({rec['result']['decoys']} decoys)")
print(f"   |cos(x, numpy)| = {abs(x @ x_ref):.12f}   (x at trent)")
print(f"   |cos(u, numpy)| = {abs(u @ u_ref):.12f}   (u at alice)")
EOF
