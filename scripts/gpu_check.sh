#!/usr/bin/env bash
# One-command GPU check: full attention sweep + CUDA-marked tests.
#
#   scripts/gpu_check.sh OUT_DIR [extra profile_attention.py args...]
#
# Why: the CPU CI never sees device-time traces, fused CUDA kernels or NVML
# energy; this runs every impl at seq 512/1024/2048 in bf16 with stacks,
# modules and memory recorded, writes <OUT_DIR>/<impl>_<seq>/ runs plus
# <OUT_DIR>/summary.{csv,md}, then runs `pytest -m cuda`. Unavailable impls
# (e.g. flash-attn not installed) are skipped with a message, not failures.
# Needs torch with CUDA (+ tensorboard for the plugin test); no network.
set -uo pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 OUT_DIR [extra profile_attention.py args]" >&2
    exit 2
fi
OUT=$1
shift
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT"

python -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || {
    echo "error: CUDA is not available to torch" >&2
    exit 2
}
python -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'

status=0
python scripts/profile_attention.py \
    --device cuda --impl all --seq 512,1024,2048 --dtype bfloat16 \
    --layers 4 --heads 16 --d-model 1024 --batch 4 --window 256 \
    --record-shapes --with-stack --with-modules --profile-memory \
    --out "$OUT" "$@" 2>&1 | tee "$OUT/sweep.log"
rc=${PIPESTATUS[0]}
[ "$rc" -ne 0 ] && { echo "sweep failed (exit $rc)" >&2; status=$rc; }

if [ -d tests ]; then
    python -m pytest -q -m cuda tests/ 2>&1 | tee "$OUT/pytest_cuda.log"
    rc=${PIPESTATUS[0]}
    # 5 = no tests collected with the cuda marker: not a failure
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
        echo "pytest -m cuda failed (exit $rc)" >&2
        status=$rc
    fi
fi
ls -la "$OUT"
exit $status
