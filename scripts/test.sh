#!/usr/bin/env bash
# README command 2: set up, build, and pass the tests on a fresh machine.
#   1. scripts/setup.sh: Debian packages + the pinned llama.cpp (cached per machine, built once)
#   2. build/: the project (RelWithDebInfo, ccache) and its unit + end-to-end tests
#   3. build-asan/: the project's own code again under AddressSanitizer + UBSan's arithmetic checks, same tests
#      (llama.cpp stays uninstrumented; the RSS test is skipped there: ASan's quarantine keeps
#      freed memory on purpose, and LeakSanitizer checks leaks instead)
#   4. build-tsan/: the project's own code under ThreadSanitizer, the tests that cross threads in new
#      ways (tsan_skip below; suppressions, each explained, in scripts/tsan.supp: llama.cpp/OpenMP
#      internals only)
#   deploy: scripts/deploy_check.sh, the deployment files' static checks (after the plain tests)
#   5. fuzz: the wire and HTTP fuzzers (libFuzzer, built in build-asan/) run UMA_FUZZ_SECONDS each (default 60)
# Compilers: a fresh build/ and build-asan/ are compiled with clang where it is installed (CI: a
# third less compile time than g++ for the same code, docs/BENCHMARKS.md "CI time"; libFuzzer needs
# it anyway); build-tsan/ with g++, so every source and test still compiles with the compiler the
# GPU servers build with. An existing build/ keeps the compiler it was configured with.
# Compile time (CI has a cold cache): the sanitizer builds and a fresh build/ compile the libraries
# and tools in unity batches (UMA_UNITY, CMakeLists.txt says why); an existing build/ keeps its
# setting (-DUMA_UNITY=OFF there for quick incremental builds). The plain and sanitizer stages build
# what the tests run (test_targets); the benchmark tools no test runs compile in build-asan/.
# The test executables' own code compiles at -O0 with a precompiled header (cmake/test_compile.cmake).
# Stages and load (scripts/test_stage.sh): UMA_TEST_STAGES="plain deploy asan tsan fuzz" picks stages (the plain
# build is always made: the others use its tools), UMA_TEST_REGEX / UMA_TEST_REPEAT pick and repeat
# tests, UMA_TEST_CONTEND=1 runs every test stage beside one busy loop per core, UMA_TEST_JOBS sets
# how many tests run at once (default two per core); the sanitizer stages start the tests the plain
# stage measured longest first. Each stage's time
# and its 20 slowest tests are printed, and a test stage fails if it left a process or a temp folder behind.
# UMA_GPU=cuda: llama.cpp with CUDA, the project in build-cuda/, unit + end-to-end tests with every
# layer on the GPU; stages 3-5 test the project's own code, backend-independent, and are left to CI
# there (UMA_SKIP_*=0 asks for them). UMA_BUNDLE=DIR: set up offline (scripts/setup.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=${UMA_JOBS:-$(nproc)}
# Tests run two per core: an end-to-end test spends much of its time waiting on the processes it
# started, so at one per core the cores idle (plain stage 209 s at -j2, 176 s at -j4 on 2 cores).
test_jobs=${UMA_TEST_JOBS:-$((2 * jobs))}
# ccache hits across checkouts (a fresh clone elsewhere reuses this machine's cache).
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true
. scripts/test_stage.sh
trap 'contend_stop; print_stage_times' EXIT
want() { [[ " ${UMA_TEST_STAGES:-plain deploy asan tsan fuzz} " == *" $1 "* ]]; }
want asan || UMA_SKIP_SANITIZERS=1
want tsan || UMA_SKIP_TSAN=1
want fuzz || UMA_SKIP_FUZZ=1

stage_begin "setup"
scripts/setup.sh
stage_end

bdir=build${UMA_GPU:+-$UMA_GPU}
if [ -n "${UMA_GPU:-}" ]; then
  : "${UMA_SKIP_SANITIZERS:=1}" "${UMA_SKIP_TSAN:=1}" "${UMA_SKIP_FUZZ:=1}"
fi
# Tests whose work the sanitizers add nothing to run in the plain stage only:
# - the OpenAI Node SDK's: they check what goes over the wire (completions, chat, streaming and
#   tools run under both sanitizers in the C++ HTTP tests); the Anthropic SDK's test stays in the ASan
#   stage, it alone drives /v1/messages and /v1/responses;
# - scripts/cluster.sh as a user runs it (the same agents and gateway run under both sanitizers in
#   the C++ cluster tests);
# - uma-mkmodel writing every type twice (llama.cpp's quantization; every stage's models are made
#   by its own uma-mkmodel before its tests);
# - the web page in Chromium: it checks the page; the endpoints it calls run under both sanitizers;
# - docs/CONFIG.md against the binaries' --help (the same text in every build).
unsanitized_only='NodeSdk|InChromium|^ClusterScript\.|^ConfigDoc\.|^MkModel\.SameSeedSameBytesForEveryType$'
# Tests ThreadSanitizer adds nothing to, left to the plain and ASan stages:
# - each drives one request at a time through an edge translation (OpenAI/llama-server fields, JSON
#   schemas to grammars, the malformed-HTTP table, the benchmark tools' reports) over the same
#   I/O -> compute hand-off that every other end-to-end test crosses under TSan; the parsers are
#   also fuzzed;
# - long generations whose work is the compute thread's alone (admission by max_tokens, early stops,
#   seeded sampling, draft models agreeing, a prefill beside streams, background against
#   interactive work, a routing view held 30 s): the threads they cross are the ones the shorter
#   tests of the same suites cross under TSan (KV exhaustion with its host-pool threads, streams
#   with drafts resumed, 100 requests through two gateways).
tsan_skip='^UmadApi\.|^UmadStructured\.|^UmadHttpMalformed\.|^UmaBench\.|^BenchClients\.'
tsan_skip+='|^UmadAdmission\.(LargeMaxTokens|SixteenEarlyStopping|WithoutMaxTokens)|^UmadSpec\.(SeededSampling|DraftModelsAgreeing)'
tsan_skip+='|^UmadE2E\.RunningStreamsKeepReceivingTokensWhileALongPromptPrefills$|^UmadSched\.BackgroundWorkIsNotStarved'
tsan_skip+='|^ClusterLoad\.RoutesOnItsLastViewThroughThirtySeconds'
# - the rolling restart: its agents, gateways and streams moved between agents are the cluster
#   tests' (live migration, failover, two gateways) that run under TSan; what it adds is the order
#   of its processes' stops and starts, which no thread of one process sees.
tsan_skip+='|^RollingRestart\.'
skip=()
# The Node SDK tests (OpenAI's, Anthropic's) need node and the SDKs (scripts/npm_deps.sh); an offline GPU server may have neither.
if ! command -v node >/dev/null || [ ! -d "$(scripts/npm_deps.sh --print-root)/openai" ]; then
  echo "(no node or SDKs here: the tests named *NodeSdk* and *AnthropicSdk* are skipped)"
  skip=(-E 'NodeSdk|AnthropicSdk')
  unsanitized_only="$unsanitized_only|AnthropicSdk"
fi
# docs/CONFIG.md is the CPU build's --help; a GPU build's says its own defaults.
if [ -n "${UMA_GPU:-}" ]; then
  skip=(-E "${skip[1]:+${skip[1]}|}^ConfigDoc\.")
fi

# The binaries the unit and end-to-end tests run (the benchmark and soak tools are built in $bdir/).
test_targets=(uma_unit_tests uma_e2e_tests store_remote_test umad uma-gw uma-agent uma-cli uma-mkmodel uma-store uma-bench)
tsan_targets=(uma_unit_tests uma_e2e_tests store_remote_test umad uma-gw uma-agent uma-cli uma-store)
clang=()
command -v clang++ >/dev/null && command -v clang >/dev/null && clang=(CC=clang CXX=clang++)
fresh=() fresh_cc=()
if [ ! -f "$bdir/CMakeCache.txt" ]; then
  fresh=(-DUMA_UNITY=ON)
  [ -z "${UMA_GPU:-}" ] && fresh_cc=("${clang[@]}")
fi

# The tools no test runs (load, routing, protocol and soak benchmarks: bench/ builds each before it
# runs it) compile where it costs least, in build-asan/ (-O0) when that stage runs, so every stage
# still proves they build; otherwise here.
tool_targets=(uma-soak uma-load-bench uma-route-bench uma-protocol-bench)
plain_targets=()
[ "${UMA_SKIP_SANITIZERS:-0}" != "1" ] && plain_targets=(--target "${test_targets[@]}")

stage_begin "build ($bdir/)"
env "${fresh_cc[@]}" cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUMA_BUILD_TESTS=ON "${fresh[@]}" >/dev/null
cmake --build "$bdir" -j "$jobs" "${plain_targets[@]}"
stage_end

if want plain; then
  stage_begin "tests ($bdir/)"
  run_ctest "$bdir" -j "$test_jobs" --timeout 600 "${skip[@]}"
  stage_end
fi

# The deployment files (Helm chart, systemd units, Prometheus rules, Compose, Dockerfile): static
# checks, no cluster or container (helm comes from the npm registry, so not on an offline GPU server).
if want deploy && [ -z "${UMA_GPU:-}" ]; then
  stage_begin "deployment files (scripts/deploy_check.sh)"
  scripts/deploy_check.sh
  stage_end
fi

# build-asan/ holds the fuzzers as well (clang only): one build of the libraries for both stages.
asan_targets=()
[ "${UMA_SKIP_SANITIZERS:-0}" != "1" ] && asan_targets+=("${test_targets[@]}" "${tool_targets[@]}")
[ "${UMA_SKIP_FUZZ:-0}" != "1" ] && asan_targets+=(uma-fuzz-wire uma-fuzz-http)
if [ "${#asan_targets[@]}" -gt 0 ]; then
  fuzz=(-DUMA_FUZZ=OFF) with=""
  if [ "${#clang[@]}" -gt 0 ]; then
    fuzz=(-DUMA_FUZZ=ON) with=", clang, with the fuzzers"
    # A build-asan/ configured with g++ (an older checkout's) is rebuilt with clang, not mixed.
    [ -f build-asan/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang' build-asan/CMakeCache.txt && rm -rf build-asan
  elif [ "${UMA_SKIP_FUZZ:-0}" != "1" ]; then
    echo "the fuzz stage needs clang (libFuzzer): install it or set UMA_SKIP_FUZZ=1"; exit 1
  fi
  stage_begin "build (build-asan/: AddressSanitizer + UBSan$with)"
  env "${clang[@]}" cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DUMA_SANITIZE=ON "${fuzz[@]}" \
    -DUMA_BUILD_TESTS=ON -DUMA_UNITY=ON >/dev/null
  cmake --build build-asan -j "$jobs" --target "${asan_targets[@]}"
  stage_end
fi
if [ "${UMA_SKIP_SANITIZERS:-0}" != "1" ]; then
  stage_begin "tests (build-asan/)"
  seed_test_costs "$bdir" build-asan
  UMA_SKIP_RSS=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_ctest build-asan -j "$test_jobs" --timeout 900 -E "$unsanitized_only"
  stage_end
fi
if [ "${UMA_SKIP_TSAN:-0}" != "1" ]; then
  stage_begin "build (build-tsan/: ThreadSanitizer)"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUMA_TSAN=ON -DUMA_BUILD_TESTS=ON -DUMA_UNITY=ON >/dev/null
  # uma-mkmodel and uma-bench are the plain build's here (the models below; the UmaBench tests are
  # not run under TSan).
  cmake --build build-tsan -j "$jobs" --target "${tsan_targets[@]}"
  stage_end
  stage_begin "tests (build-tsan/)"
  # halt_on_error: a race report ends the process (a daemon's death fails its test), never a warning.
  # ignore_noninstrumented_modules: interceptors (memcpy, strlen, read, ...) called from code not
  # built with TSan (llama.cpp, ggml, libgomp, libstdc++) check no memory; their synchronisation
  # (mutexes, condition variables) is still seen. Without it llama.cpp's vocabulary load alone costs
  # ~1 s in every process that opens a model, and the stage ran 2x longer (docs/BENCHMARKS.md, CI time).
  # uma-mkmodel is llama.cpp's work end to end (ggml's critical section, llama_model_quantize's
  # threads); TSan reports "unlock of an unlocked mutex" there (locked inside uninstrumented ggml,
  # unlocked where TSan sees it), with no frame of ours to match a suppression on. So this stage
  # writes the test models with the uninstrumented build's uma-mkmodel (the fixture then finds them
  # in place; the bytes are deterministic) and leaves the two MkModel tests to the other stages.
  UMA_MKMODEL=build/bin/uma-mkmodel UMA_MODELS_DIR=build-tsan/models scripts/make_test_models.sh >/dev/null
  seed_test_costs "$bdir" build-tsan
  UMA_SKIP_RSS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$root/scripts/tsan.supp" \
    run_ctest build-tsan -j "$test_jobs" --timeout 900 -E "^MkModel\.|$tsan_skip|$unsanitized_only"
  stage_end
fi
if [ "${UMA_SKIP_FUZZ:-0}" != "1" ]; then
  stage_begin "fuzz (build-asan/: libFuzzer, ${UMA_FUZZ_SECONDS:-60} s each: wire frames + JSON requests; HTTP parser + routing + OpenAI requests)"
  # The two fuzzers run side by side (each is one process on one core): the stage takes the time
  # of one, and each still gets its UMA_FUZZ_SECONDS of a core.
  fuzz_one() {
    local target=$1 seeds=fuzz/seeds corpus
    [ "$target" = http ] && seeds=fuzz/seeds-http
    corpus=$(mktemp -d)
    build-asan/bin/uma-fuzz-$target -max_total_time="${UMA_FUZZ_SECONDS:-60}" -print_final_stats=1 \
      -artifact_prefix="$corpus/crash-" "$corpus" "$seeds" >"$corpus.log" 2>&1 || true
    echo "-- uma-fuzz-$target"
    grep -E '^(stat::|Done|==[0-9]+==ERROR|SUMMARY)' "$corpus.log" || true
    if ls "$corpus"/crash-* >/dev/null 2>&1; then echo "uma-fuzz-$target found a crash: $corpus"; return 1; fi
    rm -rf "$corpus" "$corpus.log"
  }
  contend_start
  fuzz_one wire >build-asan/wire.out 2>&1 & wire_pid=$!
  fuzz_one http >build-asan/http.out 2>&1 & http_pid=$!
  fuzz_failed=0
  wait "$wire_pid" || fuzz_failed=1
  wait "$http_pid" || fuzz_failed=1
  contend_stop
  cat build-asan/wire.out build-asan/http.out
  [ "$fuzz_failed" = 0 ] || exit 1
  stage_end
fi
printf '\n== all tests passed\n'
