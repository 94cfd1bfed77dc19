//! NATS JetStream: the `nats` sink, [`NatsSink`].
//!
//! * Each record is one JetStream publish to the subject its `subject` template names for
//!   the record's source table, the bus message ([`crate::bus::message`]) as payload (its
//!   value) and headers (`faucet-op`, `faucet-table`, `faucet-position`, `faucet-id`, and
//!   `faucet-key` with `key:`). A page is durable when every publish of it is acknowledged:
//!   the sink publishes them all (pipelined, at most 8192 in flight), then awaits the acks.
//! * `stream` must capture the subjects ([`subject_filter`] of the template,
//!   `cdc.{schema}.{table}` → `cdc.*.>`) and `_faucet.commit.<stream>` ([`marker_subject`]);
//!   `create_stream: true` creates it so, with the server's defaults (file storage, limits
//!   retention, one replica, a two-minute duplicate window).
//! * **Effectively-once by an exact re-anchor** (an atomic watermark in the run loop's
//!   terms): every message of a page carries the page's commit-token sequence, the bookmark
//!   the page started from and its index in the page, and the last one the commit token
//!   (the bookmark after the page) — headers listed in [`anchor`]. At start the sink reads
//!   the last stored message of its subjects (`$JS.API.STREAM.MSG.GET` with `last_by_subj`
//!   on the wildcard filter, which nats-server 2.9 answers): a closed page is the committed
//!   one; a page stored in part is replayed from its start bookmark and its records already
//!   stored are skipped, so a crash mid-page leaves no duplicate however long the pipeline
//!   was down (the duplicate window plays no part). This needs a source that replays the
//!   same records after a bookmark — csv, jsonl, postgres-cdc, mysql-cdc (the run loop's
//!   `ReplayGuarantee::Deterministic`); with any other source `delivery: effectively_once`
//!   is refused before anything moves.
//! * **Chained publishes**: each publish of an effectively-once or fenced page carries
//!   `Nats-Expected-Last-Sequence` (the stream sequence it must follow), so a page's
//!   messages are stored in order without a gap (a refused one refuses all after it) and a
//!   zombie writer — a run stalled past its lease, resumed after a newer run published — is
//!   refused ([`faucet_core::state::LeaseError::Fenced`] when the newer run's fence is in
//!   the stream). Such a run needs the stream to itself.
//! * `Nats-Msg-Id` is `<state key>/<hash of the page's start bookmark>/<index>`: the same
//!   record always gets the same id whatever the page boundaries, so the server's duplicate
//!   window drops only true repeats (an at-least-once run's first page has none: its start
//!   is not known to the sink).
//! * A page that publishes nothing (empty, or every record stored before a crash) stores
//!   its token in a commit marker on [`marker_subject`] (an empty payload).
//! * Fault points: [`faucet_core::fault::MID_PAGE`] after half a page's publishes,
//!   [`faucet_core::fault::BEFORE_COMMIT`] before its last one (the token's); armed, the sink
//!   first waits for what it sent to be stored, so an abort there leaves that part stored.

pub mod anchor;
mod config;
mod sink;

pub use config::{
    NatsSinkConfig, ValidatedNatsConfig, check_message, check_subject, subject_filter,
};
pub use sink::{CONNECTOR, NatsSink, marker_subject};
