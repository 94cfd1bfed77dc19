//! The two ways the crash tests crash `faucet run`, for any [`CrashScenario`] (a pipeline
//! into PostgreSQL, MySQL, ...): aborted at every fault point ([`abort_at_every_point`]) and
//! SIGKILLed at pseudo-random instants ([`killed_at_random_instants`]). `FAUCET_SOAK=1` runs
//! more random kills.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A pipeline the crash drivers run: how to make a fresh source, target and config in a
/// directory, the exact check of the target, the cleanup, and the `faucet` command (its
/// environment holds the URLs the config names).
pub(crate) trait CrashScenario {
    /// A fresh source and target; the config in `dir`.
    fn prepare(&self, dir: &Path);
    /// Asserts the target equals the source: nothing lost, nothing doubled, values exact.
    fn check(&self, what: &str);
    /// Drops what the scenario made.
    fn drop(&self);
    /// `faucet` with no fault armed and the scenario's environment.
    fn faucet(&self) -> Command;
    /// The fault points the scenario's run passes, which [`abort_at_every_point`] aborts at:
    /// by default a SQL sink's with the file state store ([`faucet_core::fault::SQL_SINK`]).
    /// A pipeline that does not pass one (`before_commit` without a SQL or Redis sink,
    /// `state_mid_put` without the file state store) must leave it out: an armed point that
    /// is never reached fails the driver.
    fn points(&self) -> Vec<&'static str> {
        faucet_core::fault::SQL_SINK.to_vec()
    }
}

/// The CSV of the crash scenarios' csv pipelines: the header `id,v`, then `rows` lines
/// `i,3i` for `i` in `0..rows`.
pub(crate) fn id_v_csv(rows: usize) -> String {
    let mut text = String::from("id,v\n");
    for i in 0..rows {
        text.push_str(&format!("{i},{}\n", i * 3));
    }
    text
}

/// [`super::pipeline_yaml`] of a crash scenario: `effectively_once`, pages of `batch`.
pub(crate) fn scenario_yaml(name: &str, source: &str, sink: &str, batch: usize) -> String {
    super::pipeline_yaml(
        name,
        source,
        sink,
        &format!("  delivery: effectively_once\n  batch_size: {batch}\n"),
    )
}

/// Drops the scenario's objects when the driver ends, also when an assertion failed.
pub(crate) struct Cleanup<'a, S: CrashScenario + ?Sized>(pub(crate) &'a S);

impl<S: CrashScenario + ?Sized> Drop for Cleanup<'_, S> {
    fn drop(&mut self) {
        // Best effort: a failure here must not turn an unwinding panic into an abort.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.0.drop()));
    }
}

/// `faucet run --quiet` in `dir` with `FAUCET_FAULT=<fault>`; panics unless the run failed.
fn run_aborted_at(scenario: &(impl CrashScenario + ?Sized), dir: &Path, fault: &str) {
    super::expect_aborted(
        scenario.faucet().args(["run", "--quiet"]).current_dir(dir),
        fault,
    );
}

/// `faucet run` in `dir`, which must succeed.
fn run_to_completion(scenario: &(impl CrashScenario + ?Sized), dir: &Path) {
    super::output_of_success(
        scenario.faucet().arg("run").current_dir(dir),
        "the restarted run",
    );
}

/// For every fault point the scenario's run passes ([`CrashScenario::points`]): a fresh
/// source and target, a run aborted at the point's second hit, a restart to completion, the
/// exact check, and a third run that must change nothing.
pub(crate) fn abort_at_every_point(scenario: &(impl CrashScenario + ?Sized)) {
    let _cleanup = Cleanup(scenario);
    for point in scenario.points() {
        let dir = tempfile::tempdir().expect("tempdir");
        scenario.prepare(dir.path());
        run_aborted_at(scenario, dir.path(), &format!("{point}:2"));
        run_to_completion(scenario, dir.path());
        scenario.check(&format!("after an abort at {point}:2"));
        // A third run has nothing left to do and changes nothing.
        run_to_completion(scenario, dir.path());
        scenario.check(&format!("a run after the recovery ({point})"));
    }
}

/// SIGKILL at pseudo-random instants (a fixed sequence, so failures reproduce), several times
/// in a row, then a run to completion and the exact check.
pub(crate) fn killed_at_random_instants(scenario: &(impl CrashScenario + ?Sized)) {
    let _cleanup = Cleanup(scenario);
    // Six by default: with three, a sink whose commit token was broken passed one run in
    // three (a kill must land between the sink's commit and the bookmark's write).
    let rounds = crate::support::soak_or(20, 6);
    // On a fast, quiet machine a whole run can end before the first kill instant (the rest
    // then have nothing left to interrupt): start over from scratch with the instants
    // scaled down until at least one kill lands mid-run.
    let mut scale = 1;
    let dir = loop {
        let dir = tempfile::tempdir().expect("tempdir");
        scenario.prepare(dir.path());
        let mut interrupted = 0;
        for seed in kill_seeds(rounds) {
            let delay = Duration::from_millis((20 + seed % 400) / scale);
            if kill_after(scenario.faucet(), dir.path(), delay) {
                interrupted += 1;
            }
        }
        if interrupted > 0 {
            break dir;
        }
        assert!(
            scale < 27,
            "no kill landed while a run was in progress, even at 1/{scale} of the instants; \
             the runs said:\n{}",
            std::fs::read_to_string(dir.path().join("kill.err")).unwrap_or_default()
        );
        scale *= 3;
    };
    run_to_completion(scenario, dir.path());
    scenario.check("after SIGKILLs at random instants");
}

/// The fixed pseudo-random numbers (xorshift) the kill rounds draw their instants from,
/// `rounds` of them, the same every run so that failures reproduce.
pub(crate) fn kill_seeds(rounds: usize) -> impl Iterator<Item = u64> {
    let next = |&seed: &u64| {
        let mut s = seed;
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        Some(s)
    };
    std::iter::successors(Some(0x9e37_79b9_7f4a_7c15_u64), next)
        .skip(1)
        .take(rounds)
}

/// Starts `faucet run --quiet` (`faucet`) in `dir`, SIGKILLs it after `delay` (no destructor,
/// no flush) and reaps it. Returns whether it was still running when killed.
pub(crate) fn kill_after(mut faucet: Command, dir: &Path, delay: Duration) -> bool {
    // Each run's stderr is appended to `kill.err` in `dir`, for the failure message.
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("kill.err"))
        .expect("kill.err");
    let started = std::time::Instant::now();
    let mut child = faucet
        .args(["run", "--quiet"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("spawn faucet");
    std::thread::sleep(delay);
    let status = child.try_wait();
    let running = matches!(status, Ok(None));
    let _ = child.kill();
    let _ = child.wait();
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("kill.err"))
    {
        use std::io::Write as _;
        let _ = writeln!(
            f,
            "-- kill after {delay:?} (spawned {:?} before): {status:?}",
            started.elapsed()
        );
    }
    running
}
