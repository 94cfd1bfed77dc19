//! Unit tests of config loading.
