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

# faucet_binary FEATURES → sets faucet to the release `faucet` built with FEATURES (in
# $CARGO_TARGET_DIR, else target/); FAUCET=path uses that binary instead and builds nothing
# (a debug build proves a script works with tiny sizes; its numbers mean nothing).
faucet_binary() {
  if [ -n "${FAUCET:-}" ]; then
    faucet=$(cd "$(dirname "$FAUCET")" && pwd)/$(basename "$FAUCET")
    return
  fi
  echo "==> building faucet (release, --features $1)" >&2
  cargo build --release --quiet -p faucet-cli --features "$1"
  faucet="${CARGO_TARGET_DIR:-$repo/target}/release/faucet"
}

# pg_sql SQL → runs SQL with psql on $url (quiet, unaligned, stopping at the first error).
pg_sql() { PGOPTIONS="-c client_min_messages=warning" psql -X -q -At -v ON_ERROR_STOP=1 "$url" -c "$1"; }
