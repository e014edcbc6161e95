#!/usr/bin/env bash
# Real-NCCL check of librankmap_nccl_tuner.so on ONE GPU: N ranks as N processes sharing GPU 0,
# made N "hosts" for NCCL by distinct NCCL_HOSTIDs over the socket transport (as
# nccl_shim_test.sh), running nccl_tuner_check.py (PyTorch, whose NCCL is loaded from its wheel).
#
# Four runs, each bit-exact on every rank (the check program's closed forms):
#   plain      no rankmap at all;
#   tuned      LD_PRELOAD=librankmap_nccl.so, NCCL_TUNER_PLUGIN=librankmap_nccl_tuner.so and a
#              plan with models: NCCL must load the plugin ("TUNER/Plugin: Using rankmap"), and
#              every rank's tuner must be active and adjust a table NCCL hands it;
#   chained    the same with RANKMAP_NCCL_TUNER_CHAIN=LIB (a tuner plugin to call first);
#   no-shim    the tuner without the shim: it must say so and leave NCCL's choices as in plain.
# NCCL's choice per collective and size (NCCL_DEBUG_SUBSYS=TUNING) is summed up per run.
#
#   nccl_tuner_test.sh --shim LIB --tuner LIB (--plan PLAN | --rankmap BIN --topology T)
#                      [--chain LIB] [--ranks N] [--python PY] [--keep DIR]
#
# The plan is for N hosts of one rank each (--rankmap plans --topology with every collective).
# Exit 0 pass, 1 fail, 77 skipped (no GPU, or no PyTorch with CUDA).
set -euo pipefail
RANKS=4
PY=python3
HERE=$(cd "$(dirname "$0")" && pwd)
PLAN= RANKMAP= TOPOLOGY= CHAIN= KEEP=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shim) SHIM=$2; shift 2 ;;
    --tuner) TUNER=$2; shift 2 ;;
    --plan) PLAN=$2; shift 2 ;;
    --rankmap) RANKMAP=$2; shift 2 ;;
    --topology) TOPOLOGY=$2; shift 2 ;;
    --chain) CHAIN=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --keep) KEEP=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "SKIP: $PY has no PyTorch with a usable CUDA device"
  exit 77
fi
DIR=${KEEP:-$(mktemp -d "${TMPDIR:-/tmp}/rankmap-tuner.XXXXXX")}
mkdir -p "$DIR"
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done
  [[ -n "$KEEP" ]] || rm -rf "$DIR"
}
trap cleanup EXIT
if [[ -z "$PLAN" ]]; then
  PLAN=$DIR/plan.json
  "$RANKMAP" plan --topology "$TOPOLOGY" --collective all --out "$PLAN"
fi

PORT=$((29500 + RANDOM % 1000))
run() {  # run MODE [extra env...]
  local mode=$1; shift
  PORT=$((PORT + 1))
  PIDS=()
  for ((r = 0; r < RANKS; r++)); do
    env RANK=$r WORLD_SIZE="$RANKS" MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
        NCCL_HOSTID="rankmap-tuner-host-$r" NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 \
        NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_COLLNET_ENABLE=0 \
        CUDA_VISIBLE_DEVICES=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV \
        RANKMAP_TIMEOUT=120s RANKMAP_LOG=debug PYTHONUNBUFFERED=1 "$@" \
        timeout 300 "$PY" "$HERE/nccl_tuner_check.py" >"$DIR/$mode.$r.out" 2>"$DIR/$mode.$r.log" &
    PIDS+=($!)
  done
  local rc=0
  for p in "${PIDS[@]}"; do wait "$p" || rc=1; done
  PIDS=()
  for ((r = 0; r < RANKS; r++)); do
    grep -q "^ok $r$" "$DIR/$mode.$r.out" || rc=1
  done
  if [[ $rc -ne 0 ]]; then
    echo "FAIL: $mode run failed or computed wrong results; ends of its logs:"
    for ((r = 0; r < RANKS; r++)); do
      echo "--- rank $r"; tail -n 5 "$DIR/$mode.$r.out"; tail -n 15 "$DIR/$mode.$r.log"
    done
    return 1
  fi
  echo "ok: $mode: every collective exact on $RANKS ranks"
}

# NCCL writes its log to stdout (.out), rankmap to stderr (.log).
# "AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE ..." -> "AllReduce 1048576 RING SIMPLE", one
# line per distinct choice of rank 0.
choices() {
  { sed -n 's/.*NCCL INFO \([A-Za-z]*\): \([0-9]*\) Bytes -> Algo \([A-Z_]*\) proto \([A-Z0-9_]*\).*/\1 \2 \3 \4/p' \
      "$DIR/$1.0.out" 2>/dev/null || true; } | sort -u -k1,1 -k2,2n
}

fail=0
expect() {  # expect MODE TEXT: every rank's output or log of MODE contains TEXT
  local mode=$1 text=$2
  for ((r = 0; r < RANKS; r++)); do
    cat "$DIR/$mode.$r.out" "$DIR/$mode.$r.log" | grep -qF -- "$text" ||
      { echo "FAIL: $mode rank $r: log lacks '$text'"; fail=1; }
  done
}

tuner_env=(LD_PRELOAD="$SHIM" NCCL_TUNER_PLUGIN="$TUNER" RANKMAP_PLAN="$PLAN")
run plain || fail=1
run tuned "${tuner_env[@]}" || fail=1
expect tuned "TUNER/Plugin: Using rankmap"
expect tuned "adding the measured network's time from plan"
expect tuned "first adjusted call: "
if [[ -n "$CHAIN" ]]; then
  run chained "${tuner_env[@]}" RANKMAP_NCCL_TUNER_CHAIN="$CHAIN" || fail=1
  expect chained "chained to"
fi
run no-shim NCCL_TUNER_PLUGIN="$TUNER" RANKMAP_PLAN="$PLAN" || fail=1
expect no-shim "librankmap_nccl.so (the NCCL shim) is not loaded"

for mode in plain tuned ${CHAIN:+chained} no-shim; do
  echo "== NCCL's choices, $mode (collective, bytes, algorithm, protocol; rank 0):"
  choices "$mode" | sed 's/^/   /'
done
if ! diff <(choices plain) <(choices no-shim) >/dev/null; then
  echo "FAIL: without the shim the tuner changed NCCL's choices"; fail=1
fi
{ grep -h "NCCL version\|TUNER/Plugin" "$DIR"/tuned.0.out || true; } | head -n 4
{ grep -h "NCCL tuner:" "$DIR"/tuned.0.log "$DIR"/no-shim.0.log ${CHAIN:+"$DIR"/chained.0.log} ||
  true; } | head -n 12
[[ $fail -eq 0 ]] && echo "PASS: the tuner plugin inside NCCL on $RANKS ranks"
exit $fail
