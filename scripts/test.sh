#!/usr/bin/env bash
# `make test` (and CI's .ci/run): install what is missing, build the Release tree, build the clang tree's fuzz
# targets, run ctest; then print each phase's wall time and ctest's seconds per label, so that a slow commit shows
# in CI's log. README's "Tests" section keeps the table of a fresh clone's run.
#   BUILD_DIR (build), SANITIZE_DIR (BUILD_DIR/sanitize), JOBS (nproc): as the Makefile passes them; the build
#   steps are the Makefile's own targets (deps, build, fuzz-build).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
sanitize=${SANITIZE_DIR:-$build/sanitize}
jobs=${JOBS:-$(nproc)}

phases=()
began=$(date +%s)
phase_start=$began
phase() { # records the phase that just ended
  local now
  now=$(date +%s)
  phases+=("$1|$((now - phase_start))")
  phase_start=$now
}

make() { command make --no-print-directory BUILD_DIR="$build" SANITIZE_DIR="$sanitize" JOBS="$jobs" "$@"; }

make deps
phase "install (apt, what is missing)"
make build
phase "Release build (binary, Python module, tests)"
make fuzz-build
phase "sanitizer build (libFuzzer targets only)"

status=0
(cd "$build" && ctest --output-on-failure -j "$jobs" --output-junit ctest-junit.xml) || status=$?
phase "ctest"

echo
echo "make test: phase times (wall clock)"
for p in "${phases[@]}"; do
  printf '  %-48s %6d s\n' "${p%%|*}" "${p##*|}"
done
printf '  %-48s %6d s\n' "total" "$(($(date +%s) - began))"
/usr/bin/python3 scripts/ctest_times.py "$build" || true
exit $status
