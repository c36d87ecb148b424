//! Runs every scenario, each on a fresh target, a few at a time, and
//! reports all failures together.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::scenarios::{Scenario, ALL};
use crate::target::Target;

/// The result of one scenario on one target.
#[derive(Debug)]
pub struct Outcome {
    /// Scenario name.
    pub name: &'static str,
    /// `Err` holds what went wrong.
    pub result: Result<(), String>,
    /// Wall time, including starting the target.
    pub elapsed: Duration,
}

/// Runs every scenario of [`ALL`] (or those whose name contains
/// `$SCENARIO`, when set) on a fresh target from `make`, `workers` at a
/// time. Panics inside a scenario or target count as failures.
pub fn run_suite<F>(workers: usize, make: F) -> Vec<Outcome>
where
    F: Fn() -> Result<Target, String> + Sync,
{
    let filter = std::env::var("SCENARIO").unwrap_or_default();
    let chosen: Vec<&Scenario> = ALL.iter().filter(|s| s.name.contains(&filter)).collect();
    let next = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::with_capacity(chosen.len()));
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(scenario) = chosen.get(i) else { break };
                let started = Instant::now();
                let result = run_one(scenario, &make);
                let outcome = Outcome {
                    name: scenario.name,
                    result,
                    elapsed: started.elapsed(),
                };
                outcomes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(outcome);
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap_or_else(|e| e.into_inner());
    let order = |name: &str| chosen.iter().position(|s| s.name == name);
    outcomes.sort_by_key(|o| order(o.name));
    outcomes
}

fn run_one<F>(scenario: &Scenario, make: &F) -> Result<(), String>
where
    F: Fn() -> Result<Target, String>,
{
    let caught = catch_unwind(AssertUnwindSafe(|| {
        let mut target = make().map_err(|e| format!("starting the target: {e}"))?;
        (scenario.run)(&mut target)
    }));
    match caught {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "non-string panic".to_owned());
            Err(format!("panicked: {message}"))
        }
    }
}

/// Prints one line per scenario and panics with every failure's message if
/// any failed.
pub fn assert_all_pass(target_name: &str, outcomes: &[Outcome]) {
    assert!(!outcomes.is_empty(), "no scenario matched $SCENARIO");
    let total: Duration = outcomes.iter().map(|o| o.elapsed).sum();
    eprintln!(
        "{} scenarios against {target_name} ({total:.1?} summed):",
        outcomes.len()
    );
    for o in outcomes {
        let verdict = if o.result.is_ok() { "ok  " } else { "FAIL" };
        eprintln!("  {verdict} {:<50} {:>8.0?}", o.name, o.elapsed);
    }
    let failures: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            o.result
                .as_ref()
                .err()
                .map(|e| format!("--- {}\n{e}", o.name))
        })
        .collect();
    if !failures.is_empty() {
        let names: Vec<&str> = outcomes
            .iter()
            .filter(|o| o.result.is_err())
            .map(|o| o.name)
            .collect();
        panic!(
            "{} of {} scenarios failed against {target_name}: {}\n\n{}",
            failures.len(),
            outcomes.len(),
            names.join(", "),
            failures.join("\n\n")
        );
    }
}
