//! Fuzzing the command line, the `ETCD_*` variables and the config file:
//! any text gives a config or an error naming what is wrong, never a
//! panic. An input is split at NUL bytes into arguments; the first
//! argument that starts with `yaml:` is a config file's text instead.

use super::super::file;
use super::*;

fn seeds() -> Vec<Vec<u8>> {
    let lines: [&[&str]; 5] = [
        &[
            "--name=m1",
            "--listen-client-urls=http://127.0.0.1:2379",
            "--initial-cluster=m1=http://127.0.0.1:2380",
        ],
        &["--quota-backend-bytes=-1", "--auto-compaction-retention=1h"],
        &[
            "--auth-token=jwt,pub-key=a.pem,priv-key=b.pem,sign-method=RS256,ttl=5m",
            "--feature-gates=AllAlpha=true,LeaseCheckpoint=false",
        ],
        &[
            "--heartbeat-interval=100",
            "--election-timeout=1000",
            "--max-request-bytes=1.5MiB",
        ],
        &["yaml:name: m1\nclient-transport-security:\n  cert-file: a\nlog-outputs: [stderr]\n"],
    ];
    lines
        .iter()
        .map(|args| args.join("\0").into_bytes())
        .collect()
}

#[test]
fn fuzz_flags_and_config_file() {
    let ran = oxetcd_fuzz::fuzz("config", &seeds(), |bytes| {
        let text = String::from_utf8_lossy(bytes);
        let args: Vec<&str> = text.split('\0').collect();
        if let Some(yaml) = args.iter().find_map(|a| a.strip_prefix("yaml:")) {
            let _ = file::read("fuzz.yaml", yaml, &mut Vec::new());
            return;
        }
        let _ = parse(&args, std::iter::empty::<(&str, &str)>());
    });
    assert!(ran > 0);
}
