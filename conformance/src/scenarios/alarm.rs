//! Alarms and the backend quota: `Maintenance.Alarm`'s answers, what
//! NOSPACE and CORRUPT refuse, and filling the suite's quota
//! ([`crate::target::SUITE_QUOTA_BYTES`]) until NOSPACE, then making room
//! and disarming, as etcd's `TestCtlV3Alarm` does.

use oxetcd_proto::etcdserverpb::alarm_request::AlarmAction;
use oxetcd_proto::etcdserverpb::{AlarmRequest, AlarmType, CompactionRequest, TxnRequest};

use super::{del, ensure, expect, get, ok, put};
use crate::target::Target;

/// etcd's ID of a default single member (see the status scenario).
const MEMBER_ID: u64 = 0x8e9e_05c5_2164_694d;

/// A member ID no member has: etcd stores alarms for any ID.
const OTHER_ID: u64 = 0x1234;

/// Puts of this size fill the suite's quota in about a hundred.
const FILL_VALUE_BYTES: usize = 256 * 1024;

/// Fill puts at most before the scenario gives up.
const FILL_PUTS_MAX: usize = 1_000;

fn alarm(action: AlarmAction, member_id: u64, alarm: AlarmType) -> AlarmRequest {
    AlarmRequest {
        action: action as i32,
        member_id,
        alarm: alarm as i32,
    }
}

fn list() -> AlarmRequest {
    alarm(AlarmAction::Get, 0, AlarmType::None)
}

/// ACTIVATE answers the alarm (again when already active),
/// GET lists by type, Status lists them among its errors, DEACTIVATE
/// answers what it cleared; NOSPACE refuses
/// puts and txns with puts but not deletes or read-only txns.
pub(super) fn alarm_activate_get_deactivate(t: &mut Target) -> Result<(), String> {
    use AlarmAction::{Activate, Deactivate, Get};
    use AlarmType::{Corrupt, None, Nospace};
    ok(t.put(put("k", "v")))?;
    expect(&t.alarm(list()), "alarms []")?;
    expect(
        &t.alarm(alarm(Activate, OTHER_ID, Nospace)),
        "alarms [1234 NOSPACE]",
    )?;
    expect(
        &t.alarm(alarm(Activate, OTHER_ID, Nospace)),
        "alarms [1234 NOSPACE]",
    )?;
    expect(&t.alarm(list()), "alarms [1234 NOSPACE]")?;
    expect(&t.alarm(alarm(Get, 0, Corrupt)), "alarms []")?;
    expect(&t.alarm(alarm(Get, 0, None)), "alarms [1234 NOSPACE]")?;
    let errors = ok(t.status())?.errors;
    ensure(errors == ["memberID:4660 alarm:NOSPACE "], || {
        format!("status errors {errors:?}")
    })?;
    expect(
        &t.put(put("k", "w")),
        "error 8 etcdserver: mvcc: database space exceeded",
    )?;
    expect(&t.range(get("k")), "rev 2 count 1 [k=v c2 m2 v1]")?;
    expect(&t.txn(TxnRequest::default()), "rev 2 succeeded {}")?;
    expect(&t.delete_range(del("k")), "rev 3 deleted 1")?;
    expect(
        &t.alarm(alarm(Deactivate, OTHER_ID, Nospace)),
        "alarms [1234 NOSPACE]",
    )?;
    expect(&t.alarm(alarm(Deactivate, OTHER_ID, Nospace)), "alarms []")?;
    expect(&t.put(put("k", "w")), "rev 4")?;
    expect(&t.alarm(list()), "alarms []")
}

/// CORRUPT refuses every write with DataLoss; reads still work, and
/// clearing it lets writes through again.
pub(super) fn alarm_corrupt_refuses_writes(t: &mut Target) -> Result<(), String> {
    use AlarmAction::{Activate, Deactivate};
    ok(t.put(put("k", "v")))?;
    expect(
        &t.alarm(alarm(Activate, OTHER_ID, AlarmType::Corrupt)),
        "alarms [1234 CORRUPT]",
    )?;
    let corrupt = "error 15 etcdserver: corrupt cluster";
    expect(&t.put(put("k", "w")), corrupt)?;
    expect(&t.delete_range(del("k")), corrupt)?;
    expect(
        &t.compact(CompactionRequest {
            revision: 2,
            physical: false,
        }),
        corrupt,
    )?;
    expect(&t.range(get("k")), "rev 2 count 1 [k=v c2 m2 v1]")?;
    expect(
        &t.alarm(alarm(Deactivate, OTHER_ID, AlarmType::Corrupt)),
        "alarms [1234 CORRUPT]",
    )?;
    expect(&t.put(put("k", "w")), "rev 3")
}

/// Filling the quota raises NOSPACE for this member and refuses further
/// puts; after compaction, defragmentation and disarming, puts succeed.
pub(super) fn alarm_quota_fill_then_recover(t: &mut Target) -> Result<(), String> {
    ok(t.put(put("1st", "a")))?;
    let value = vec![b'b'; FILL_VALUE_BYTES];
    let mut refused = None;
    for _ in 0..FILL_PUTS_MAX {
        if let Err(e) = t.put(put("2nd", &value)) {
            refused = Some(e);
            break;
        }
    }
    let refused = refused.ok_or("the quota never refused a put")?;
    ensure(
        refused.code == 8 && refused.message == "etcdserver: mvcc: database space exceeded",
        || format!("the refusal was {refused}"),
    )?;
    let raised = format!("alarms [{MEMBER_ID:x} NOSPACE]");
    expect(&t.alarm(list()), &raised)?;
    expect(
        &t.put(put("3rd", "a")),
        "error 8 etcdserver: mvcc: database space exceeded",
    )?;
    let revision = ok(t.status())?.header.unwrap_or_default().revision;
    ok(t.compact(CompactionRequest {
        revision,
        physical: true,
    }))?;
    ok(t.defragment())?;
    let disarm = alarm(AlarmAction::Deactivate, MEMBER_ID, AlarmType::Nospace);
    expect(&t.alarm(disarm), &raised)?;
    let after = ok(t.put(put("4th", "a")))?;
    ensure(
        after.header.is_some_and(|h| h.revision == revision + 1),
        || format!("the put after disarming answered {after:?}"),
    )?;
    expect(&t.alarm(list()), "alarms []")
}
