#!/usr/bin/env bash
# Installs what spattn needs to build and test on Debian or Ubuntu (run as root). Packages that
# are already present are not fetched again, so a prepared machine needs no network.
set -euo pipefail

packages=(build-essential cmake pkg-config python3 openmpi-bin libopenmpi-dev libopenblas-openmp-dev
          libgtest-dev libgmock-dev)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
