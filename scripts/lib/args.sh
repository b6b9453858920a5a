# shellcheck shell=sh
# args.sh — checks of command-line values shared by the guest scripts (POSIX sh: they run under
# the guest's busybox). Sourced by scripts/bench-guest.sh and scripts/syscalls-guest.sh.

# need_count TOOL OPTION VALUE MIN: VALUE is a whole number of at least MIN; otherwise TOOL says
# which option is wrong and exits 2 (a bad command line).
need_count() {
    case $3 in '' | *[!0-9]*) echo "$1: $2 needs a positive number" >&2; exit 2 ;; esac
    [ "$3" -ge "$4" ] || { echo "$1: $2 must be at least $4" >&2; exit 2; }
}
