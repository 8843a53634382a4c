#!/usr/bin/env bash
# Install what trestle needs on a fresh Debian bookworm machine (idempotent), then
# build the workspace. Sourced by tests/run.sh and tests/demo.sh.
set -euo pipefail

need_apt=()
command -v clang-19 >/dev/null 2>&1 || need_apt+=(clang-19)
[ -e /usr/lib/llvm-19/lib/libLLVM-19.so ] && [ -e /usr/lib/llvm-19/include/llvm-c/Core.h ] || need_apt+=(llvm-19-dev)
ls /usr/lib/llvm-19/lib/clang/19/lib/linux/libclang_rt.* >/dev/null 2>&1 || need_apt+=(libclang-rt-19-dev)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
command -v make >/dev/null 2>&1 || need_apt+=(make)
# Lifted tests run in a bubblewrap sandbox.
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v objcopy >/dev/null 2>&1 || need_apt+=(binutils)
# llvm-sys links these next to libLLVM.
[ -e /usr/lib/x86_64-linux-gnu/libzstd.so ] || need_apt+=(libzstd-dev)
[ -e /usr/lib/x86_64-linux-gnu/libz.so ] || need_apt+=(zlib1g-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is missing; install a Rust toolchain (rustup) first" >&2
  exit 1
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
echo "setup: building trestle (cargo build --workspace --release)" >&2
cargo build --workspace --release --quiet
export TRESTLE_BIN="$PWD/target/release"
# Cargo cannot name a binary trestle-c++; trestle-cc acts as the C++ wrapper when
# called by a name ending in ++.
ln -sf trestle-cc "$TRESTLE_BIN/trestle-c++"
