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

# mysql_auth URL → sets the array auth: the mariadb / mariadb-binlog options (-u, -h, -P and
# -p when the URL has a password) of mysql://user[:password]@host[:port]/database.
mysql_auth() {
  local m_user m_pass m_host m_port
  read -r m_user m_pass m_host m_port <<<"$(python3 - "$1" <<'PY'
import sys, urllib.parse as u
p = u.urlparse(sys.argv[1])
print(p.username or "root", p.password or "-", p.hostname or "127.0.0.1", p.port or 3306)
PY
)"
  auth=(-u"$m_user" -h"$m_host" -P"$m_port")
  [ "$m_pass" = - ] || auth+=(-p"$m_pass")
}

# faucet_binary FEATURES → sets faucet: $FAUCET_BIN when set (an already built binary with
# those features, e.g. a debug build to prove a script works), else the release build with
# FEATURES, built now.
faucet_binary() {
  if [ -n "${FAUCET_BIN:-}" ]; then
    faucet=$FAUCET_BIN
    echo "==> using $faucet (FAUCET_BIN)" >&2
  else
    echo "==> building faucet (release, --features $1)" >&2
    cargo build --release --quiet -p faucet-cli --features "$1"
    faucet="${CARGO_TARGET_DIR:-$repo/target}/release/faucet"
  fi
}
