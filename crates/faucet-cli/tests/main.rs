//! faucet-cli integration tests: the built `faucet` binary, run in temporary directories, on
//! real files (and, with the state-store features, the real PostgreSQL and Redis).

mod adversarial_files;
mod bad_input;
#[cfg(feature = "postgres")]
mod cdc_flights;
#[cfg(feature = "postgres")]
mod cdc_latency;
mod crash_files;
#[cfg(all(feature = "postgres", feature = "state-postgres"))]
mod deploy_manifests;
#[cfg(all(feature = "state-postgres", feature = "state-redis"))]
mod doctor_backends;
#[cfg(feature = "postgres")]
mod effectively_once_crash;
mod examples;
#[cfg(all(feature = "mysql", feature = "postgres"))]
mod feedback_loop;
mod field_paths;
mod file_safety;
mod input_edges;
#[cfg(feature = "postgres")]
mod jsonl_routed;
#[cfg(all(
    feature = "kafka",
    feature = "redis-streams",
    feature = "nats",
    feature = "postgres"
))]
mod kafka_cli;
#[cfg(all(feature = "state-postgres", feature = "state-redis"))]
mod lease_e2e;
mod lost_state;
#[cfg(feature = "mongodb")]
mod mongodb_cdc_cli;
#[cfg(all(feature = "mongodb", feature = "state-postgres"))]
mod mongodb_cdc_crash;
#[cfg(all(feature = "mongodb", feature = "postgres"))]
mod mongodb_replicate;
#[cfg(all(feature = "mongodb", feature = "postgres"))]
mod mongodb_sink_cli;
#[cfg(all(
    feature = "mysql",
    feature = "redis-streams",
    feature = "nats",
    feature = "postgres"
))]
mod mysql_cdc_buses;
#[cfg(feature = "mysql")]
mod mysql_cdc_cli;
#[cfg(feature = "mysql")]
mod mysql_cdc_crash;
#[cfg(all(feature = "mysql", feature = "state-postgres"))]
mod mysql_cdc_flights;
#[cfg(feature = "mysql")]
mod mysql_cdc_history;
#[cfg(feature = "mysql")]
mod mysql_cdc_latency;
#[cfg(feature = "mysql")]
mod mysql_cdc_statements;
#[cfg(feature = "mysql")]
mod mysql_connectors;
#[cfg(all(feature = "mysql", feature = "postgres"))]
mod mysql_cross_db;
#[cfg(all(feature = "mysql", feature = "postgres"))]
mod mysql_replicate;
#[cfg(feature = "mysql")]
mod mysql_sink_cli;
#[cfg(all(feature = "redis-streams", feature = "nats", feature = "postgres"))]
mod nats_cli;
#[cfg(feature = "postgres")]
mod pg_edges;
#[cfg(feature = "postgres")]
mod postgres_cdc_crash;
#[cfg(feature = "postgres")]
mod postgres_connectors;
#[cfg(feature = "postgres")]
mod postgres_sink_crash;
#[cfg(feature = "postgres")]
mod postgres_values;
#[cfg(all(feature = "redis-streams", feature = "nats", feature = "postgres"))]
mod redis_streams_cli;
#[cfg(feature = "postgres")]
mod replicate_crash;
#[cfg(all(feature = "mysql", feature = "postgres"))]
mod replicate_late_table;
mod reports;
#[cfg(all(
    feature = "postgres",
    feature = "state-postgres",
    feature = "state-redis"
))]
mod retention_horizon;
#[cfg(feature = "postgres")]
mod routed_tables;
mod run_files;
#[cfg(feature = "postgres")]
mod schema_changes;
mod serve;
mod serve_api_guard;
#[cfg(all(feature = "redis-streams", feature = "nats", feature = "postgres"))]
mod serve_bus_sinks;
#[cfg(feature = "cluster")]
mod serve_cluster;
mod signals;
#[cfg(all(feature = "mysql", feature = "postgres"))]
mod sql_sink_hostile;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod sqlite_sink_crash;
#[cfg(all(feature = "state-postgres", feature = "state-redis"))]
mod state_pg_restart;
#[cfg(feature = "state-postgres")]
mod state_postgres;
#[cfg(feature = "state-redis")]
mod state_redis;
mod status_page;
mod support;
#[cfg(feature = "postgres")]
mod table_patterns;
#[cfg(feature = "postgres")]
mod unmet_requests;
#[cfg(all(feature = "mysql", feature = "postgres"))]
mod upsert_keys;
#[cfg(all(
    feature = "postgres",
    feature = "state-postgres",
    feature = "state-redis"
))]
mod zombie_fence;
