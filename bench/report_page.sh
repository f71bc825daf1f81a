#!/usr/bin/env bash
# The page of a large result: its size, and the time headless Chromium takes to open and draw it.
#   bench/report_page.sh [BUILD] [SCENARIO] [RUNS]
# Runs SCENARIO at analytical fidelity with --report (default: the 131K-GPU Llama 3 405B example), then opens
# report.html RUNS times (default 3) in Debian's headless Chromium with the network off. Prints the run's wall time
# and peak memory, the page's size, and per opening the page's own figure (data-draw-ms: performance.now() when its
# script has drawn everything, from the start of navigation) and Chromium's whole wall time (start-up included).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
scenario="${2:-$root/examples/scenarios/llama3-405b-131k-ft-hsdp.json}"
runs="${3:-3}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
/usr/bin/time -f "run: %e s wall, %M KiB peak" "$build/spansim" run "$scenario" --fidelity analytical --out "$out" \
  --report >/dev/null
page="$out/report.html"
echo "page: $(stat -c %s "$page") bytes ($(numfmt --to=iec-i --suffix=B "$(stat -c %s "$page")"))"
for i in $(seq 1 "$runs"); do
  profile="$(mktemp -d)"
  start=$(date +%s.%N)
  dom="$(chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir="$profile" \
    --host-resolver-rules='MAP * ~NOTFOUND' --proxy-server=127.0.0.1:9 --dump-dom "file://$page" 2>/dev/null)"
  end=$(date +%s.%N)
  rm -rf "$profile"
  drawn=$(grep -o 'data-draw-ms="[0-9]*"' <<<"$dom" | grep -o '[0-9]*' || echo "not drawn")
  errors="script errors: none"
  grep -q 'id="errors"></div>' <<<"$dom" || errors="SCRIPT ERRORS (see the page's #errors)"
  echo "opening $i: drawn at $drawn ms; chromium $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.2f", b - a}') s in all; $errors"
done
