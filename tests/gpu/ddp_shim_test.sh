#!/usr/bin/env bash
# PyTorch DDP step under torchrun with and without librankmap_nccl.so (LD_PRELOAD, plan that
# reverses the hosts), all ranks on GPU 0 with distinct NCCL_HOSTIDs (see ddp_step.py). PyTorch
# loads NCCL through Python's RTLD_LOCAL dlopen chain: this is the case the shim's
# dlopen(RTLD_NOLOAD) resolution exists for.
#
#   ddp_shim_test.sh --shim LIB --make-plan BIN [--ranks N] [--python PY]
#
# Exit 0 pass, 1 fail, 77 skipped (no GPU, or no PyTorch with CUDA).
set -euo pipefail
RANKS=4
PY=python3
HERE=$(cd "$(dirname "$0")" && pwd)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shim) SHIM=$2; shift 2 ;;
    --make-plan) MAKE_PLAN=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "SKIP: $PY has no PyTorch with a usable CUDA device"
  exit 77
fi
DIR=$(mktemp -d "${TMPDIR:-/tmp}/rankmap-ddp.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
"$MAKE_PLAN" "$DIR/reverse.json" "$RANKS" 1 reverse
mkdir -p "$DIR/plain" "$DIR/shim"
common=(NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
        NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0)
env "${common[@]}" timeout 600 "$PY" -m torch.distributed.run --standalone \
    --nproc_per_node="$RANKS" "$HERE/ddp_step.py" "$DIR/plain" 2>"$DIR/plain.log" ||
  { echo "FAIL: plain run"; tail -n 30 "$DIR/plain.log"; exit 1; }
env "${common[@]}" LD_PRELOAD="$SHIM" RANKMAP_PLAN="$DIR/reverse.json" RANKMAP_TIMEOUT=120s \
    timeout 600 "$PY" -m torch.distributed.run --standalone --nproc_per_node="$RANKS" \
    "$HERE/ddp_step.py" "$DIR/shim" 2>"$DIR/shim.log" ||
  { echo "FAIL: run under the shim"; tail -n 30 "$DIR/shim.log"; exit 1; }
fail=0
for ((r = 0; r < RANKS; r++)); do
  cmp -s "$DIR/plain/rank$r.txt" "$DIR/shim/rank$r.txt" ||
    { echo "FAIL: rank $r results differ under the shim"; fail=1; }
done
grep -q -- "-> NCCL rank" "$DIR/shim.log" ||
  { echo "FAIL: the shim did not permute any communicator (no '-> NCCL rank' in the log)"; fail=1; }
[[ $fail -eq 0 ]] && echo "PASS: DDP step identical with and without the shim ($RANKS ranks)"
exit $fail
