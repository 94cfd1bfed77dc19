# What the benchmark scripts share; each sources it (`. "$(dirname "$0")/lib.sh"`) and then
# calls bench_start.

# bench_start [DEFAULT_ROWS] → sets repo (the checkout), target_dir ($CARGO_TARGET_DIR, default
# $repo/target), rows ($ROWS, default DEFAULT_ROWS), repeat ($REPEAT, default 3) and batch
# ($BATCH, default 10000), changes into $repo and makes sure GNU time is there (need_gnu_time).
bench_start() {
  repo=$(cd "$(dirname "$0")/.." && pwd)
  cd "$repo"
  need_gnu_time
  target_dir=${CARGO_TARGET_DIR:-$repo/target}
  rows=${ROWS:-${1:-}}
  repeat=${REPEAT:-3}
  batch=${BATCH:-10000}
}

# work_dir NAME → sets work: a fresh temporary folder (faucet-NAME-bench.XXXXXX under $TMPDIR,
# default /tmp); the caller's EXIT trap removes it.
work_dir() { work=$(mktemp -d "${TMPDIR:-/tmp}/faucet-$1-bench.XXXXXX"); }

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

# need_pg URL [HINT] → exits unless the server answers; HINT is what to do (default: start it
# with scripts/services.sh).
need_pg() {
  psql -X -q -v ON_ERROR_STOP=1 "$1" -c 'select 1' >/dev/null ||
    { echo "PostgreSQL is unreachable at $1; ${2:-start it with scripts/services.sh}" >&2; exit 1; }
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

# my_sql SQL → runs SQL with the `mariadb` client mariadb_client set (tab-separated rows, no
# header line).
my_sql() { "${client[@]}" --batch --skip-column-names -e "$1"; }

# need_mariadb URL → mariadb_client URL, then exits with where to start MariaDB unless it
# answers there.
need_mariadb() {
  mariadb_client "$1"
  my_sql 'select 1' >/dev/null ||
    { echo "MariaDB is unreachable at $1; start it with scripts/services.sh" >&2; exit 1; }
}

# mib → the last run's peak RSS ($rss_kb) in MiB.
mib() { python3 -c "print($rss_kb / 1024)"; }

# rps N → N rows over the last run's wall clock ($secs), rounded: rows per second.
rps() { python3 -c "print(round($1 / $secs))"; }

# ratio A B → A / B rounded to two places (a rate against its floor's).
ratio() { python3 -c "print(round($1 / $2, 2))"; }

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
    rps=$(rps "$rows")
    printf '%-16s %9d %12s %8s %7.1f MiB\n' "faucet $variant" "$got" "$rps" "$cpu" "$(mib)"
    [ "$got" -eq "$rows" ] || { echo "error: faucet wrote $got rows, expected $rows" >&2; exit 1; }
    ratios=""
    for floor in "$@"; do
      ratios+="${ratios:+, }/ ${floor%=*} = $(ratio "$rps" "${floor##*=}")x"
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

# example_binary FEATURES NAME → builds the faucet-connectors example NAME (release, with
# FEATURES) and sets faucet to it.
example_binary() {
  echo "==> building the example $2 (release)" >&2
  cargo build --release --quiet -p faucet-connectors --features "$1" --example "$2"
  faucet="$target_dir/release/examples/$2"
}

# floor_binary DIR BIN → builds the floor program bench/DIR (its own Cargo workspace, release)
# into $target_dir/DIR and sets floor to its binary BIN.
floor_binary() {
  echo "==> building the floor (bench/$1, release)" >&2
  cargo build --release --quiet --manifest-path "$repo/bench/$1/Cargo.toml" --target-dir "$target_dir/$1"
  floor="$target_dir/$1/release/$2"
}

# pg_bench_table TABLE STEP → creates TABLE (the PostgreSQL benchmarks' shape, $pg_bench_ddl)
# on $url and fills it with $rows generated rows (row g's `at` is g × STEP after 2026-01-01,
# e.g. `1 second`; every 10th note null), then vacuums and analyzes it.
pg_bench_ddl="(id bigint primary key, name text not null, note text, amount numeric(12,2) not null,
      at timestamptz not null, flag boolean not null, doc jsonb)"
pg_bench_table() {
  pg_sql "create table $1 $pg_bench_ddl;
     insert into $1
       select g, 'name ' || g, case when g % 10 = 0 then null else md5(g::text) end,
              (g % 100000) / 100.0, timestamptz '2026-01-01 00:00:00+00' + g * interval '$2',
              g % 2 = 0, jsonb_build_object('k', g, 'tags', jsonb_build_array('a', g % 7))
       from generate_series(1, $rows) g;"
  pg_sql "vacuum analyze $1"
}

# pg_cdc_names WORD → sets suffix ($$), schema (bench_WORD_$suffix), slot
# (faucet_WORD_$suffix), floor_slot (faucet_WORD_floor_$suffix) and publication
# (pub_WORD_$suffix): one run's PostgreSQL objects, which pg_cdc_cleanup drops.
pg_cdc_names() {
  suffix=$$
  schema=bench_$1_$suffix
  slot=faucet_$1_$suffix
  floor_slot=faucet_$1_floor_$suffix
  publication=pub_$1_$suffix
}

# pg_cdc_cleanup → drops what pg_cdc_names named on $url: every inactive slot whose name starts
# faucet_WORD_ and ends in $suffix, the publication and the schema; errors are ignored.
pg_cdc_cleanup() {
  local s
  for s in $(pg_sql "select slot_name from pg_replication_slots
                     where slot_name like '${slot%_"$suffix"}%$suffix' and not active" 2>/dev/null); do
    pg_sql "select pg_drop_replication_slot('$s')" >/dev/null 2>&1 || true
  done
  pg_sql "drop publication if exists $publication; drop schema if exists $schema cascade" >/dev/null 2>&1 || true
}

# pg_sql SQL → runs SQL with psql on $url (quiet, unaligned, stopping at the first error).
pg_sql() { PGOPTIONS="-c client_min_messages=warning" psql -X -q -At -v ON_ERROR_STOP=1 "$url" -c "$1"; }
