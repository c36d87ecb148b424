//! Every scenario against the in-process core: a `Node` over in-memory
//! storage, no network, no threads.

use oxetcd_conformance::{assert_all_pass, run_suite, Target};

#[test]
fn every_scenario_against_the_core() {
    let outcomes = run_suite(2, Target::in_process);
    assert_all_pass("the in-process core", &outcomes);
}
