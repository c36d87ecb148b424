//! The client carries on when the first of its endpoints dies: three
//! single-member oxetcd servers, the first killed after a request, and the
//! next requests (library and command line) served by the others. A first
//! endpoint that accepts connections but never answers (a stopped process)
//! does not hold a command up either.

use std::process::Command;
use std::time::Duration;

use oxetcd_ctl::client::{Client, Config};
use oxetcd_proto::etcdserverpb::{PutRequest, RangeRequest};
use oxetcd_tests::{Server, ServerKind};

fn servers() -> Vec<Server> {
    (0..3)
        .map(|_| Server::start(ServerKind::Oxetcd).expect("oxetcd starts"))
        .collect()
}

fn put(key: &str, value: &str) -> PutRequest {
    PutRequest {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_moves_to_the_next_endpoint_when_the_first_dies() {
    let mut servers = servers();
    let endpoints: Vec<String> = servers.iter().map(Server::address).collect();
    let mut config = Config::new(endpoints.clone());
    config.command_timeout = Duration::from_secs(10);
    let client = Client::new(config).expect("client");
    // Which endpoint serves: the first, unless it was slow to answer and
    // a hedged dial to another won (a loaded machine).
    let serving = |client: &Client| {
        let current = client.current_endpoint();
        endpoints
            .iter()
            .position(|e| *e == current)
            .unwrap_or_else(|| panic!("{current} is not one of {endpoints:?}"))
    };

    client
        .put(put("k", "on the first"))
        .await
        .expect("first put");
    let first = serving(&client);

    servers[first].kill();

    // A read is retried on the next endpoint transparently.
    let range = client
        .range(RangeRequest {
            key: b"k".to_vec(),
            ..Default::default()
        })
        .await
        .expect("read after the first endpoint died");
    // Each server is its own cluster, so the second one has not seen `k`:
    // this proves the answer came from elsewhere.
    assert_eq!(range.count, 0);
    let second = serving(&client);
    assert_ne!(second, first);

    // Writes go on to the second endpoint too.
    for i in 0..20 {
        client
            .put(put(&format!("after{i}"), "x"))
            .await
            .expect("put after failover");
    }
    let range = client
        .range(RangeRequest {
            key: b"after".to_vec(),
            range_end: b"aftes".to_vec(),
            ..Default::default()
        })
        .await
        .expect("range");
    assert_eq!(range.count, 20);

    // And on to the third when the second goes as well. A write caught on
    // a connection that breaks under it may or may not have been applied,
    // so it is not resent (etcd's rule): it fails, and the client moves on.
    // A write that could not even connect is provably unsent and retried.
    servers[second].kill();
    if let Err(e) = client.put(put("maybe", "x")).await {
        assert!(!e.to_string().starts_with("etcdserver:"), "{e}");
    }
    client
        .put(put("last", "x"))
        .await
        .expect("put on the third");
    let third = serving(&client);
    assert!(
        third != first && third != second,
        "{first} {second} {third}"
    );
}

#[test]
fn command_line_skips_a_dead_first_endpoint() {
    let mut servers = servers();
    // A dead endpoint and one live one: each server is a cluster of its
    // own, so a put and a get agree only if both reach the same member
    // (with two live ones, a slow dial on a loaded machine may hedge to
    // either).
    let endpoints: Vec<String> = servers[..2].iter().map(Server::address).collect();
    servers[0].kill();
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_oxetcdctl"))
            .arg(format!("--endpoints={}", endpoints.join(",")))
            .args(args)
            .output()
            .expect("run oxetcdctl");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    assert_eq!(
        run(&["put", "k", "v"]),
        (Some(0), "OK\n".to_owned(), String::new())
    );
    // Each invocation starts at the first endpoint again and moves on.
    assert_eq!(
        run(&["get", "k"]),
        (Some(0), "k\nv\n".to_owned(), String::new())
    );
    // `endpoint health` asks every endpoint and reports the dead one.
    let (code, _, stderr) = run(&["endpoint", "health", "--command-timeout=1s"]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(&format!("{} is unhealthy", endpoints[0])),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{} is healthy", endpoints[1])),
        "{stderr}"
    );
    assert!(stderr.ends_with("Error: unhealthy cluster\n"), "{stderr}");
    // With every endpoint gone the command times out as etcdctl does.
    servers[1].kill();
    servers[2].kill();
    let (code, _, stderr) = run(&["get", "k", "--command-timeout=1s"]);
    assert_eq!(
        (code, stderr.as_str()),
        (Some(1), "Error: context deadline exceeded\n")
    );
}

/// With the first endpoint stopped (SIGSTOP: its port still accepts TCP
/// connections, nothing answers), a command is answered by the next one
/// well within the dial timeout, as etcdctl answers.
#[test]
fn command_line_skips_a_stopped_first_endpoint() {
    let servers = servers();
    let endpoints: Vec<String> = servers.iter().map(Server::address).collect();
    let signal = |name: &str, server: &Server| {
        let pid = server.pid().expect("running").to_string();
        let status = Command::new("kill")
            .args([name, &pid])
            .status()
            .expect("kill");
        assert!(status.success());
    };
    signal("-STOP", &servers[0]);
    let started = std::time::Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_oxetcdctl"))
        .arg(format!("--endpoints={}", endpoints.join(",")))
        .args(["put", "k", "v"])
        .output()
        .expect("run oxetcdctl");
    let took = started.elapsed();
    signal("-CONT", &servers[0]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "OK\n");
    // The dial timeout is 2 s and the command timeout 5 s: an answer
    // sooner than either came from the next endpoint at once.
    assert!(took < Duration::from_millis(1_500), "took {took:?}");
}
