//! The commands: `run`, `validate`, `doctor`, and the planning they share.

pub(crate) mod doctor;
pub(crate) mod plan;
pub(crate) mod replicate;
pub(crate) mod run;
pub(crate) mod validate;
