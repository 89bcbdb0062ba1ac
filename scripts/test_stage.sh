# Sourced by scripts/test.sh: how one test stage runs, is timed, loaded and checked for leftovers.
#   run_ctest DIR [ctest args...]  ctest on DIR with the stage options below, its 20 slowest tests
#                                  listed after, and a check that it left nothing behind
#   stage_begin NAME / stage_end   the stage's wall time, summed up by print_stage_times
#   seed_test_costs FROM TO        TO's ctest orders its tests by FROM's measured times
# Options (environment):
#   UMA_TEST_CONTEND=1  the CPUs are contended while tests run: one busy loop per core of its own
#                       (N > 1: N busy loops), started for each test stage and stopped after it
#   UMA_TEST_REGEX=RE   only the tests matching RE (ctest -R)
#   UMA_TEST_REPEAT=N   each test must pass N times in a row (ctest --repeat until-fail:N)

stage_names=()
stage_secs=()
stage_t0=0
stage_begin() {
  stage_t0=$(date +%s)
  stage_names+=("$1")
  printf '\n== %s  (%s)\n' "$1" "$(date +%H:%M:%S)"
}
stage_end() { stage_secs+=($(($(date +%s) - stage_t0))); }
print_stage_times() {
  local i total=0
  printf '\n== stage times (s)\n'
  for i in "${!stage_secs[@]}"; do
    printf '  %6d  %s\n' "${stage_secs[$i]}" "${stage_names[$i]}"
    total=$((total + stage_secs[i]))
  done
  printf '  %6d  in all\n' "$total"
}

contend_pids=()
contend_start() {
  local n=${UMA_TEST_CONTEND:-0} i
  [ "$n" = 0 ] && return 0
  [ "$n" = 1 ] && n=$(nproc)
  for ((i = 0; i < n; i++)); do
    (exec -a uma-contend bash -c 'while :; do :; done') &
    contend_pids+=($!)
  done
  echo "(UMA_TEST_CONTEND: $n busy loops beside the tests: ${contend_pids[*]})"
}
contend_stop() {
  [ "${#contend_pids[@]}" -eq 0 ] && return 0
  kill "${contend_pids[@]}" 2>/dev/null || true
  wait "${contend_pids[@]}" 2>/dev/null || true
  contend_pids=()
}

# What a test may leave behind: processes of ours or of the servers the tests start (not there
# before the stage: a developer's own redis or nginx is not the tests'), and /tmp entries of the
# tests' own prefixes made during the stage.
test_processes() {
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case $exe in
      "$root"/build*/bin/* | */redis-server | */nginx | */node) echo "${p#/proc/} $exe" ;;
    esac
  done
}
leftover_processes() {
  local pid exe
  test_processes | while read -r pid exe; do
    grep -qx "$pid $exe" "$1" && continue
    echo "  pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)"
  done
}
leftover_tmp() {
  find /tmp -maxdepth 1 -newer "$1" \( -name 'uma-e2e-*' -o -name 'uma-nginx-*' -o -name 'uma-cluster-test-*' \) \
    -printf '  %p\n' 2>/dev/null
}

# ctest starts the tests it knows to be long first; in a fresh build folder it knows none and
# a long test started last runs alone at the end. The plain stage's measured times order the others.
seed_test_costs() {
  local from=$1/Testing/Temporary/CTestCostData.txt to=$2/Testing/Temporary
  [ -f "$from" ] && [ ! -f "$to/CTestCostData.txt" ] || return 0
  mkdir -p "$to" && cp "$from" "$to/"
}

run_ctest() {
  local dir=$1 rc=0 before left
  shift
  local extra=()
  [ -n "${UMA_TEST_REGEX:-}" ] && extra+=(-R "$UMA_TEST_REGEX")
  [ -n "${UMA_TEST_REPEAT:-}" ] && extra+=(--repeat "until-fail:$UMA_TEST_REPEAT")
  before=$(mktemp)
  test_processes >"$before"
  contend_start
  { ctest --test-dir "$dir" --output-on-failure "$@" "${extra[@]}"; echo $? >"$dir/ctest.rc"; } 2>&1 | tee "$dir/ctest.out"
  [ "$(cat "$dir/ctest.rc")" = 0 ] || rc=1
  contend_stop
  echo "-- the 20 slowest tests in $dir:"
  # awk reads to the end: `head -20` exits early, and a sort still writing then dies of SIGPIPE,
  # which pipefail made the stage's result (a passing TSan stage ended CI with 141, contended).
  grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: ' "$dir/ctest.out" |
    sed -E 's/^.*Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/' | sort -rn | awk 'NR <= 20 { print "   " $0 }'
  # A killed server's children die a moment after it (their parent-death signal): poll, briefly.
  for _ in $(seq 50); do
    left="$(leftover_processes "$before")$(leftover_tmp "$before")"
    [ -z "$left" ] && break
    sleep 0.2
  done
  if [ -n "$left" ]; then
    echo "the tests in $dir left these behind:"
    echo "$left"
    rc=1
  fi
  rm -f "$before"
  return "$rc"
}
