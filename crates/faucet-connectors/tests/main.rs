//! faucet-connectors integration tests: one binary, one module per connector and role.
//! They talk to the real services (see scripts/services.sh).

#[cfg(feature = "files")]
mod files_csv;
#[cfg(feature = "files")]
mod files_csv_resume;
#[cfg(feature = "files")]
mod files_jsonl;
#[cfg(feature = "files")]
mod files_jsonl_routed;
#[cfg(feature = "files")]
mod files_support;
#[cfg(feature = "files")]
mod files_weather;
#[cfg(feature = "kafka")]
mod kafka_sink;
#[cfg(feature = "mongodb")]
mod mongodb_cdc;
#[cfg(feature = "mongodb")]
mod mongodb_sink;
#[cfg(feature = "mysql")]
mod mysql_cdc;
#[cfg(feature = "mysql")]
mod mysql_cdc_ddl;
#[cfg(feature = "mysql")]
mod mysql_cdc_errors;
#[cfg(feature = "mysql")]
mod mysql_cdc_gtid;
#[cfg(feature = "mysql")]
mod mysql_cdc_paging;
#[cfg(feature = "mysql")]
mod mysql_cdc_values;
#[cfg(feature = "mysql")]
mod mysql_private;
#[cfg(feature = "mysql")]
mod mysql_query;
#[cfg(feature = "mysql")]
mod mysql_replicate;
#[cfg(feature = "mysql")]
mod mysql_sink;
#[cfg(feature = "mysql")]
mod mysql_sink_support;
#[cfg(feature = "mysql")]
mod mysql_sink_values;
#[cfg(feature = "mysql")]
mod mysql_support;
#[cfg(feature = "mysql")]
mod mysql_values;
#[cfg(feature = "nats")]
mod nats_sink;
#[cfg(feature = "postgres")]
mod postgres_cdc;
#[cfg(feature = "postgres")]
mod postgres_cdc_ack;
#[cfg(feature = "postgres")]
mod postgres_cdc_decoding;
#[cfg(feature = "postgres")]
mod postgres_cdc_errors;
#[cfg(feature = "postgres")]
mod postgres_cdc_paging;
#[cfg(feature = "postgres")]
mod postgres_cdc_retention;
#[cfg(feature = "postgres")]
mod postgres_cdc_values;
#[cfg(feature = "postgres")]
mod postgres_query;
#[cfg(feature = "postgres")]
mod postgres_query_cases;
#[cfg(feature = "postgres")]
mod postgres_query_support;
#[cfg(all(feature = "postgres", feature = "files"))]
mod postgres_replicate;
#[cfg(feature = "postgres")]
mod postgres_sink;
#[cfg(all(feature = "postgres", feature = "files"))]
mod postgres_sink_pipeline;
#[cfg(feature = "postgres")]
mod postgres_sink_routed;
#[cfg(feature = "postgres")]
mod postgres_sink_snapshot;
#[cfg(feature = "postgres")]
mod postgres_sink_support;
#[cfg(feature = "redis-streams")]
mod redis_streams_sink;
#[cfg(feature = "sql")]
mod sink_support;
#[cfg(feature = "sqlite")]
mod sqlite_sink;
mod support;
