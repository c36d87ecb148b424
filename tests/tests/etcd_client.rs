//! The Rust `etcd-client` crate (0.21, a client users already have)
//! against both binaries: `get_stream()` — etcd 3.7's RangeStream — of
//! 100,000 keys returns exactly what one `get()` returns: the same
//! key-values with their revisions, versions and leases, in the same
//! order, and on its final chunk the same count, `more` and header
//! revision; the same holds with a limit and `keys_only`, and a custom
//! sort order is refused as etcd 3.7 refuses it.

use etcd_client::{Client, GetOptions, GetResponse, KeyValue, SortOrder, SortTarget, Txn, TxnOp};
use oxetcd_tests::{Server, ServerKind};

const KEYS: usize = 100_000;
const PUTS_PER_TXN: usize = 100;

/// What is compared of a key-value.
fn fields(kv: &KeyValue) -> (Vec<u8>, Vec<u8>, i64, i64, i64, i64) {
    (
        kv.key().to_vec(),
        kv.value().to_vec(),
        kv.create_revision(),
        kv.mod_revision(),
        kv.version(),
        kv.lease(),
    )
}

/// One `get()` and one `get_stream()` with `options`, compared.
async fn compare(client: &mut Client, options: GetOptions, expected_kvs: usize) {
    let mut kv = client.kv_client().max_decoding_message_size(256 << 20);
    let whole: GetResponse = kv.get("key/", Some(options.clone())).await.expect("get");
    let mut stream = kv
        .get_stream("key/", Some(options))
        .await
        .expect("get_stream");
    let mut merged = Vec::new();
    let mut chunks = 0;
    let mut last = None;
    while let Some(chunk) = stream.message().await.expect("a chunk") {
        chunks += 1;
        merged.extend(chunk.kvs().iter().map(fields));
        last = Some(chunk);
    }
    let last = last.expect("at least one chunk");
    let want: Vec<_> = whole.kvs().iter().map(fields).collect();
    assert_eq!(want.len(), expected_kvs);
    assert!(merged == want, "streamed key-values differ from get()");
    assert!(chunks > 1, "a result this size comes in chunks");
    assert_eq!(last.count(), whole.count());
    assert_eq!(last.more(), whole.more());
    let revision = |r: &GetResponse| r.header().map(|h| h.revision());
    assert_eq!(revision(&last), revision(&whole));
}

async fn check(kind: ServerKind) {
    let server = Server::start(kind).expect("server starts");
    let mut client = Client::connect([server.address()], None)
        .await
        .expect("connect");
    let lease = client.lease_grant(600, None).await.expect("lease").id();
    for batch in 0..KEYS / PUTS_PER_TXN {
        let ops: Vec<TxnOp> = (0..PUTS_PER_TXN)
            .map(|i| {
                let n = batch * PUTS_PER_TXN + i;
                let options = n
                    .is_multiple_of(7)
                    .then(|| etcd_client::PutOptions::new().with_lease(lease));
                TxnOp::put(format!("key/{n:06}"), format!("value-{n}"), options)
            })
            .collect();
        client.txn(Txn::new().and_then(ops)).await.expect("txn");
    }
    // Some keys at later versions, so versions and revisions differ.
    for n in (0..KEYS).step_by(997) {
        client
            .put(format!("key/{n:06}"), "again", None)
            .await
            .expect("put");
    }
    compare(&mut client, GetOptions::new().with_prefix(), KEYS).await;
    compare(
        &mut client,
        GetOptions::new()
            .with_prefix()
            .with_limit(5_000)
            .with_sort(SortTarget::Key, SortOrder::Ascend),
        5_000,
    )
    .await;
    // Any other order is refused, as etcd 3.7 refuses it.
    let descending = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Key, SortOrder::Descend);
    let refused = client
        .kv_client()
        .get_stream("key/", Some(descending))
        .await;
    let refused = match refused {
        Err(e) => e.to_string(),
        Ok(mut stream) => format!("{:?}", stream.message().await),
    };
    assert!(
        refused.contains("RangeStream does not support custom sort orders"),
        "{refused}"
    );
    compare(
        &mut client,
        GetOptions::new().with_prefix().with_keys_only(),
        KEYS,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_stream_returns_what_get_returns_on_oxetcd() {
    check(ServerKind::Oxetcd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_stream_returns_what_get_returns_on_oxetcd_smol() {
    check(ServerKind::OxetcdSmol).await;
}
