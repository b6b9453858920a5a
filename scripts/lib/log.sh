# shellcheck shell=bash
# log.sh — how the host scripts talk: `PROG: message` on stdout, warnings and errors on stderr
# with the script's name first. Set PROG before sourcing; die exits 1.

say() { printf '%s: %s\n' "$PROG" "$*"; }
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
