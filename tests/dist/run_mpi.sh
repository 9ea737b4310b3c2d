#!/usr/bin/env bash
# run_mpi.sh N COMMAND...: runs COMMAND as N MPI ranks on this machine. --oversubscribe: N may
# exceed the cores; --allow-run-as-root only when running as root (Open MPI refuses root
# otherwise). Exits 77 (CTest's skip code here) when no mpirun is installed.
set -euo pipefail
n="$1"; shift
launcher="$(command -v mpirun || command -v mpiexec || true)"
if [[ -z "$launcher" ]]; then
  echo "no mpirun or mpiexec on PATH: MPI test skipped"
  exit 77
fi
extra=(--oversubscribe)
if [[ "$(id -u)" == 0 ]]; then extra+=(--allow-run-as-root); fi
exec "$launcher" "${extra[@]}" -x OMP_NUM_THREADS -np "$n" "$@"
