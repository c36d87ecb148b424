//! Every flag of the table, in every form: `--flag value`, `--flag=value`,
//! `ETCD_*` and the config file, with a valid value other than its
//! default (it must reach [`Settings`], and its new name for a renamed
//! flag) and with a malformed one (refused, naming the flag). One
//! mechanism over the table, so a flag added to it is tested too.

use super::*;
use crate::config::flags::{self, Flag, Replacement, Support};
use crate::config::parse::parse_with;
use crate::config::values::Kind;

/// A valid value other than `flag`'s default, and flags it needs beside
/// it; `None` for flags that take no value worth testing.
fn sample(flag: &Flag) -> Option<(String, Vec<(&'static str, &'static str)>)> {
    let companions: Vec<(&str, &str)> = match flag.name {
        "cert-file" => vec![("key-file", "/k.pem")],
        "key-file" => vec![("cert-file", "/c.pem")],
        "peer-cert-file" => vec![("peer-key-file", "/k.pem")],
        "peer-key-file" => vec![("peer-cert-file", "/c.pem")],
        "peer-cert-allowed-cn" | "peer-cert-allowed-hostname" => {
            vec![("peer-trusted-ca-file", "/ca.pem")]
        }
        "initial-advertise-peer-urls" => vec![("initial-cluster", "default=http://127.0.0.1:2480")],
        "discovery-endpoints" => vec![("discovery-token", "t")],
        "discovery-token" => vec![("discovery-endpoints", "http://127.0.0.1:2999")],
        _ => vec![],
    };
    let text = match (flag.name, flag.kind) {
        (_, Kind::Ignored) => return None,
        ("cipher-suites", _) => "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_owned(),
        ("tls-min-version", _) => "TLS1.3".to_owned(),
        ("tls-max-version", _) => "TLS1.2".to_owned(),
        ("log-outputs" | "log-output", _) => "stdout,stderr".to_owned(),
        ("election-timeout", _) => "2000".to_owned(),
        ("initial-advertise-peer-urls", _) => "http://127.0.0.1:2480".to_owned(),
        ("unsafe-run-as-version", _) => "3.5.1".to_owned(),
        (_, Kind::Switch) => (flag.default != "true").to_string(),
        (_, Kind::Text) => "/sample/text".to_owned(),
        (_, Kind::Uint | Kind::Uint32 | Kind::Int | Kind::Positive) => "7".to_owned(),
        (_, Kind::Duration) => "7s".to_owned(),
        (_, Kind::Bytes) => "8GiB".to_owned(),
        (_, Kind::List) => "a,b".to_owned(),
        (_, Kind::Urls) => "http://127.0.0.1:2999".to_owned(),
        (_, Kind::HostPort) => "collector.example:4317".to_owned(),
        (_, Kind::Choice(words)) => words.iter().find(|w| **w != flag.default)?.to_string(),
        (_, Kind::FeatureGates) => "CompactHashCheck=true".to_owned(),
        (_, Kind::Retention) => "2h".to_owned(),
        (_, Kind::AuthToken) => "jwt,sign-method=RS256,ttl=10m".to_owned(),
        (_, Kind::InitialCluster) => {
            "default=http://localhost:2380,other=http://10.0.0.2:2380".to_owned()
        }
    };
    Some((text, companions))
}

/// A value `flag`'s syntax refuses; `None` where any text is valid.
fn malformed(flag: &Flag) -> Option<&'static str> {
    Some(match flag.kind {
        Kind::Switch => "maybe",
        Kind::Uint => "-1",
        Kind::Uint32 => "4294967296",
        Kind::Int => "x1",
        Kind::Positive => "0",
        Kind::Duration => "7parsecs",
        Kind::Bytes => "lots",
        Kind::Urls => "ftp://127.0.0.1:1",
        Kind::HostPort => "no-port",
        Kind::Choice(_) => "nope",
        Kind::FeatureGates => "NoSuchGate=true",
        Kind::Retention => "soon",
        Kind::AuthToken => "magic",
        Kind::InitialCluster => "no-equals-sign",
        Kind::Text | Kind::List | Kind::Ignored => return None,
    })
}

fn tested() -> impl Iterator<Item = &'static Flag> {
    flags::all().filter(|f| !matches!(f.support, Support::Command | Support::Ignored))
}

fn env_name(flag: &str) -> String {
    format!("ETCD_{}", flag.to_ascii_uppercase().replace('-', "_"))
}

/// `flag: text` as the config file says it: YAML booleans and numbers
/// for switches and counts, nanoseconds for durations (as etcd), quoted
/// text otherwise.
fn yaml_line(flag: &Flag, text: &str) -> String {
    let value = match flag.kind {
        Kind::Switch if text == "true" || text == "false" => text.to_owned(),
        Kind::Uint | Kind::Int | Kind::Positive if text.parse::<i64>().is_ok() => text.to_owned(),
        Kind::Duration => match parse_duration("x", text) {
            Ok(d) => d.as_nanos().to_string(),
            Err(_) => format!("'{text}'"),
        },
        _ => format!("'{}'", text.replace('\'', "''")),
    };
    format!("{}: {value}\n", flag.name)
}

/// The four ways to give `flag` the value `text`.
fn forms(
    flag: &Flag,
    text: &str,
    companions: &[(&str, &str)],
) -> Vec<(&'static str, Result<Command, ConfigError>)> {
    let no_file = |_: &str| -> Result<String, String> { Err("no file".into()) };
    // Go booleans take no separate value: `--flag` alone means true, and
    // other values need `--flag=value`, as in etcd.
    let mut spaced = match flag.kind {
        Kind::Switch if text == "true" => vec![format!("--{}", flag.name)],
        Kind::Switch => vec![format!("--{}={text}", flag.name)],
        _ => vec![format!("--{}", flag.name), text.to_owned()],
    };
    let mut inline = vec![format!("--{}={text}", flag.name)];
    let mut env = vec![(env_name(flag.name), text.to_owned())];
    let mut yaml = yaml_line(flag, text);
    for (name, value) in companions {
        spaced.push(format!("--{name}={value}"));
        inline.push(format!("--{name}={value}"));
        env.push((env_name(name), (*value).to_owned()));
        yaml.push_str(&format!("{name}: '{value}'\n"));
    }
    let file = |_: &str| -> Result<String, String> { Ok(yaml.clone()) };
    vec![
        ("--flag value", parse_with(&spaced, NO_ENV, &no_file)),
        ("--flag=value", parse_with(&inline, NO_ENV, &no_file)),
        ("ETCD_*", parse_with(NO_ARGS, env, &no_file)),
        (
            "config file",
            parse_with(["--config-file", "/etc/etcd.yaml"], NO_ENV, &file),
        ),
    ]
}

const NO_ARGS: [&str; 0] = [];

#[test]
fn every_flag_is_parsed_in_every_form() {
    for flag in tested() {
        let Some((text, companions)) = sample(flag) else {
            continue;
        };
        let expected = flag.kind.parse(flag.name, &text).expect("sample parses");
        let default = flag
            .kind
            .parse(flag.name, flag.default)
            .expect("default parses");
        assert_ne!(
            expected, default,
            "--{}: sample equals the default",
            flag.name
        );
        for (form, result) in forms(flag, &text, &companions) {
            let context = format!("--{} {text:?} as {form}", flag.name);
            if let Support::Refused(why) = flag.support {
                let error = result.expect_err(&context).to_string();
                assert!(
                    error.contains(&format!("--{}", flag.name)) && error.contains(why),
                    "{context}: {error}"
                );
                continue;
            }
            let config = match result {
                Ok(Command::Run(config)) => config,
                other => panic!("{context}: {other:?}"),
            };
            assert_eq!(config.settings.get(flag.name), Some(&expected), "{context}");
            assert!(config.settings.is_given(flag.name), "{context}");
            if let Replacement::Flag(plain) = flag.replaced {
                assert_eq!(config.settings.get(plain), Some(&expected), "{context}");
                assert!(
                    config.warnings.iter().any(|w| w.contains("deprecated")),
                    "{context}: no deprecation warning in {:?}",
                    config.warnings
                );
            }
            if flag.support == Support::NotYet {
                let note = format!("not yet supported: --{}", flag.name);
                assert!(
                    config.warnings.contains(&note),
                    "{context}: {:?}",
                    config.warnings
                );
            }
        }
    }
}

#[test]
fn every_malformed_value_is_refused_naming_its_flag() {
    for flag in tested() {
        let Some(text) = malformed(flag) else {
            continue;
        };
        let Some((_, companions)) = sample(flag) else {
            continue;
        };
        for (form, result) in forms(flag, text, &companions) {
            let context = format!("--{} {text:?} as {form}", flag.name);
            match result {
                Err(error @ ConfigError::InvalidValue { flag: named, .. }) => {
                    assert_eq!(named, flag.name, "{context}: {error}");
                    assert!(
                        error.to_string().contains(&format!("--{}", flag.name)),
                        "{context}: {error}"
                    );
                }
                other => panic!("{context}: expected a refusal, got {other:?}"),
            }
        }
    }
}

#[test]
fn every_default_is_the_setting_when_nothing_is_given() {
    let config = run(&[], &[]);
    for flag in tested() {
        let default = flag
            .kind
            .parse(flag.name, flag.default)
            .expect("default parses");
        assert_eq!(
            config.settings.get(flag.name),
            Some(&default),
            "--{}",
            flag.name
        );
        assert!(!config.settings.is_given(flag.name), "--{}", flag.name);
    }
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}

#[test]
fn help_shows_every_flag_but_the_ignored_ones_under_etcds_groups() {
    let help = usage("oxetcd");
    for flag in flags::all() {
        let shown = help.contains(&format!("\n  --{} '", flag.name));
        let hidden = matches!(flag.support, Support::Ignored | Support::Command);
        assert_eq!(shown, !hidden, "--{}", flag.name);
    }
    for group in [
        "\nMember:\n",
        "\nClustering:\n",
        "\nSecurity:\n",
        "\nAuth:\n",
        "\nLogging:\n",
        "\nProfiling and monitoring:\n",
        "\nUnsafe feature:\n",
    ] {
        assert!(help.contains(group), "{group:?}");
    }
    // Names are unique across the table.
    let mut names: Vec<&str> = flags::all().map(|f| f.name).collect();
    names.sort_unstable();
    let count = names.len();
    names.dedup();
    assert_eq!(names.len(), count, "a flag is listed twice");
}
