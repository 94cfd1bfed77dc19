#!/usr/bin/env python3
"""A steady writer for bench/cdc_latency.sh (SOURCE=mysql): feeds STATEMENT to the stdin of
CLIENTS copies of the command after `--` (a SQL client reading statements, e.g. `mariadb`),
RATE statements per second in all for SECS seconds, spread evenly over time and clients;
each statement is its own transaction (autocommit). Prints the rate achieved (statements
written and executed, over the time until every client finished) as `tps = N`, the way
pgbench does. `{rate}` in STATEMENT is replaced by RATE.

Usage: rate_writer.py RATE SECS CLIENTS STATEMENT -- CMD...
"""
import subprocess
import sys
import time


def main():
    rate, secs, clients = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    statement = sys.argv[4].replace("{rate}", str(rate)).encode() + b"\n"
    cmd = sys.argv[sys.argv.index("--") + 1:]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
             for _ in range(clients)]
    total = int(rate * secs)
    start = time.monotonic()
    for i in range(total):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        p = procs[i % clients].stdin
        p.write(statement)
        p.flush()
    for p in procs:
        p.stdin.close()
    failed = sum(1 for p in procs if p.wait() != 0)
    elapsed = time.monotonic() - start
    if failed:
        sys.exit(f"{failed} of {clients} clients failed")
    print(f"tps = {total / elapsed:.1f}")


if __name__ == "__main__":
    main()
