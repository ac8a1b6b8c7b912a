#!/usr/bin/env bash
# Lint, format and type checks (run by .ci/run before the tests; fails on any finding):
#   ruff check (rules in pyproject.toml), ruff format --check, mypy over the typed rooms.
# The source folders are mapped into one package `bertology` by setuptools (pyproject.toml), which
# mypy cannot follow: it checks a package-shaped copy, and its messages name the source files.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DIRS="workbench probes studies apps tests benchmarks scripts examples"
"$PY" -m ruff check $DIRS
"$PY" -m ruff format --check $DIRS
# the rooms mypy checks: every core module, the store, pretraining, fine-tuning, the CLI, the analyses (probes)
# the studies and the dashboard (bertology.apps): every room of the package
TYPED="${TYPED:-bertology.store bertology.finetuning bertology.pretraining bertology.features bertology.runtime bertology.models bertology.paths bertology.inspection bertology.attribution bertology.atomic bertology.results bertology.distributed bertology.checkpoints bertology.fingerprints bertology.validation bertology.adapters bertology.architectures bertology.corpus bertology.testing bertology.runs bertology.machine bertology.uncertainty bertology.errors bertology.similarity bertology.pseudo_likelihood bertology.cli bertology.probes bertology.studies bertology.apps}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash scripts/package_copy.sh "$tmp"
args=()
for m in $TYPED; do args+=(-p "$m"); done
status=0
(cd "$tmp" && "$OLDPWD/$PY" -m mypy --config-file "$OLDPWD/pyproject.toml" "${args[@]}") > "$tmp/mypy.log" 2>&1 || status=$?
# name the source folders, not the copy: bertology/probes -> probes, bertology/... -> workbench/...
sed -e 's#^bertology/probes/#probes/#' -e 's#^bertology/studies/#studies/#' -e 's#^bertology/apps/#apps/#' \
    -e 's#^bertology/#workbench/#' "$tmp/mypy.log"
exit $status
