#!/usr/bin/env bash
# A private "LAN" of network namespaces for running smcdp parties as if on separate hosts.
#
# Layout for run RUN (RUN = <owner pid>-<hex>, so leftovers of dead runs can be found):
#
#   netns smcdp-RUN-sw        a switch: bridge br0 and one port pN per party (no address,
#                             no route: it only forwards frames between the parties)
#   netns smcdp-RUN-NAME      one per party: lo + eth0 with PREFIX.HOST/24, no default route
#
# Every veth pair is created directly inside the two namespaces, so nothing appears in the
# host's namespace and the parties can reach only each other's addresses (they have no
# route anywhere else).  Needs root and iproute2.
#
# Usage:
#   netns.sh up RUN PREFIX NAME=HOST...   e.g. up 4242-a1b2 10.213.7 trent=11 alice=12
#   netns.sh link RUN NAME up|down        connect/disconnect NAME's cable at the switch
#   netns.sh exec RUN NAME CMD...         run CMD inside NAME's namespace
#   netns.sh pids RUN                     pids of processes inside the run's namespaces
#   netns.sh down RUN                     stop what runs inside (TERM, then KILL) and delete
#   netns.sh cleanup                      'down' every run whose owner pid no longer exists
#   netns.sh list                         the smcdp-* namespaces
set -euo pipefail

die() { echo "netns.sh: $*" >&2; exit 2; }
ns_sw() { echo "smcdp-$1-sw"; }
ns_party() { echo "smcdp-$1-$2"; }

check_run() {
  [[ "$1" =~ ^[0-9]+-[0-9a-f]{1,8}$ ]] || die "RUN must look like <pid>-<hex>, got '$1'"
}
check_name() {
  [[ "$1" =~ ^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$ ]] || die "bad party name '$1'"
}
run_namespaces() {  # every namespace of run $1
  ip netns list | awk '{print $1}' | grep -E "^smcdp-$1-" || true
}

cmd_up() {
  local run=$1 prefix=$2; shift 2
  check_run "$run"
  [[ "$prefix" =~ ^10\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "PREFIX must be a private 10.x.y prefix, got '$prefix'"
  [ $# -ge 1 ] || die "name at least one NAME=HOST"
  local sw; sw=$(ns_sw "$run")
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  local i=0 item name host ns
  for item in "$@"; do
    name=${item%%=*}; host=${item#*=}
    check_name "$name"
    [[ "$host" =~ ^[0-9]{1,3}$ ]] && [ "$host" -ge 2 ] && [ "$host" -le 254 ] || die "bad host number in '$item'"
    i=$((i + 1))
    ns=$(ns_party "$run" "$name")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # one veth pair: pN in the switch, eth0 in the party (created in place, never in the host)
    ip -n "$sw" link add "p$i" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "p$i" alias "$name"
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
    ip -n "$ns" addr add "$prefix.$host/24" dev eth0
    ip -n "$ns" link set eth0 up
    echo "$name $ns $prefix.$host"
  done
}

switch_port() {  # the switch port whose alias is $2
  local sw; sw=$(ns_sw "$1")
  ip -n "$sw" -o link show | awk -v want="$2" '
    { name=$2; sub(/:$/, "", name); sub(/@.*/, "", name) }
    /alias/ { for (k = 1; k <= NF; k++) if ($k == "alias" && $(k+1) == want) print name }'
}

cmd_link() {
  local run=$1 name=$2 state=$3
  check_run "$run"; check_name "$name"
  [[ "$state" == up || "$state" == down ]] || die "state must be up or down"
  local port; port=$(switch_port "$run" "$name")
  [ -n "$port" ] || die "no switch port for '$name' in run $run"
  ip -n "$(ns_sw "$run")" link set "$port" "$state"
}

cmd_pids() {
  local ns
  for ns in $(run_namespaces "$1"); do ip netns pids "$ns" 2>/dev/null || true; done
}

cmd_down() {
  local run=$1
  check_run "$run"
  local pids; pids=$(cmd_pids "$run" | sort -u | tr '\n' ' ')
  if [ -n "${pids// /}" ]; then
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 1 50); do
      pids=$(cmd_pids "$run" | sort -u | tr '\n' ' ')
      [ -z "${pids// /}" ] && break
      sleep 0.2
    done
    [ -n "${pids// /}" ] && kill -KILL $pids 2>/dev/null || true
  fi
  local ns
  for ns in $(run_namespaces "$run"); do
    ip netns del "$ns" 2>/dev/null || echo "netns.sh: could not delete $ns" >&2
  done
}

cmd_cleanup() {
  local run owner
  for run in $(ip netns list | awk '{print $1}' | sed -nE 's/^smcdp-([0-9]+-[0-9a-f]{1,8})-.*/\1/p' | sort -u); do
    owner=${run%%-*}
    if ! kill -0 "$owner" 2>/dev/null; then
      echo "netns.sh: removing leftovers of run $run (owner pid $owner is gone)" >&2
      cmd_down "$run"
    fi
  done
}

[ $# -ge 1 ] || { sed -n '2,25p' "$0"; exit 2; }
command -v ip >/dev/null || die "iproute2 ('ip') is not installed"
action=$1; shift
case "$action" in
  up)      [ $# -ge 3 ] || die "usage: up RUN PREFIX NAME=HOST..."; cmd_up "$@" ;;
  link)    [ $# -eq 3 ] || die "usage: link RUN NAME up|down"; cmd_link "$@" ;;
  exec)    [ $# -ge 3 ] || die "usage: exec RUN NAME CMD..."; check_run "$1"; check_name "$2"
           ns=$(ns_party "$1" "$2"); shift 2; exec ip netns exec "$ns" "$@" ;;
  pids)    [ $# -eq 1 ] || die "usage: pids RUN"; check_run "$1"; cmd_pids "$1" ;;
  down)    [ $# -eq 1 ] || die "usage: down RUN"; cmd_down "$1" ;;
  cleanup) cmd_cleanup ;;
  list)    ip netns list | awk '{print $1}' | grep -E '^smcdp-' || true ;;
  *)       die "unknown action '$action' (up, link, exec, pids, down, cleanup, list)" ;;
esac
