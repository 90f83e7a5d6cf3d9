#!/usr/bin/env bash
# Runs the whole test suite (including the docs build and the tutorials), then
# the parity tests against PyG's own NeighborLoader when the baseline wheels
# are available. Extra arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
PYTHON="${PYTHON:-python}"

# Tests run in parallel processes (pytest-xdist), one per core up to 4;
# PYTEST_WORKERS=0 runs them in this process. Tests that start processes
# meeting over TCP ports share one worker (tests/conftest.py).
WORKERS="${PYTEST_WORKERS:-$("$PYTHON" -c 'import os; print(min(4, os.cpu_count() or 1))')}"
"$PYTHON" -m pytest -q -n "$WORKERS" --dist loadgroup "$@"

SITE=".cache/baseline-site"
if [ -d "$SITE/torch_sparse" ]; then
    echo "[test] parity tests against PyG's NeighborLoader ($SITE)"
    rc=0
    PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" \
        "$PYTHON" -m pytest -q -m parity "$@" || rc=$?
    if [ "$rc" -eq 5 ]; then
        echo "[test] no parity tests collected"
    elif [ "$rc" -ne 0 ]; then
        exit "$rc"
    fi
else
    echo "[test] $SITE has no torch_sparse: parity run skipped"
fi
