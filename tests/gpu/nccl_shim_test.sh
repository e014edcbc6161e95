#!/usr/bin/env bash
# Real-NCCL test of librankmap_nccl.so on ONE GPU: N ranks as N processes sharing GPU 0. NCCL
# refuses two ranks on one GPU of one host, but it identifies hosts by a hash that NCCL_HOSTID
# overrides: with a distinct NCCL_HOSTID per rank, NCCL_SOCKET_IFNAME=lo and NCCL_IB_DISABLE=1
# the ranks are "hosts" talking over the socket transport.
#
# Runs gpu_nccl_collectives_check (every translated collective, integer data, closed-form checks)
# three times: without the shim, under the shim with an identity plan, and under the shim with a
# plan that reverses the hosts; every rank's results must be byte-identical across the three, and
# the reversed run's log must show each app rank r reaching NCCL as rank N-1-r.
#
#   nccl_shim_test.sh --check BIN --make-plan BIN --shim LIB [--ranks N] [--count C]
#
# Exit 0 pass, 1 fail, 77 skipped (no GPU).
set -euo pipefail
RANKS=4
COUNT=1000
while [[ $# -gt 0 ]]; do
  case "$1" in
    --check) CHECK=$2; shift 2 ;;
    --make-plan) MAKE_PLAN=$2; shift 2 ;;
    --shim) SHIM=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "SKIP: no NVIDIA GPU on this machine (nvidia-smi -L lists none)"
  exit 77
fi
DIR=$(mktemp -d "${TMPDIR:-/tmp}/rankmap-nccl-shim.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT

"$MAKE_PLAN" "$DIR/identity.json" "$RANKS" 1 identity
"$MAKE_PLAN" "$DIR/reverse.json" "$RANKS" 1 reverse

run() {  # run MODE [extra env...]
  local mode=$1; shift
  PIDS=()
  for ((r = 0; r < RANKS; r++)); do
    env NCCL_HOSTID="rankmap-test-host-$r" NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 \
        NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0 \
        RANKMAP_TIMEOUT=120s "$@" \
        timeout 600 "$CHECK" --rank "$r" --nranks "$RANKS" --id-file "$DIR/$mode.id" \
        --out "$DIR/$mode.$r.txt" --count "$COUNT" 2>"$DIR/$mode.$r.log" &
    PIDS+=($!)
  done
  local rc=0
  for p in "${PIDS[@]}"; do wait "$p" || rc=1; done
  PIDS=()
  if [[ $rc -ne 0 ]]; then
    echo "FAIL: $mode run failed; logs:"; tail -n 20 "$DIR/$mode".*.log
    return 1
  fi
  echo "ok: $mode run passed its own checks"
}

run plain
run shim-identity LD_PRELOAD="$SHIM" RANKMAP_PLAN="$DIR/identity.json"
run shim-reverse LD_PRELOAD="$SHIM" RANKMAP_PLAN="$DIR/reverse.json"

fail=0
for ((r = 0; r < RANKS; r++)); do
  for mode in shim-identity shim-reverse; do
    if ! cmp -s "$DIR/plain.$r.txt" "$DIR/$mode.$r.txt"; then
      echo "FAIL: rank $r: $mode results differ from the plain run"; fail=1
    fi
  done
  expect="app rank $r -> NCCL rank $((RANKS - 1 - r)) of $RANKS"
  if ! grep -q "$expect" "$DIR/shim-reverse.$r.log"; then
    echo "FAIL: rank $r: shim log lacks '$expect'"; fail=1
  fi
done
[[ $fail -eq 0 ]] && echo "PASS: $RANKS ranks, every translated collective bit-exact with and without the shim"
exit $fail
