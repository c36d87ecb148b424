//! `--config-file`: etcd's YAML configuration file.
//!
//! Design: the file's keys are the flags' names (etcd's `embed.Config`
//! YAML tags), so each key is looked up in the flag table and its value
//! turned into the text the flag would have had; from there the file's
//! values are checked exactly as flags are. etcd's nested keys map onto
//! flags too: `client-transport-security: {cert-file, ...}` onto
//! `--cert-file` …, `peer-transport-security` onto `--peer-*`, and
//! `socket-options` onto `--socket-reuse-*`. YAML lists become comma lists.
//! A bare number for a duration is nanoseconds, as etcd reads Go's
//! `time.Duration` from YAML; a duration string (`10m`) is taken too. An
//! unknown key is a warning (etcd ignores it silently). This module never
//! reads the file: `parse` hands it the text.

use serde_yaml_ng::Value as Yaml;

use super::flags::{self, Flag, Kind, Support};
use super::ConfigError;

/// One value the file gives: the flag, its text, and the key it came under.
pub(super) struct FileValue {
    pub(super) flag: &'static Flag,
    pub(super) text: String,
}

/// The flags under `client-transport-security` (oxetcd also takes
/// `crl-file` there, which etcd's file has no key for).
const CLIENT_SECURITY: &[(&str, &str)] = &[
    ("cert-file", "cert-file"),
    ("key-file", "key-file"),
    ("client-cert-file", "client-cert-file"),
    ("client-key-file", "client-key-file"),
    ("client-cert-auth", "client-cert-auth"),
    ("trusted-ca-file", "trusted-ca-file"),
    ("auto-tls", "auto-tls"),
    ("allowed-hostname", "client-cert-allowed-hostname"),
    ("crl-file", "client-crl-file"),
];

/// The flags under `peer-transport-security`.
const PEER_SECURITY: &[(&str, &str)] = &[
    ("cert-file", "peer-cert-file"),
    ("key-file", "peer-key-file"),
    ("client-cert-file", "peer-client-cert-file"),
    ("client-key-file", "peer-client-key-file"),
    ("client-cert-auth", "peer-client-cert-auth"),
    ("trusted-ca-file", "peer-trusted-ca-file"),
    ("auto-tls", "peer-auto-tls"),
    ("allowed-cn", "peer-cert-allowed-cn"),
    ("allowed-hostname", "peer-cert-allowed-hostname"),
    (
        "skip-client-san-verification",
        "peer-skip-client-san-verification",
    ),
    ("crl-file", "peer-crl-file"),
];

/// The flags under `socket-options`.
const SOCKET_OPTIONS: &[(&str, &str)] = &[
    ("reuse-port", "socket-reuse-port"),
    ("reuse-address", "socket-reuse-address"),
];

/// Top-level keys whose name differs from their flag's.
const ALIASES: &[(&str, &str)] = &[(
    "experimental-snapshot-catch-up-entries",
    "experimental-snapshot-catchup-entries",
)];

/// The values `text` (the file at `path`) gives.
pub(super) fn read(
    path: &str,
    text: &str,
    warnings: &mut Vec<String>,
) -> Result<Vec<FileValue>, ConfigError> {
    let error = |reason: String| ConfigError::ConfigFile {
        path: path.to_owned(),
        reason,
    };
    let document: Yaml = serde_yaml_ng::from_str(text).map_err(|e| error(e.to_string()))?;
    let map = match document {
        Yaml::Mapping(map) => map,
        Yaml::Null => return Ok(Vec::new()),
        _ => {
            return Err(error(
                "expected a mapping of flag names to values".to_owned(),
            ))
        }
    };
    let mut values = Vec::new();
    for (key, value) in map {
        let Some(key) = key.as_str() else {
            return Err(error(format!("key {key:?} is not a string")));
        };
        let nested = match key {
            "client-transport-security" => Some(CLIENT_SECURITY),
            "peer-transport-security" => Some(PEER_SECURITY),
            "socket-options" => Some(SOCKET_OPTIONS),
            _ => None,
        };
        match nested {
            Some(names) => {
                read_nested(key, &value, names, &mut values, warnings).map_err(&error)?
            }
            None => read_value(key, key, &value, &mut values, warnings)?,
        }
    }
    Ok(values)
}

/// A nested mapping whose keys stand for the flags `names` gives.
fn read_nested(
    key: &str,
    value: &Yaml,
    names: &[(&str, &'static str)],
    values: &mut Vec<FileValue>,
    warnings: &mut Vec<String>,
) -> Result<(), String> {
    let map = match value {
        Yaml::Mapping(map) => map,
        Yaml::Null => return Ok(()),
        _ => return Err(format!("{key} must be a mapping")),
    };
    for (inner, value) in map {
        let inner = inner.as_str().unwrap_or_default();
        match names.iter().find(|(name, _)| *name == inner) {
            Some((_, flag)) => read_value(&format!("{key}.{inner}"), flag, value, values, warnings)
                .map_err(|e| e.to_string())?,
            None => warnings.push(format!("unrecognized key {key}.{inner} in the config file")),
        }
    }
    Ok(())
}

/// `value` under `key`, for the flag called `name`.
fn read_value(
    key: &str,
    name: &str,
    value: &Yaml,
    values: &mut Vec<FileValue>,
    warnings: &mut Vec<String>,
) -> Result<(), ConfigError> {
    let name = ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, flag)| *flag);
    let flag = match flags::find(name) {
        Some(flag) if flag.support != Support::Command => flag,
        _ => {
            warnings.push(format!("unrecognized key {key} in the config file"));
            return Ok(());
        }
    };
    let text = match value {
        Yaml::Null => return Ok(()),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Number(n) if flag.kind == Kind::Duration => format!("{n}ns"),
        Yaml::Number(n) => n.to_string(),
        Yaml::String(s) => s.clone(),
        Yaml::Sequence(items) => items
            .iter()
            .map(scalar)
            .collect::<Option<Vec<String>>>()
            .ok_or_else(|| not_scalar(flag, key))?
            .join(","),
        _ => return Err(not_scalar(flag, key)),
    };
    values.push(FileValue { flag, text });
    Ok(())
}

fn scalar(value: &Yaml) -> Option<String> {
    match value {
        Yaml::Bool(b) => Some(b.to_string()),
        Yaml::Number(n) => Some(n.to_string()),
        Yaml::String(s) => Some(s.clone()),
        _ => None,
    }
}

fn not_scalar(flag: &'static Flag, key: &str) -> ConfigError {
    ConfigError::InvalidValue {
        flag: flag.name,
        value: key.to_owned(),
        reason: "expected a value or a list of values in the config file".to_owned(),
    }
}
