#!/usr/bin/env bash
# CSV → SQLite: `faucet run` (csv → sqlite sink) against the `sqlite3` command-line tool's
# `.import` of the same CSV into a fresh table, on generated data.
#
#   bench/csv_to_sqlite.sh                 # 1,000,000 generated rows (bench/gen_csv.py)
#   ROWS=200000 REPEAT=1 bench/csv_to_sqlite.sh
#
# Needs Debian's `sqlite3` (scripts/services.sh installs it). Compared, each into a fresh
# database file:
#   * floor: `sqlite3 db ".import --csv in.csv t"` — the CLI creates `t` (TEXT columns from
#     the header) and inserts every row with one prepared statement in one transaction
#     (rollback journal, synchronous FULL: one commit at the end);
#   * faucet append: the release `faucet run` on csv → sqlite (`create_table: true`, TEXT
#     columns as the floor's), file state store, batch 10,000: every page is one transaction
#     (WAL, synchronous FULL: fsynced before its bookmark is stored);
#   * faucet effectively_once: the same with `delivery: effectively_once` (the commit token
#     written in each page's transaction).
# Checks that every table holds the same rows (count and a checksum of the values); prints
# rows/s (best of REPEAT, wall clock), CPU seconds, peak RSS (`/usr/bin/time`) and the ratio.
# Target: faucet ≥ 0.8× the floor's rows/s.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_start 1000000

command -v sqlite3 >/dev/null || { echo "sqlite3 is missing; run scripts/services.sh (apt-get install sqlite3)" >&2; exit 1; }

faucet_binary sqlite

work_dir sqlite
trap '[ -n "${KEEP:-}" ] && echo "kept $work" >&2 || rm -rf "$work"' EXIT

echo "==> generating $rows rows" >&2
python3 bench/gen_csv.py "$work/in.csv" "$rows"

# run CMD... → secs, cpu, rss_kb of the fastest of $repeat runs, each into a fresh file.
run() { best_of 'rm -rf "$work/out.db" "$work/out.db-wal" "$work/out.db-shm" "$work/state"' "$@"; }

# The rows of table t in out.db: count and a checksum over every value.
digest() {
  sqlite3 "$work/out.db" "select count(*), sum(length(id || first_name || last_name || amount || created_at || active || attrs)), sum(cast(id as integer)) from t"
}

printf '\n%-26s %9s %12s %8s %10s\n' program rows rows/s cpu_s peak_rss
run sqlite3 "$work/out.db" ".import --csv $work/in.csv t"
floor_digest=$(digest)
floor_rps=$(rps "$rows")
printf '%-26s %9d %12s %8s %7.1f MiB\n' "floor (sqlite3 .import)" "$rows" "$floor_rps" "$cpu" "$(mib)"

summary=()
for delivery in at_least_once effectively_once; do
  cat > "$work/faucet.yaml" <<YAML
version: 1
name: bench
pipeline:
  source: { type: csv, config: { path: "$work/in.csv" } }
  sink: { type: sqlite, config: { path: "$work/out.db", table: t, create_table: true } }
  state: { type: file, config: { path: "$work/state" } }
  delivery: $delivery
  batch_size: 10000
YAML
  run "$faucet" run --quiet "$work/faucet.yaml"
  got=$(digest)
  rps=$(rps "$rows")
  printf '%-26s %9s %12s %8s %7.1f MiB\n' "faucet ($delivery)" "${got%%|*}" "$rps" "$cpu" "$(mib)"
  [ "$got" = "$floor_digest" ] || { echo "error: faucet's table ($got) differs from the floor's ($floor_digest)" >&2; exit 1; }
  ratio=$(ratio "$rps" "$floor_rps")
  summary+=("faucet ($delivery) / floor = ${ratio}x rows/s, peak RSS $((rss_kb / 1024)) MiB")
done
echo
for line in "${summary[@]}"; do echo "$line"; done
echo "target: ratio >= 0.8 (batch size 10,000)"
