# shellcheck shell=bash
# log.sh — how the host scripts talk: `PROG: message` on stdout, warnings and errors on stderr
# with the script's name first. Set PROG before sourcing. die exits 1 (or $DIE_STATUS, for a
# script whose 1 means something else); usage_error exits 2, as every tool's bad command line.

say() { printf '%s: %s\n' "$PROG" "$*"; }
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit "${DIE_STATUS:-1}"; }
usage_error() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 2; }
