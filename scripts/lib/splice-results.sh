# shellcheck shell=bash
# splice_results: the results of a deterministic sweep into docs/benchmarks.md, between its
# DETERMINISTIC RESULTS markers (scripts/bench-vs-perftest --deterministic --sweep --docs).
# Needs `die` (scripts/lib/log.sh). Kept apart so that a host test can run it on files of its
# own (tests/scripts_usage.rs).

DET_BEGIN='<!-- BEGIN DETERMINISTIC RESULTS by scripts/bench-vs-perftest --deterministic --docs: rewritten down to END DETERMINISTIC RESULTS -->'
DET_END='<!-- END DETERMINISTIC RESULTS -->'

# splice_results GENERATED PAGE: the results of a deterministic sweep (GENERATED's "## Results"
# down to its other columns: every row's medians, spreads, ratio and verdict, and the misses)
# into PAGE between the DETERMINISTIC RESULTS markers, which PAGE must have, each on a line of
# its own and in that order. PAGE is left as it was when either file is not what it should be.
splice_results() {
  local gen=$1 page=$2
  awk -v b="$DET_BEGIN" -v e="$DET_END" '$0 == b && !nb { nb = NR } $0 == e && !ne { ne = NR }
      END { exit !(nb && ne > nb) }' "$page" ||
    die "$page has no DETERMINISTIC RESULTS markers (begin, then end, each a line of its own)" \
      "to write the results between"
  grep -qx '## Results' "$gen" ||
    die "$gen has no '## Results' section: not a report of vl_benchstat; $page left as it was"
  {
    awk -v m="$DET_BEGIN" '{ print } $0 == m { exit }' "$page"
    echo
    awk '/^## Results$/ { on = 1; print "### Results in deterministic time"; next }
         /^### Other columns/ { exit }
         on { sub(/^### /, "#### "); print }' "$gen"
    printf '%s\n' "$DET_END"
    awk -v m="$DET_END" 'found { print } $0 == m { found = 1 }' "$page"
  } >"$page.tmp"
  mv -- "$page.tmp" "$page"
}
