//! `oxetcdctl`: the command-line client of oxetcd, with etcdctl's
//! commands, flags, output and exit codes, plus `bench`.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgAction, Parser, Subcommand};
use oxetcd_ctl::bench::BenchArgs;
use oxetcd_ctl::client::{Client, Config, Credentials, Tls};
use oxetcd_ctl::command::auth::AuthCommand;
use oxetcd_ctl::command::elect::ElectArgs;
use oxetcd_ctl::command::endpoint::EndpointArgs;
use oxetcd_ctl::command::kv::{CompactionArgs, DelArgs, GetArgs, PutArgs};
use oxetcd_ctl::command::lease::LeaseCommand;
use oxetcd_ctl::command::lock::LockArgs;
use oxetcd_ctl::command::maintenance::{
    AlarmCommand, DefragArgs, DowngradeCommand, SnapshotCommand,
};
use oxetcd_ctl::command::member::MemberCommand;
use oxetcd_ctl::command::role::RoleCommand;
use oxetcd_ctl::command::txn::TxnArgs;
use oxetcd_ctl::command::user::UserCommand;
use oxetcd_ctl::command::watch::WatchArgs;
use oxetcd_ctl::command::{self, exit, Context, Failure};
use oxetcd_ctl::output::{Format, Printer};
use oxetcd_ctl::parse_go_duration;

/// mimalloc, as the server's allocator (see the dependency's note in
/// Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "oxetcdctl",
    version,
    about = "A simple command line client for oxetcd and any etcd-compatible cluster",
    infer_subcommands = true
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// etcdctl's global flags (and their `ETCDCTL_*` variables).
#[derive(clap::Args)]
struct Global {
    /// gRPC endpoints
    #[arg(
        long,
        global = true,
        value_delimiter = ',',
        default_value = "127.0.0.1:2379",
        env = "ETCDCTL_ENDPOINTS"
    )]
    endpoints: Vec<String>,
    /// enable client-side debug logging
    #[arg(long, global = true, env = "ETCDCTL_DEBUG")]
    debug: bool,
    /// set the output format (fields, json, protobuf, simple, table)
    #[arg(
        short = 'w',
        long,
        global = true,
        default_value = "simple",
        env = "ETCDCTL_WRITE_OUT"
    )]
    write_out: String,
    /// print byte strings as hex encoded strings
    #[arg(long, global = true, env = "ETCDCTL_HEX")]
    hex: bool,
    /// dial timeout for client connections
    #[arg(long, global = true, default_value = "2s", value_parser = parse_go_duration, env = "ETCDCTL_DIAL_TIMEOUT")]
    dial_timeout: Duration,
    /// timeout for short running command (excluding dial timeout)
    #[arg(long, global = true, value_parser = parse_go_duration, env = "ETCDCTL_COMMAND_TIMEOUT")]
    command_timeout: Option<Duration>,
    /// keepalive time for client connections
    #[arg(long, global = true, default_value = "2s", value_parser = parse_go_duration, env = "ETCDCTL_KEEPALIVE_TIME")]
    keepalive_time: Duration,
    /// keepalive timeout for client connections
    #[arg(long, global = true, default_value = "6s", value_parser = parse_go_duration, env = "ETCDCTL_KEEPALIVE_TIMEOUT")]
    keepalive_timeout: Duration,
    /// disable transport security for client connections
    #[arg(long, global = true, action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true", env = "ETCDCTL_INSECURE_TRANSPORT")]
    insecure_transport: bool,
    /// accept insecure SRV records describing cluster endpoints
    #[arg(long, global = true, action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true")]
    insecure_discovery: bool,
    /// skip server certificate verification (CAUTION: this option should be enabled only for testing purposes)
    #[arg(long, global = true, env = "ETCDCTL_INSECURE_SKIP_TLS_VERIFY")]
    insecure_skip_tls_verify: bool,
    /// identify secure client using this TLS certificate file
    #[arg(long, global = true, env = "ETCDCTL_CERT")]
    cert: Option<String>,
    /// identify secure client using this TLS key file
    #[arg(long, global = true, env = "ETCDCTL_KEY")]
    key: Option<String>,
    /// verify certificates of TLS-enabled secure servers using this CA bundle
    #[arg(long, global = true, env = "ETCDCTL_CACERT")]
    cacert: Option<String>,
    /// username[:password] for authentication (prompt if password is not supplied)
    #[arg(long, global = true, env = "ETCDCTL_USER")]
    user: Option<String>,
    /// password for authentication (if this option is used, --user option shouldn't include password)
    #[arg(long, global = true, env = "ETCDCTL_PASSWORD")]
    password: Option<String>,
    /// domain name to query for SRV records describing cluster endpoints
    #[arg(short = 'd', long, global = true)]
    discovery_srv: Option<String>,
    /// service name to query when using DNS discovery
    #[arg(long, global = true)]
    discovery_srv_name: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Gets the key or a range of keys
    Get(GetArgs),
    /// Puts the given key into the store
    Put(PutArgs),
    /// Removes the specified key or range of keys [key, range_end)
    Del(DelArgs),
    /// Txn processes all the requests in one transaction
    Txn(TxnArgs),
    /// Compacts the event history in etcd
    Compaction(CompactionArgs),
    /// Alarm related commands
    Alarm {
        #[command(subcommand)]
        command: AlarmCommand,
    },
    /// Defragments the storage of the etcd members with given endpoints
    Defrag(DefragArgs),
    /// Endpoint related commands
    Endpoint(EndpointArgs),
    /// Transfers leadership to another etcd cluster member.
    MoveLeader {
        /// <transferee-member-id>
        args: Vec<String>,
    },
    /// Watches events stream on keys or prefixes
    Watch(WatchArgs),
    /// Acquires a named lock
    Lock(LockArgs),
    /// Observes and participates in leader election
    Elect(ElectArgs),
    /// Prints the version of oxetcdctl
    Version,
    /// Lease related commands
    Lease {
        #[command(subcommand)]
        command: LeaseCommand,
    },
    /// Membership related commands
    Member {
        #[command(subcommand)]
        command: MemberCommand,
    },
    /// Manages etcd node snapshots
    Snapshot {
        #[command(subcommand)]
        command: SnapshotCommand,
    },
    /// Downgrade related commands
    Downgrade {
        #[command(subcommand)]
        command: DowngradeCommand,
    },
    /// Enable or disable authentication
    Auth {
        #[command(subcommand)]
        command: AuthCommand,
    },
    /// User related commands
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Role related commands
    Role {
        #[command(subcommand)]
        command: RoleCommand,
    },
    /// Measure request throughput and latency
    Bench(BenchArgs),
    /// Makes a mirror at the destination etcd cluster
    MakeMirror(command::mirror::MakeMirrorArgs),
    /// commands for checking properties of the etcd cluster
    Check {
        #[command(subcommand)]
        command: command::check::CheckCommand,
    },
    /// Generates the autocompletion script for the specified shell
    Completion {
        /// bash, zsh, fish or powershell
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // etcdctl reports flag errors as `Error: …` and exits 1.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            eprintln!("Error: {}", first.trim_start_matches("error: "));
            return ExitCode::from(exit::ERROR as u8);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("Error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(()) => exit::SUCCESS,
        Err(failure) => {
            if let Some(message) = failure.message {
                let _ = std::io::stdout().flush();
                eprintln!("Error: {message}");
            }
            failure.code
        }
    };
    // Lingering streams (watch, keepalive) must not keep the process alive.
    runtime.shutdown_background();
    ExitCode::from(code.clamp(0, 255) as u8)
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let g = cli.global;
    if let Command::Version = cli.command {
        println!("oxetcdctl version: {}", env!("CARGO_PKG_VERSION"));
        println!("API version: 3.6");
        return Ok(());
    }
    if let Command::Completion { shell } = &cli.command {
        use clap::CommandFactory;
        let mut command = Cli::command();
        let mut script = Vec::new();
        clap_complete::generate(*shell, &mut command, "oxetcdctl", &mut script);
        // A reader that stops early (`| head`) is not an error.
        let _ = std::io::stdout().write_all(&script);
        return Ok(());
    }
    if let Command::Bench(args) = &cli.command {
        return bench(&g, args).await;
    }
    let format: Format = g
        .write_out
        .parse()
        .map_err(|e: String| Failure::new(exit::BAD_FEATURE, e))?;
    let ctx = Context {
        client: Client::new(config(&g)?).map_err(Failure::bad_args)?,
        printer: Printer {
            format,
            hex: g.hex,
            value_only: false,
        },
        command_timeout_given: g.command_timeout.is_some(),
    };
    let result = match &cli.command {
        Command::Get(a) => command::kv::get(&ctx, a).await,
        Command::Put(a) => command::kv::put(&ctx, a).await,
        Command::Del(a) => command::kv::del(&ctx, a).await,
        Command::Txn(a) => command::txn::txn(&ctx, a).await,
        Command::Compaction(a) => command::kv::compaction(&ctx, a).await,
        Command::Alarm { command } => command::maintenance::alarm(&ctx, command).await,
        Command::Defrag(a) => command::maintenance::defrag(&ctx, a).await,
        Command::Endpoint(a) => command::endpoint::endpoint(&ctx, a).await,
        Command::MoveLeader { args } => command::maintenance::move_leader(&ctx, args).await,
        Command::Watch(a) => command::watch::watch(&ctx, a).await,
        Command::Lock(a) => command::lock::lock(&ctx, a).await,
        Command::Elect(a) => command::elect::elect(&ctx, a).await,
        Command::Lease { command } => command::lease::lease_command(&ctx, command).await,
        Command::Member { command } => command::member::member(&ctx, command).await,
        Command::Snapshot { command } => command::maintenance::snapshot(&ctx, command).await,
        Command::Downgrade { command } => command::maintenance::downgrade(&ctx, command).await,
        Command::Auth { command } => command::auth::auth(&ctx, command).await,
        Command::User { command } => command::user::user(&ctx, command).await,
        Command::Role { command } => command::role::role(&ctx, command).await,
        Command::MakeMirror(a) => command::mirror::make_mirror(&ctx, a).await,
        Command::Check { command } => command::check::check(&ctx, command).await,
        Command::Version | Command::Bench(_) | Command::Completion { .. } => {
            unreachable!("handled above")
        }
    };
    match ctx.client.credentials_refused() {
        // etcdctl authenticates as it connects, before the command runs,
        // and reports a refusal there as a connection failure.
        Some(refusal) if result.is_err() => Err(Failure::new(exit::BAD_CONNECTION, refusal)),
        _ => result,
    }
}

/// The endpoints `--discovery-srv` names: the targets of the SRV records
/// `_etcd-client-ssl._tcp.<domain>` (as `https://`) and
/// `_etcd-client._tcp.<domain>` (as `http://`, dropped with a note unless
/// `--insecure-discovery`), as etcdctl finds them.
fn srv_endpoints(domain: &str, name: &str, insecure: bool) -> Result<Vec<String>, Failure> {
    use oxetcd_urls::srv::{lookup_srv, service_name};
    let mut endpoints = Vec::new();
    let mut errors = Vec::new();
    for (secure, scheme) in [(true, "https"), (false, "http")] {
        match lookup_srv(&service_name("etcd-client", secure, name, domain)) {
            Ok(records) => endpoints.extend(
                records
                    .iter()
                    .map(|r| format!("{scheme}://{}:{}", r.target, r.port)),
            ),
            Err(e) => errors.push(e),
        }
    }
    if errors.len() == 2 {
        return Err(Failure::bad_args(format!(
            "dns lookup errors: {} and {}",
            errors[0], errors[1]
        )));
    }
    if !insecure {
        endpoints.retain(|endpoint| {
            let plain = endpoint.starts_with("http://");
            if plain {
                eprintln!("ignoring discovered insecure endpoint {endpoint:?}");
            }
            !plain
        });
    }
    Ok(endpoints)
}

/// The client configuration from the global flags, with etcdctl's checks.
fn config(g: &Global) -> Result<Config, Failure> {
    for (flag, value) in [("cert", &g.cert), ("key", &g.key), ("cacert", &g.cacert)] {
        if value.as_deref() == Some("") {
            return Err(Failure::bad_args(format!(
                "empty string is passed to --{flag} option"
            )));
        }
    }
    let credentials = match (&g.user, &g.password) {
        (None, _) => None,
        (Some(user), _) if user.is_empty() => None,
        (Some(user), Some(password)) if !password.is_empty() => Some(Credentials {
            user: user.clone(),
            password: Some(password.clone()),
        }),
        (Some(user), _) => Some(match user.split_once(':') {
            Some((user, password)) => Credentials {
                user: user.to_owned(),
                password: Some(password.to_owned()),
            },
            // Asked for when the client first connects.
            None => Credentials {
                user: user.clone(),
                password: None,
            },
        }),
    };
    let endpoints = match g.discovery_srv.as_deref().filter(|d| !d.is_empty()) {
        Some(domain) => srv_endpoints(
            domain,
            g.discovery_srv_name.as_deref().unwrap_or(""),
            g.insecure_discovery,
        )?,
        None => g.endpoints.iter().map(|e| e.trim().to_owned()).collect(),
    };
    Ok(Config {
        endpoints,
        dial_timeout: g.dial_timeout,
        command_timeout: g.command_timeout.unwrap_or(Duration::from_secs(5)),
        keepalive_time: g.keepalive_time,
        keepalive_timeout: g.keepalive_timeout,
        tls: Tls {
            ca_cert: g.cacert.as_ref().map(Into::into),
            cert: g.cert.as_ref().map(Into::into),
            key: g.key.as_ref().map(Into::into),
            insecure_skip_verify: g.insecure_skip_tls_verify,
            insecure_transport: g.insecure_transport,
        },
        credentials,
    })
}

async fn bench(g: &Global, args: &BenchArgs) -> Result<(), Failure> {
    let options = args
        .options()
        .map_err(|e| Failure::new(exit::BAD_FEATURE, e))?;
    let config = config(g)?;
    let first_endpoint = config.endpoints.first().cloned().unwrap_or_default();
    let channels = oxetcd_ctl::connect(&config, args.conns)
        .await
        .map_err(Failure::error)?;
    let mut options = options;
    if config.credentials.is_some() {
        let client = oxetcd_ctl::Client::new(config).map_err(Failure::error)?;
        options.token = client
            .token_for(&channels[0])
            .await
            .map_err(Failure::error)?;
    }
    if args.gateway {
        let address = first_endpoint
            .strip_prefix("http://")
            .unwrap_or(&first_endpoint)
            .trim_end_matches('/');
        if address.starts_with("https://") {
            return Err(Failure::new(
                exit::BAD_FEATURE,
                "bench --gateway speaks plaintext HTTP only".to_owned(),
            ));
        }
        options.gateway = Some(address.to_owned());
    }
    let report = oxetcd_ctl::bench::run(channels, options).await;
    print!("{}", report.summary());
    if let Some(path) = &args.csv {
        std::fs::write(path, report.csv())
            .map_err(|e| Failure::new(exit::IO, format!("{}: {e}", path.display())))?;
    }
    if let Some(path) = &args.plot {
        use oxetcd_ctl::bench::plot;
        let figure = plot::render(&report, &args.title(), plot::Format::for_path(path))
            .map_err(|e| Failure::new(exit::IO, format!("{}: {e}", path.display())))?;
        std::fs::write(path, figure)
            .map_err(|e| Failure::new(exit::IO, format!("{}: {e}", path.display())))?;
    }
    if report.samples.is_empty() {
        return Err(Failure::error(
            report
                .first_error
                .unwrap_or_else(|| "no request completed".to_owned()),
        ));
    }
    Ok(())
}
