//! The benchmark's numbers add up: a tiny run against oxetcd counts exactly
//! the requests asked for, its histogram holds every one of them, and the
//! CSV and SVG files hold the same samples. `--plot` draws a PNG for a
//! `.png` file, and a path it cannot write fails as etcdctl's file errors
//! do. The workloads oxetcd does not serve yet (watch, lease keepalive) are
//! checked against Debian's etcd.

use std::path::Path;
use std::process::{Command, Output};

use oxetcd_tests::{Server, ServerKind};

struct Run {
    stdout: String,
    csv: String,
    svg: String,
}

fn bench(server: &Server, args: &[&str]) -> Run {
    let dir = tempfile::tempdir().expect("temp dir");
    let csv = dir.path().join("samples.csv");
    let svg = dir.path().join("plot.svg");
    let output = Command::new(env!("CARGO_BIN_EXE_oxetcdctl"))
        .arg(format!("--endpoints={}", server.address()))
        .arg("bench")
        .args(args)
        .arg(format!("--csv={}", csv.display()))
        .arg(format!("--plot={}", svg.display()))
        .output()
        .expect("run oxetcdctl bench");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "bench {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Run {
        stdout,
        csv: std::fs::read_to_string(csv).expect("csv written"),
        svg: std::fs::read_to_string(svg).expect("svg written"),
    }
}

/// The value of a `  Name:\tvalue` summary line.
fn field<'a>(summary: &'a str, name: &str) -> &'a str {
    summary
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(&format!("{name}:\t")))
        .unwrap_or_else(|| panic!("no {name} in\n{summary}"))
}

fn histogram_total(summary: &str) -> u64 {
    summary
        .split("Response time histogram:")
        .nth(1)
        .and_then(|s| s.split("Latency distribution:").next())
        .expect("histogram")
        .lines()
        .filter_map(|l| l.split('[').nth(1)?.split(']').next()?.parse::<u64>().ok())
        .sum()
}

fn check(run: &Run, expected: u64) {
    assert_eq!(
        field(&run.stdout, "Requests"),
        expected.to_string(),
        "{}",
        run.stdout
    );
    assert_eq!(field(&run.stdout, "Errors"), "0", "{}", run.stdout);
    assert_eq!(histogram_total(&run.stdout), expected, "{}", run.stdout);
    assert_eq!(
        run.csv.lines().count() as u64,
        expected + 1,
        "CSV rows plus header"
    );
    assert!(run.svg.starts_with("<svg") && run.svg.trim_end().ends_with("</svg>"));
    assert!(run.stdout.contains("99.9% in "), "{}", run.stdout);
}

#[test]
fn tiny_runs_count_every_request_on_oxetcd() {
    let server = Server::start(ServerKind::Oxetcd).expect("oxetcd");
    let common = [
        "--total=200",
        "--clients=8",
        "--conns=2",
        "--key-space-size=50",
    ];
    for workload in [
        &["put"][..],
        &["range"],
        &["range", "--consistency=s"],
        &["txn-put", "--txn-ops=3"],
    ] {
        let args: Vec<&str> = workload.iter().chain(&common).copied().collect();
        check(&bench(&server, &args), 200);
    }
    // --rate paces the run: 100 requests at 400/s take at least 0.2 s.
    let run = bench(
        &server,
        &["put", "--total=100", "--clients=4", "--rate=400"],
    );
    check(&run, 100);
    let total: f64 = field(&run.stdout, "Total")
        .trim_end_matches(" secs.")
        .parse()
        .expect("secs");
    assert!(total >= 0.24, "rate not applied: {total}s");
}

#[test]
fn watch_and_keepalive_runs_count_every_sample_on_etcd() {
    let server = Server::start(ServerKind::Etcd).expect("etcd");
    // 5 watchers × 40 events = 200 deliveries.
    check(
        &bench(
            &server,
            &["watch", "--watchers=5", "--events=40", "--clients=4"],
        ),
        200,
    );
    check(
        &bench(&server, &["lease-keepalive", "--total=200", "--clients=4"]),
        200,
    );
}

fn bench_plot(server: &Server, plot: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oxetcdctl"))
        .arg(format!("--endpoints={}", server.address()))
        .args(["bench", "put", "--total=200", "--clients=8", "--conns=2"])
        .arg(format!("--plot={}", plot.display()))
        .output()
        .expect("run oxetcdctl bench")
}

#[test]
fn png_plots_and_unwritable_paths_on_oxetcd() {
    let server = Server::start(ServerKind::Oxetcd).expect("oxetcd");
    let dir = tempfile::tempdir().expect("temp dir");
    // The extension is matched in any case.
    let path = dir.path().join("latency.PNG");
    let output = bench_plot(&server, &path);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let bytes = std::fs::read(&path).expect("PNG written");
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("a PNG header");
    let mut rgb = vec![0; reader.output_buffer_size().expect("buffer size")];
    let info = reader.next_frame(&mut rgb).expect("PNG data");
    // Twice the SVG's 1360 × 470 units, 8-bit RGB.
    assert_eq!((info.width, info.height), (2720, 940));
    assert_eq!(
        (info.color_type, info.bit_depth),
        (png::ColorType::Rgb, png::BitDepth::Eight)
    );
    let count = |colour: [u8; 3]| {
        rgb[..info.buffer_size()]
            .chunks_exact(3)
            .filter(|p| *p == colour)
            .count()
    };
    // The p99 and mean series, the text (the only pure black), and a
    // white background around them.
    assert!(count([0xd6, 0x5f, 0x5f]) > 100, "no p99 line");
    assert!(count([0x22, 0x22, 0x22]) > 100, "no mean line");
    assert!(count([0, 0, 0]) > 2000, "no text");
    assert!(
        count([0xff, 0xff, 0xff]) > 2720 * 940 / 2,
        "not mostly white"
    );

    let unwritable = dir.path().join("missing").join("plot.png");
    let output = bench_plot(&server, &unwritable);
    assert_eq!(output.status.code(), Some(oxetcd_ctl::command::exit::IO));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with(&format!("Error: {}: ", unwritable.display())),
        "{stderr}"
    );
    assert!(!unwritable.exists());
}

/// With auth on, `--user` gives every benchmark request the token (puts,
/// reads, transactions); without it the server refuses them all.
#[test]
fn runs_with_user_carry_the_token_on_oxetcd() {
    let server = Server::start(ServerKind::Oxetcd).expect("oxetcd");
    let etcdctl = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_oxetcdctl"))
            .arg(format!("--endpoints={}", server.address()))
            .args(args)
            .output()
            .expect("run oxetcdctl");
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    etcdctl(&["user", "add", "root:rootpw"]);
    etcdctl(&["user", "grant-role", "root", "root"]);
    etcdctl(&["auth", "enable"]);
    let common = [
        "--total=100",
        "--clients=4",
        "--key-space-size=50",
        "--user=root:rootpw",
    ];
    for workload in [&["put"][..], &["range"], &["txn-put", "--txn-ops=2"]] {
        let args: Vec<&str> = workload.iter().chain(&common).copied().collect();
        check(&bench(&server, &args), 100);
    }
    let refused = Command::new(env!("CARGO_BIN_EXE_oxetcdctl"))
        .arg(format!("--endpoints={}", server.address()))
        .args(["bench", "put", "--total=10", "--clients=2"])
        .output()
        .expect("run oxetcdctl bench");
    assert!(!refused.status.success());
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert_eq!(field(&stdout, "Errors"), "10", "{stdout}");
}
