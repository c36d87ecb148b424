//! The JSON gateway of both binaries, driven as etcd3gw drives it: real
//! HTTP/1.1 `POST`s of JSON with base64 keys and values. KV (range with
//! `range_end`, put, delete, txn, compaction), leases (grant, time-to-live
//! with keys, leases, keep-alive, revoke), member list, status, a watch
//! that receives events as they happen, the `/v3beta/` and `/v3alpha/`
//! prefixes, errors (a malformed body is a 400 that costs only itself,
//! an unknown path a 404, another method a 405), Election routed, and
//! last auth: enable, authenticate, the token in `Grpc-Metadata-Token`
//! and in `Authorization`, a call without one and one denied. The calls
//! show in the server's gRPC metrics: they went through its gRPC services.

use std::time::Duration;

use oxetcd_tests::gateway::{Answer, JsonClient};
use oxetcd_tests::{Server, ServerKind};
use serde_json::{json, Value};

/// Longest to wait for one line of a stream.
const LINE_WAIT: Duration = Duration::from_secs(10);

// base64 of the keys and values used.
const FOO: &str = "Zm9v"; // foo
const FOO1: &str = "Zm9vMQ=="; // foo1
const FOO2: &str = "Zm9vMg=="; // foo2
const FOP: &str = "Zm9w"; // fop: the end of the prefix foo
const BAR: &str = "YmFy"; // bar
const BAZ: &str = "YmF6"; // baz

fn ok(answer: Answer) -> Value {
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.content_type, "application/json", "{answer:?}");
    answer.json()
}

/// A 64-bit integer field, which the gateway writes as a string.
fn int(value: &Value) -> i128 {
    value
        .as_str()
        .unwrap_or_else(|| panic!("not a string: {value}"))
        .parse()
        .unwrap_or_else(|e| panic!("{value}: {e}"))
}

fn gateway(kind: ServerKind) {
    let server = Server::start(kind).unwrap_or_else(|e| panic!("{e}"));
    let client = JsonClient::new(&server.address());
    let post = |path: &str, body: Value| ok(client.post(path, &body.to_string()));

    // KV.
    let put = post("/v3/kv/put", json!({"key": FOO, "value": BAR}));
    let header = &put["header"];
    assert!(int(&header["revision"]) >= 1, "{put}");
    assert!(int(&header["cluster_id"]) != 0 && int(&header["member_id"]) != 0);
    post("/v3/kv/put", json!({"key": FOO1, "value": BAR}));
    post("/v3/kv/put", json!({"key": FOO2, "value": BAZ}));
    let range = post("/v3/kv/range", json!({"key": FOO}));
    assert_eq!(range["kvs"][0]["value"], BAR, "{range}");
    assert_eq!(int(&range["kvs"][0]["version"]), 1);
    assert_eq!(int(&range["count"]), 1);
    let prefix = post("/v3/kv/range", json!({"key": FOO, "range_end": FOP}));
    let keys: Vec<&str> = prefix["kvs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| kv["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, [FOO, FOO1, FOO2], "{prefix}");
    // camelCase names and numbers for 64-bit integers are read too.
    let limited = post(
        "/v3/kv/range",
        json!({"key": FOO, "rangeEnd": FOP, "limit": 2, "keysOnly": true}),
    );
    assert_eq!(limited["kvs"].as_array().unwrap().len(), 2, "{limited}");
    assert_eq!(limited["more"], true);
    assert!(limited["kvs"][0].get("value").is_none(), "{limited}");
    let counted = post(
        "/v3/kv/range",
        json!({"key": FOO, "range_end": FOP, "count_only": true}),
    );
    assert_eq!(int(&counted["count"]), 3);
    assert!(counted.get("kvs").is_none(), "{counted}");
    // Default fields are left out: no match has neither kvs nor count.
    let none = post("/v3/kv/range", json!({"key": "bm9uZQ=="}));
    assert!(
        none.get("kvs").is_none() && none.get("count").is_none(),
        "{none}"
    );

    let deleted = post("/v3/kv/deleterange", json!({"key": FOO2, "prev_kv": true}));
    assert_eq!(int(&deleted["deleted"]), 1);
    assert_eq!(deleted["prev_kvs"][0]["value"], BAZ, "{deleted}");

    let txn = json!({
        "compare": [{"key": FOO, "result": "EQUAL", "target": "VALUE", "value": BAR}],
        "success": [{"request_put": {"key": FOO, "value": BAZ}}],
        "failure": [{"request_range": {"key": FOO}}]
    });
    let first = post("/v3/kv/txn", txn.clone());
    assert_eq!(first["succeeded"], true, "{first}");
    assert!(first["responses"][0]["response_put"].is_object(), "{first}");
    let second = post("/v3/kv/txn", txn);
    assert!(second.get("succeeded").is_none(), "{second}");
    assert_eq!(
        second["responses"][0]["response_range"]["kvs"][0]["value"],
        BAZ
    );

    let revision = int(&second["header"]["revision"]);
    let compacted = post(
        "/v3/kv/compaction",
        json!({"revision": revision.to_string(), "physical": true}),
    );
    assert!(compacted["header"].is_object(), "{compacted}");
    let old = client.post(
        "/v3/kv/range",
        &json!({"key": FOO, "revision": "1"}).to_string(),
    );
    assert_eq!(old.status, 400, "{old:?}");
    assert_eq!(
        old.json(),
        json!({
            "error": "etcdserver: mvcc: required revision has been compacted",
            "message": "etcdserver: mvcc: required revision has been compacted",
            "code": 11
        })
    );

    // Leases.
    let grant = post("/v3/lease/grant", json!({"TTL": 60}));
    let lease = int(&grant["ID"]);
    assert_eq!(int(&grant["TTL"]), 60, "{grant}");
    post(
        "/v3/kv/put",
        json!({"key": FOO1, "value": BAR, "lease": lease.to_string()}),
    );
    let ttl = post(
        "/v3/lease/timetolive",
        json!({"ID": lease.to_string(), "keys": true}),
    );
    assert_eq!(ttl["keys"], json!([FOO1]), "{ttl}");
    assert_eq!(int(&ttl["grantedTTL"]), 60);
    let leases = post("/v3/lease/leases", json!({}));
    assert_eq!(int(&leases["leases"][0]["ID"]), lease, "{leases}");
    // The keep-alive stream answers each request, and ends with the body.
    let mut keepalive = client.stream(
        "/v3/lease/keepalive",
        &json!({"ID": lease.to_string()}).to_string(),
        &[],
    );
    assert_eq!(keepalive.status(LINE_WAIT), Some(200));
    let line: Value = serde_json::from_str(&keepalive.next_line(LINE_WAIT).unwrap()).unwrap();
    assert_eq!(int(&line["result"]["ID"]), lease, "{line}");
    assert_eq!(int(&line["result"]["TTL"]), 60, "{line}");
    keepalive.close_body();
    assert!(
        keepalive.ended(LINE_WAIT),
        "keep-alive did not end with its body"
    );
    let revoked = post("/v3/kv/lease/revoke", json!({"ID": lease.to_string()}));
    assert!(revoked["header"].is_object(), "{revoked}");
    let gone = post("/v3/lease/timetolive", json!({"ID": lease.to_string()}));
    assert_eq!(int(&gone["TTL"]), -1, "{gone}");
    let gone = post("/v3/kv/range", json!({"key": FOO1}));
    assert!(gone.get("kvs").is_none(), "{gone}");

    // Cluster and maintenance.
    let members = post("/v3/cluster/member/list", json!({}));
    assert_eq!(members["members"].as_array().unwrap().len(), 1, "{members}");
    assert_eq!(members["members"][0]["name"], "default");
    assert_eq!(
        members["members"][0]["clientURLs"],
        json!([server.endpoint()])
    );
    let status = post("/v3/maintenance/status", json!({}));
    assert_eq!(status["leader"], status["header"]["member_id"], "{status}");
    assert!(int(&status["dbSize"]) > 0);

    // The older prefixes reach the same methods.
    for prefix in ["v3beta", "v3alpha"] {
        let range = post(&format!("/{prefix}/kv/range"), json!({"key": FOO}));
        assert_eq!(range["kvs"][0]["value"], BAZ, "{prefix}: {range}");
    }

    // A watch gets its events as they happen, each flushed on its line.
    let watch = client.stream(
        "/v3/watch",
        &json!({"create_request": {"key": FOO, "range_end": FOP}}).to_string(),
        &[],
    );
    assert_eq!(watch.status(LINE_WAIT), Some(200));
    let created: Value = serde_json::from_str(&watch.next_line(LINE_WAIT).unwrap()).unwrap();
    assert_eq!(created["result"]["created"], true, "{created}");
    post("/v3/kv/put", json!({"key": FOO2, "value": BAR}));
    let event: Value = serde_json::from_str(&watch.next_line(LINE_WAIT).unwrap()).unwrap();
    let kv = &event["result"]["events"][0]["kv"];
    assert_eq!(
        (kv["key"].as_str(), kv["value"].as_str()),
        (Some(FOO2), Some(BAR))
    );
    // A PUT is the enum's default, so it has no "type"; a DELETE does.
    assert!(
        event["result"]["events"][0].get("type").is_none(),
        "{event}"
    );
    post("/v3/kv/deleterange", json!({"key": FOO2}));
    let event: Value = serde_json::from_str(&watch.next_line(LINE_WAIT).unwrap()).unwrap();
    assert_eq!(event["result"]["events"][0]["type"], "DELETE", "{event}");
    drop(watch);

    // Errors.
    let malformed = client.post("/v3/kv/put", r#"{"key": foo}"#);
    assert_eq!(malformed.status, 400, "{malformed:?}");
    assert_eq!(malformed.json()["code"], 3);
    assert!(!malformed.json()["error"].as_str().unwrap().is_empty());
    let not_base64 = client.post("/v3/kv/put", r#"{"key": "!!"}"#);
    assert_eq!(not_base64.status, 400, "{not_base64:?}");
    let wrong_type = client.post("/v3/kv/put", r#"{"key": 5}"#);
    assert_eq!(wrong_type.status, 400, "{wrong_type:?}");
    let cut = client.post("/v3/kv/put", r#"{"key": "Zm9v""#);
    assert_eq!(cut.status, 400, "{cut:?}");
    let empty_key = client.post("/v3/kv/put", "");
    assert_eq!(
        (empty_key.status, empty_key.json()["message"].clone()),
        (400, json!("etcdserver: key is not provided"))
    );
    let unknown = client.post("/v3/kv/nothing", "{}");
    assert_eq!(
        (unknown.status, unknown.body.as_str()),
        (404, "Not Found\n")
    );
    assert_eq!(client.post("/v4/kv/range", "{}").status, 404);
    let get = client.request("GET", "/v3/kv/range", "", &[]);
    assert_eq!(get.status, 405, "{get:?}");
    // The server is unharmed.
    assert_eq!(
        post("/v3/kv/range", json!({"key": FOO}))["kvs"][0]["value"],
        BAZ
    );

    // Election is routed (answered by its service, or Unimplemented where
    // it is not served), never a 404.
    let campaign = client.post(
        "/v3/election/campaign",
        &json!({"name": "ZWxlY3Rpb24=", "value": BAR}).to_string(),
    );
    assert_ne!(campaign.status, 404, "{campaign:?}");
    campaign.json();

    // Auth.
    post(
        "/v3/auth/user/add",
        json!({"name": "root", "password": "root-pw"}),
    );
    post("/v3/auth/role/add", json!({"name": "root"}));
    post(
        "/v3/auth/user/grant",
        json!({"user": "root", "role": "root"}),
    );
    post(
        "/v3/auth/user/add",
        json!({"name": "nobody", "password": "nobody-pw"}),
    );
    post("/v3/auth/enable", json!({}));
    let token = post(
        "/v3/auth/authenticate",
        json!({"name": "root", "password": "root-pw"}),
    )["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let with = |header: &str, token: &str, key: &str| {
        client.request(
            "POST",
            "/v3/kv/range",
            &json!({"key": key}).to_string(),
            &[(header, token)],
        )
    };
    let allowed = ok(with("Grpc-Metadata-Token", &token, FOO));
    assert_eq!(allowed["kvs"][0]["value"], BAZ, "{allowed}");
    let allowed = ok(with("Authorization", &token, FOO));
    assert_eq!(allowed["kvs"][0]["value"], BAZ, "{allowed}");
    let anonymous = client.post("/v3/kv/range", &json!({"key": FOO}).to_string());
    assert_eq!(anonymous.status, 400, "{anonymous:?}");
    assert_eq!(
        anonymous.json()["message"],
        "etcdserver: user name is empty"
    );
    let wrong = client.post(
        "/v3/auth/authenticate",
        &json!({"name": "root", "password": "wrong"}).to_string(),
    );
    assert_eq!(wrong.status, 400, "{wrong:?}");
    assert_eq!(
        wrong.json()["message"],
        "etcdserver: authentication failed, invalid user ID or password"
    );
    let nobody = post(
        "/v3/auth/authenticate",
        json!({"name": "nobody", "password": "nobody-pw"}),
    )["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let denied = with("Grpc-Metadata-Token", &nobody, FOO);
    assert_eq!(denied.status, 403, "{denied:?}");
    assert_eq!(
        denied.json(),
        json!({
            "error": "etcdserver: permission denied",
            "message": "etcdserver: permission denied",
            "code": 7
        })
    );

    let handled = |method: &str, code: &str| {
        metric(
            &client,
            &format!(r#"grpc_server_handled_total{{grpc_code="{code}",grpc_method="{method}","#),
        )
    };
    assert!(handled("Put", "OK") >= 5);
    assert!(handled("Range", "PermissionDenied") >= 1);
    assert!(handled("LeaseKeepAlive", "OK") >= 1);
    assert!(metric(&client, r#"grpc_server_started_total{grpc_method="Watch","#) >= 1);
}

/// The sum of the server's metric lines that start with `prefix`. The
/// gateway's calls are gRPC calls to the server's own services, so they
/// are in its gRPC metrics, by method and code.
fn metric(client: &JsonClient, prefix: &str) -> u64 {
    let metrics = client.request("GET", "/metrics", "", &[]);
    assert_eq!(metrics.status, 200);
    metrics
        .body
        .lines()
        .filter(|line| line.starts_with(prefix))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn oxetcd() {
    gateway(ServerKind::Oxetcd);
}

#[test]
fn oxetcd_smol() {
    gateway(ServerKind::OxetcdSmol);
}
