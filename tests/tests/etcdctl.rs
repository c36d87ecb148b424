//! Debian's `etcdctl` (API v3) against real etcd and against both oxetcd
//! binaries: the same command sequences must print the same thing once IDs,
//! raft term and indexes, sizes, versions and timings are normalised.
//!
//! etcdctl 3.4 has no `get --count-only`; `-w json` output covers counts.

use oxetcd_tests::session::{args, compare_with_etcd, fails, ok, txn, Session};
use oxetcd_tests::ServerKind;

fn sessions() -> Vec<Session> {
    vec![
        Session {
            name: "put-get-del",
            steps: vec![
                ok("put foo bar"),
                ok("put foo baz -w json"),
                ok("put --prev-kv foo qux"),
                ok("put --prev-kv foo qux2 -w json"),
                ok("put k1 v1"),
                ok("put k2 v2"),
                ok("put k3 v3"),
                ok("put k10 v10"),
                ok("get foo"),
                ok("get foo -w json"),
                ok("get k --prefix"),
                ok("get k --prefix -w json"),
                ok("get k --prefix --limit 2"),
                ok("get k --prefix --limit 2 -w json"),
                ok("get k2 --from-key"),
                ok("get k2 --from-key --keys-only"),
                ok("get k1 k3"),
                ok("get --rev 2 foo"),
                ok("get --rev 3 foo -w json"),
                ok("get --rev 5 k --prefix -w json"),
                ok("get k --prefix --sort-by=MODIFY --order=DESCEND"),
                ok("get k --prefix --sort-by=VALUE --order=ASCEND --print-value-only"),
                ok("get k --prefix --sort-by=CREATE --order=DESCEND -w json"),
                ok("get k --prefix --sort-by=VERSION"),
                ok("get k --prefix --sort-by=KEY --order=DESCEND --limit 3"),
                ok("get k --prefix --keys-only -w json"),
                ok("get k --prefix --print-value-only"),
                ok("get missing"),
                ok("get missing -w json"),
                args(&["get", "", "--from-key"], false),
                args(&["get", "", "--from-key", "--keys-only", "-w", "json"], false),
                fails("get --rev 100 foo"),
                args(&["get", ""], true),
                ok("del missing"),
                ok("del k1 --prev-kv"),
                ok("del k --prefix --prev-kv"),
                ok("del foo -w json"),
                ok("del foo -w json"),
                ok("get k --prefix -w json"),
            ],
        },
        Session {
            name: "put-options",
            steps: vec![
                ok("put a 1"),
                ok("put a --ignore-value"),
                ok("get a -w json"),
                fails("put missing --ignore-value"),
                ok("put a 2 --ignore-lease"),
                fails("put a x --lease=1234abcd"),
                ok("get a -w json"),
            ],
        },
        Session {
            name: "txn",
            steps: vec![
                ok("put a 1"),
                txn("", "value(\"a\") = \"1\"\n\nput a 2\nget a\n\nput b 2\n\n"),
                txn("", "value(\"a\") = \"1\"\n\nput a 2\nget a\n\nput b 2\n\n"),
                txn(
                    "-w json",
                    "mod(\"a\") > \"0\"\ncreate(\"a\") = \"2\"\nversion(\"a\") < \"5\"\n\nput c 1\nget a\ndel b\n\nput d 1\n\n",
                ),
                txn("", "version(\"a\") > \"0\"\n\ndel a --prev-kv\n\n\n"),
                txn("", "version(\"missing\") = \"0\"\n\n\n\n"),
                ok("get a --from-key -w json"),
            ],
        },
        Session {
            name: "compaction",
            steps: vec![
                ok("put x 1"),
                ok("put x 2"),
                ok("put x 3"),
                ok("put y 1"),
                ok("compaction 3"),
                fails("get --rev 2 x"),
                ok("get --rev 3 x -w json"),
                fails("compaction 3"),
                fails("compaction 100"),
                ok("compaction --physical 4"),
                ok("get x -w json"),
                ok("get x --rev 5"),
            ],
        },
        Session {
            name: "endpoint",
            steps: vec![
                ok("put a 1"),
                ok("endpoint status"),
                ok("endpoint status -w json"),
                ok("endpoint health"),
                ok("endpoint health -w json"),
            ],
        },
    ]
}

fn check(kind: ServerKind) {
    match compare_with_etcd(kind, &sessions()) {
        Ok(report) if report.is_empty() => {}
        Ok(report) => panic!(
            "etcdctl output from {} differs from etcd's:\n{report}",
            kind.name()
        ),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn etcdctl_sees_oxetcd_as_etcd() {
    check(ServerKind::Oxetcd);
}

#[test]
fn etcdctl_sees_oxetcd_smol_as_etcd() {
    check(ServerKind::OxetcdSmol);
}
