# shellcheck shell=sh
# Helpers of the collective scenarios (tests/guest/6N-coll-*.sh), on top of lib.sh: the mqueue
# file system mounted (so the queues of --np show as files), and a check that none is left.
#
#   . "$VL_TESTS/lib.sh"
#   . "$VL_TESTS/coll-lib.sh"
#   no_queues_left "what ran"

if ! grep -q ' mqueue ' /proc/mounts; then
    mkdir -p /dev/mqueue
    mount -t mqueue none /dev/mqueue
fi

# no_queues_left WHAT: no --np queue (/vl-coll-PID-rN) remains in /dev/mqueue.
no_queues_left() {
    q=$(for f in /dev/mqueue/vl-coll-*; do [ ! -e "$f" ] || echo "${f##*/}"; done)
    [ -z "$q" ] || fail "$1 left message queues behind: $q"
}
