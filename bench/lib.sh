# What the benchmark scripts share; each sources it (`. "$repo/bench/lib.sh"`).

# Installs GNU time when it is missing: its "Maximum resident set size" is the peak RSS the
# benchmarks report.
need_gnu_time() {
  if [ ! -x /usr/bin/time ]; then
    echo "installing GNU time (for peak RSS)" >&2
    apt-get install -y time >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y time >/dev/null; }
  fi
}

# timed CMD... → sets secs (wall clock), cpu (user + system seconds) and rss_kb (peak RSS) of
# one run of CMD (its stdout the caller's); $work holds time.txt.
timed() {
  local t0 t1
  t0=$(date +%s.%N)
  /usr/bin/time -f '%M %U %S' -o "$work/time.txt" "$@"
  t1=$(date +%s.%N)
  secs=$(python3 -c "print($t1 - $t0)")
  read -r rss_kb u sy < "$work/time.txt"
  cpu=$(python3 -c "print(round($u + $sy, 2))")
}

# best_of SETUP CMD... → sets secs (wall clock), cpu (user + system seconds) and rss_kb (peak
# RSS) of the fastest of $repeat runs of CMD. Before each run, SETUP is evaluated (a shell
# command: clear the output, truncate a table). CMD runs in $run_in (default: the current
# folder) with its stdout to $run_stdout (default /dev/null); $work holds time.txt.
best_of() {
  local setup=$1 best="" i t0 t1 s
  shift
  for ((i = 0; i < repeat; i++)); do
    eval "$setup"
    t0=$(date +%s.%N)
    (cd "${run_in:-.}" && /usr/bin/time -f '%M %U %S' -o "$work/time.txt" "$@" > "${run_stdout:-/dev/null}")
    t1=$(date +%s.%N)
    s=$(python3 -c "print($t1 - $t0)")
    if [ -z "$best" ] || python3 -c "import sys; sys.exit(0 if $s < $best else 1)"; then
      best=$s
      read -r rss_kb u sy < "$work/time.txt"
      cpu=$(python3 -c "print(round($u + $sy, 2))")
    fi
  done
  secs=$best
}

# need_pg URL → exits with where to start PostgreSQL unless it answers at URL.
need_pg() {
  psql -X -q -v ON_ERROR_STOP=1 "$1" -c 'select 1' >/dev/null ||
    { echo "PostgreSQL is unreachable at $1; start it with scripts/services.sh" >&2; exit 1; }
}

# mariadb_client URL → sets auth (the `mariadb` client's -u/-h/-P[/-p] options for
# mysql://user[:pass]@host[:port]/database) and client (the `mariadb` command with them).
mariadb_client() {
  local m_user m_pass m_host m_port
  read -r m_user m_pass m_host m_port <<<"$(python3 - "$1" <<'PY'
import sys, urllib.parse as u
p = u.urlparse(sys.argv[1])
print(p.username or "root", p.password or "-", p.hostname or "127.0.0.1", p.port or 3306)
PY
)"
  auth=(-u"$m_user" -h"$m_host" -P"$m_port")
  [ "$m_pass" = - ] || auth+=(-p"$m_pass")
  client=(mariadb --no-defaults "${auth[@]}")
}

# mib → the last run's peak RSS ($rss_kb) in MiB.
mib() { python3 -c "print($rss_kb / 1024)"; }

# table_and_query TABLE URL FLOOR=RPS... → the query-source benchmarks' faucet runs: through
# the caller's `run`, "$faucet" URL WHAT "$work/out.jsonl" "$work/state" 10000 for WHAT
# `table=TABLE`, then `query=select * from TABLE`; prints each run's row and exits unless it
# wrote $rows rows; then the start of the output, each run's ratio to every floor (`floor
# text=123456`: name and rows/s) and the targets.
table_and_query() {
  local table=$1 url=$2 variant what got rps ratios floor summary=() line
  shift 2
  for variant in "table" "query"; do
    if [ "$variant" = table ]; then what="table=$table"; else what="query=select * from $table"; fi
    run "$faucet" "$url" "$what" "$work/out.jsonl" "$work/state" 10000
    got=$(wc -l < "$work/out.jsonl")
    rps=$(python3 -c "print(round($rows / $secs))")
    printf '%-16s %9d %12s %8s %7.1f MiB\n' "faucet $variant" "$got" "$rps" "$cpu" "$(mib)"
    [ "$got" -eq "$rows" ] || { echo "error: faucet wrote $got rows, expected $rows" >&2; exit 1; }
    ratios=""
    for floor in "$@"; do
      ratios+="${ratios:+, }/ ${floor%=*} = $(python3 -c "print(round($rps / ${floor##*=}, 2))")x"
    done
    summary+=("faucet ($variant) $ratios rows/s, peak RSS $((rss_kb / 1024)) MiB")
  done
  head -c 300 "$work/out.jsonl"; echo
  echo
  for line in "${summary[@]}"; do echo "$line"; done
  echo "targets: ratio >= 0.8, faucet peak RSS < 64 MiB (batch size 10,000)"
}

# faucet_binary FEATURES → sets faucet: $FAUCET_BIN when set (an already built binary with
# those features, e.g. a debug build to prove a script works), else the release build with
# FEATURES, built now.
faucet_binary() {
  if [ -n "${FAUCET_BIN:-}" ]; then
    faucet=$(cd "$(dirname "$FAUCET_BIN")" && pwd)/$(basename "$FAUCET_BIN")
    echo "==> using $faucet (FAUCET_BIN)" >&2
  else
    echo "==> building faucet (release, features: ${1:-default})" >&2
    cargo build --release --quiet -p faucet-cli ${1:+--features "$1"}
    faucet="${CARGO_TARGET_DIR:-$repo/target}/release/faucet"
  fi
}

# pg_sql SQL → runs SQL with psql on $url (quiet, unaligned, stopping at the first error).
pg_sql() { PGOPTIONS="-c client_min_messages=warning" psql -X -q -At -v ON_ERROR_STOP=1 "$url" -c "$1"; }
