#!/bin/sh
# The collectives' master port survives strangers. Rank 0 of a world of 4 listens; before the
# other ranks start, its master port gets: a connection that closes at once (a port scan), a
# well-framed message of garbage, an HTTP request, a vl_write_bw client pointed at the wrong
# port, a record of another bootstrap protocol version, and a trickle of one byte a second that
# is still going when the world forms. Each is logged by rank 0 in one line naming its address
# and what it was; the rendezvous goes on, and all four ranks run the collective and exit 0.
# The vl_write_bw client is not left waiting: it fails at once, and so does the other build's
# "rank", told why.
# timeout: 180
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin vl_all_reduce_perf
port=29581

# rank R: rank R of 4 in the background, its output in $TMPDIR/rR.out, its pid in PIDR.
rank() {
    vl_all_reduce_perf --ib-dev "$VL_DEV0,$VL_DEV1" --rank "$1" --world-size 4 \
        --master "127.0.0.1:$port" -b 8 -e 64 -n 1 -w 0 -c 1 --timeout 30 \
        --bootstrap-timeout 60 >"$TMPDIR/r$1.out" 2>&1 </dev/null &
    eval "PID$1=\$!"
}

step "rank 0 listens; strangers hit the master port before the other ranks start"
rank 0
wait_port "$port" 60 "$PID0"
# 1. connect and close.
nc -w 2 127.0.0.1 "$port" </dev/null >/dev/null 2>&1 || true
# 2. a well-formed frame of 4 bytes of garbage.
printf '\000\000\000\004\336\255\276\357' | nc -w 2 127.0.0.1 "$port" >/dev/null 2>&1 || true
# 3. an HTTP request (its first 4 bytes, read as a frame length, are far too long).
printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 127.0.0.1 "$port" >/dev/null 2>&1 || true
# 4. a vl_* benchmark's client given the master port: refused at once, not left to wait.
rc=0
run_timeout 30 vl_write_bw -d "$VL_DEV1" -p "$port" --wait 5 127.0.0.1 >"$TMPDIR/vl.out" 2>&1 || rc=$?
cat "$TMPDIR/vl.out"
[ "$rc" = 1 ] || fail "the vl_write_bw client at the master port exited $rc, expected 1"
# 5. a record of bootstrap protocol version 3 (magic VLCB, version 3, then anything): told why.
# (nc's input stays open until the answer has come: the refusal closes the connection.)
(printf '\000\000\000\010VLCB\000\003\000\001'; sleep 3) |
    nc -w 3 127.0.0.1 "$port" >"$TMPDIR/v3.out" 2>&1 || true
grep -aq "version 3, this build speaks version" "$TMPDIR/v3.out" ||
    fail "the other build's record was not told why it was ignored"
# 6. a trickle of a 256-byte frame, one byte a second for 15 s: still going when the world forms.
(for b in '\000' '\000' '\001' '\000' V L C B '\000' '\004' 0 0 0 0 0; do
    # shellcheck disable=SC2059 # $b is a byte (an octal escape or a letter): the format is it
    printf "$b"
    sleep 1
done) | nc 127.0.0.1 "$port" >/dev/null 2>&1 &
trickle=$!
sleep 1

step "ranks 1..3 start: the world of 4 forms while the trickle goes on; every rank exits 0"
for r in 1 2 3; do rank "$r"; done
for r in 0 1 2 3; do
    RC=0
    eval "_vl_watch \$PID$r 120" || RC=$?
    [ "$RC" = 0 ] || { cat "$TMPDIR/r$r.out"; fail "rank $r exited $RC"; }
done
kill "$trickle" 2>/dev/null || true
cat "$TMPDIR/r0.out"
expect_contains "$TMPDIR/r0.out" "# Out of bounds values : 0 OK"
n=$(grep -c "rank 0 ignored a connection from 127.0.0.1:[0-9]* to the master port $port: " \
    "$TMPDIR/r0.out" || true)
[ "$n" = 6 ] || fail "rank 0 logged $n strangers, expected 6 (one line each)"
expect_contains "$TMPDIR/r0.out" "it closed the connection without a word"
expect_contains "$TMPDIR/r0.out" "its first message is not an endpoint record"
expect_contains "$TMPDIR/r0.out" "its opening bytes are not a verbs-lab frame (another protocol?)"
expect_contains "$TMPDIR/r0.out" "a vl_* benchmark's client (its HELLO), not a rank"
expect_contains "$TMPDIR/r0.out" "a rank of bootstrap protocol version 3"
# "yet when the world was complete" (or, on a slow guest, "within 10 s"): either way the
# rendezvous did not wait for it.
expect_contains "$TMPDIR/r0.out" "no whole endpoint record"
echo "the master port ignored 6 strangers and the world of 4 formed"
