#!/usr/bin/env bash
# mysql-cdc → JSON Lines: one UPDATE of every row of a generated table, in one transaction,
# read from the binlog by `faucet run` (mysql-cdc source → jsonl sink, file state) against
# `mariadb-binlog --read-from-remote-server --base64-output=decode-rows --verbose` decoding the
# same events to a file.
#
#   bench/mysql_cdc_to_jsonl.sh               # 1,000,000 rows
#   ROWS=200000 bench/mysql_cdc_to_jsonl.sh
#
# Needs the MariaDB with a binlog (FAUCET_TEST_MYSQL_URL, default
# mysql://root@127.0.0.1:3307/test, scripts/services.sh) and the mariadb / mariadb-binlog
# clients. The table (id BIGINT primary key, name VARCHAR(40), amount DECIMAL(12,2),
# at DATETIME(6), n INT) is loaded with sql_log_bin=0; only the UPDATE is in the binlog.
# Prints changes/s (wall clock incl. connecting), CPU seconds, peak RSS
# (`/usr/bin/time`) and the ratio; checks the record count. Targets: ≥ 0.8× the floor's
# rate, memory bounded by the page size (batch 10,000).
#
# The floor does no fsync: its output is in the page cache when it exits. faucet makes every
# page durable (fdatasync) and then its bookmark (the file state store's fsyncs) before it
# reads past it. So two more comparisons are printed: `floor+fsync` (the same floor, then one
# fdatasync of its output: the same bytes, durable once at the end), and with TMPFS=1 (the
# default when /dev/shm is a tmpfs) both again with their output and faucet's state on
# /dev/shm, where an fsync is a no-op: no fsync for either, the decode-and-write rate alone.
set -euo pipefail

. "$(dirname "$0")/lib.sh" # bench_start; timed CMD... → secs, cpu, rss_kb; need_mariadb
bench_start 1000000
url=${FAUCET_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3307/test}
db=bench_mysql_cdc_$$

need_mariadb "$url"
sql() { my_sql "$@"; }

faucet_binary mysql

work_dir mysql-cdc
tmpfs=${TMPFS:-}
if [ -z "$tmpfs" ]; then
  [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && tmpfs=1 || tmpfs=0
fi
shm=
[ "$tmpfs" = 1 ] && shm=$(mktemp -d /dev/shm/faucet-mysql-cdc-bench.XXXXXX)
cleanup() { sql "SET SESSION sql_log_bin = 0; DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true; rm -rf "$work" ${shm:+"$shm"}; }
trap cleanup EXIT

echo "==> $rows rows in $db.t" >&2
sql "SET SESSION sql_log_bin = 0;
     CREATE DATABASE $db CHARACTER SET utf8mb4;
     USE $db;
     CREATE TABLE $db.t (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL,
       amount DECIMAL(12,2) NOT NULL, at DATETIME(6) NOT NULL, n INT NOT NULL);
     INSERT INTO $db.t SELECT seq, CONCAT('name ', seq), (seq % 100000) / 100.0,
       TIMESTAMP '2026-01-01 00:00:00' + INTERVAL seq SECOND, 0 FROM seq_1_to_$rows;" >/dev/null

base="mysql://${url#mysql://}"; base="${base%/*}"
cat > "$work/faucet.yaml" <<YAML
version: 1
name: mysqlcdcbench
pipeline:
  source: { type: mysql-cdc, config: { connection_url: "$base/$db", server_id: $((40000 + $$ % 20000)), tables: [$db.t] } }
  sink: { type: jsonl, config: { path: ./out.jsonl } }
  state: { type: file, config: { path: ./state } }
  batch_size: 10000
YAML
(cd "$work" && "$faucet" run >/dev/null 2>&1)   # the bookmark: the end of the log, now
if [ -n "$shm" ]; then
  sed -e 's/^name: mysqlcdcbench$/name: mysqlcdcbenchtmpfs/' \
      -e "s/server_id: [0-9]*/server_id: $((20000 + $$ % 20000))/" "$work/faucet.yaml" > "$shm/faucet.yaml"
  (cd "$shm" && "$faucet" run >/dev/null 2>&1)
fi
read -r file start <<<"$(sql 'SHOW MASTER STATUS' | awk '{print $1, $2}')"
echo "==> UPDATE of $rows rows in one transaction" >&2
sql "UPDATE $db.t SET n = n + 1" >/dev/null
read -r file_end stop <<<"$(sql 'SHOW MASTER STATUS' | awk '{print $1, $2}')"
[ "$file" = "$file_end" ] || echo "note: the binlog rotated during the UPDATE; the floor reads $file only" >&2


# The floor as a script, so /usr/bin/time can run it: floor.sh OUTPUT [fsync].
{
  echo 'set -e'
  printf '%q ' mariadb-binlog --no-defaults "${auth[@]}" --read-from-remote-server \
    --base64-output=decode-rows --verbose --start-position="$start" --stop-position="$stop" "$file"
  echo '--result-file="$1"'
  echo '[ "${2:-}" != fsync ] || python3 -c '"'"'import os, sys; os.fdatasync(os.open(sys.argv[1], os.O_RDONLY))'"'"' "$1"'
} > "$work/floor.sh"

# One unmeasured read first, so that every measured program finds the binlog in the server's
# cache (otherwise the first one measured pays for reading it from disk).
bash "$work/floor.sh" /dev/null
printf '\n%-14s %9s %12s %8s %10s\n' program changes changes/s cpu_s peak_rss
timed bash "$work/floor.sh" "$work/floor.txt"
floor_rps=$(rps "$rows")
floor_rows=$(grep -c '^### UPDATE' "$work/floor.txt" || true)
printf '%-14s %9d %12s %8s %7.1f MiB  (mariadb-binlog decode-rows --verbose; no fsync)\n' floor "$floor_rows" "$floor_rps" "$cpu" "$(mib)"
rm -f "$work/floor.txt"
timed bash "$work/floor.sh" "$work/floor.txt" fsync
durable_rps=$(rps "$rows")
printf '%-14s %9d %12s %8s %10s  (the same, then one fdatasync of its output)\n' floor+fsync "$floor_rows" "$durable_rps" "$cpu" -
rm -f "$work/floor.txt"
timed bash -c "cd '$work' && '$faucet' run >/dev/null 2>'$work/faucet.err'"
got=$(wc -l < "$work/out.jsonl")
faucet_rps=$(rps "$rows")
printf '%-14s %9d %12s %8s %7.1f MiB  (fdatasync per page, bookmark fsynced)\n' faucet "$got" "$faucet_rps" "$cpu" "$(mib)"
faucet_rss_kb=$rss_kb
[ "$got" -eq "$rows" ] || { echo "error: faucet wrote $got records, expected $rows" >&2; cat "$work/faucet.err" >&2; exit 1; }
head -c 300 "$work/out.jsonl"; echo
rm -f "$work/out.jsonl"
if [ -n "$shm" ]; then
  timed bash "$work/floor.sh" "$shm/floor.txt"
  shm_floor_rps=$(rps "$rows")
  printf '%-14s %9d %12s %8s %7.1f MiB  (output on tmpfs)\n' floor-tmpfs "$(grep -c '^### UPDATE' "$shm/floor.txt" || true)" "$shm_floor_rps" "$cpu" "$(mib)"
  rm -f "$shm/floor.txt"
  timed bash -c "cd '$shm' && '$faucet' run >/dev/null 2>'$work/faucet.err'"
  shm_got=$(wc -l < "$shm/out.jsonl")
  shm_rps=$(rps "$rows")
  printf '%-14s %9d %12s %8s %7.1f MiB  (output and state on tmpfs: fsync is a no-op)\n' faucet-tmpfs "$shm_got" "$shm_rps" "$cpu" "$(mib)"
  [ "$shm_got" -eq "$rows" ] || { echo "error: faucet (tmpfs) wrote $shm_got records, expected $rows" >&2; cat "$work/faucet.err" >&2; exit 1; }
fi
echo
echo "faucet / floor = $(ratio "$faucet_rps" "$floor_rps")x changes/s, peak RSS $((faucet_rss_kb / 1024)) MiB (the floor does no fsync)"
echo "faucet / floor+fsync = $(ratio "$faucet_rps" "$durable_rps")x"
[ -z "$shm" ] || echo "on tmpfs, no fsync for either: faucet / floor = $(ratio "$shm_rps" "$shm_floor_rps")x"
echo "targets: ratio >= 0.8, memory bounded by the page size (batch 10,000)"
