//! `faucet serve`'s metrics and status per bus sink, through the binary: csv → nats and
//! csv → redis-streams rows, and then `/metrics` counts the messages each published (equal
//! to the rows, and to what an independent consumer reads back), their bytes and the pages'
//! publish latency, and `GET /pipelines/{name}` shows the same.
//!
//! nats-server from `FAUCET_TEST_NATS_URL`, Redis from `FAUCET_TEST_REDIS_URL`
//! (`scripts/services.sh`); the test's own stream, subjects and keys are removed at the end.

use crate::serve::promtool_check;
use crate::support::Dir;
use crate::support::bus::{delete_nats_stream, delete_redis_keys, nats_messages, redis_streams};
use crate::support::pg::unique_suffix;
use crate::support::server::Server;

const ROWS: usize = 120;

/// A pipeline file of csv `in.csv` into `sink`, run every second in pages of 25.
fn bus_pipeline(name: &str, sink: &str) -> String {
    format!(
        "version: 1\nname: {name}\npipeline:\n  \
         source: {{ type: csv, config: {{ path: ../in.csv, columns: {{ id: int, v: int }} }} }}\n  \
         sink: {sink}\n  \
         state: {{ type: file, config: {{ path: ../state }} }}\n  \
         batch_size: 25\n  schedule: {{ cron: \"*/1 * * * * *\" }}\n"
    )
}

/// The value of the series `series` (name and labels exactly as exposed,
/// `faucet_records_total{pipeline="p",row=""}`) in the Prometheus exposition `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The series of `metric` for the row of pipeline `name`.
fn series(metric: &str, name: &str) -> String {
    format!("{metric}{{pipeline=\"{name}\",row=\"\"}}")
}

#[test]
fn serve_counts_what_each_bus_sink_published() {
    let suffix = unique_suffix();
    let subject = format!("faucet-test.servebus.{suffix}");
    let stream = format!("FAUCET_TEST_SERVEBUS_{suffix}");
    let prefix = format!("faucet-test-servebus-{suffix}");
    delete_nats_stream(&stream);
    delete_redis_keys(&format!("{prefix}:*"));

    let dir = Dir::new();
    let mut csv = String::from("id,v\n");
    for i in 0..ROWS {
        csv.push_str(&format!("{i},{}\n", i * 7));
    }
    dir.write("in.csv", csv);
    dir.write(
        "pipelines/busnats.yaml",
        bus_pipeline(
            "busnats",
            &format!(
                "{{ type: nats, config: {{ url: \"{}\", subject: \"{subject}\", stream: {stream}, \
                 create_stream: true, key: [id] }} }}",
                faucet_test_support::nats_url()
            ),
        ),
    );
    dir.write(
        "pipelines/busredis.yaml",
        bus_pipeline(
            "busredis",
            &format!(
                "{{ type: redis-streams, config: {{ url: \"{}\", stream: \"{prefix}:events\", \
                 prefix: \"{prefix}:\", key: [id] }} }}",
                faucet_test_support::redis_url()
            ),
        ),
    );
    let server = Server::start(&dir, &["pipelines"], None);
    for name in ["busnats", "busredis"] {
        server.wait_for(name, "every row", |d| d["records"] == ROWS);
    }

    let (code, text) = server.request("GET", "/metrics", None);
    assert_eq!(code, 200);
    promtool_check(&text);
    for name in ["busnats", "busredis"] {
        let messages = sample(&text, &series("faucet_sink_messages_total", name));
        assert_eq!(messages, Some(ROWS as f64), "{name}: {text}");
        let bytes = sample(&text, &series("faucet_sink_bytes_total", name)).unwrap_or_default();
        assert!(bytes > 0.0, "{name}: {text}");
        let pages = sample(&text, &series("faucet_sink_publish_seconds_count", name));
        assert_eq!(
            pages,
            Some((ROWS / 25 + 1) as f64),
            "{name}: 5 pages: {text}"
        );
        let seconds = sample(&text, &series("faucet_sink_publish_seconds_sum", name));
        assert!(seconds.is_some_and(|s| s > 0.0), "{name}: {text}");
        let pending = sample(&text, &series("faucet_sink_acks_pending", name));
        assert!(
            pending.is_some_and(|p| (1.0..=25.0).contains(&p)),
            "{name}: at most a page's publishes await their acks: {text}"
        );

        let doc = server.status(name);
        let published = &doc["published"];
        assert_eq!(published["messages"], ROWS, "{doc}");
        assert_eq!(published["pages"], ROWS / 25 + 1, "{doc}");
        assert_eq!(published["bytes"].as_f64(), Some(bytes), "{doc}");
        assert!(
            published["publish_seconds"]
                .as_f64()
                .is_some_and(|s| s > 0.0),
            "{doc}"
        );
    }

    // What the metrics count is what the buses hold: every row once.
    let key_ids = |got: Vec<crate::support::bus::Consumed>| {
        let mut ids: Vec<i64> = got
            .iter()
            .map(|m| m.fields["value"]["id"].as_i64().expect("id"))
            .collect();
        ids.sort_unstable();
        ids
    };
    let all: Vec<i64> = (0..ROWS as i64).collect();
    assert_eq!(key_ids(nats_messages(&stream, &subject)), all);
    assert_eq!(key_ids(redis_streams(&format!("{prefix}:events"))), all);

    let (code, stderr) = server.terminate();
    assert_eq!(code, 0, "{stderr}");
    delete_nats_stream(&stream);
    delete_redis_keys(&format!("{prefix}:*"));
}
