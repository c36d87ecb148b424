//! Start-up figure, oxetcd beside Debian's etcd in the same run: the time
//! from spawning a single-member server on a fresh data dir to its first
//! acknowledged put. Ignored by default; run in release:
//!
//! ```text
//! cargo build --release --bins
//! cargo test --release -p oxetcd-tests --test startup_bench -- --ignored --nocapture
//! ```
//!
//! Prints, per server, the median, fastest and slowest of [`RUNS`] starts.
//! A put is tried every [`RETRY`] from the moment the process is spawned,
//! each try on a fresh connection, so the figure includes binding, opening
//! storage, electing itself and serving. The goal for oxetcd is 50 ms.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::PutRequest;
use oxetcd_tests::process::ChildGuard;
use oxetcd_tests::ServerKind;
use tonic::transport::Endpoint;

/// Starts measured per server.
const RUNS: usize = 7;
/// Pause between tries of the first put.
const RETRY: Duration = Duration::from_millis(1);
/// A start slower than this is reported as failed.
const GIVE_UP: Duration = Duration::from_secs(20);

const CLIENT_PORT: u16 = 24379;
const PEER_PORT: u16 = 24380;

/// One start: spawn, put until acknowledged, kill. The elapsed time, or
/// why it failed.
async fn start_to_first_put(kind: ServerKind) -> Result<Duration, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let client = format!("http://127.0.0.1:{CLIENT_PORT}");
    let peer = format!("http://127.0.0.1:{PEER_PORT}");
    let started = Instant::now();
    let server = ChildGuard::spawn(
        Command::new(kind.program()?)
            .args(["--name", "bench", "--data-dir"])
            .arg(dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("bench={peer}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )?;
    let endpoint = Endpoint::from_shared(client.clone())
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_millis(200))
        .timeout(Duration::from_secs(2));
    let put = PutRequest {
        key: b"first".to_vec(),
        value: b"put".to_vec(),
        ..Default::default()
    };
    let outcome = loop {
        if started.elapsed() > GIVE_UP {
            break Err(format!("no put acknowledged within {GIVE_UP:?}"));
        }
        if let Ok(channel) = endpoint.connect().await {
            if KvClient::new(channel).put(put.clone()).await.is_ok() {
                break Ok(started.elapsed());
            }
        }
        tokio::time::sleep(RETRY).await;
    };
    drop(server);
    outcome
}

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture, in release"]
fn start_to_first_put_bench() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    println!("start → first acknowledged put, single member, fresh data dir ({RUNS} starts)");
    println!("| server | median | fastest | slowest |");
    println!("|---|---|---|---|");
    for kind in [ServerKind::Oxetcd, ServerKind::OxetcdSmol, ServerKind::Etcd] {
        let mut times = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            match runtime.block_on(start_to_first_put(kind)) {
                Ok(elapsed) => times.push(elapsed),
                Err(e) => panic!("{}: {e}", kind.name()),
            }
        }
        times.sort();
        let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
        println!(
            "| {} | {} | {} | {} |",
            kind.name(),
            ms(times[RUNS / 2]),
            ms(times[0]),
            ms(times[RUNS - 1])
        );
    }
}
