#!/usr/bin/env bash
# Runs etcd's own end-to-end suite (etcd 3.4's tests/e2e, Go source from
# Debian's golang-etcd-server-dev) against a server binary: oxetcd,
# oxetcd-smol, or Debian's etcd to prove the expectations.
#
#   scripts/etcd-e2e.sh [options] [TEST_REGEX]
#
#   --bin PATH        the server to test as `etcd` (default target/debug/oxetcd)
#   --expect FILE     expected failures: `TestName  reason` per line; the run
#                     fails on a failing test not listed, and on a listed test
#                     that passes (the list only shrinks)
#   --timeout SECS    wall limit per test (default 90)
#   --jobs N          tests run at once (default 2)
#   --out DIR         where each test's log goes (default target/e2e/logs)
#   --list FILE       run the tests named in FILE, one per line (# comments)
#   TEST_REGEX        which tests (default ^TestCtlV3)
#
# How: the suite is built once into target/e2e/e2e.test (GOPATH mode,
# offline). Each test runs alone in its own network and PID namespaces
# (`unshare`), so the suite's fixed ports (20000+) never collide, tests run
# side by side, and every process a test started dies with it. The cwd is
# a scratch tree where ../../integration/fixtures resolves, as the suite's
# relative JWT key paths need; TMPDIR is per test and removed after it.
# Prints one line per test, the failures with their reasons, and ends with
# `e2e against BIN: N passed, M failed`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# All in one function: bash reads it whole before running, so editing this
# file during a run does not change the run.
main() {

    bin=$root/target/debug/oxetcd
    expect=""
    timeout=90
    jobs=2
    out=$root/target/e2e/logs
    pattern='^TestCtlV3'
    list=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --bin) bin=$2; shift 2 ;;
            --expect) expect=$2; shift 2 ;;
            --timeout) timeout=$2; shift 2 ;;
            --jobs) jobs=$2; shift 2 ;;
            --out) out=$2; shift 2 ;;
            --list) list=$2; shift 2 ;;
            -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
            -*) echo "etcd-e2e.sh: unknown option $1" >&2; exit 2 ;;
            *) pattern=$1; shift ;;
        esac
    done
    case "$bin" in /*) ;; *) bin=$root/$bin ;; esac
    [ -x "$bin" ] || { echo "etcd-e2e.sh: $bin is not an executable" >&2; exit 2; }
    [ -z "$expect" ] || [ -f "$expect" ] || { echo "etcd-e2e.sh: no file $expect" >&2; exit 2; }

    scripts/install-deps.sh e2e
    gosrc=/usr/share/gocode/src/go.etcd.io/etcd
    cache=$root/target/e2e
    mkdir -p "$cache"
    suite=$cache/e2e.test
    if [ ! -x "$suite" ] || [ "$gosrc/tests/e2e" -nt "$suite" ]; then
        echo "etcd-e2e.sh: building etcd's e2e suite"
        (cd "$cache" && GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= \
            GOCACHE=$cache/gocache go test -c -o "$suite" go.etcd.io/etcd/tests/e2e)
    fi

    # The scratch tree: bin/{etcd,etcdctl}, integration/fixtures, tests/e2e.
    work=$(mktemp -d "${TMPDIR:-/tmp}/etcd-e2e.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/bin" "$out"
    # The suite runs bin/etcd: a wrapper that records each server's command
    # line and output beside the test's log ($out/NAME.server.log), then
    # becomes the server (exec, so the suite's signals reach it).
    cat >"$work/bin/etcd" <<'WRAPPER'
#!/usr/bin/env bash
printf '+ etcd %s\n' "$*" >>"$E2E_SERVER_LOG"
exec "$E2E_SERVER_BIN" "$@" > >(exec tee -a "$E2E_SERVER_LOG") 2>&1
WRAPPER
    chmod +x "$work/bin/etcd"
    ln -s /usr/bin/etcdctl "$work/bin/etcdctl"

    if [ -n "$list" ]; then
        mapfile -t tests < <(grep -v '^#' "$list" | grep .)
    else
        mapfile -t tests < <("$suite" -test.list "$pattern" | grep '^Test')
    fi
    [ ${#tests[@]} -gt 0 ] || { echo "etcd-e2e.sh: no test matches $pattern" >&2; exit 2; }
    echo "etcd-e2e.sh: ${#tests[@]} tests against $bin, $jobs at a time, ${timeout}s each"

    # One test: its own namespaces, cwd and TMPDIR; the verdict in $out/NAME.verdict.
    run_one() {
        local name=$1 dir=$work/run/$1
        mkdir -p "$dir/tmp" "$dir/tests/e2e" "$dir/integration"
        ln -s "$gosrc/integration/fixtures" "$dir/integration/fixtures"
        local started=$SECONDS rc=0
        (cd "$dir/tests/e2e" && TMPDIR=$dir/tmp E2E_SERVER_LOG=$out/$name.server.log \
            timeout -k 5 "$timeout" \
            unshare --net --pid --fork --kill-child --mount-proc \
            sh -c 'ip link set lo up && exec "$@"' sh \
            "$suite" -test.run "^${name}\$" -test.v -test.timeout "$((timeout + 60))s" \
            -bin-dir "$work/bin" -cert-dir "$gosrc/integration/fixtures") \
            >"$out/$name.log" 2>&1 || rc=$?
        local verdict=FAIL
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            verdict=TIMEOUT
        # The verdict is the test's own line: after it, the suite's TestMain
        # may still fail the process over goroutines it counts as leaked
        # (readers of processes that just exited), which says nothing of
        # the server.
        elif grep -q "^--- PASS: $name " "$out/$name.log" \
            && ! grep -q "^--- FAIL: $name " "$out/$name.log"; then
            verdict=PASS
        fi
        printf '%s %s %ss\n' "$verdict" "$name" "$((SECONDS - started))" | tee "$out/$name.verdict"
        rm -rf "$dir"
    }
    export -f run_one
    export work out suite timeout gosrc
    export E2E_SERVER_BIN=$bin

    rm -f "$out"/*.verdict "$out"/*.log
    started=$SECONDS
    printf '%s\n' "${tests[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$@"' _ {}
    wall=$((SECONDS - started))

    passed=() failed=()
    for name in "${tests[@]}"; do
        read -r verdict _ <"$out/$name.verdict" || verdict=FAIL
        if [ "$verdict" = PASS ]; then passed+=("$name"); else failed+=("$name"); fi
    done

    status=0
    if [ -n "$expect" ]; then
        declare -A reasons=()
        while read -r name reason; do
            case "$name" in ''|'#'*) continue ;; esac
            reasons[$name]=$reason
        done <"$expect"
        unexpected=() fixed=()
        for name in "${failed[@]}"; do [ -n "${reasons[$name]+x}" ] || unexpected+=("$name"); done
        for name in "${passed[@]}"; do [ -z "${reasons[$name]+x}" ] || fixed+=("$name"); done
        for name in "${failed[@]}"; do
            printf 'failed: %s  (%s)\n' "$name" "${reasons[$name]:-NOT EXPECTED}"
        done
        if [ ${#unexpected[@]} -gt 0 ]; then
            # The end of a run's output is what a CI report keeps: each
            # unexpected failure's own words and its server's last lines.
            for name in "${unexpected[@]}"; do
                echo "---- $name: test log (last 40 lines)"
                tail -n 40 "$out/$name.log" 2>/dev/null || true
                echo "---- $name: server log (last 30 lines)"
                tail -n 30 "$out/$name.server.log" 2>/dev/null | cut -c1-400 || true
            done
            echo "etcd-e2e.sh: ${#unexpected[@]} unexpected failures (logs in $out): ${unexpected[*]}"
            status=1
        fi
        if [ ${#fixed[@]} -gt 0 ]; then
            echo "etcd-e2e.sh: ${#fixed[@]} tests pass but are listed in $expect; remove them: ${fixed[*]}"
            status=1
        fi
    else
        for name in "${failed[@]}"; do echo "failed: $name"; done
    fi
    echo "etcd-e2e.sh: ${wall}s wall"
    local summary="e2e against $(basename "$bin"): ${#passed[@]} passed, ${#failed[@]} failed"
    if [ -n "$expect" ]; then
        summary="$summary (expected failures: $((${#failed[@]} - ${#unexpected[@]})) of ${#reasons[@]} listed)"
    fi
    echo "$summary"
    exit $status
}

main "$@"
