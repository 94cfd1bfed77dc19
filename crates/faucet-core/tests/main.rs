//! faucet-core integration tests: the run loop with the in-memory doubles, the conformance
//! battery (each check proven able to fail), and a property test of crash and resume.

mod conformance_can_fail;
mod crash_property;
mod run_loop;
