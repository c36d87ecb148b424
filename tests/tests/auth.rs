//! Users and roles as etcdctl manages them: the same session against
//! Debian's etcd, oxetcd and oxetcd-smol gives the same output, errors
//! included; what oxetcd stored survives `kill -9` and a restart; and a
//! password never reaches the data directory in plain text.

use std::path::Path;

use oxetcd_tests::etcdctl::{self, Output};
use oxetcd_tests::{Server, ServerKind};

/// A password no file may hold as it is.
const PASSWORD: &str = "plain-text-secret-7f3a9";

/// etcdctl `args` against `address`, output with the endpoint replaced.
fn ctl(address: &str, args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let output = etcdctl::run(address, &args, None).unwrap_or_else(|e| panic!("{e}"));
    etcdctl::normalise(&output, address)
}

/// One session of user and role commands, successes and etcd's errors.
fn session(address: &str) -> Vec<(String, Output)> {
    let user = format!("alice:{PASSWORD}");
    let steps: Vec<Vec<&str>> = vec![
        vec!["user", "add", &user, "--interactive=false"],
        vec!["user", "add", &user, "--interactive=false"],
        vec!["user", "add", "bob", "--no-password"],
        vec!["user", "get", "nobody"],
        vec!["role", "add", "readers"],
        vec!["role", "add", "readers"],
        vec![
            "role",
            "grant-permission",
            "readers",
            "read",
            "a",
            "--prefix=true",
        ],
        vec!["role", "grant-permission", "readers", "readwrite", "k"],
        vec![
            "role",
            "grant-permission",
            "readers",
            "write",
            "z",
            "--from-key",
        ],
        vec!["role", "get", "readers"],
        vec!["role", "revoke-permission", "readers", "nothing"],
        vec!["user", "grant-role", "alice", "readers"],
        vec!["user", "grant-role", "alice", "missing"],
        vec!["user", "revoke-role", "bob", "readers"],
        vec!["user", "get", "alice"],
        vec!["user", "list"],
        vec!["role", "list"],
        vec!["auth", "status"],
    ];
    steps
        .into_iter()
        .map(|args| (args.join(" "), ctl(address, &args)))
        .collect()
}

/// What the session left, read back.
fn state(address: &str) -> Vec<Output> {
    [
        &["user", "list"][..],
        &["user", "get", "alice"],
        &["role", "get", "readers"],
    ]
    .iter()
    .map(|args| ctl(address, args))
    .collect()
}

/// Every file below `dir`, searched for `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path)
                .expect("read file")
                .windows(needle.len())
                .any(|w| w == needle)
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[test]
fn users_and_roles_as_etcd_manages_them() {
    let etcd = Server::start(ServerKind::Etcd).unwrap_or_else(|e| panic!("{e}"));
    let expected = session(&etcd.address());
    // The reference itself: the errors are there, as etcd words them.
    let said = |step: usize| format!("{:?}", expected[step].1);
    assert!(said(1).contains("user name already exists"), "{}", said(1));
    assert!(said(3).contains("user name not found"), "{}", said(3));
    assert!(said(5).contains("role name already exists"), "{}", said(5));
    assert!(
        said(10).contains("permission is not granted"),
        "{}",
        said(10)
    );
    assert!(said(12).contains("role name not found"), "{}", said(12));
    assert!(said(13).contains("role is not granted"), "{}", said(13));

    for kind in [ServerKind::Oxetcd, ServerKind::OxetcdSmol] {
        let dir = tempfile::tempdir().expect("temp dir");
        let data_dir = dir.path().join("data");
        let mut server = Server::start_in(kind, &data_dir).unwrap_or_else(|e| panic!("{e}"));
        let address = server.address();
        let got = session(&address);
        for ((step, want), (_, have)) in expected.iter().zip(&got) {
            // `auth status` prints the auth revision, which counts changes
            // the same way on both; everything else is compared as is.
            assert_eq!(have, want, "{}: `etcdctl {step}`", kind.name());
        }
        let before = state(&address);
        server.kill();
        let server = Server::start_in(kind, &data_dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            state(&server.address()),
            before,
            "{}: users and roles after kill -9 and a restart",
            kind.name()
        );
        drop(server);
        let leaks = files_holding(&data_dir, PASSWORD.as_bytes());
        assert!(
            leaks.is_empty(),
            "{}: the password in plain text in {leaks:?}",
            kind.name()
        );
    }
}
