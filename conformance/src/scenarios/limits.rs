//! Validation at the edge: empty keys and oversized requests are refused
//! with etcd's code and message, write nothing, and the server keeps
//! serving.

use oxetcd_proto::etcdserverpb::compare::CompareResult::Equal;
use oxetcd_proto::etcdserverpb::{Compare, DeleteRangeRequest, RangeRequest};

use super::{
    cmp_version, del, ensure, everything, expect, get, op_del, op_put, op_range, put, range, txn,
};
use crate::target::Target;

const EMPTY_KEY: &str = "error 3 etcdserver: key is not provided";

/// etcd's default `--max-request-bytes`.
const REQUEST_BYTES_MAX: usize = 1_572_864;

/// An empty key is refused in every request that names one, even with a
/// from-key range end.
pub(super) fn empty_key_errors(t: &mut Target) -> Result<(), String> {
    expect(&t.range(get("")), EMPTY_KEY)?;
    expect(&t.range(range("", b"\0")), EMPTY_KEY)?;
    expect(&t.range(range("", "z")), EMPTY_KEY)?;
    expect(&t.put(put("", "1")), EMPTY_KEY)?;
    expect(&t.delete_range(del("")), EMPTY_KEY)?;
    expect(
        &t.delete_range(DeleteRangeRequest {
            range_end: b"\0".to_vec(),
            ..del("")
        }),
        EMPTY_KEY,
    )?;
    let empty_compare: Compare = cmp_version("", Equal, 0);
    expect(&t.txn(txn(vec![empty_compare], vec![], vec![])), EMPTY_KEY)?;
    expect(
        &t.txn(txn(vec![], vec![op_put(put("", "1"))], vec![])),
        EMPTY_KEY,
    )?;
    expect(
        &t.txn(txn(vec![], vec![op_range(get(""))], vec![])),
        EMPTY_KEY,
    )?;
    expect(
        &t.txn(txn(vec![], vec![], vec![op_del(del(""))])),
        EMPTY_KEY,
    )?;
    expect(
        &t.txn(txn(
            vec![],
            vec![op_put(put("a", "1")), op_put(put("", "1"))],
            vec![],
        )),
        EMPTY_KEY,
    )?;
    expect(&t.range(everything()), "rev 1 count 0 []")?;
    expect(&t.put(put("a", "1")), "rev 2")
}

/// A request over `--max-request-bytes` is refused with InvalidArgument
/// (one too large even for the gRPC frame limit with ResourceExhausted);
/// nothing is written and the next requests are served.
pub(super) fn oversized_requests_then_still_serves(t: &mut Target) -> Result<(), String> {
    let too_large = "error 3 etcdserver: request is too large";
    let big = vec![b'x'; REQUEST_BYTES_MAX + 30_000];
    expect(&t.put(put("a", &big)), too_large)?;
    expect(&t.range(get("a")), "rev 1 count 0 []")?;
    let half = vec![b'y'; 900_000];
    let two_halves = txn(
        vec![],
        vec![op_put(put("a", &half)), op_put(put("b", &half))],
        vec![],
    );
    expect(&t.txn(two_halves), too_large)?;
    expect(&t.range(everything()), "rev 1 count 0 []")?;
    let mebibyte = vec![b'z'; 1 << 20];
    expect(&t.put(put("a", &mebibyte)), "rev 2")?;
    expect(
        &t.range(get("a")),
        "rev 2 count 1 [a=<1048576 bytes> c2 m2 v1]",
    )?;
    if t.is_server() {
        // Past the gRPC frame limit (request bytes + 512 KiB) the transport
        // refuses the message itself; only the code is etcd's contract.
        let huge = vec![b'h'; 3_000_000];
        let refused = t.put(put("h", &huge));
        ensure(matches!(&refused, Err(f) if f.code == 8), || {
            format!(
                "3 MB put: expected ResourceExhausted (8), got {:?}",
                refused.as_ref().map(|_| ())
            )
        })?;
    }
    expect(&t.put(put("b", "small")), "rev 3")?;
    expect(
        &t.range(RangeRequest {
            keys_only: true,
            ..everything()
        }),
        "rev 3 count 2 [a= c2 m2 v1, b= c3 m3 v1]",
    )
}
