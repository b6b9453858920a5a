# shellcheck shell=bash
# packages.sh — the one place that says which Debian packages this repository needs, by purpose,
# and the one function that installs them. Sourced by scripts/test, scripts/softroce-vm and the
# bench scripts; scripts/check-packages keeps the README and docs in agreement with these lists.
#
# Callers source scripts/lib/log.sh (say, die) and set PROG first.

# Building the workspace: rdma-sys links libibverbs/librdmacm (pkg-config finds them) and
# generates its bindings with bindgen (libclang; Debian 12's is clang 14, which rdma-sys needs).
# shellcheck disable=SC2034 # used by the scripts that source this file
VL_BUILD_PKGS=(libibverbs-dev librdmacm-dev libclang-dev pkg-config)
# Building and booting the SoftRoCE guest on the host (QEMU, the initramfs tools).
# shellcheck disable=SC2034
VL_GUEST_HOST_PKGS=(qemu-system-x86 busybox-static cpio zstd kmod xz-utils binutils)
# Checking the scripts themselves (scripts/test's lint stage).
# shellcheck disable=SC2034
VL_LINT_PKGS=(shellcheck)
# What a CI runner's bare container needs before the steps of docs/ci.md (a stock Debian
# image lacks them; the scripts above install everything else themselves).
# shellcheck disable=SC2034
VL_CI_RUNNER_PKGS=(ca-certificates curl git build-essential jq)
# scripts/softroce-up on a machine with RDMA: iproute2's `rdma` and `ip`.
# shellcheck disable=SC2034
VL_SOFTROCE_UP_PKGS=(iproute2)

vl_pkg_installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]; }

# vl_ensure_packages WHAT PKG...: install the missing Debian packages when root, or print the
# exact command and fail. WHAT says what they are for ("build", "guest", ...).
vl_ensure_packages() {
  local what=$1 missing=() p
  shift
  if ! command -v dpkg-query >/dev/null; then
    say "note: not a Debian/Ubuntu host; not checking the $what packages ($*)"
    return 0
  fi
  for p in "$@"; do vl_pkg_installed "$p" || missing+=("$p"); done
  ((${#missing[@]} == 0)) && return 0
  if [[ $(id -u) != 0 ]]; then
    die "missing $what packages: ${missing[*]}
  install them with:  sudo apt-get install -y --no-install-recommends ${missing[*]}"
  fi
  say "installing the missing $what packages: ${missing[*]}"
  say "+ apt-get update"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null || die "apt-get update failed"
  say "+ apt-get install -y --no-install-recommends ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
    || die "apt-get install ${missing[*]} failed"
}

# rdma-sys's bindgen breaks with clang >= 16: pin Debian 12's clang 14 when it is there.
vl_pin_libclang() {
  if [[ -z ${LIBCLANG_PATH:-} && -d /usr/lib/llvm-14/lib ]]; then
    export LIBCLANG_PATH=/usr/lib/llvm-14/lib
    say "LIBCLANG_PATH=$LIBCLANG_PATH (rdma-sys needs clang < 16)"
  fi
}
