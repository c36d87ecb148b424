//! The client with auth on: tokens obtained as it connects, sent on every
//! call, and renewed once when the server has forgotten one.

use std::time::Duration;

use oxetcd_conformance::{Server, ServerKind};
use oxetcd_ctl::client::{Client, Config, Credentials};
use oxetcd_proto::etcdserverpb::{
    AuthEnableRequest, AuthRoleAddRequest, AuthUserAddRequest, AuthUserGrantRoleRequest,
    PutRequest, RangeRequest,
};

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
