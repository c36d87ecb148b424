//! The client with auth on: tokens obtained as it connects, sent on every
//! call, and renewed once when the server has forgotten one; and
//! `auth status`, which etcdctl 3.4 (the parity reference) lacks.

use std::process::Command;
use std::time::Duration;

use oxetcd_ctl::client::{Client, Config, Credentials};
use oxetcd_proto::etcdserverpb::{
    AuthEnableRequest, AuthRoleAddRequest, AuthUserAddRequest, AuthUserGrantRoleRequest,
    PutRequest, RangeRequest,
};
use oxetcd_tests::{Server, ServerKind};

/// Longer than the server's token TTL (one second, below) plus the
/// period at which etcd drops expired simple tokens (one second).
const TOKEN_EXPIRY_WAIT: Duration = Duration::from_millis(3_500);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Debian's etcd forgets a simple token a second after its last use; the
/// client's next call is refused with `invalid auth token`, and must go
/// through once the client has authenticated again.
#[test]
fn an_expired_token_is_renewed_and_the_call_retried() {
    let server =
        Server::start_flags(ServerKind::Etcd, &["--auth-token-ttl", "1"]).expect("etcd starts");
    let endpoints = vec![server.address()];
    runtime().block_on(async {
        let admin = Client::new(Config::new(endpoints.clone())).expect("client");
        admin
            .user_add(AuthUserAddRequest {
                name: "root".into(),
                password: "rootpw".into(),
                ..Default::default()
            })
            .await
            .expect("root added");
        admin
            .role_add(AuthRoleAddRequest {
                name: "root".into(),
            })
            .await
            .expect("role added");
        admin
            .user_grant_role(AuthUserGrantRoleRequest {
                user: "root".into(),
                role: "root".into(),
            })
            .await
            .expect("role granted");
        admin
            .auth_enable(AuthEnableRequest {})
            .await
            .expect("auth enabled");

        let mut config = Config::new(endpoints);
        config.credentials = Some(Credentials {
            user: "root".into(),
            password: Some("rootpw".into()),
        });
        let client = Client::new(config).expect("client");
        let put = PutRequest {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            ..Default::default()
        };
        client.put(put.clone()).await.expect("put with a token");
        tokio::time::sleep(TOKEN_EXPIRY_WAIT).await;
        client
            .put(put)
            .await
            .expect("a write after the token expired");
        tokio::time::sleep(TOKEN_EXPIRY_WAIT).await;
        let range = client
            .range(RangeRequest {
                key: b"k".to_vec(),
                ..Default::default()
            })
            .await
            .expect("a read after the token expired");
        assert_eq!(range.kvs.len(), 1);
        assert!(client.credentials_refused().is_none());
    });
}

/// `auth status` as etcdctl 3.5 prints it, against oxetcd (which serves
/// `AuthStatus`; etcd 3.4 does not).
#[test]
fn auth_status_prints_as_etcdctl_3_5() {
    let server = Server::start(ServerKind::Oxetcd).expect("oxetcd starts");
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_oxetcdctl"))
            .arg(format!("--endpoints={}", server.address()))
            .args(args)
            .output()
            .expect("oxetcdctl runs");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stdout, _) = run(&["auth", "status"]);
    assert_eq!(code, Some(0));
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("Authentication Status: false"));
    let revision = lines
        .next()
        .and_then(|l| l.strip_prefix("AuthRevision: "))
        .and_then(|r| r.parse::<u64>().ok());
    assert!(revision.is_some(), "{stdout}");

    let (code, stdout, _) = run(&["user", "add", "u:pw"]);
    assert_eq!((code, stdout.as_str()), (Some(0), "User u created\n"));
    let (code, stdout, _) = run(&["auth", "status", "-w", "json"]);
    assert_eq!(code, Some(0));
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert!(json.get("enabled").is_none(), "false is omitted: {stdout}");
    assert!(json["header"]["revision"].is_number(), "{stdout}");
    assert!(
        json["authRevision"].as_u64() > revision,
        "a new user moves the auth revision: {stdout}"
    );

    let (code, _, stderr) = run(&["auth", "status", "-w", "fields"]);
    assert_eq!(
        (code, stderr.as_str()),
        (Some(4), "Error: fields not supported as output format\n")
    );
    let (code, _, stderr) = run(&["auth", "status", "extra"]);
    assert_eq!(
        (code, stderr.as_str()),
        (
            Some(128),
            "Error: auth status command does not accept any arguments\n"
        )
    );
}
