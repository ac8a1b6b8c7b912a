#!/usr/bin/env bash
# The GPU check (issue 40): every path's gpu-marked test at tiny sizes, then the one-GPU benchmark
# (benchmarks/gpu.py: store vs bare forward vs disk, trainer vs minimal loop, with and without
# torch.compile), in under 5 minutes on one H100. Run from a checkout root on a machine with CUDA:
#
#   bash scripts/gpu_check.sh            # figures and logs in ${OUT:-gpu-out}/
#   PARTS="setup extract" TEST_TIMEOUT=100 bash scripts/gpu_check.sh   # a shorter check
#
# Where `bertology` is not installed (a bare GPU image), the source folders are laid out as the
# package in a temporary folder and put on PYTHONPATH, with any wheels found in .whl/ (e.g. conllu,
# the Brown sample's reader, and captum for attribution: pure-Python packages a CUDA image may lack).
set -u
cd "$(dirname "$0")/.."
START=$(date +%s)
OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && PY=.venv/bin/python
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TQDM_DISABLE=1 TOKENIZERS_PARALLELISM=false
WORK="$(mktemp -d /tmp/bertology-gpu.XXXXXX)"
if ! "$PY" -c "import bertology" 2>/dev/null; then
  PKG="$WORK/pkg"
  bash scripts/package_copy.sh "$PKG"
  if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" .whl/*.whl 2>&1 | tail -2
  fi
  export PYTHONPATH="$PKG:$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
{
  echo "== $(date -u +%FT%TZ) bertology GPU check"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available(), "| transformers", transformers.__version__)'
  lscpu | grep -m1 "Model name"
} 2>&1 | tee "$OUT/check.log"

part() {  # part NAME SECONDS: one benchmark part in its own process under a timeout
  echo "== bench $1 (timeout $2 s)"
  timeout -k 5 "$2" "$PY" benchmarks/gpu.py "$1" --out "$OUT" --work "$WORK/bench" --budget "$(( $2 - 10 ))" ${BENCH_ARGS:-}
  echo "== bench $1 exited $?"
}
{
  echo "== gpu tests"
  timeout -k 5 "${TEST_TIMEOUT:-150}" "$PY" -m pytest -m gpu -q -p no:cacheprovider -o addopts="" -rfEs --continue-on-collection-errors \
    --durations=10 tests/test_gpu_paths.py tests/test_gpu_analyses.py tests/test_trainer_speed.py \
    tests/test_attribution.py tests/test_patching.py tests/test_structural_probe.py
  echo "== gpu tests exited $?"
  for p in ${PARTS:-setup extract pretrain}; do
    case $p in setup) part setup 40 ;; extract) part extract 110 ;; pretrain) part pretrain 210 ;; esac
  done
  "$PY" benchmarks/gpu.py report --out "$OUT"
  echo "== done in $(( $(date +%s) - START )) s"
} 2>&1 | tee -a "$OUT/check.log"
rm -rf "$WORK"
