//! The `postgres-cdc` source: logical replication with pgoutput.
