//! Alarms and the backend quota in a three-member cluster: NOSPACE raised
//! by the member over the quota and applied everywhere, what it refuses
//! and what it lets through, disarming, CORRUPT, and alarms kept across a
//! restart.

use oxetcd_proto::etcdserverpb::alarm_request::AlarmAction;
use oxetcd_proto::etcdserverpb::{
    AlarmRequest, AlarmType, CompactionRequest, DeleteRangeRequest, LeaseGrantRequest,
};

use super::*;

/// The tiny quota these tests fill.
const QUOTA_BYTES: u64 = 8 * 1024;

fn put(key: &str, value_bytes: usize) -> Request {
    Request::Put(PutRequest {
        key: key.as_bytes().to_vec(),
        value: vec![b'v'; value_bytes],
        ..Default::default()
    })
}

fn alarm(action: AlarmAction, member_id: u64, alarm: AlarmType) -> Request {
    Request::Alarm(AlarmRequest {
        action: action as i32,
        member_id,
        alarm: alarm as i32,
    })
}

fn listed(cluster: &mut Cluster, id: u64) -> Vec<(u64, i32)> {
    match cluster.call(id, alarm(AlarmAction::Get, 0, AlarmType::None)) {
        Ok(Response::Alarm(r)) => r.alarms.iter().map(|a| (a.member_id, a.alarm)).collect(),
        other => panic!("expected an alarm answer, got {other:?}"),
    }
}

/// Puts through `id` until the quota refuses one; returns how many fit.
fn fill(cluster: &mut Cluster, id: u64) -> usize {
    for n in 0..100 {
        match cluster.call(id, put("fill", 1024)) {
            Ok(_) => {}
            Err(Error::NoSpace) => return n,
            Err(e) => panic!("unexpected refusal {e:?}"),
        }
    }
    panic!("the quota never refused a put");
}

#[test]
fn nospace_is_raised_applied_everywhere_and_cleared_after_compaction() {
    let mut cluster = Cluster::with(3, |c| {
        c.quota = crate::alarm::Quota {
            limit_bytes: Some(QUOTA_BYTES),
        }
    });
    let follower = cluster.followers()[0];
    let filled = fill(&mut cluster, follower);
    assert!(filled >= 4, "only {filled} puts fit in the quota");
    cluster.run_for(Duration::from_secs(1));
    for id in 1..=3 {
        assert_eq!(
            listed(&mut cluster, id),
            vec![(follower, AlarmType::Nospace as i32)],
            "member {id} lists the alarm the full member raised"
        );
        assert_eq!(
            cluster.node(id).used_bytes(),
            cluster.node(follower).used_bytes()
        );
    }
    // Every member refuses growing writes; deletes, reads and
    // compaction still work.
    for id in 1..=3 {
        assert_eq!(cluster.call(id, put("small", 8)), Err(Error::NoSpace));
        let grant = Request::LeaseGrant(LeaseGrantRequest {
            ttl: 60,
            ..Default::default()
        });
        assert_eq!(cluster.call(id, grant), Err(Error::NoSpace));
    }
    let delete = Request::DeleteRange(DeleteRangeRequest {
        key: b"nothing".to_vec(),
        ..Default::default()
    });
    assert!(cluster.call(follower, delete).is_ok());
    let revision = cluster.node(follower).meta.revision;
    let compact = Request::Compact(CompactionRequest {
        revision,
        physical: true,
    });
    assert!(cluster.call(follower, compact).is_ok());
    assert!(cluster.node(follower).used_bytes() < QUOTA_BYTES / 2);
    // Still refused until the alarm is disarmed.
    assert_eq!(cluster.call(follower, put("small", 8)), Err(Error::NoSpace));
    let disarm = alarm(AlarmAction::Deactivate, follower, AlarmType::Nospace);
    assert!(cluster.call(1, disarm).is_ok());
    assert!(listed(&mut cluster, follower).is_empty());
    for id in 1..=3 {
        assert!(cluster.call(id, put("small", 8)).is_ok(), "member {id}");
    }
}

#[test]
fn corrupt_refuses_every_write_and_survives_a_restart() {
    let mut cluster = Cluster::new(3);
    let leader = cluster.leader().unwrap();
    assert!(cluster.call(leader, put("k", 4)).is_ok());
    let raise = alarm(AlarmAction::Activate, 2, AlarmType::Corrupt);
    match cluster.call(leader, raise.clone()) {
        Ok(Response::Alarm(r)) => assert_eq!(r.alarms.len(), 1),
        other => panic!("expected an alarm answer, got {other:?}"),
    }
    match cluster.call(leader, raise) {
        Ok(Response::Alarm(r)) => assert_eq!(r.alarms.len(), 1, "already active, answered"),
        other => panic!("expected an alarm answer, got {other:?}"),
    }
    let errors = match cluster.call(leader, Request::Status) {
        Ok(Response::Status(status)) => status.errors,
        other => panic!("expected a status answer, got {other:?}"),
    };
    assert_eq!(errors, vec!["memberID:2 alarm:CORRUPT ".to_owned()]);
    let follower = cluster.followers()[0];
    cluster.crash(follower);
    cluster.restart(follower);
    cluster.run_for(Duration::from_secs(3));
    assert_eq!(
        cluster.node(follower).alarms().len(),
        1,
        "kept in the backend"
    );
    let delete = Request::DeleteRange(DeleteRangeRequest {
        key: b"k".to_vec(),
        ..Default::default()
    });
    for id in 1..=3 {
        assert_eq!(cluster.call(id, put("k", 4)), Err(Error::Corrupt));
        assert_eq!(cluster.call(id, delete.clone()), Err(Error::Corrupt));
        assert_eq!(
            cluster.local(id, "k"),
            vec!["vvvv".to_owned()],
            "reads work"
        );
    }
    let clear = alarm(AlarmAction::Deactivate, 2, AlarmType::Corrupt);
    assert!(cluster.call(follower, clear).is_ok());
    assert!(cluster.call(follower, delete).is_ok());
}
