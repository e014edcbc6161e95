#!/usr/bin/env bash
# The GPU measurements of docs/performance.md (## GPU), in one go, on a machine with a GPU:
#
#   tests/gpu/run_gpu_benchmarks.sh BUILD_DIR
#
# 1. reduction kernels vs a device-to-device copy (target: fp32/bf16 sum >= 85% of the copy);
# 2. engine ring allreduce with device buffers vs host buffers over TCP (target: <= 1.10x);
# 3. NCCL 8-byte allreduce with and without librankmap_nccl.so, identity plan (target: <= 2%):
#    two ranks on GPU 0 (distinct NCCL_HOSTID), 5 alternating runs each, medians compared.
set -euo pipefail
B=${1:?usage: $0 BUILD_DIR}
G=$B/tests/gpu
echo "== reduction kernels"; "$G/gpu_reduce_bench" --bytes $((256 << 20)) --iters 20 || true
echo "== engine allreduce, device vs host buffers"; "$G/gpu_engine_device_bench" --ranks 4 --iters 10 || true
echo "== NCCL 8-byte allreduce, shim overhead"
DIR=$(mktemp -d); trap 'rm -rf "$DIR"' EXIT
"$G/gpu_make_plan" "$DIR/identity.json" 2 1 identity
lat() {  # lat TAG [env...]
  local tag=$1; shift
  for r in 0 1; do
    env NCCL_HOSTID="bench-$r" NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_P2P_DISABLE=1 \
        NCCL_SHM_DISABLE=1 CUDA_VISIBLE_DEVICES=0 "$@" \
        "$G/gpu_nccl_allreduce_latency" --rank $r --nranks 2 --id-file "$DIR/$tag.id" &
  done
  wait; rm -f "$DIR/$tag.id"
}
for i in 1 2 3 4 5; do
  echo -n "plain: "; lat "p$i"
  echo -n "shim:  "; lat "s$i" LD_PRELOAD="$B/shim_nccl/librankmap_nccl.so" RANKMAP_PLAN="$DIR/identity.json"
done
