//! `faucet validate [CONFIG]`: checks a pipeline file offline — no I/O beyond reading it and
//! the `.env` beside it — and prints, per row, its state key, source → sink, state store and
//! the delivery guarantee the topology gives (or why the request cannot be met).

use std::path::PathBuf;

use clap::Args;

use super::plan;
use crate::config::{self, DEFAULT_CONFIG, Loaded};
use crate::exit::Exit;
use crate::output;

/// `faucet validate`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// The pipeline file.
    #[arg(value_name = "CONFIG", default_value = DEFAULT_CONFIG)]
    pub(crate) config: PathBuf,
}

/// Runs the command: exit 0 when every row is valid, 2 when a row's config is invalid,
/// 3 when only delivery requests are unmet.
pub(crate) fn run(args: &ValidateArgs) -> Exit {
    let loaded = match config::load(&args.config) {
        Ok(l) => l,
        Err(e) => {
            output::print_error("", &e);
            return Exit::Usage;
        }
    };
    say!(
        "{}: pipeline `{}`, {} {}",
        loaded.path.display(),
        output::clip(&loaded.name),
        loaded.rows.len(),
        if loaded.rows.len() == 1 {
            "run"
        } else {
            "runs"
        }
    );
    let mut exit = Exit::Success;
    for row in &loaded.rows {
        let code = check_row(&loaded, row);
        exit = worst(exit, code);
    }
    if exit == Exit::Success {
        say!("valid");
    }
    exit
}

fn check_row(loaded: &Loaded, row: &config::Row) -> Exit {
    let context = plan::context(loaded, &row.label);
    let (key, p) = match &row.config {
        Ok((key, p)) => (key, p),
        Err(e) => {
            say!("{}\n  ✗ invalid", row.label);
            output::print_error(&context, e);
            return Exit::Usage;
        }
    };
    let plan = match plan::plan(row, key, p) {
        Ok(plan) => plan,
        Err(e) => {
            say!("{}\n  ✗ invalid", row.label);
            output::print_error(&context, &e);
            return Exit::of(&e);
        }
    };
    say!("{}", row.label);
    say!("  state key   {key}");
    say!(
        "  source      {} {}",
        p.source.type_name(),
        p.source.target()
    );
    say!("  sink        {} {}", p.sink.type_name(), p.sink.target());
    say!("  state       {} {}", p.state.type_name(), p.state.target());
    say!("  batch size  {}", p.batch_size);
    say!(
        "  page delay  {} (at most, for a continuous source)",
        humantime::format_duration(p.max_page_delay)
    );
    match (&p.schedule, p.source.is_continuous()) {
        (Some(s), _) => say!("  schedule    {s} (faucet serve; faucet run ignores it)"),
        (None, true) => say!("  schedule    continuous (faucet serve runs it all the time)"),
        (None, false) => {
            say!("  schedule    none (faucet serve refuses a bounded row without one)")
        }
    }
    for warning in p.source.warnings() {
        say!("  warning     {warning}");
    }
    match &plan.guarantee {
        Ok(g) => {
            say!("  delivery    {g}");
            Exit::Success
        }
        Err(e) => {
            say!("  delivery    ✗ {}", output::error_chain(e));
            output::print_error(&context, e);
            Exit::of(e)
        }
    }
}

/// The code to exit with when both happened: a config error outranks an unmet request.
fn worst(a: Exit, b: Exit) -> Exit {
    let rank = |e: Exit| match e {
        Exit::Success => 0,
        Exit::DeliveryUnmet => 1,
        Exit::LeaseHeld | Exit::RunFailed => 2,
        Exit::Usage => 3,
    };
    if rank(b) > rank(a) { b } else { a }
}
