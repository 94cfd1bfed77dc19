#!/usr/bin/env bash
# Runs every check and test of faucet, as CI does: services up, format, lints, docs, tests,
# doc tests. Usage: scripts/test.sh   (FAUCET_SOAK=1 for the long crash/soak counts)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

step "services (PostgreSQL with wal_level=logical, Redis, MariaDB with a binlog on 3307, SecantusDB on 27117)"
scripts/services.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, all features, -D warnings)"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
step "cargo clippy (default features: the README's build)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo doc (all features, no broken links)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --locked --quiet

step "cargo test (all features)"
status=0
cargo test --workspace --all-features --locked --no-fail-fast 2>&1 | tee target/test-output.txt || status=$?
# cargo test's own closing lines are read by CI; also print one total.
passed=$(grep -Eo '[0-9]+ passed' target/test-output.txt | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/test-output.txt | awk '{s+=$1} END {print s+0}')
printf '\n%s passed, %s failed\n' "$passed" "$failed"
[ "$status" = 0 ] && [ "$failed" = 0 ]
