//! `KV.RangeStream` (etcd 3.7) on both binaries: the merged chunks equal
//! the unary `Range` for every option the stream serves; writes and
//! deletions made while a stream is open are not seen by it; a compaction
//! of its revision ends it with etcd's error; a user without read
//! permission is refused; `oxetcdctl get --stream` prints what `get`
//! prints.

use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::{
    CompactionRequest, DeleteRangeRequest, PutRequest, RangeRequest, RangeResponse,
};
use oxetcd_tests::{binary_path, etcdctl, Server, ServerKind};
use tonic::transport::{Channel, Endpoint};

/// Keys written before the streams: enough, at this size, for chunks to
/// grow past the first few doublings.
const KEYS: usize = 400;
const VALUE_BYTES: usize = 2_048;

/// Longest all of one binary's checks may take.
const CHECKS_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

fn key(i: usize) -> Vec<u8> {
    format!("stream/{i:04}").into_bytes()
}

fn prefix() -> RangeRequest {
    RangeRequest {
        key: b"stream/".to_vec(),
        range_end: b"stream0".to_vec(),
        ..Default::default()
    }
}

async fn put(kv: &mut KvClient<Channel>, k: Vec<u8>) -> i64 {
    let put = PutRequest {
        key: k,
        value: vec![b'v'; VALUE_BYTES],
        ..Default::default()
    };
    let header = kv.put(put).await.expect("put").into_inner().header;
    header.expect("header").revision
}

/// The chunks of one stream, and whether each but the last was bare.
async fn chunks(
    kv: &mut KvClient<Channel>,
    request: RangeRequest,
) -> Result<Vec<RangeResponse>, tonic::Status> {
    let mut stream = kv.range_stream(request).await?.into_inner();
    let mut chunks = Vec::new();
    // Bounded: a stream of this data has far fewer chunks.
    for _ in 0..1_000 {
        match stream.message().await? {
            Some(chunk) => chunks.push(chunk.range_response.unwrap_or_default()),
            None => return Ok(chunks),
        }
    }
    panic!("the stream never ended")
}

/// The chunks merged as clients merge them; checks that only the last
/// carries a header, `more` and `count`.
fn merged(chunks: Vec<RangeResponse>) -> RangeResponse {
    let (last, rest) = chunks.split_last().expect("at least one chunk");
    for chunk in rest {
        assert!(chunk.header.is_none() && !chunk.more && chunk.count == 0);
    }
    let mut merged = last.clone();
    merged.kvs = chunks.iter().flat_map(|c| c.kvs.clone()).collect();
    merged
}

/// A response without the fields a later read may change (raft term).
fn comparable(mut response: RangeResponse) -> RangeResponse {
    if let Some(header) = &mut response.header {
        header.raft_term = 0;
    }
    response
}

fn check(kind: ServerKind) {
    let server = Server::start(kind).unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let checks = async {
        // A small HTTP/2 stream window, so the member cannot send far
        // ahead of what the client has read (with hyper's 2 MiB default it
        // could send the whole stream before the compaction below). The
        // connection's window stays large: a stream's unread chunks must
        // not hold up the puts made on the same connection meanwhile.
        let channel = Endpoint::from_shared(server.endpoint().to_owned())
            .expect("endpoint")
            .initial_stream_window_size(65_535)
            .connect()
            .await
            .expect("connect");
        let mut kv = KvClient::new(channel);
        let mut first_revision = 0;
        for i in 0..KEYS {
            let revision = put(&mut kv, key(i)).await;
            if i == 0 {
                first_revision = revision;
            }
        }
        let cases = [
            prefix(),
            RangeRequest {
                limit: 5,
                ..prefix()
            },
            RangeRequest {
                limit: 10,
                ..prefix()
            },
            RangeRequest {
                limit: 25,
                ..prefix()
            },
            RangeRequest {
                limit: 1_000,
                ..prefix()
            },
            RangeRequest {
                keys_only: true,
                ..prefix()
            },
            RangeRequest {
                count_only: true,
                ..prefix()
            },
            RangeRequest {
                serializable: true,
                ..prefix()
            },
            RangeRequest {
                revision: first_revision + 49,
                ..prefix()
            },
            RangeRequest {
                key: key(7),
                ..Default::default()
            },
            RangeRequest {
                key: b"absent".to_vec(),
                ..Default::default()
            },
        ];
        for case in cases {
            let stream = chunks(&mut kv, case.clone()).await.expect("stream");
            let many = stream.len();
            let unary = kv.range(case.clone()).await.expect("range").into_inner();
            assert_eq!(
                comparable(merged(stream)),
                comparable(unary),
                "{kind:?} {case:?}"
            );
            let whole = case.limit == 0 && case.revision == 0 && !case.count_only;
            if whole && case.range_end == prefix().range_end {
                assert!(many >= 4, "{kind:?}: {many} chunks for {KEYS} keys");
            }
        }

        // Writes and deletions after the first chunk are not seen.
        let mut stream = kv
            .range_stream(prefix())
            .await
            .expect("stream")
            .into_inner();
        let first = stream.message().await.expect("first").expect("a chunk");
        let mut seen = first.range_response.unwrap_or_default().kvs;
        assert_eq!(seen.len(), 10);
        let mut writer = kv.clone();
        for i in KEYS..KEYS + 30 {
            put(&mut writer, key(i)).await;
        }
        writer
            .delete_range(DeleteRangeRequest {
                key: key(300),
                range_end: key(320),
                ..Default::default()
            })
            .await
            .expect("delete");
        let mut header = None;
        while let Some(chunk) = stream.message().await.expect("chunk") {
            let chunk = chunk.range_response.unwrap_or_default();
            seen.extend(chunk.kvs);
            header = chunk.header.or(header);
        }
        let pinned = header.expect("a header on the last chunk").revision;
        assert_eq!(pinned, first_revision + KEYS as i64 - 1);
        let then = kv
            .range(RangeRequest {
                revision: pinned,
                ..prefix()
            })
            .await
            .expect("range at the pinned revision")
            .into_inner();
        assert_eq!(seen, then.kvs);

        // A compaction past the stream's revision ends it with etcd's error.
        let mut stream = kv
            .range_stream(prefix())
            .await
            .expect("stream")
            .into_inner();
        stream.message().await.expect("first").expect("a chunk");
        let now = put(&mut writer, key(0)).await;
        writer
            .compact(CompactionRequest {
                revision: now,
                physical: true,
            })
            .await
            .expect("compact");
        let ended = loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("{kind:?}: the stream outlived its compacted revision"),
                Err(status) => break status,
            }
        };
        assert_eq!(ended.code(), tonic::Code::OutOfRange);
        assert_eq!(
            ended.message(),
            "etcdserver: mvcc: required revision has been compacted"
        );

        // What the stream refuses before sending anything.
        let refused = chunks(&mut kv, RangeRequest::default())
            .await
            .expect_err("refused");
        assert_eq!(refused.message(), "etcdserver: key is not provided");
        let refused = chunks(
            &mut kv,
            RangeRequest {
                sort_order: 2,
                ..prefix()
            },
        )
        .await
        .expect_err("refused");
        assert_eq!(refused.code(), tonic::Code::Unimplemented);
    };
    // A hang (a stream that never ends) fails the test instead of holding it.
    runtime
        .block_on(async { tokio::time::timeout(CHECKS_DEADLINE, checks).await })
        .unwrap_or_else(|_| panic!("{kind:?}: the RangeStream checks did not finish in time"));

    // oxetcdctl prints a streamed get as a plain one.
    let program = binary_path("oxetcdctl").unwrap_or_else(|e| panic!("{e}"));
    let get = |stream: bool| {
        let mut args: Vec<String> = ["get", "stream/", "--prefix", "--keys-only"]
            .map(String::from)
            .to_vec();
        if stream {
            args.push("--stream".into());
        }
        let output = etcdctl::run_program(&program, &server.address(), &args, None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(output.code, 0, "{output:?}");
        output.stdout
    };
    let plain = get(false);
    assert!(plain.lines().count() > KEYS, "{plain}");
    assert_eq!(get(true), plain);
}

#[test]
fn range_stream_on_oxetcd() {
    check(ServerKind::Oxetcd);
}

#[test]
fn range_stream_on_oxetcd_smol() {
    check(ServerKind::OxetcdSmol);
}
