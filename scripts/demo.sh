#!/usr/bin/env bash
# Trains GraphSAGE on a synthetic power-law graph with HybridNeighborLoader
# and prints per-stage times. Arguments go to `python -m pyg_orch.demo`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec "${PYTHON:-python}" -m pyg_orch.demo "$@"
