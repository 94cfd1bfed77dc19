//! What the CSV floors share (`faucet-bench-floor` and, by `#[path]`, `faucet-bench-bus-floor`):
//! a CSV file read as byte records, each turned into the JSON object faucet's csv source
//! without `columns` makes of it (every value a string, keys from the header, fields in header
//! order).

use std::fs::File;
use std::io::Write;

/// The floors' error: anything, sendable between threads (the bus floor's clients need that).
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Opens `input` as CSV with a header row through a 1 MiB buffer; returns the reader and each
/// column's JSON key prefix — `{"name":` for the first, `,"name":` for the others — as
/// [`write_object`] takes them. Errors: the file cannot be opened or its header read, or a
/// header name is not UTF-8.
pub fn open(input: &str) -> Result<(csv::Reader<File>, Vec<Vec<u8>>), Error> {
    let mut reader = csv::ReaderBuilder::new()
        .buffer_capacity(1 << 20)
        .from_path(input)?;
    let keys = reader
        .byte_headers()?
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut key = if i == 0 { b"{".to_vec() } else { b",".to_vec() };
            serde_json::to_writer(&mut key, std::str::from_utf8(name)?)?;
            key.push(b':');
            Ok(key)
        })
        .collect::<Result<_, Error>>()?;
    Ok((reader, keys))
}

/// Writes `record` to `out` as one JSON object (no line end): each of `keys` (from [`open`])
/// followed by its field as a JSON string, then `}`. Fields beyond `keys` are dropped. Errors:
/// a field is not UTF-8, or `out` fails.
pub fn write_object(
    out: &mut impl Write,
    keys: &[Vec<u8>],
    record: &csv::ByteRecord,
) -> Result<(), Error> {
    for (key, field) in keys.iter().zip(record.iter()) {
        out.write_all(key)?;
        serde_json::to_writer(&mut *out, std::str::from_utf8(field)?)?;
    }
    out.write_all(b"}")?;
    Ok(())
}
