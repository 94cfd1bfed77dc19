//! The file connectors: `csv` and `jsonl` sources, the `jsonl` sink.
