#!/usr/bin/env bash
# Lay the source folders out as the installed package: DIR/bertology (workbench/) with probes/,
# studies/ and apps/ inside it, as pyproject.toml's package-dir maps them. Used where no install
# can be made (a bare GPU image: scripts/gpu_check.sh) or followed (mypy: scripts/check.sh).
#   bash scripts/package_copy.sh DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: package_copy.sh DIR}
mkdir -p "$out"
cp -r workbench "$out/bertology"
for room in probes studies apps; do cp -r "$room" "$out/bertology/$room"; done
