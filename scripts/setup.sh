#!/usr/bin/env bash
# Sets up everything the demo, the tests and the docs need. Idempotent: safe
# to run again; steps that are already done are skipped.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python}"

# 1. PyTorch. A plain `torch` requirement with nothing installed would pull a
#    multi-GB CUDA build, so install the pinned CPU-friendly version first, and
#    only when torch is missing (GPU machines come with torch preinstalled).
if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    echo "[setup] installing torch==2.13.0"
    "$PYTHON" -m pip install -q "torch==2.13.0"
fi

# 2. The package itself (editable, from this checkout) with the test extras:
#    docs, notebooks. Checked from a neutral folder, so that the checkout on
#    the current path does not count as installed.
ROOT="$(pwd -P)"
if ! (cd / && "$PYTHON" - "$ROOT" <<'PY' >/dev/null 2>&1
import importlib.util, sys
from pathlib import Path
import pyg_orch
assert Path(pyg_orch.__file__).resolve().parents[1] == Path(sys.argv[1])
for mod in ('pytest', 'pytest_timeout', 'xdist', 'nbclient', 'nbformat', 'ipykernel',
            'matplotlib', 'sphinx', 'torch_geometric', 'numpy', 'pymetis'):
    if importlib.util.find_spec(mod) is None:
        sys.exit(1)
PY
); then
    echo "[setup] pip install -e .[test]"
    "$PYTHON" -m pip install -q -e ".[test]"
fi

# 3. Baseline wheels (torch-scatter/torch-sparse) for the parity tests against
#    PyG's own NeighborLoader. They go into .cache/baseline-site, never into
#    site-packages: the main test run must prove we work without them.
read -r PY_TAG TORCH_MM < <("$PYTHON" - <<'PY'
import sys, torch
v = torch.__version__.split('+')[0].split('.')
print(f"cp{sys.version_info.major}{sys.version_info.minor}", f"{v[0]}.{v[1]}")
PY
)
# The wheel folder for this Python and torch: `<kind>-cpXY-torchA.B[-...]`,
# in ../shared/wheels, or carried along in .device_wheels on machines that
# have no ../shared.
WHEELS=""
for dir in ../shared/wheels/cpu-* ../shared/wheels/* .device_wheels/*; do
    name="$(basename "$dir")"
    case "$name" in
        *-"${PY_TAG}-torch${TORCH_MM}" | *-"${PY_TAG}-torch${TORCH_MM}"-*)
            if compgen -G "$dir/torch_sparse-*.whl" >/dev/null; then
                WHEELS="$dir"
                break
            fi ;;
    esac
done
SITE=".cache/baseline-site"
if [ -n "$WHEELS" ]; then
    if [ ! -d "$SITE/torch_sparse" ] || [ ! -d "$SITE/torch_scatter" ]; then
        echo "[setup] installing baseline wheels from $WHEELS into $SITE"
        mkdir -p "$SITE"
        "$PYTHON" -m pip install -q --no-deps --target "$SITE" "$WHEELS"/*.whl
    fi
else
    echo "[setup] no torch-sparse wheels for ${PY_TAG} and torch ${TORCH_MM}" \
         "(parity tests will be skipped)"
fi
