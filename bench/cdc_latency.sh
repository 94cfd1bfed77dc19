#!/usr/bin/env bash
# Commit-to-durable latency of a continuous postgres-cdc (or mysql-cdc) → JSON Lines run,
# under a steady writer of single-row transactions, beside pg_recvlogical (or mariadb-binlog)
# reading the same changes.
#
#   bench/cdc_latency.sh                       # 10, 100, 1,000, 10,000 commits/s, 30 s each
#   RATES="10 100" SECS=10 bench/cdc_latency.sh
#   MAX_PAGE_DELAY=200ms bench/cdc_latency.sh  # faucet's pipeline setting (default 50ms)
#   SOURCE=mysql bench/cdc_latency.sh          # mysql-cdc beside mariadb-binlog (below)
#   FAUCET_BIN=target/debug/faucet …           # an already built binary instead of a release build
#
# Needs PostgreSQL with wal_level=logical (FAUCET_TEST_PG_URL, default
# postgres://postgres@127.0.0.1:5432/test; scripts/services.sh starts it), pgbench and
# pg_recvlogical (Debian: postgresql, postgresql-client).
#
# Setup: a table t (id bigserial, rate int, payload text); faucet's slot (pgoutput, made by a
# first bounded `faucet run`) and the floor's (test_decoding). Then, once with the file state
# store and once with the PostgreSQL one:
#   * faucet: `faucet run` continuous, default batch_size (10,000), jsonl sink (fsync per
#     page), bookmark persisted per page, slot acknowledged after it;
#   * the floor: `pg_recvlogical --start -F 1 -o include-timestamp=on -f file` on its own slot
#     at the same time (it writes each change as it arrives; fsyncs every second);
#   * the writer: `pgbench -R RATE -T SECS` of single-row INSERTs (8 clients), for each rate;
#   * bench/cdc_latency.py tails both files and polls faucet's state store. For faucet a change
#     counts as `visible` when its line is in the file and `durable` once the stored bookmark
#     passed it (after the sink's fsync: the run loop persists the bookmark after the flush);
#     for the floor when its COMMIT line is in the file. Latency = that instant minus the
#     change's commit time.
# Prints p50 / p99 / max per rate, the writer's achieved rate, and faucet's peak RSS.
#
# SOURCE=mysql: the private MariaDB with a binlog (FAUCET_TEST_MYSQL_URL, default
# mysql://root@127.0.0.1:3307/test; scripts/services.sh) and the mariadb / mariadb-binlog
# clients; the state store's PostgreSQL as above. A database with a table t (id bigint
# auto_increment, rate int, at datetime(6), payload text); faucet's bookmark made by a first
# bounded `faucet run` (the end of the binlog); then, per state store:
#   * faucet: `faucet run` continuous, mysql-cdc → jsonl as above;
#   * the floor: `mariadb-binlog --read-from-remote-server --stop-never
#     --base64-output=decode-rows --verbose` from the binlog's end, to a file;
#   * the writer: bench/rate_writer.py, RATE single-row INSERTs per second in all over 8
#     `mariadb` sessions, each row's `at` = NOW(6) in UTC;
#   * bench/cdc_latency.py (SOURCE=mysql) as above; a change's commit time is its row's `at`
#     (the binlog's times have whole seconds only), faucet's `durable` when the stored
#     bookmark's binlog position passed the change's, the floor's when the transaction's
#     `COMMIT` line is in its file.
set -euo pipefail

. "$(dirname "$0")/lib.sh" # bench_start, pg_cdc_names, need_pg, need_mariadb, faucet_binary
bench_start
rates=${RATES:-10 100 1000 10000}
secs=${SECS:-30}
export SOURCE=${SOURCE:-postgres}
url=${FAUCET_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/test}
mysql_url=${FAUCET_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3307/test}
pg_cdc_names lat
state_table=bench_lat_state_$suffix

case $SOURCE in
  postgres) tools="pgbench pg_recvlogical psql python3"; features=postgres,state-postgres ;;
  mysql) tools="mariadb mariadb-binlog psql python3"; features=mysql,state-postgres ;;
  *) echo "SOURCE must be postgres or mysql, not $SOURCE" >&2; exit 2 ;;
esac
for tool in $tools; do
  command -v $tool >/dev/null || { echo "$tool not found (packages postgresql, postgresql-client, mariadb-client)" >&2; exit 1; }
done
need_pg "$url"
if [ "$SOURCE" = mysql ]; then
  need_mariadb "$mysql_url"
fi

faucet_binary "$features"

work_dir lat
sql() { pg_sql "$@"; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  sleep 1
  pg_cdc_cleanup
  sql "drop table if exists $state_table, ${state_table}_lease" >/dev/null 2>&1 || true
  [ "$SOURCE" != mysql ] || my_sql "drop database if exists $schema" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

delay_line=""
[ -n "${MAX_PAGE_DELAY:-}" ] && delay_line="  max_page_delay: $MAX_PAGE_DELAY"
if [ "$SOURCE" = postgres ]; then
  sql "create schema $schema;
       create table $schema.t (id bigserial primary key, rate int not null, payload text not null)"
  echo "insert into $schema.t (rate, payload) values (:rate, 'a change of about sixty bytes of payload text');" > "$work/insert.sql"
  source_block="{ type: postgres-cdc, config: { connection_url: \"\${env:BENCH_PG_URL}\", slot_name: $slot, publication: $publication, tables: [$schema.t], create_publication: true, continuous: CONTINUOUS } }"
else
  # The database is named like the PostgreSQL schema; `at` is the row's commit time.
  my_sql "create database $schema;
        create table $schema.t (id bigint auto_increment primary key, rate int not null,
          at datetime(6) not null, payload text not null)"
  base="mysql://${mysql_url#mysql://}"; base="${base%/*}"
  export BENCH_MYSQL_URL="$base/$schema"
  source_block="{ type: mysql-cdc, config: { connection_url: \"\${env:BENCH_MYSQL_URL}\", server_id: SERVER_ID, tables: [$schema.t], continuous: CONTINUOUS } }"
fi
pipeline() { # continuous state_block n (mysql: each run its own server_id, since the server
             # keeps a stopped run's replica connection for a while)
  local block=${source_block/CONTINUOUS/$1} server_id=$((40000 + suffix % 20000 + $3))
  cat <<YAML
version: 1
name: cdc_lat
pipeline:
  source: ${block/SERVER_ID/$server_id}
  sink: { type: jsonl, config: { path: ./out.jsonl } }
  state: $2
$delay_line
YAML
}
export BENCH_PG_URL=$url
file_state='{ type: file, config: { path: ./state } }'
pg_state="{ type: postgres, config: { url: \"\${env:BENCH_PG_URL}\", table: $state_table, ensure_table: true } }"
pipeline false "$file_state" 0 > "$work/first.yaml"
# postgres: creates the publication and faucet's slot; mysql: the bookmark at the binlog's end.
(cd "$work" && "$faucet" run first.yaml --quiet)
[ "$SOURCE" != postgres ] || sql "select pg_create_logical_replication_slot('$floor_slot', 'test_decoding')" >/dev/null

# The floor of the source, in the background, writing to $work/floor.txt; sets floor_pid.
start_floor() {
  if [ "$SOURCE" = postgres ]; then
    pg_recvlogical -d "$url" --slot "$floor_slot" --start -F 1 -o include-timestamp=on -f "$work/floor.txt" &
  else
    local file pos
    read -r file pos <<<"$(my_sql 'SHOW MASTER STATUS' | awk '{print $1, $2}')"
    mariadb-binlog --no-defaults "${auth[@]}" --read-from-remote-server --stop-never \
      --stop-never-slave-server-id=$((20000 + suffix % 20000)) --base64-output=decode-rows \
      --verbose --start-position="$pos" --result-file="$work/floor.txt" "$file" &
  fi
  floor_pid=$!
}

# The writer at $1 commits/s for $secs s; prints the rate achieved.
write_at() {
  if [ "$SOURCE" = postgres ]; then
    pgbench -n -c 8 -j 2 -R "$1" -T "$secs" -D rate="$1" -f "$work/insert.sql" "$url" 2>&1 |
      awk '/^tps = /{printf "%d", $3}'
  else
    python3 "$repo/bench/rate_writer.py" "$1" "$secs" 8 \
      "insert into t (rate, at, payload) values ({rate}, now(6), 'a change of about sixty bytes of payload text');" \
      -- mariadb --no-defaults "${auth[@]}" --batch "--init-command=set time_zone = '+00:00'" "$schema" |
      awk '/^tps = /{printf "%d", $3}'
  fi
}
floor_name=pg_recvlogical
[ "$SOURCE" = postgres ] || floor_name=mariadb-binlog

summarize() { # report.json label
  python3 - "$1" "$2" "$rates" "$floor_name" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
label, rates, floor = sys.argv[2], sys.argv[3].split(), sys.argv[4]
def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")
def row(name, rate, xs):
    print(f"{label:<9} {name:<16} {rate:>6} {len(xs):>8} {pct(xs, .5):>9.1f} {pct(xs, .99):>9.1f} {max(xs) if xs else float('nan'):>9.1f}")
for rate in rates:
    f = rep["faucet"].get(rate, {"visible": [], "durable": []})
    row("faucet visible", rate, f["visible"])
    row("faucet durable", rate, f["durable"])
    row(floor, rate, rep["floor"].get(rate, []))
if rep["never_durable"]:
    print(f"warning: {rep['never_durable']} changes never became durable before the end")
PY
}

for variant in file postgres; do
  state_block=$file_state
  [ "$variant" = postgres ] && state_block=$pg_state
  n=1
  [ "$variant" = postgres ] && n=2
  pipeline true "$state_block" "$n" > "$work/run.yaml"
  rm -f "$work/out.jsonl" "$work/floor.txt" "$work/stop" "$work/report.json"
  start_floor
  pids+=("$floor_pid")
  (cd "$work" && exec "$faucet" run run.yaml --quiet) &
  faucet_pid=$!; pids+=("$faucet_pid")
  sleep 3   # both streaming; the observer ignores changes committed before it started
  if [ "$variant" = file ]; then
    observer_state=(file "$work/state/cdc_lat.json")
  else
    observer_state=(postgres "$url" "$state_table" cdc_lat)
  fi
  python3 "$repo/bench/cdc_latency.py" "$work/out.jsonl" "$work/floor.txt" "$work/stop" \
    "$work/report.json" "${observer_state[@]}" &
  observer_pid=$!; pids+=("$observer_pid")
  echo "==> state: $variant" >&2
  for rate in $rates; do
    achieved=$(write_at "$rate")
    echo "    writer at $rate/s for ${secs}s: achieved ${achieved:-?} commits/s" >&2
    sleep 2
  done
  sleep 3
  touch "$work/stop"
  wait "$observer_pid"
  rss_kb=$(awk '/VmHWM/{print $2}' "/proc/$faucet_pid/status")
  kill -TERM "$faucet_pid" "$floor_pid" 2>/dev/null || true
  wait "$faucet_pid" "$floor_pid" 2>/dev/null || true
  printf '\n%-9s %-16s %6s %8s %9s %9s %9s\n' state latency rate/s changes p50_ms p99_ms max_ms
  summarize "$work/report.json" "$variant"
  echo "faucet peak RSS ($variant state): $((rss_kb / 1024)) MiB"
done
