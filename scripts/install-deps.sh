#!/usr/bin/env bash
# Installs spansim's build and test dependencies from Debian's packages.
# Idempotent and silent when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libsimgrid-dev libns3-dev ns3 libgsl-dev libboost-graph-dev nlohmann-json3-dev libhdf5-dev libcli11-dev catch2
  libprotobuf-dev protobuf-compiler clang-14 libclang-rt-14-dev pybind11-dev python3-dev python3-pytest
  python3-h5py python3-matplotlib python3-pandas slurm-wlm munge
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "Installing missing packages: ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
