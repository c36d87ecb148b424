//! Tokens cross between this module and Debian's etcd 3.4.23, both ways.
//!
//! etcd starts with `--auth-token jwt,...`; root is added and auth enabled
//! through etcd's JSON gateway. The token etcd hands root verifies here, and
//! a token signed here for root reads a key there, while an expired one and
//! garbage are refused. A missing etcd fails these tests, never skips them:
//! CI installs it (`scripts/install-deps.sh`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, SystemTime};

use oxetcd_conformance::{Server, ServerKind};
use serde_json::{json, Value};

use super::tests::{ec_key, fixture};
use super::{SignMethod, TokenConfig};

/// Longest one gateway request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[test]
fn rs256_with_etcds_own_e2e_keys() {
    interop(
        SignMethod::RS256,
        Some(&fixture("server.crt")),
        &fixture("server.key.insecure"),
    );
}

#[test]
fn ps384_with_a_pkcs8_key_alone() {
    interop(
        SignMethod::PS384,
        None,
        &fixture("server.pkcs8.key.insecure"),
    );
}

#[test]
fn es256_with_etcds_sec1_key() {
    interop(
        SignMethod::ES256,
        Some(&fixture("server-ecdsa.crt")),
        &fixture("server-ecdsa.key.insecure"),
    );
}

#[test]
fn es384_with_a_generated_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (private, public) = ec_key(SignMethod::ES384);
    let private_path = dir.path().join("p384.key");
    let public_path = dir.path().join("p384.pub");
    std::fs::write(&private_path, private).expect("write key");
    std::fs::write(&public_path, public).expect("write key");
    interop(
        SignMethod::ES384,
        Some(&public_path.display().to_string()),
        &private_path.display().to_string(),
    );
}

#[test]
fn hs512_with_a_secret_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "not much of a secret\n").expect("write secret");
    interop(SignMethod::HS512, None, &secret.display().to_string());
}

/// etcd and this module on the same `--auth-token jwt,...`.
fn interop(method: SignMethod, public_key: Option<&str>, private_key: &str) {
    let mut spec = format!("jwt,priv-key={private_key},sign-method={method},ttl=10m");
    if let Some(public_key) = public_key {
        spec.push_str(&format!(",pub-key={public_key}"));
    }
    let etcd = Server::start_flags(ServerKind::Etcd, &["--auth-token", &spec])
        .unwrap_or_else(|e| panic!("etcd with --auth-token {spec}: {e}"));
    let Ok(TokenConfig::Jwt(tokens)) = TokenConfig::parse(&spec, Duration::from_secs(300)) else {
        panic!("{spec} is not a usable JWT config here");
    };
    let address = etcd.address();
    let root = json!({"name": "root", "password": "pw"});
    for (path, body) in [
        ("/v3/auth/user/add", root.clone()),
        (
            "/v3/auth/user/grant",
            json!({"user": "root", "role": "root"}),
        ),
        ("/v3/auth/enable", json!({})),
    ] {
        let answer = post(&address, path, None, &body);
        assert!(answer.get("error").is_none(), "{path}: {answer}");
    }

    // etcd → here.
    let answer = post(&address, "/v3/auth/authenticate", None, &root);
    let Some(token) = answer["token"].as_str() else {
        panic!("no token from etcd: {answer}");
    };
    let (user, revision) = tokens
        .verify(token, SystemTime::now())
        .unwrap_or_else(|e| panic!("etcd's {method} token {token}: {e}"));
    assert_eq!(user, "root");
    assert!(revision > 0, "auth revision {revision}");

    // Here → etcd. The auth revision must be etcd's current one.
    let range = json!({"key": "Zm9v"});
    let ours = tokens
        .sign("root", revision, SystemTime::now())
        .expect("signs");
    let answer = post(&address, "/v3/kv/range", Some(&ours), &range);
    assert!(
        answer.get("header").is_some() && answer.get("error").is_none(),
        "etcd refused our {method} token: {answer}"
    );
    let an_hour_ago = SystemTime::now()
        .checked_sub(Duration::from_secs(3600))
        .expect("clock after 1970");
    let expired = tokens.sign("root", revision, an_hour_ago).expect("signs");
    for refused in [expired.as_str(), "garbage"] {
        let answer = post(&address, "/v3/kv/range", Some(refused), &range);
        assert_eq!(
            answer["error"], "etcdserver: invalid auth token",
            "{refused}: {answer}"
        );
    }
}

/// POSTs `body` to etcd's JSON gateway, HTTP/1.0 so the answer is neither
/// chunked nor kept alive, and returns the JSON answer.
fn post(address: &str, path: &str, token: Option<&str>, body: &Value) -> Value {
    let body = body.to_string();
    let mut stream = TcpStream::connect(address).expect("connects to etcd");
    stream
        .set_read_timeout(Some(REQUEST_TIMEOUT))
        .expect("timeout");
    stream
        .set_write_timeout(Some(REQUEST_TIMEOUT))
        .expect("timeout");
    let authorization = token
        .map(|token| format!("Authorization: {token}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "POST {path} HTTP/1.0\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{authorization}\r\n{body}",
        body.len()
    )
    .expect("writes the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("reads the answer");
    let Some((_, answer)) = response.split_once("\r\n\r\n") else {
        panic!("{path}: no HTTP body in {response:?}");
    };
    serde_json::from_str(answer).unwrap_or_else(|e| panic!("{path}: {e}: {answer:?}"))
}
