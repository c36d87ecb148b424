//! Every scenario against the `oxetcd-smol` binary (smol).
//! Each scenario runs on a freshly started server with its own data dir.

use oxetcd_conformance::{assert_all_pass, run_suite, ServerKind, Target};

/// Servers started at once; they mostly wait on each other's fsyncs.
const PARALLEL_SERVERS: usize = 4;

#[test]
fn every_scenario_against_oxetcd_smol() {
    let outcomes = run_suite(PARALLEL_SERVERS, || Target::launch(ServerKind::OxetcdSmol));
    assert_all_pass("oxetcd-smol", &outcomes);
}
