set -x
vl_alltoall_perf --np 2 --algo direct -b 8 -e 64K -f 64 -c 1 -n 2 -w 1 --ib-dev rxe0,rxe1 2>&1 | grep -E "algo|^ +[0-9]+ |error|Out of"
vl_alltoall_perf --np 1 -b 8 -e 64K -f 64 -c 1 -n 2 -w 1 2>&1 | grep -E "algo|^ +[0-9]+ |error|Out of"
vl_alltoall_perf --np 3 --channels 4 -b 8 -e 1M -f 128 -c 1 -n 2 -w 1 --ib-dev rxe0,rxe1 2>&1 | grep -E "algo|^ +[0-9]+ |error|Out of"
vl_alltoall_perf --np 12 -b 96 -e 96K -f 1024 -c 1 -n 1 -w 0 --ib-dev rxe0,rxe1 --slots 4 --slot-size 16K 2>&1 | grep -E "algo|^ +[0-9]+ |error|Out of"; echo rc=$?
vl_alltoall_perf --np 3 --slots 3000 -b 8 -e 8 -c 1 -n 1 -w 0 --ib-dev rxe0,rxe1 2>&1 | tail -3; echo rc=$?
vl_alltoall_perf --np 3 -d half -b 6 -e 6000 -f 1000 -c 1 -n 1 -w 0 --ib-dev rxe0,rxe1 2>&1 | grep -E "^ +[0-9]+ |error|Out of"
