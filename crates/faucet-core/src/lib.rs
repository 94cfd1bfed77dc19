//! faucet-core: the contract between sources, sinks and state stores, and the run loop that
//! keeps the delivery promise of the seeds (docs/specification.md, "Delivery"):
//!
//! * per page, **write to the sink → flush → persist the bookmark**; the bookmark is never
//!   persisted before the sink confirmed the page, so no committed change is ever lost
//!   (at-least-once);
//! * effectively-once when the sink can absorb a replay (an atomic watermark or a keyed
//!   upsert), and a typed [`DeliveryError`] naming the limiting side when it cannot;
//! * there is no `ExactlyOnce` anywhere.
//!
//! The pieces:
//! * [`Value`], [`Schema`], [`Page`]: typed records, field names shared by a page;
//! * [`Source`] / [`PageStream`], [`Sink`] / [`SinkWriter`], [`state::StateStore`];
//! * [`Pipeline`] and [`RunStreamOptions`]: the run loop, returning a [`RunSummary`];
//! * [`change`]: the change-record contract every CDC source emits and keyed sinks apply;
//! * [`fault`]: named fault points a crash test arms to abort the process;
//! * [`route::TableTemplate`]: names made from a record's source table (`cdc.{schema}.{table}`),
//!   shared by every sink that routes by table;
//! * feature `testing`: in-memory doubles and the conformance battery for connectors.

pub mod change;
pub mod delivery;
pub mod error;
pub mod extent;
pub mod fault;
pub mod keys;
pub mod page;
pub mod pipeline;
pub mod route;
pub mod sink;
pub mod source;
pub mod state;
#[cfg(feature = "testing")]
pub mod testing;
pub mod value;

pub use delivery::{
    DeliveryError, DeliveryGuarantee, DeliveryRequest, EffectivelyOnceMechanism, LimitingSide,
};
pub use error::{BoxError, FaucetError};
pub use extent::{Extent, ExtentPart, ExtentUnit};
pub use page::{Bookmark, Page, PageBuilder, PageStart, RowRef, RowWriter};
pub use pipeline::{Pipeline, RunStreamOptions, RunSummary};
pub use sink::{Commit, CommitToken, Fence, PublishStats, Sink, SinkCapabilities, SinkWriter};
pub use source::{
    PageDeadline, PageStream, ReadOptions, ReplayGuarantee, Retention, RetentionMonitor, Source,
    ready_within,
};
pub use value::{DataType, Field, Json, Schema, Text, Value};

/// Re-exported so connectors and library users share one `serde_json` (with exact numbers).
pub use serde_json;
