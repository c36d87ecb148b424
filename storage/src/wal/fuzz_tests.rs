//! Fuzzing the WAL segment scan that runs at every open: any bytes in a
//! segment file give frames, a torn tail or a corruption error, never a
//! panic. Seeds are segments as the writer frames them.

use raft_proto::eraftpb::{Entry, HardState};

use super::frame::{encode_frame, ItemRef};
use super::segment::scan_segment;

fn seeds() -> Vec<Vec<u8>> {
    let entries: Vec<Entry> = (1..=3u64)
        .map(|i| Entry {
            index: i,
            term: 1,
            data: vec![i as u8; 40 * i as usize].into(),
            ..Default::default()
        })
        .collect();
    let hard_state = HardState {
        term: 1,
        vote: 7,
        commit: 3,
        ..Default::default()
    };
    let mut segment = Vec::new();
    encode_frame(&[ItemRef::ClusterId(0xc1)], &mut segment).expect("a frame");
    for entry in &entries {
        encode_frame(&[ItemRef::Entry(entry)], &mut segment).expect("a frame");
    }
    encode_frame(
        &[
            ItemRef::HardState(&hard_state),
            ItemRef::Mark {
                first_index: 2,
                snapshot_term: 1,
                replace: false,
            },
        ],
        &mut segment,
    )
    .expect("a frame");
    let mut zero_tail = segment.clone();
    zero_tail.resize(segment.len() + 512, 0);
    vec![segment, zero_tail]
}

#[test]
fn fuzz_wal_segment_scan() {
    let ran = oxetcd_fuzz::fuzz("wal-segment", &seeds(), |bytes| {
        let _ = scan_segment(bytes);
    });
    assert!(ran > 0);
}
