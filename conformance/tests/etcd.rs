//! Every scenario against Debian's etcd, the reference; missing etcd is a failure, not a skip.
//! Each scenario runs on a freshly started server with its own data dir.

use oxetcd_conformance::{assert_all_pass, run_suite, ServerKind, Target};

/// Servers started at once; they mostly wait on each other's fsyncs.
const PARALLEL_SERVERS: usize = 4;

#[test]
fn every_scenario_against_etcd() {
    let outcomes = run_suite(PARALLEL_SERVERS, || Target::launch(ServerKind::Etcd));
    assert_all_pass("etcd", &outcomes);
}
