#!/bin/sh
# mpirun.sh NP PROGRAM [ARGS...] — Open MPI's mpirun as the SoftRoCE guest needs it, in one place
# (tests/guest/67-*, scripts/bench-coll-vs-mpi). What each flag is for:
#   --allow-run-as-root      the guest runs everything as root
#   --oversubscribe, --bind-to none   4 ranks on 2 vCPUs
#   --mca plm isolated       no ssh in the guest: start every rank on this node
#   --mca pml ucx            Debian's openmpi-mca-params.conf says pml = ^ucx; without this the
#                            job silently falls back to ob1 over shared memory
#   UCX_TLS=rc_verbs,ud_verbs,self   UCX's verbs transports only (no shared memory, no TCP);
#                            rc_verbs alone fails: UCX sets connections up over ud_verbs
#   UCX_UD_ETH_DGID_CHECK=n  with rxe's IPv4-mapped RoCE v2 GID, UCX's UD endpoints otherwise
#                            die after ~30 s ("unhandled timeout")
# Programs that take no device list themselves go through one-device.sh (one rxe per rank).
set -eu
[ $# -ge 2 ] || { echo "usage: mpirun.sh NP PROGRAM [ARGS...]" >&2; exit 2; }
np=$1
shift
exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
    --mca plm isolated --mca pml ucx \
    -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_UD_ETH_DGID_CHECK=n "$@"
