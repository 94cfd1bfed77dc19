//! Delivery guarantees, and how a source × sink × state store topology derives one.
//!
//! From the delivery seed (docs/specification.md, "Delivery"): the delivery type is
//! [`DeliveryGuarantee::AtLeastOnce`] or [`DeliveryGuarantee::EffectivelyOnce`] with a
//! [`EffectivelyOnceMechanism`]; there is no exactly-once variant, on purpose. A request
//! that cannot be met is a [`DeliveryError`] naming the limiting side, resolved before any
//! data moves (docs/run-loop.md, invariant 5). The derivation (docs/delivery.md):
//!
//! | sink | source replay | durable state | guarantee |
//! |---|---|---|---|
//! | atomic watermark | deterministic | yes | `EffectivelyOnce(AtomicWatermark)` |
//! | keyed upsert configured | any | any | `EffectivelyOnce(KeyedUpsert)` |
//! | anything else | any | any | `AtLeastOnce` |

use std::fmt;

use serde::{Deserialize, Serialize};

/// What a sink can do to absorb a replay (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SinkCapabilities {
    /// Commits a page's rows and a [`crate::sink::CommitToken`] in one transaction.
    pub atomic_watermark: bool,
    /// Deduplicates by a configured key: a replayed row overwrites itself.
    pub keyed_upsert: bool,
}

/// Why a sink delivers at-least-once only, in its own terms ([`crate::Sink::delivery_limit`]):
/// an effectively-once request into it gets a [`DeliveryError::Unsatisfiable`] saying this
/// instead of the generic "no atomic commit token and no upsert key".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkLimit {
    /// Why the sink cannot absorb a replay (completes "the sink `kafka` …").
    pub reason: &'static str,
    /// What the user can change.
    pub fix: &'static str,
}

/// Whether a source, resumed from a bookmark, emits exactly the same records after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayGuarantee {
    /// The same records, in the same order (a CDC log, an immutable file).
    Deterministic,
    /// Possibly different records (a query over a table that changes).
    NonDeterministic,
}

/// How duplicates are removed when the guarantee is effectively-once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectivelyOnceMechanism {
    /// The sink commits a page's rows and its commit token in one transaction; on restart the
    /// source is re-anchored at the bookmark inside the sink's token.
    AtomicWatermark,
    /// The sink deduplicates by primary key: a replayed row overwrites itself.
    KeyedUpsert,
}

/// What a topology delivers. There is no `ExactlyOnce`: across a crash it is not achievable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryGuarantee {
    /// No committed change is lost; after a crash the one in-flight page may be delivered again.
    AtLeastOnce,
    /// No loss and no duplicate in the sink, through the given mechanism.
    EffectivelyOnce(EffectivelyOnceMechanism),
}

impl fmt::Display for DeliveryGuarantee {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AtLeastOnce => f.write_str("at-least-once"),
            Self::EffectivelyOnce(EffectivelyOnceMechanism::AtomicWatermark) => {
                f.write_str("effectively-once (atomic watermark)")
            }
            Self::EffectivelyOnce(EffectivelyOnceMechanism::KeyedUpsert) => {
                f.write_str("effectively-once (keyed upsert)")
            }
        }
    }
}

/// What a user asks for (`pipeline.delivery`). `exactly_once` is accepted as a request and
/// means "effectively-once, please"; it never yields anything called exactly-once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryRequest {
    /// The default: whatever the topology gives, at least at-least-once.
    #[default]
    AtLeastOnce,
    /// Effectively-once, or a [`DeliveryError`] before any data moves.
    EffectivelyOnce,
    /// The same request as [`DeliveryRequest::EffectivelyOnce`].
    ExactlyOnce,
}

/// The part of a topology that keeps a request from being met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitingSide {
    /// The source cannot replay deterministically.
    Source,
    /// The sink cannot absorb a replay.
    Sink,
    /// The state store is not durable.
    StateStore,
}

impl fmt::Display for LimitingSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Source => "source",
            Self::Sink => "sink",
            Self::StateStore => "state store",
        })
    }
}

/// A delivery request the topology cannot meet. Returned before any data moves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// Effectively-once was requested, and `side` keeps it from being possible.
    #[error(
        "effectively-once delivery cannot be met: the {side} `{connector}` {reason}; fix: {fix}"
    )]
    Unsatisfiable {
        /// Which side limits the topology.
        side: LimitingSide,
        /// The connector or store on that side (`jsonl`, `memory`).
        connector: String,
        /// Why it cannot help.
        reason: String,
        /// What the user can change.
        fix: String,
    },
    /// An upsert sink fed by a source table that has no key (no primary key, no unique key):
    /// rows that share a value of the sink's key would overwrite each other
    /// ([`crate::keys`]).
    #[error(
        "the `{connector}` source table `{table}` has no primary key (nor any unique key), so \
         the `{sink}` sink's upsert would merge distinct rows that share a key value; fix: \
         give the source table a primary key, or use `write_mode: append`"
    )]
    KeylessSource {
        /// The source connector (`mysql-cdc`).
        connector: String,
        /// The keyless table, qualified as the source qualifies it.
        table: String,
        /// The sink connector (`mysql`).
        sink: String,
    },
}

/// What the run loop knows of each side when it derives the guarantee.
#[derive(Debug, Clone, Copy)]
pub struct Topology<'a> {
    /// The source connector's name.
    pub source: &'a str,
    /// Whether the source replays deterministically from a bookmark.
    pub replay: ReplayGuarantee,
    /// The sink connector's name.
    pub sink: &'a str,
    /// What the sink can do.
    pub sink_caps: SinkCapabilities,
    /// Why the sink cannot absorb a replay, when it says so itself
    /// ([`crate::Sink::delivery_limit`]); `None` for the generic reason.
    pub sink_limit: Option<SinkLimit>,
    /// The state store's name.
    pub state: &'a str,
    /// Whether the state store survives the process.
    pub state_durable: bool,
}

impl Topology<'_> {
    /// The best guarantee this topology provides, by docs/delivery.md's table.
    pub fn derive(&self) -> DeliveryGuarantee {
        if self.sink_caps.atomic_watermark
            && self.replay == ReplayGuarantee::Deterministic
            && self.state_durable
        {
            DeliveryGuarantee::EffectivelyOnce(EffectivelyOnceMechanism::AtomicWatermark)
        } else if self.sink_caps.keyed_upsert {
            DeliveryGuarantee::EffectivelyOnce(EffectivelyOnceMechanism::KeyedUpsert)
        } else {
            DeliveryGuarantee::AtLeastOnce
        }
    }

    /// Resolves `request` against this topology.
    ///
    /// # Errors
    /// [`DeliveryError::Unsatisfiable`] when effectively-once (or `exactly_once`) is requested
    /// and [`Topology::derive`] gives at-least-once; the error names the limiting side.
    pub fn resolve(&self, request: DeliveryRequest) -> Result<DeliveryGuarantee, DeliveryError> {
        let derived = self.derive();
        if request == DeliveryRequest::AtLeastOnce || derived != DeliveryGuarantee::AtLeastOnce {
            return Ok(derived);
        }
        Err(self.limiting_side())
    }

    fn limiting_side(&self) -> DeliveryError {
        let (side, connector, reason, fix) =
            if let (false, Some(limit)) = (self.sink_caps.atomic_watermark, self.sink_limit) {
                (LimitingSide::Sink, self.sink, limit.reason, limit.fix)
            } else if !self.sink_caps.atomic_watermark {
                (
                    LimitingSide::Sink,
                    self.sink,
                    "cannot absorb a replay: it has no atomic commit token and no upsert key",
                    "use a sink that can (for example `postgres` with `write_mode: upsert` and \
                 `key: [...]`), or request `delivery: at_least_once`",
                )
            } else if self.replay != ReplayGuarantee::Deterministic {
                (
                    LimitingSide::Source,
                    self.source,
                    "does not replay deterministically from a bookmark, so the sink's atomic \
                 watermark cannot skip what was committed",
                    "configure the sink with an upsert key (`write_mode: upsert`, `key: [...]`), \
                 or request `delivery: at_least_once`",
                )
            } else {
                (
                    LimitingSide::StateStore,
                    self.state,
                    "is not durable: it forgets the bookmark when the process exits",
                    "use a durable state store (`file`, `postgres` or `redis`), or request \
                 `delivery: at_least_once`",
                )
            };
        DeliveryError::Unsatisfiable {
            side,
            connector: connector.to_owned(),
            reason: reason.to_owned(),
            fix: fix.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(atomic: bool, keyed: bool, det: bool, durable: bool) -> Topology<'static> {
        Topology {
            source: "src",
            replay: if det {
                ReplayGuarantee::Deterministic
            } else {
                ReplayGuarantee::NonDeterministic
            },
            sink: "snk",
            sink_caps: SinkCapabilities {
                atomic_watermark: atomic,
                keyed_upsert: keyed,
            },
            sink_limit: None,
            state: "st",
            state_durable: durable,
        }
    }

    #[test]
    fn derivation_follows_the_design_table() {
        use DeliveryGuarantee::*;
        use EffectivelyOnceMechanism::*;
        assert_eq!(
            topo(true, false, true, true).derive(),
            EffectivelyOnce(AtomicWatermark)
        );
        assert_eq!(
            topo(true, true, false, true).derive(),
            EffectivelyOnce(KeyedUpsert)
        );
        assert_eq!(
            topo(true, true, true, false).derive(),
            EffectivelyOnce(KeyedUpsert)
        );
        assert_eq!(topo(true, false, false, true).derive(), AtLeastOnce);
        assert_eq!(topo(false, false, true, true).derive(), AtLeastOnce);
    }

    #[test]
    fn unmet_request_names_the_limiting_side() {
        let side = |t: Topology<'_>| match t.resolve(DeliveryRequest::ExactlyOnce) {
            Err(DeliveryError::Unsatisfiable { side, .. }) => side,
            Err(e) => panic!("{e}"),
            Ok(g) => panic!("expected an error, got {g}"),
        };
        assert_eq!(side(topo(false, false, true, true)), LimitingSide::Sink);
        assert_eq!(side(topo(true, false, false, true)), LimitingSide::Source);
        assert_eq!(
            side(topo(true, false, true, false)),
            LimitingSide::StateStore
        );
        assert_eq!(
            topo(false, false, true, true).resolve(DeliveryRequest::AtLeastOnce),
            Ok(DeliveryGuarantee::AtLeastOnce)
        );
    }
}
