//! The commands: `run`, `validate`, `doctor`, and the planning they share.

pub(crate) mod doctor;
mod plan;
pub(crate) mod replicate;
pub(crate) mod run;
pub(crate) mod validate;
