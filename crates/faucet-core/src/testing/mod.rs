//! Test support (feature `testing`): in-memory doubles and the conformance battery.
