//! The health probes of both binaries, with etcd 3.6's bodies: `/health`
//! (`?serializable=true`, `?exclude=<alarm>`), `/livez` and `/readyz`
//! (`?verbose`, `?exclude=<check>`, one check's sub-path), healthy; then
//! unhealthy for an active CORRUPT alarm, and for a member that lost its
//! leader. Every wait is bounded.

use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::alarm_request::AlarmAction;
use oxetcd_proto::etcdserverpb::{AlarmRequest, AlarmType};
use oxetcd_tests::probe::{http_get, http_request};
use oxetcd_tests::{Cluster, ClusterOptions, Grpc, Server, ServerKind};

/// Longest to wait for a member to see its leader gone.
const LEADER_LOST_DEADLINE: Duration = Duration::from_secs(20);

const POLL: Duration = Duration::from_millis(100);

const HEALTHY: &str = r#"{"health":"true","reason":""}"#;

const READY_VERBOSE: &str =
    "[+]data_corruption ok\n[+]serializable_read ok\n[+]linearizable_read ok\nok\n";

fn corrupt(action: AlarmAction) -> AlarmRequest {
    AlarmRequest {
        action: action as i32,
        member_id: 0x77,
        alarm: AlarmType::Corrupt as i32,
    }
}

fn healthy_then_corrupt(kind: ServerKind) {
    let server = Server::start(kind).unwrap_or_else(|e| panic!("{e}"));
    let address = server.address();
    let get = |path: &str| http_get(&address, path);
    let ok = (200, "ok\n".to_owned());
    assert_eq!(get("/health"), (200, HEALTHY.to_owned()));
    assert_eq!(get("/health?serializable=true"), (200, HEALTHY.to_owned()));
    assert_eq!(get("/livez"), ok);
    assert_eq!(
        get("/livez?verbose"),
        (200, "[+]serializable_read ok\nok\n".to_owned())
    );
    assert_eq!(get("/readyz"), ok);
    assert_eq!(get("/readyz?verbose"), (200, READY_VERBOSE.to_owned()));
    assert_eq!(
        get("/readyz?verbose&exclude=linearizable_read&exclude=nothing"),
        (
            200,
            "[+]data_corruption ok\n[+]serializable_read ok\nok\n".to_owned()
        )
    );
    assert_eq!(
        get("/readyz/linearizable_read?verbose"),
        (200, "[+]linearizable_read ok\nok\n".to_owned())
    );
    assert_eq!(get("/readyz/nothing").0, 404);
    assert_eq!(http_request(&address, "POST", "/livez").0, 405);

    let mut client = Grpc::connect(server.endpoint()).unwrap_or_else(|e| panic!("{e}"));
    client
        .alarm(corrupt(AlarmAction::Activate))
        .expect("activate");
    let reason = "{\"health\":\"false\",\"reason\":\"ALARM CORRUPT\"}\n";
    assert_eq!(get("/health"), (503, reason.to_owned()));
    assert_eq!(get("/health?exclude=NOSPACE"), (503, reason.to_owned()));
    assert_eq!(get("/health?exclude=CORRUPT"), (200, HEALTHY.to_owned()));
    assert_eq!(
        get("/readyz"),
        (
            503,
            "[-]data_corruption failed: alarm activated: CORRUPT\n[+]serializable_read ok\n\
             [+]linearizable_read ok\n/readyz failed\n"
                .to_owned()
        )
    );
    assert_eq!(get("/readyz?exclude=data_corruption"), ok);
    assert_eq!(
        get("/readyz/data_corruption").1,
        "[-]data_corruption failed: alarm activated: CORRUPT\n/readyz/data_corruption failed\n"
    );
    assert_eq!(get("/livez"), ok, "liveness ignores alarms");
    client
        .alarm(corrupt(AlarmAction::Deactivate))
        .expect("deactivate");
    assert_eq!(get("/readyz"), ok);
    assert_eq!(get("/health"), (200, HEALTHY.to_owned()));
}

#[test]
fn probes_of_a_healthy_then_corrupt_member() {
    for kind in [ServerKind::Oxetcd, ServerKind::OxetcdSmol] {
        healthy_then_corrupt(kind);
    }
}

/// A member whose peers are gone: live (its own reads work), not ready,
/// `/health` says there is no leader, `?serializable=true` is healthy.
#[test]
fn a_member_without_a_leader_is_live_but_not_ready() {
    let mut cluster = Cluster::start(
        ClusterOptions::new("health-test"),
        &[
            ServerKind::Oxetcd,
            ServerKind::OxetcdSmol,
            ServerKind::Oxetcd,
        ],
    );
    let leader = cluster.wait_leader();
    let alone = (leader + 1) % 3;
    for i in 0..3 {
        if i != alone {
            cluster.members[i].kill();
        }
    }
    let address = cluster.members[alone].address();
    let started = Instant::now();
    let lost = (
        503,
        "{\"health\":\"false\",\"reason\":\"RAFT NO LEADER\"}\n".to_owned(),
    );
    while http_get(&address, "/health") != lost {
        assert!(
            started.elapsed() < LEADER_LOST_DEADLINE,
            "still healthy: {:?}\n{}",
            http_get(&address, "/health"),
            cluster.members[alone].log_tail()
        );
        std::thread::sleep(POLL);
    }
    assert_eq!(
        http_get(&address, "/health?serializable=true"),
        (200, HEALTHY.to_owned())
    );
    assert_eq!(http_get(&address, "/livez"), (200, "ok\n".to_owned()));
    let (code, body) = http_get(&address, "/readyz");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.starts_with(
            "[+]data_corruption ok\n[+]serializable_read ok\n[-]linearizable_read failed: "
        ) && body.ends_with("\n/readyz failed\n"),
        "{body}"
    );
}
