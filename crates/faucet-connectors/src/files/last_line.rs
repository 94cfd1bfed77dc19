//! [`UnterminatedLastLine`]: what a file source does with a last line that has no line break.

use serde::{Deserialize, Serialize};

/// What the `csv` and `jsonl` sources do with a last line that does not end in a line
/// break (`unterminated_last_line` in their configs).
///
/// A file that is still being written ends in a partial line: `2,ze` before `bra\n` lands.
/// Delivered as a record, the partial value would be in the sink for good (and the next
/// run refused, the record having changed under its bookmark). So by default such a line is
/// not read: the run ends before it, logs a warning naming `file:line`, and a later run
/// reads it once it ends in a line break. A file known to be complete whose last line has no
/// line break is read whole with `read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnterminatedLastLine {
    /// Not delivered until it ends in a line break (the default: safe for a file that is
    /// still growing).
    #[default]
    Wait,
    /// Delivered as the last record (for a complete file without a final line break).
    Read,
}

/// The default `max_field_bytes` (csv) and `max_line_bytes` (jsonl): 16 MiB.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 16 << 20;

/// [`DEFAULT_MAX_BYTES`], for serde.
pub(crate) fn default_max_bytes() -> u64 {
    DEFAULT_MAX_BYTES
}

/// The warning for a held-back last line at `location` (`file:line`).
pub(crate) fn warn_held_back(connector: &str, location: &str) {
    tracing::warn!(
        connector,
        location,
        "the last line has no line break yet: not read (a writer may still be appending \
         it). A later run reads it once it ends in a line break; if the file is complete, \
         set `unterminated_last_line: read` in the source config"
    );
}
