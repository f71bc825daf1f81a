#!/usr/bin/env bash
# The default scenario `make run` shows: the two-buildings topology, a ring all-reduce sweep across both
# buildings, and one co-simulated training step of Llama 3 405B placed over them.
set -euo pipefail
spansim=${1:-build/spansim}
"$spansim" topology describe two-buildings
echo
# GPU 0 of every 64th node: 32 GPUs on rail 0 in each building, so the ring crosses the building boundary.
"$spansim" collective --topology two-buildings --ranks 64 --stride 512 --sizes 1MiB:4GiB --factor 8 --algo ring
echo
"$spansim" run
