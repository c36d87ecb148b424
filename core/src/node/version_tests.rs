//! Cluster version and downgrade across members, on the in-process
//! cluster harness of [`super::cluster_tests`]: members run as different
//! server versions through their configuration.

use std::time::Duration;

use oxetcd_proto::etcdserverpb::{downgrade_request::DowngradeAction, DowngradeRequest};

use oxetcd_proto::etcdserverpb::MemberAddRequest;

use super::cluster_tests::{config, put, url, Cluster};
use super::*;
use crate::version::Version;

const V35: Version = Version::new(3, 5, 0);
const V36: Version = Version::new(3, 6, 0);

/// Virtual time a version change may take to reach every member.
const SPREAD_TIME_MAX: Duration = Duration::from_secs(30);

fn downgrade(action: DowngradeAction, version: &str) -> Request {
    Request::Downgrade(DowngradeRequest {
        action: action as i32,
        version: version.to_owned(),
    })
}

fn status(cluster: &mut Cluster, id: u64) -> StatusResponse {
    match cluster.call(id, Request::Status) {
        Ok(Response::Status(status)) => status,
        other => panic!("expected a status, got {other:?}"),
    }
}

/// Runs until every running member applied cluster version `version`.
fn cluster_version_reaches(cluster: &mut Cluster, version: Version) -> bool {
    cluster.run_until(SPREAD_TIME_MAX, |c| {
        c.running()
            .into_iter()
            .all(|id| c.node(id).versions().cluster() == Some(version))
    })
}

fn downgrade_version(result: Result<Response, Error>) -> String {
    match result {
        Ok(Response::Downgrade(r)) => r.version,
        other => panic!("expected a downgrade answer, got {other:?}"),
    }
}

#[test]
fn the_cluster_version_is_the_lowest_member_version() {
    let mut cluster = Cluster::with(3, |config| {
        if config.member_id == 3 {
            config.server_version = Version::new(3, 5, 9);
        }
    });
    assert!(cluster_version_reaches(&mut cluster, V35));
    let s3 = status(&mut cluster, 3);
    assert_eq!(s3.version, "3.5.9", "a member reports its own version");
    assert_eq!(s3.storage_version, "3.5.0");
    let s1 = status(&mut cluster, 1);
    assert_eq!(s1.version, "3.6.0");
    assert_eq!(s1.storage_version, "3.5.0");
    assert_eq!(
        cluster.node(1).versions().member(3),
        Some(Version::new(3, 5, 9))
    );

    // Member 3 is upgraded: it publishes its new version and the cluster
    // version rises.
    cluster.crash(3);
    cluster.members.get_mut(&3).unwrap().config.server_version = V36;
    cluster.restart(3);
    assert!(cluster_version_reaches(&mut cluster, V36));
    assert_eq!(status(&mut cluster, 2).storage_version, "3.6.0");
}

#[test]
fn the_cluster_version_survives_a_restart() {
    let mut cluster = Cluster::with(3, |_| {});
    assert!(cluster_version_reaches(&mut cluster, V36));
    let follower = cluster.followers()[0];
    cluster.stop(follower);
    cluster.restart(follower);
    assert_eq!(
        cluster.node(follower).versions().cluster(),
        Some(V36),
        "read back from the stored membership"
    );
}

#[test]
fn downgrade_rules_enable_and_cancel() {
    let mut cluster = Cluster::with(3, |_| {});
    assert!(cluster_version_reaches(&mut cluster, V36));
    let follower = cluster.followers()[0];
    let validate = cluster.call(follower, downgrade(DowngradeAction::Validate, "3.5"));
    assert_eq!(downgrade_version(validate), "3.6");
    for (action, target, error) in [
        (
            DowngradeAction::Validate,
            "3.4",
            Error::InvalidDowngradeTargetVersion,
        ),
        (
            DowngradeAction::Validate,
            "3.6",
            Error::InvalidDowngradeTargetVersion,
        ),
        (
            DowngradeAction::Enable,
            "3.7",
            Error::InvalidDowngradeTargetVersion,
        ),
        (
            DowngradeAction::Validate,
            "three",
            Error::WrongDowngradeVersionFormat,
        ),
        (DowngradeAction::Cancel, "", Error::NoInflightDowngrade),
    ] {
        let answer = cluster.call(follower, downgrade(action, target));
        assert_eq!(answer, Err(error), "{action:?} {target}");
    }

    // Two enables race: the log decides, the second finds a job.
    let leader = cluster.leader().expect("a leader");
    let first = cluster.call(leader, downgrade(DowngradeAction::Enable, "3.5"));
    assert_eq!(downgrade_version(first), "3.6");
    assert!(
        cluster_version_reaches(&mut cluster, V35),
        "enable lowers the cluster version"
    );
    for id in cluster.running() {
        let s = status(&mut cluster, id);
        assert_eq!(
            s.storage_version, "3.5.0",
            "member {id} migrated its storage down"
        );
        let info = s.downgrade_info.expect("downgrade info");
        assert!(info.enabled);
        assert_eq!(info.target_version, "3.5.0");
    }

    let cancel = cluster.call(follower, downgrade(DowngradeAction::Cancel, ""));
    assert_eq!(downgrade_version(cancel), "3.5");
    assert!(
        cluster_version_reaches(&mut cluster, V36),
        "cancel restores"
    );
    let s = status(&mut cluster, follower);
    assert_eq!(s.storage_version, "3.6.0");
    assert!(!s.downgrade_info.expect("downgrade info").enabled);
}

#[test]
fn racing_enables_are_decided_in_log_order() {
    let mut cluster = Cluster::with(3, |_| {});
    assert!(cluster_version_reaches(&mut cluster, V36));
    let leader = cluster.leader().expect("a leader");
    // Both pass admission before either applies.
    let a = cluster.send(leader, downgrade(DowngradeAction::Enable, "3.5"));
    let b = cluster.send(leader, downgrade(DowngradeAction::Enable, "3.5"));
    assert!(cluster.run_until(SPREAD_TIME_MAX, |c| {
        c.members[&leader].answers.contains_key(&a) && c.members[&leader].answers.contains_key(&b)
    }));
    assert!(cluster.take_answer(leader, a).expect("answered").is_ok());
    assert_eq!(
        cluster.take_answer(leader, b).expect("answered"),
        Err(Error::DowngradeInProcess)
    );
}

#[test]
fn a_downgrade_ends_once_every_member_runs_the_target() {
    let mut cluster = Cluster::with(3, |config| {
        config.downgrade_check_interval = Duration::from_secs(1);
    });
    assert!(cluster_version_reaches(&mut cluster, V36));
    let leader = cluster.leader().expect("a leader");
    let enabled = cluster.call(leader, downgrade(DowngradeAction::Enable, "3.5"));
    assert!(enabled.is_ok());
    assert!(cluster_version_reaches(&mut cluster, V35));
    // Replace the binaries one by one.
    for id in [1, 2, 3] {
        cluster.crash(id);
        cluster.members.get_mut(&id).unwrap().config.server_version = Version::new(3, 5, 4);
        cluster.restart(id);
        assert!(cluster.run_until(SPREAD_TIME_MAX, |c| c.leader().is_some()));
        let restarted = id;
        assert!(cluster.run_until(SPREAD_TIME_MAX, |c| {
            c.running()
                .into_iter()
                .all(|m| c.node(m).versions().member(restarted) == Some(Version::new(3, 5, 4)))
        }));
    }
    assert!(
        cluster.run_until(SPREAD_TIME_MAX, |c| {
            c.running()
                .into_iter()
                .all(|id| c.node(id).versions().downgrade_target().is_none())
        }),
        "the leader ends the job"
    );
    for id in cluster.running() {
        assert_eq!(cluster.node(id).versions().cluster(), Some(V35));
    }
}

#[test]
fn a_member_below_the_cluster_version_is_refused() {
    let mut cluster = Cluster::with(3, |_| {});
    assert!(cluster_version_reaches(&mut cluster, V36));
    let follower = cluster.followers()[0];
    assert_eq!(cluster.node(follower).version_refusal(), None);
    // An older binary on the same data: refused once a leader confirmed
    // what its backend holds.
    let refusal = restart_refused(&mut cluster, follower, Version::new(3, 5, 1));
    assert!(refusal
        .starts_with("invalid downgrade; server version is lower than determined cluster version"));
    // A binary two minors newer is outside the range too.
    let refusal = restart_refused(&mut cluster, follower, Version::new(3, 8, 0));
    assert!(refusal.starts_with("incompatible with current running cluster"));
}

/// Restarts member `id` as `version` and answers why it refuses to run.
fn restart_refused(cluster: &mut Cluster, id: u64, version: Version) -> String {
    cluster.crash(id);
    cluster
        .members
        .get_mut(&id)
        .expect("a member")
        .config
        .server_version = version;
    cluster.restart(id);
    assert!(cluster.run_until(SPREAD_TIME_MAX, |c| c.node(id).version_refusal().is_some()));
    cluster
        .node(id)
        .version_refusal()
        .expect("refused")
        .to_string()
}

#[test]
fn versions_travel_in_snapshots() {
    let mut cluster = Cluster::with(3, |config| {
        config.snapshot_count = 20;
        config.snapshot_catch_up_entries = 5;
    });
    assert!(cluster_version_reaches(&mut cluster, V36));
    let leader = cluster.leader().expect("a leader");
    let enabled = cluster.call(leader, downgrade(DowngradeAction::Enable, "3.5"));
    assert!(enabled.is_ok());
    assert!(cluster_version_reaches(&mut cluster, V35));
    for i in 0..60 {
        cluster.call(leader, put(&format!("k{i:02}"), "v")).unwrap();
    }
    let add = Request::MemberAdd(MemberAddRequest {
        peer_ur_ls: vec![url(4)],
        is_learner: true,
    });
    let Ok(Response::MemberAdd(added)) = cluster.call(leader, add) else {
        panic!("learner add failed");
    };
    let learner = added.member.expect("the learner").id;
    let mut config = config(learner, &[1, 2, 3], ClusterState::Existing);
    config.snapshot_count = 20;
    config.server_version = V35;
    cluster.start(learner, config);
    assert!(cluster.run_until(SPREAD_TIME_MAX, |c| {
        c.node(learner).applied_index() >= c.node(leader).applied_index()
    }));
    assert!(
        cluster.members[&learner].log.state().unwrap().first_index > 1,
        "the learner started from a snapshot"
    );
    let versions = cluster.node(learner).versions();
    assert_eq!(versions.cluster(), Some(V35));
    assert_eq!(versions.storage(), Some(V35));
    assert_eq!(versions.downgrade_target(), Some(V35));
    assert_eq!(versions.member(leader), Some(V36));
    assert_eq!(cluster.node(learner).version_refusal(), None);
}

/// Sends `request` to member `id` as `credentials` and runs the cluster
/// until it is answered.
fn call_as(
    cluster: &mut Cluster,
    id: u64,
    request: Request,
    credentials: crate::auth::Credentials,
) -> Result<Response, Error> {
    let request_id = cluster.next_request;
    cluster.next_request += 1;
    let now = cluster.now;
    cluster
        .node_mut(id)
        .handle(now, Input::Client(request_id, request, credentials));
    assert!(cluster.run_until(SPREAD_TIME_MAX, |c| c.members[&id]
        .answers
        .contains_key(&request_id)));
    cluster.take_answer(id, request_id).expect("answered")
}

#[test]
fn only_root_may_downgrade_once_auth_is_on() {
    use crate::auth::{AuthRequest, Credentials};
    use oxetcd_proto::authpb::UserAddOptions;
    use oxetcd_proto::etcdserverpb::{
        AuthEnableRequest, AuthUserAddRequest, AuthUserGrantRoleRequest,
    };
    use oxetcd_proto::oxetcdpb::auth_change::Change;

    let mut cluster = Cluster::with(3, |_| {});
    assert!(cluster_version_reaches(&mut cluster, V36));
    let leader = cluster.leader().expect("a leader");
    let user = |name: &str| {
        Change::UserAdd(AuthUserAddRequest {
            name: name.into(),
            options: Some(UserAddOptions { no_password: true }),
            ..Default::default()
        })
    };
    for change in [
        user("root"),
        Change::UserGrantRole(AuthUserGrantRoleRequest {
            user: "root".into(),
            role: "root".into(),
        }),
        user("alice"),
        Change::Enable(AuthEnableRequest {}),
    ] {
        let answer = cluster.call(leader, Request::Auth(AuthRequest::Change(change)));
        assert!(answer.is_ok(), "{answer:?}");
    }
    let as_user = |name: &str| Credentials::User {
        name: name.into(),
        revision: None,
    };
    let validate = || downgrade(DowngradeAction::Validate, "3.5");
    assert_eq!(
        call_as(&mut cluster, leader, validate(), as_user("alice")),
        Err(Error::PermissionDenied)
    );
    assert_eq!(
        call_as(
            &mut cluster,
            leader,
            downgrade(DowngradeAction::Enable, "3.5"),
            as_user("alice")
        ),
        Err(Error::PermissionDenied)
    );
    let by_root = call_as(&mut cluster, leader, validate(), as_user("root"));
    assert_eq!(downgrade_version(by_root), "3.6");
}
