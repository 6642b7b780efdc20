#!/usr/bin/env bash
# Issue 13's device checks, as one script for the device tool (an H200, 10 minutes a call):
#   run(command="bash tools/gpu_device_check.sh", carry=[".gpu-deps/debs"], timeout_s=600)
# after `tools/gpu-build.sh fetch` here. Writes under $OUT (at most 8 files come back):
#   log.txt                    everything printed
#   cuda_tests.json            1. GPU vs CPU, bit for bit: kernels and device codecs (gtest JSON)
#   device_codecs.json         2. codec GB/s on 256 MiB against the device's copy bandwidth
#   gpu_4stage_summary.json    3. 4 stages sharing the GPU (8 layers, width 1024, seq 512), user-space
#   gpu_4stage_runs.tgz           links at 100 Mbps / 1 / 10 Gbps, fp32 vs AC-SGD fw2/bw4, 2 repeats
#   profile_h200_gpt2xl.json   4. `slowpipe profile` of the paper-scale GPT2-XL stages on the GPU,
#                                 a stage at a time, --dedicated (one GPU per stage)
# Every step has its own time limit, so one that hangs leaves time for the rest.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
step() { echo; echo "== $(date +%T) $*"; }
step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
step "build (tools/gpu-build.sh)"
CUDA_ARCHS=90 timeout 270 tools/gpu-build.sh build build-gpu || { echo "BUILD FAILED"; exit 1; }
source build-gpu/env.sh
fortunes="$PWD/.gpu-deps/root/usr/share/games/fortunes"
step "1. bit-exact: GPU kernels and device codecs against the CPU"
timeout 60 build-gpu/tests/compression_cuda_test --gtest_output=json:"$OUT/cuda_tests.json" || echo "CUDA TESTS FAILED"
step "2. device codecs, 256 MiB, against the device copy"
timeout 90 build-gpu/bench_device_codecs --json --rounds 5 > "$OUT/device_codecs.json" || echo "BENCH FAILED"
step "3. 4-stage GPT on the GPU"
timeout 170 build-gpu/slowpipe sweep experiments/gpu_4stage.json --out /tmp/gpu_4stage --quiet \
  --set data.source="$fortunes" || echo "SWEEP FAILED"
cp /tmp/gpu_4stage/summary.json "$OUT/gpu_4stage_summary.json" 2>/dev/null
tar czf "$OUT/gpu_4stage_runs.tgz" -C /tmp/gpu_4stage . 2>/dev/null  # every run's result.json, also if cut short
step "4. profile: GPT2-XL-shaped stages on the GPU"
timeout 100 build-gpu/slowpipe profile experiments/paper_scale.json --set runtime.device=cuda --dedicated --reps 3 \
  --out "$OUT/profile_h200_gpt2xl.json" || echo "PROFILE FAILED"
step "done"
ls -la "$OUT"
