#!/usr/bin/env bash
# Installs spansim's build and test dependencies from Debian's packages.
# Idempotent and silent when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libsimgrid-dev libns3-dev ns3 libgsl-dev libboost-graph-dev nlohmann-json3-dev libhdf5-dev libcli11-dev catch2
  libprotobuf-dev protobuf-compiler clang-14 libclang-rt-14-dev pybind11-dev python3-dev python3-pytest
  python3-h5py python3-matplotlib python3-pandas python3-protobuf zlib1g-dev slurm-wlm munge chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

# apt's and dpkg's own output (hundreds of lines) goes to a log; the terminal sees one progress line, read from
# apt's status descriptor ("dlstatus:...:percent:..." and "pmstatus:...:percent:...").
log="${TMPDIR:-/tmp}/spansim-install-deps.log"
echo "Installing ${#missing[@]} Debian packages and what they need: ${missing[*]} (log: $log)" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive

progress() {
  local kind pct stage="" last=-1 word
  while IFS=: read -r kind _ pct _; do
    case "$kind" in
    dlstatus) word="downloading" ;;
    pmstatus) word="installing" ;;
    *) continue ;;
    esac
    pct=${pct%%.*}
    if [ "$word" != "$stage" ]; then
      [ -n "$stage" ] && [ -t 2 ] && printf '\n' >&2
      stage=$word
      last=-1
    fi
    if [ -t 2 ]; then
      printf '\r  %s: %3d%%' "$stage" "$pct" >&2
    elif [ $((pct / 25)) -ne "$last" ]; then
      last=$((pct / 25))
      echo "  $stage: $pct%" >&2
    fi
  done
  if [ -n "$stage" ] && [ -t 2 ]; then printf '\n' >&2; fi
}

fail() {
  echo "install-deps: $1 failed; the last lines of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
}

$sudo apt-get update -qq >"$log" 2>&1 || fail "apt-get update"
if ! $sudo apt-get install -y -q --no-install-recommends -o APT::Status-Fd=3 "${missing[@]}" 3>&1 >>"$log" 2>&1 |
  progress; then
  fail "apt-get install"
fi
echo "Installed (details in $log)." >&2
