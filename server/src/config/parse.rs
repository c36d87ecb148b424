//! From arguments and environment to a [`Command`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::cluster::{parse_initial_cluster, parse_raft_timing, ClusterState};
use super::flags::*;
use super::tls::{parse_client_tls, parse_peer_tls, Given};
use super::urls::{parse_listen_urls, parse_urls};
use super::values::*;
use super::{Command, Config, ConfigError};

/// Parses `args` (without the program name) and the environment `env`.
pub fn parse<A, E, S, T>(args: A, env: E) -> Result<Command, ConfigError>
where
    A: IntoIterator<Item = S>,
    S: AsRef<str>,
    E: IntoIterator<Item = (T, T)>,
    T: AsRef<str>,
{
    let mut warnings = Vec::new();
    let mut values: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut switches: BTreeMap<&'static str, bool> = BTreeMap::new();

    // Flags first; the environment only fills what they left unset.
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let arg = arg.as_ref();
        if arg == "--" {
            if let Some(extra) = args.next() {
                return Err(ConfigError::NotAFlag(extra.as_ref().to_owned()));
            }
            break;
        }
        let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Err(ConfigError::NotAFlag(arg.to_owned()));
        };
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (body, None),
        };
        let Some(flag) = FLAGS.iter().find(|f| f.name == name) else {
            return Err(ConfigError::UnknownFlag(arg.to_owned()));
        };
        match flag.value {
            None => {
                let on = match inline {
                    None => true,
                    Some(value) => parse_bool(flag.name, value)?,
                };
                switches.insert(flag.name, on);
            }
            Some(_) => {
                let value = match inline {
                    Some(value) => value.to_owned(),
                    None => match args.next() {
                        Some(value) => value.as_ref().to_owned(),
                        None => return Err(ConfigError::MissingValue(arg.to_owned())),
                    },
                };
                values.insert(flag.name, value);
            }
        }
    }
    if switches.get("help").copied().unwrap_or(false) {
        return Ok(Command::Help);
    }
    if switches.get("version").copied().unwrap_or(false) {
        return Ok(Command::Version);
    }

    let mut env: Vec<(String, String)> = env
        .into_iter()
        .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned()))
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    env.sort();
    for (key, value) in env {
        let name = key[ENV_PREFIX.len()..]
            .to_ascii_lowercase()
            .replace('_', "-");
        let flag = FLAGS
            .iter()
            .find(|f| f.name == name && !SWITCHES_NOT_FROM_ENV.contains(&f.name));
        match flag {
            None => warnings.push(format!("unrecognized environment variable {key}={value}")),
            Some(flag) if values.contains_key(flag.name) || switches.contains_key(flag.name) => {
                warnings.push(format!(
                    "environment variable {key} is shadowed by the command-line flag --{}",
                    flag.name
                ))
            }
            Some(flag) if flag.value.is_none() => {
                switches.insert(flag.name, parse_bool(flag.name, &value)?);
            }
            Some(flag) => {
                values.insert(flag.name, value);
            }
        }
    }

    let value = |name: &'static str| -> String {
        values.get(name).cloned().unwrap_or_else(|| {
            FLAGS
                .iter()
                .find(|f| f.name == name)
                .map(|f| f.default.to_owned())
                .unwrap_or_default()
        })
    };

    let name = value("name");
    let data_dir = match values.get("data-dir") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        Some(_) => return Err(invalid("data-dir", "", "must not be empty")),
        None => PathBuf::from(format!("{name}.etcd")),
    };
    let listen_client_urls = parse_listen_urls("listen-client-urls", &value("listen-client-urls"))?;
    let switch = |flag: &'static str| switches.get(flag).copied().unwrap_or(false);
    let given = Given {
        value: &value,
        switch: &switch,
    };
    let client_tls = parse_client_tls(&given, &listen_client_urls, &mut warnings)?;
    let advertise_client_urls =
        parse_urls("advertise-client-urls", &value("advertise-client-urls"))?;
    let listen_peer_urls = parse_listen_urls("listen-peer-urls", &value("listen-peer-urls"))?;
    let initial_advertise_peer_urls = parse_urls(
        "initial-advertise-peer-urls",
        &value("initial-advertise-peer-urls"),
    )?;
    let initial_cluster_token = value("initial-cluster-token");
    let initial_cluster = parse_initial_cluster(
        &name,
        &initial_advertise_peer_urls,
        &value("initial-cluster"),
    )?;
    let peer_tls = parse_peer_tls(
        &given,
        &listen_peer_urls,
        &initial_advertise_peer_urls,
        &initial_cluster,
        &mut warnings,
    )?;
    let initial_cluster_state = match value("initial-cluster-state").as_str() {
        "new" => ClusterState::New,
        "existing" => ClusterState::Existing,
        other => {
            return Err(invalid(
                "initial-cluster-state",
                other,
                "expected new or existing",
            ))
        }
    };
    let (heartbeat_interval_ms, election_timeout_ms) =
        parse_raft_timing(&value("heartbeat-interval"), &value("election-timeout"))?;
    let snapshot_count = match value("snapshot-count").trim().parse::<u64>() {
        Ok(0) => {
            warnings.push(format!(
                "--snapshot-count is 0; using the default {SNAPSHOT_COUNT_DEFAULT}"
            ));
            SNAPSHOT_COUNT_DEFAULT
        }
        Ok(n) => n,
        Err(e) => {
            return Err(invalid(
                "snapshot-count",
                &value("snapshot-count"),
                e.to_string(),
            ))
        }
    };
    let snapshot_catchup_entries = parse_positive(
        "experimental-snapshot-catchup-entries",
        &value("experimental-snapshot-catchup-entries"),
    )?;
    let max_learners = parse_positive("max-learners", &value("max-learners"))?;
    let max_request_bytes = parse_positive("max-request-bytes", &value("max-request-bytes"))?;
    let max_txn_ops = parse_positive("max-txn-ops", &value("max-txn-ops"))?;
    let log_level = parse_log_level(&value("log-level"))?;
    // etcd 3.6 also knows these without the `experimental-` prefix; the
    // plain name wins when both are given.
    let renamed = |plain: &'static str, experimental: &'static str| {
        if values.contains_key(plain) {
            (plain, value(plain))
        } else {
            (experimental, value(experimental))
        }
    };
    let (flag, text) = renamed(
        "lease-checkpoint-interval",
        "experimental-lease-checkpoint-interval",
    );
    let lease_checkpoint_interval = parse_duration(flag, &text)?;
    if lease_checkpoint_interval.is_zero() {
        return Err(invalid(flag, &text, "must be greater than zero"));
    }
    let (flag, text) = renamed(
        "watch-progress-notify-interval",
        "experimental-watch-progress-notify-interval",
    );
    let mut watch_progress_notify_interval = parse_duration(flag, &text)?;
    // Zero keeps etcd's default rather than turning notifications off.
    if watch_progress_notify_interval.is_zero() {
        watch_progress_notify_interval = oxetcd_core::watch::PROGRESS_NOTIFY_INTERVAL_DEFAULT;
    } else if watch_progress_notify_interval < WATCH_PROGRESS_NOTIFY_INTERVAL_MIN {
        warnings.push(format!(
            "--{flag} {text} is below the minimum; using {WATCH_PROGRESS_NOTIFY_INTERVAL_MIN:?}"
        ));
        watch_progress_notify_interval = WATCH_PROGRESS_NOTIFY_INTERVAL_MIN;
    }

    if switches
        .get("experimental-initial-corrupt-check")
        .copied()
        .unwrap_or(false)
    {
        warnings.push("not yet supported: --experimental-initial-corrupt-check".to_owned());
    }

    Ok(Command::Run(Config {
        name,
        data_dir,
        listen_client_urls,
        client_tls,
        peer_tls,
        advertise_client_urls,
        listen_peer_urls,
        initial_advertise_peer_urls,
        initial_cluster_token,
        initial_cluster,
        initial_cluster_state,
        heartbeat_interval_ms,
        election_timeout_ms,
        snapshot_count,
        snapshot_catchup_entries: snapshot_catchup_entries as u64,
        max_learners,
        max_request_bytes,
        max_txn_ops,
        lease_checkpoint_interval,
        watch_progress_notify_interval,
        log_level,
        warnings,
    }))
}
