#!/usr/bin/env bash
# The default scenario `make run` shows: the two-buildings topology, and ring all-reduce sweeps inside one
# node and across both buildings.
set -euo pipefail
spansim=${1:-build/spansim}
"$spansim" topology describe two-buildings
echo
"$spansim" collective --topology two-buildings --ranks 8 --sizes 1MiB:8GiB --factor 4
echo
# GPU 0 of every 64th node: 32 GPUs on rail 0 in each building, so the ring crosses the building boundary.
"$spansim" collective --topology two-buildings --ranks 64 --stride 512 --sizes 1MiB:8GiB --factor 4
