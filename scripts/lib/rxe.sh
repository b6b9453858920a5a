# shellcheck shell=sh
# rxe.sh — what "an rxe device is ready" means, said once for the guest's /init
# (scripts/lib/guest-init.sh) and for the scenarios that take a link down and bring it back
# (tests/guest/lib.sh). POSIX sh: it runs under the guest's busybox.

# mapped_gid ADDR: the IPv4-mapped GID of the IPv4 address ADDR, as sysfs prints a GID.
mapped_gid() {
    echo "$1" | awk -F. '{ printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n", $1, $2, $3, $4 }'
}

# rxe_ready DEV ADDR: true when DEV's port 1 is ACTIVE and its GID 1 is ADDR's IPv4-mapped
# RoCE v2 GID (what the tools choose by default). Sets RXE_STATE, RXE_GID and RXE_TYPE to what
# it read, for a caller's message when it gives up.
rxe_ready() {
    _rr_p=/sys/class/infiniband/$1/ports/1
    RXE_STATE=$(cat "$_rr_p/state" 2>/dev/null)
    RXE_GID=$(cat "$_rr_p/gids/1" 2>/dev/null)
    RXE_TYPE=$(cat "$_rr_p/gid_attrs/types/1" 2>/dev/null)
    case $RXE_STATE in
        *ACTIVE*) [ "$RXE_GID" = "$(mapped_gid "$2")" ] && [ "$RXE_TYPE" = "RoCE v2" ] ;;
        *) return 1 ;;
    esac
}
