//! From every flag's value to a [`Config`], with the rules that span
//! several flags (URLs against TLS, the initial cluster against the
//! advertised URLs, raft timing) and the warnings for values oxetcd
//! accepts but does not act on yet.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::cluster::{parse_initial_cluster, parse_raft_timing, ClusterState};
use super::flags::{
    self, Replacement, Support, SNAPSHOT_COUNT_DEFAULT, WATCH_PROGRESS_NOTIFY_INTERVAL_MIN,
};
use super::gates::{gate_warnings, FeatureGates, FEATURE_GATES};
use super::logging::Logging;
use super::parse::{from_source, Given};
use super::settings::{Pending, Settings};
use super::tls::{parse_client_tls, parse_peer_tls, Switches};
use super::urls::{parse_listen_urls, parse_urls, ListenUrl};
use super::values::{invalid, Value};
use super::{Config, ConfigError};

/// The configuration `settings` describe; an error names the flag as given
/// and where its value came from.
pub(super) fn config(
    given: &Given,
    settings: Settings,
    mut warnings: Vec<String>,
) -> Result<Config, ConfigError> {
    check_support(given, &settings, &mut warnings).map_err(|e| locate(e, given))?;
    let gates = feature_gates(given, &settings).map_err(|e| locate(e, given))?;
    if let Some(Value::Gates(explicit)) = settings.get("feature-gates") {
        warnings.extend(gate_warnings(FEATURE_GATES, explicit));
    }
    for gate in FeatureGates::resolve(FEATURE_GATES, &gates).not_acted_on() {
        warnings.push(format!("not yet supported: {gate}"));
    }
    build(given, settings, gates, warnings).map_err(|e| locate(e, given))
}

fn build(
    given: &Given,
    settings: Settings,
    gates: BTreeMap<String, bool>,
    mut warnings: Vec<String>,
) -> Result<Config, ConfigError> {
    let value = |name: &'static str| -> String {
        match given.get(name) {
            Some(raw) => raw.text.clone(),
            None => flags::find(name).map_or_else(String::new, |f| f.default.to_owned()),
        }
    };
    let name = value("name");
    let data_dir = match given.get("data-dir") {
        Some(dir) if !dir.text.is_empty() => PathBuf::from(&dir.text),
        Some(_) => return Err(invalid("data-dir", "", "must not be empty")),
        None => PathBuf::from(format!("{name}.etcd")),
    };
    let listen_client_urls = parse_listen_urls("listen-client-urls", &value("listen-client-urls"))?;
    let switch = |flag: &'static str| settings.bool(flag);
    let tls_given = Switches {
        value: &value,
        switch: &switch,
    };
    let client_tls = parse_client_tls(&tls_given, &listen_client_urls, &mut warnings)?;
    let advertise_client_urls = settings.list("advertise-client-urls");
    if advertise_client_urls.is_empty() {
        return Err(invalid(
            "advertise-client-urls",
            &value("advertise-client-urls"),
            "at least one URL is required",
        ));
    }
    let listen_peer_urls = parse_listen_urls("listen-peer-urls", &value("listen-peer-urls"))?;
    let initial_advertise_peer_urls = parse_urls(
        "initial-advertise-peer-urls",
        &value("initial-advertise-peer-urls"),
    )?;
    let discovery = super::discovery::parse(&settings, settings.is_given("initial-cluster"))?;
    // Until discovery answers, the initial cluster is this member alone.
    let initial_cluster_value = match discovery {
        None => value("initial-cluster"),
        Some(_) => initial_advertise_peer_urls
            .iter()
            .map(|url| format!("{name}={url}"))
            .collect::<Vec<_>>()
            .join(","),
    };
    let initial_cluster =
        parse_initial_cluster(&name, &initial_advertise_peer_urls, &initial_cluster_value)?;
    let initial_cluster_token = match &discovery {
        Some(super::Discovery::V3(v3)) => v3.token.clone(),
        _ => settings.text("initial-cluster-token"),
    };
    let peer_tls = parse_peer_tls(
        &tls_given,
        &listen_peer_urls,
        &initial_advertise_peer_urls,
        &initial_cluster,
        &client_tls,
        &mut warnings,
    )?;
    let (heartbeat_interval_ms, election_timeout_ms) =
        parse_raft_timing(&value("heartbeat-interval"), &value("election-timeout"))?;
    let snapshot_count = snapshot_count(&settings, &mut warnings);
    let (lease_checkpoint_interval, watch_progress_notify_interval) =
        intervals(&settings, &value, &mut warnings)?;
    let logging = logging(&settings);
    let listen_metrics_urls = listen_metrics_urls(&value("listen-metrics-urls"))?;
    let pending = Pending::new(&settings, gates)?;
    let server_version = run_as_version(&settings.text("unsafe-run-as-version"))?;
    warnings.extend(quota_warning(pending.quota_backend_bytes));
    Ok(Config {
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
        discovery,
        initial_cluster_state: match settings.text("initial-cluster-state").as_str() {
            "existing" => ClusterState::Existing,
            _ => ClusterState::New,
        },
        heartbeat_interval_ms,
        election_timeout_ms,
        snapshot_count,
        snapshot_catchup_entries: settings.uint("snapshot-catchup-entries"),
        max_learners: settings.uint("max-learners") as usize,
        max_request_bytes: settings.uint("max-request-bytes") as usize,
        max_txn_ops: settings.uint("max-txn-ops") as usize,
        lease_checkpoint_interval,
        watch_progress_notify_interval,
        strict_reconfig_check: settings.bool("strict-reconfig-check"),
        max_concurrent_streams: u32::try_from(settings.uint("max-concurrent-streams"))
            .unwrap_or(u32::MAX),
        bcrypt_cost: super::settings::bcrypt_cost(&settings)?,
        auth_token: settings.text("auth-token"),
        auth_token_ttl: Duration::from_secs(settings.uint("auth-token-ttl")),
        logging,
        metrics_extensive: settings.text("metrics") == "extensive",
        listen_metrics_urls,
        server_version,
        pending,
        known_ids: None,
        settings,
        warnings,
    })
}

/// `--unsafe-run-as-version`: empty for this build's version, else a
/// version no newer than this build's and at most one minor older (a
/// member older than that could not run this build's data).
fn run_as_version(value: &str) -> Result<oxetcd_core::version::Version, ConfigError> {
    use oxetcd_core::version::{min_cluster_version, Version, SERVER_VERSION};
    if value.is_empty() {
        return Ok(SERVER_VERSION);
    }
    let invalid = |reason: &str| ConfigError::InvalidValue {
        flag: "unsafe-run-as-version",
        value: value.to_owned(),
        reason: reason.to_owned(),
    };
    let version: Version = value
        .parse()
        .map_err(|_| invalid("not a major.minor.patch version"))?;
    if version.major_minor() > SERVER_VERSION || version < min_cluster_version(SERVER_VERSION) {
        return Err(invalid(&format!(
            "this build runs as {} or one minor below",
            SERVER_VERSION.major_minor_string()
        )));
    }
    Ok(version)
}

/// `--listen-metrics-urls`: `http://`, `https://`, `unix://` and
/// `unixs://` URLs, served as the client URLs are; none is allowed.
fn listen_metrics_urls(value: &str) -> Result<Vec<ListenUrl>, ConfigError> {
    if super::urls::split_list(value).next().is_none() {
        return Ok(Vec::new());
    }
    parse_listen_urls("listen-metrics-urls", value)
}

/// etcd's warning for a `--quota-backend-bytes` above its suggested
/// maximum (8 GiB).
fn quota_warning(bytes: i64) -> Option<String> {
    let max = oxetcd_core::alarm::QUOTA_BYTES_WARN;
    (bytes > 0 && bytes.unsigned_abs() > max).then(|| {
        format!("quota exceeds the maximum value: --quota-backend-bytes {bytes} is above {max}")
    })
}

/// `--snapshot-count`; 0 means etcd's default, with a warning.
fn snapshot_count(settings: &Settings, warnings: &mut Vec<String>) -> u64 {
    match settings.uint("snapshot-count") {
        0 => {
            warnings.push(format!(
                "--snapshot-count is 0; using the default {SNAPSHOT_COUNT_DEFAULT}"
            ));
            SNAPSHOT_COUNT_DEFAULT
        }
        n => n,
    }
}

/// `--lease-checkpoint-interval` (above zero) and
/// `--watch-progress-notify-interval` (zero: etcd's default; raised to
/// etcd's minimum).
fn intervals(
    settings: &Settings,
    value: &dyn Fn(&'static str) -> String,
    warnings: &mut Vec<String>,
) -> Result<(Duration, Duration), ConfigError> {
    let lease_checkpoint_interval = settings.duration("lease-checkpoint-interval");
    if lease_checkpoint_interval.is_zero() {
        return Err(invalid(
            "lease-checkpoint-interval",
            &value("lease-checkpoint-interval"),
            "must be greater than zero",
        ));
    }
    let mut watch_progress_notify_interval = settings.duration("watch-progress-notify-interval");
    // Zero keeps etcd's default rather than turning notifications off.
    if watch_progress_notify_interval.is_zero() {
        watch_progress_notify_interval = oxetcd_core::watch::PROGRESS_NOTIFY_INTERVAL_DEFAULT;
    } else if watch_progress_notify_interval < WATCH_PROGRESS_NOTIFY_INTERVAL_MIN {
        warnings.push(format!(
            "--watch-progress-notify-interval {} is below the minimum; using \
             {WATCH_PROGRESS_NOTIFY_INTERVAL_MIN:?}",
            value("watch-progress-notify-interval")
        ));
        watch_progress_notify_interval = WATCH_PROGRESS_NOTIFY_INTERVAL_MIN;
    }
    Ok((lease_checkpoint_interval, watch_progress_notify_interval))
}

/// The logging flags; etcd 3.4's `--debug` means debug logging unless a
/// level is given.
fn logging(settings: &Settings) -> Logging {
    let level = if settings.bool("debug") && !settings.is_given("log-level") {
        "debug".to_owned()
    } else {
        settings.text("log-level")
    };
    Logging::new(
        &settings.text("logger"),
        &level,
        &settings.text("log-format"),
        &settings.list("log-outputs"),
    )
}

/// Refused flags given a value other than their default are errors; flags
/// stored for later work log `not yet supported` when they differ from
/// their default.
fn check_support(
    given: &Given,
    settings: &Settings,
    warnings: &mut Vec<String>,
) -> Result<(), ConfigError> {
    for flag in flags::all() {
        let Some(raw) = given.get(flag.name) else {
            continue;
        };
        let default = flag.kind.parse(flag.name, flag.default)?;
        if settings.get(flag.name) == Some(&default) {
            continue;
        }
        match flag.support {
            Support::Refused(why) => {
                let error = invalid(raw.given_as, &raw.text, format!("not supported: {why}"));
                return Err(from_source(error, &raw.source));
            }
            Support::NotYet => warnings.push(format!("not yet supported: --{}", flag.name)),
            _ => {}
        }
    }
    Ok(())
}

/// `--feature-gates`, with etcd 3.5's switches that 3.6 made gates: a
/// switch sets its gate unless `--feature-gates` names it too (an error,
/// as in etcd 3.6). Gates oxetcd does not act on are logged.
fn feature_gates(
    given: &Given,
    settings: &Settings,
) -> Result<BTreeMap<String, bool>, ConfigError> {
    let mut gates = match settings.get("feature-gates") {
        Some(Value::Gates(gates)) => gates.clone(),
        _ => BTreeMap::new(),
    };
    let explicit = gates.clone();
    for flag in flags::all() {
        let (Replacement::Gate(gate), Some(raw)) = (flag.replaced, given.get(flag.name)) else {
            continue;
        };
        let on = settings.bool(flag.name);
        if let Some(set) = explicit.get(gate) {
            return Err(invalid(
                flag.name,
                &raw.text,
                format!(
                    "cannot specify both flags: --{}={on} and --feature-gates={gate}={set} at \
                     the same time, please just use --feature-gates={gate}={set}",
                    flag.name
                ),
            ));
        }
        gates.insert(gate.to_owned(), on);
    }
    Ok(gates)
}

/// `error` with the source of the value it names, when that value came
/// from a variable or the file.
fn locate(error: ConfigError, given: &Given) -> ConfigError {
    let ConfigError::InvalidValue { flag, .. } = &error else {
        return error;
    };
    match given.values().find(|raw| raw.given_as == *flag) {
        Some(raw) if !error.to_string().contains("(from ") => from_source(error, &raw.source),
        _ => error,
    }
}
