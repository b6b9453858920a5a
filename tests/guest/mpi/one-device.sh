#!/bin/sh
# one-device.sh DEVS PROGRAM [ARGS...] — run PROGRAM with UCX held to one device of the
# comma-separated DEVS (e.g. rxe0:1,rxe1:1), picked round-robin by the Open MPI local rank.
# Given both devices, UCX pairs rxe0 with rxe0 and rxe1 with rxe1, so no byte would cross the
# veth pair; one device per rank (as vl_*_perf's -d does) makes the ring cross it.
set -eu
[ $# -ge 2 ] || { echo "usage: one-device.sh DEV[,DEV...] PROGRAM [ARGS...]" >&2; exit 2; }
devs=$1
shift
i=${OMPI_COMM_WORLD_LOCAL_RANK:?one-device.sh runs under mpirun (no OMPI_COMM_WORLD_LOCAL_RANK)}
n=$(echo "$devs" | tr ',' '\n' | grep -c .)
UCX_NET_DEVICES=$(echo "$devs" | tr ',' '\n' | sed -n "$((i % n + 1))p")
export UCX_NET_DEVICES
exec "$@"
