//! From arguments, environment and config file to every flag's value.
//!
//! Design: the sources are read in etcd's order of precedence into one
//! map of given texts ([`Given`]): with `--config-file` (or
//! `ETCD_CONFIG_FILE`) the file alone, other flags and variables ignored
//! with a warning; otherwise flags, then `ETCD_*` variables for what the
//! flags left unset. Old names etcd 3.6 replaced hand their value to the
//! new name unless that one is given too, with a deprecation warning. Then
//! every flag of the table, given or not, is parsed by its [`Kind`] into
//! [`Settings`]; an error names the flag as it was given and, for a
//! variable or the file, where the value came from. `build.rs` turns the
//! settings into a [`Config`].

use std::collections::BTreeMap;

use super::flags::{self, Flag, Replacement, Support};
use super::settings::Settings;
use super::values::{parse_bool, Kind};
use super::{build, file, Command, ConfigError};

/// Prefix of the environment variables that stand in for flags.
const ENV_PREFIX: &str = "ETCD_";

/// Options that are never taken from the environment: `ETCD_VERSION` is
/// commonly set by scripts to say which release they want.
/// (`ETCD_CONFIG_FILE` is read on its own, before the others.)
const NOT_FROM_ENV: [&str; 3] = ["version", "help", "config-file"];

/// Where a value came from, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Source {
    Flag,
    Env(String),
    File(String),
}

/// One given value.
#[derive(Clone, Debug)]
pub(super) struct Raw {
    pub(super) text: String,
    /// The name it was given under (an old name, for a renamed flag).
    pub(super) given_as: &'static str,
    pub(super) source: Source,
}

/// The values given, by flag name.
pub(super) type Given = BTreeMap<&'static str, Raw>;

/// Parses `args` (without the program name) and the environment `env`;
/// `--config-file` is read from disk.
pub fn parse<A, E, S, T>(args: A, env: E) -> Result<Command, ConfigError>
where
    A: IntoIterator<Item = S>,
    S: AsRef<str>,
    E: IntoIterator<Item = (T, T)>,
    T: AsRef<str>,
{
    let read = |path: &str| std::fs::read_to_string(path).map_err(|e| e.to_string());
    parse_with(args, env, &read)
}

/// [`parse`], reading the config file with `read`.
pub(super) fn parse_with<A, E, S, T>(
    args: A,
    env: E,
    read: &dyn Fn(&str) -> Result<String, String>,
) -> Result<Command, ConfigError>
where
    A: IntoIterator<Item = S>,
    S: AsRef<str>,
    E: IntoIterator<Item = (T, T)>,
    T: AsRef<str>,
{
    let args = read_args(args)?;
    let on = |name: &str| {
        args.iter()
            .rev()
            .find(|(flag, _)| flag.name == name)
            .is_some_and(|(_, text)| parse_bool("version", text) == Ok(true))
    };
    if on("help") {
        return Ok(Command::Help);
    }
    if on("version") {
        return Ok(Command::Version);
    }
    let mut env: Vec<(String, String)> = env
        .into_iter()
        .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned()))
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    env.sort();
    let mut warnings = Vec::new();
    let config_file = args
        .iter()
        .rev()
        .find(|(flag, _)| flag.name == "config-file")
        .map(|(_, path)| path.clone())
        .or_else(|| {
            env.iter()
                .find(|(k, _)| k == "ETCD_CONFIG_FILE")
                .map(|(_, v)| v.clone())
        })
        .filter(|path| !path.is_empty());
    let mut given = match config_file {
        Some(path) => from_file(&path, &args, read, &mut warnings)?,
        None => from_flags_and_env(&args, &env, &mut warnings),
    };
    apply_replacements(&mut given, &mut warnings);
    let settings = settings(&given)?;
    build::config(&given, settings, warnings).map(Command::Run)
}

/// The flags on the command line, in order: each flag with its text
/// (`true` for a switch given alone).
fn read_args<A, S>(args: A) -> Result<Vec<(&'static Flag, String)>, ConfigError>
where
    A: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut read = Vec::new();
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
        // Go's flag package answers -h with the help, as etcd does.
        let name = if name == "h" { "help" } else { name };
        let Some(flag) = flags::find(name) else {
            return Err(ConfigError::UnknownFlag(arg.to_owned()));
        };
        let text = match (flag.kind, inline) {
            (_, Some(value)) => value.to_owned(),
            (Kind::Switch | Kind::Ignored, None) => "true".to_owned(),
            (_, None) => match args.next() {
                Some(value) => value.as_ref().to_owned(),
                None => return Err(ConfigError::MissingValue(arg.to_owned())),
            },
        };
        if flag.kind == Kind::Switch {
            parse_bool(flag.name, &text)?;
        }
        read.push((flag, text));
    }
    Ok(read)
}

/// Flags, then the `ETCD_*` variables they leave unset.
fn from_flags_and_env(
    args: &[(&'static Flag, String)],
    env: &[(String, String)],
    warnings: &mut Vec<String>,
) -> Given {
    let mut given = Given::new();
    for (flag, text) in args {
        if flag.support != Support::Command {
            given.insert(flag.name, raw(flag, text, Source::Flag));
        }
    }
    for (key, value) in env {
        if key == "ETCD_CONFIG_FILE" {
            continue;
        }
        let name = key[ENV_PREFIX.len()..]
            .to_ascii_lowercase()
            .replace('_', "-");
        match flags::find(&name).filter(|f| !NOT_FROM_ENV.contains(&f.name)) {
            None => warnings.push(format!("unrecognized environment variable {key}={value}")),
            Some(flag) if given.contains_key(flag.name) => warnings.push(format!(
                "environment variable {key} is shadowed by the command-line flag --{}",
                flag.name
            )),
            Some(flag) => {
                given.insert(flag.name, raw(flag, value, Source::Env(key.clone())));
            }
        }
    }
    given
}

/// The config file at `path`; the command line's other flags are ignored,
/// as etcd ignores them.
fn from_file(
    path: &str,
    args: &[(&'static Flag, String)],
    read: &dyn Fn(&str) -> Result<String, String>,
    warnings: &mut Vec<String>,
) -> Result<Given, ConfigError> {
    let ignored: Vec<String> = args
        .iter()
        .filter(|(flag, _)| flag.support != Support::Command)
        .map(|(flag, _)| format!("--{}", flag.name))
        .collect();
    if !ignored.is_empty() {
        warnings.push(format!(
            "loaded server configuration from {path}; other configuration command line flags \
             and environment variables are ignored: {}",
            ignored.join(" ")
        ));
    }
    let text = read(path).map_err(|reason| ConfigError::ConfigFile {
        path: path.to_owned(),
        reason,
    })?;
    let mut given = Given::new();
    for value in file::read(path, &text, warnings)? {
        let source = Source::File(path.to_owned());
        given.insert(value.flag.name, raw(value.flag, &value.text, source));
    }
    Ok(given)
}

fn raw(flag: &'static Flag, text: &str, source: Source) -> Raw {
    Raw {
        text: text.to_owned(),
        given_as: flag.name,
        source,
    }
}

/// Old names hand their value to the new name (which wins when both are
/// given), with etcd's deprecation warnings; ignored flags are warned
/// about.
fn apply_replacements(given: &mut Given, warnings: &mut Vec<String>) {
    let names: Vec<&'static str> = given.keys().copied().collect();
    for name in names {
        let Some(flag) = flags::find(name) else {
            continue;
        };
        if flag.support == Support::Ignored {
            warnings.push(format!(
                "flag \"-{name}\" is no longer supported - ignoring."
            ));
            continue;
        }
        match flag.replaced {
            Replacement::None => {}
            Replacement::Flag(plain) => {
                warnings.push(format!(
                    "--{name} is deprecated; use '--{plain}' instead (etcd v3.7 removed it)."
                ));
                if !given.contains_key(plain) {
                    let old = given[name].clone();
                    given.insert(plain, old);
                }
            }
            Replacement::Gate(gate) => warnings.push(format!(
                "--{name} is deprecated; use '--feature-gates={gate}=true' instead (etcd v3.7 \
                 removed it)."
            )),
            Replacement::Deprecated(message) => warnings.push(message.to_owned()),
        }
    }
}

/// Every flag's value: given, or its default.
fn settings(given: &Given) -> Result<Settings, ConfigError> {
    let mut settings = Settings::default();
    for flag in flags::all() {
        if matches!(flag.support, Support::Command | Support::Ignored) {
            continue;
        }
        let value = match given.get(flag.name) {
            Some(raw) => flag
                .kind
                .parse(raw.given_as, &raw.text)
                .map_err(|e| from_source(e, &raw.source))?,
            None => flag.kind.parse(flag.name, flag.default)?,
        };
        settings.insert(flag.name, value, given.contains_key(flag.name));
    }
    Ok(settings)
}

/// `error` with where its value came from, for a variable or the file.
pub(super) fn from_source(error: ConfigError, source: &Source) -> ConfigError {
    let place = match source {
        Source::Flag => return error,
        Source::Env(key) => format!("environment variable {key}"),
        Source::File(path) => format!("config file {path}"),
    };
    match error {
        ConfigError::InvalidValue {
            flag,
            value,
            reason,
        } => ConfigError::InvalidValue {
            flag,
            value,
            reason: format!("{reason} (from {place})"),
        },
        other => other,
    }
}
