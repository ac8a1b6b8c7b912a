#!/usr/bin/env bash
# Build the wheel, install it (not editable) into a fresh virtual environment, and use it from a
# temporary folder far from the checkout: list the studies, run a small study, build the Brown part of
# the pretraining corpus, serve the dashboard.
# Used by CI after the test suite; safe to run by hand. Leaves nothing behind but pip's cache.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${PYTHON:-python3}
WORK=$(mktemp -d /tmp/bertology-wheel-XXXXXX)
stop_dashboard() { [ -n "${DASH_PID:-}" ] && kill -- "-$DASH_PID" 2>/dev/null; DASH_PID=""; }  # its whole process group
trap 'stop_dashboard || true; rm -rf "$WORK"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1

.venv/bin/python -m pip wheel -q --no-deps -w "$WORK/dist" . 2>&1 | grep -v "neither a file nor a directory" >&2 || true
WHEEL=$(ls "$WORK"/dist/bertology_workbench-*.whl)
echo "wheel: $(basename "$WHEEL")"
if unzip -l "$WHEEL" | awk '{print $4}' | grep -E '^(probes|studies|apps|workbench)/' >/dev/null; then
  echo "wheel installs a generic top-level module:" >&2; unzip -l "$WHEEL" | awk '{print $4}' | cut -d/ -f1 | sort -u >&2; exit 1
fi
"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install -q "torch==${TORCH_VERSION:-2.13.0}" 2>&1 | grep -v "neither a file nor a directory" >&2 || true
"$VPY" -m pip install -q "${WHEEL}[data]" 2>&1 | grep -v "neither a file nor a directory" >&2 || true

mkdir -p "$WORK/elsewhere" && cd "$WORK/elsewhere"
export BERTOLOGY_HOME="$WORK/home" BERTOLOGY_RESULTS="$WORK/results"
"$VPY" - <<'PY'
import bertology, bertology.probes, bertology.studies, bertology.apps
from bertology.results import git_commit
print("bertology", bertology.__version__, "from", bertology.__file__, "commit", git_commit())
assert "site-packages" in bertology.__file__, bertology.__file__
for name in ("probes", "studies", "apps", "workbench"):
    try:
        __import__(name)
    except ImportError:
        continue
    raise SystemExit(f"the install made a top-level module {name!r}")
PY
BIN="$WORK/venv/bin/bertology"
"$BIN" study list | tee "$WORK/list.txt"
for s in quickstart tour head_types edge_probing pruning contextuality alignment emergence; do
  grep -q "^$s " "$WORK/list.txt" || { echo "study $s missing from the installed package" >&2; exit 1; }
done
printf 'limit: 20\nword_vectors: none\nexample_sentences: 1\n' > small.yaml
"$BIN" study run head_types --config small.yaml
ls "$BERTOLOGY_RESULTS"/head_types/*/manifest.json >/dev/null
"$VPY" - <<'PY'
import json, os, pathlib
m = json.loads(next(pathlib.Path(os.environ["BERTOLOGY_RESULTS"]).glob("head_types/*/manifest.json")).read_text())
assert m["git_commit"], "an installed wheel must still record the commit it was built from"
print("manifest:", m["study"], m["run_id"], "commit", m["git_commit"], "tables", m["tables"])
PY
"$BIN" pretrain --help >/dev/null
"$BIN" build-corpus --out "$WORK/corpus" --sources brown --cache "$WORK/corpus-sources" 2>/dev/null  # the shipped Brown text, no fetch
grep -q '"words": 972403' "$WORK/corpus/manifest.json" || { echo "build-corpus from the wheel: unexpected Brown counts" >&2; exit 1; }
"$BIN" models | tee "$WORK/models.txt"
grep -q "bert-mini-english@3800" "$WORK/models.txt" || { echo "the shipped English BERT is missing from the wheel" >&2; exit 1; }
PORT=$("$VPY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
setsid "$BIN" dashboard --port "$PORT" > "$WORK/dash.log" 2>&1 &
DASH_PID=$!
for _ in $(seq 1 90); do
  if "$VPY" -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$PORT/_stcore/health', timeout=2).status == 200 else 1)" 2>/dev/null; then
    echo "dashboard answers on 127.0.0.1:$PORT"; break
  fi
  sleep 1
done
"$VPY" -c "import urllib.request; assert urllib.request.urlopen('http://127.0.0.1:$PORT/_stcore/health', timeout=5).status == 200" \
  || { cat "$WORK/dash.log" >&2; exit 1; }
stop_dashboard || true
echo "wheel smoke test: passed"
