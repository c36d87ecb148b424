//! The `--help` and `--version` texts, laid out as etcd's.

use super::flags::{self, Flag, Replacement, Support};
use super::gates::{Stage, FEATURE_GATES};

/// The `--help` text: etcd's usage lines, then every group of the flag
/// table with each flag's default and help.
pub fn usage(program: &str) -> String {
    let mut text = format!(
        "Usage:\n\n  {program} [flags]\n    Start an etcd-compatible server.\n\n  \
         {program} --version\n    Show the version of {program}.\n\n  \
         {program} -h | --help\n    Show the help information about {program}.\n\n  \
         {program} --config-file\n    Path to the server configuration file. Note that if a \
         configuration file is provided, other command line flags and environment variables \
         will be ignored.\n\n\
         Each flag may also be set by an ETCD_* environment variable (--data-dir as \
         ETCD_DATA_DIR); a flag wins over its variable.\n"
    );
    for group in flags::GROUPS.iter().filter(|g| !g.title.is_empty()) {
        text.push_str(&format!("\n{}:\n", group.title));
        for flag in group.flags {
            text.push_str(&entry(flag));
        }
    }
    text.push_str(
        "\nCAUTIOUS with unsafe flag! It may break the guarantees given by the consensus \
         protocol!\n",
    );
    text
}

/// One flag as etcd's help shows it: `--name 'default'` and the help
/// indented below.
fn entry(flag: &Flag) -> String {
    let help = match flag.replaced {
        Replacement::Flag(plain) => format!("Deprecated: use --{plain}."),
        Replacement::Gate(gate) => {
            format!("{} Deprecated: use --feature-gates={gate}=true.", flag.help)
        }
        Replacement::Deprecated(message) => format!("{} {message}", flag.help),
        Replacement::None if flag.name == "feature-gates" => {
            format!("{}\n    {}", flag.help, known_gates().join("\n    "))
        }
        Replacement::None => flag.help.to_owned(),
    };
    let note = match flag.support {
        Support::NotYet => " [not yet supported by oxetcd]",
        Support::Refused(_) => " [refused by oxetcd unless left at the default]",
        _ => "",
    };
    format!(
        "  --{} '{}'\n    {help}{note}\n",
        flag.name,
        flag.default.replace('\'', "\\'")
    )
}

/// etcd's list of the gates one may set: alpha and beta ones, sorted, as
/// `Name=true|false (STAGE - default=bool)`.
fn known_gates() -> Vec<String> {
    let mut known: Vec<String> = FEATURE_GATES
        .iter()
        .filter(|g| matches!(g.stage, Stage::Alpha | Stage::Beta))
        .map(|g| {
            format!(
                "{}=true|false ({} - default={})",
                g.name,
                g.stage.label(),
                g.default
            )
        })
        .collect();
    known.sort();
    known
}

/// The `--version` text, in etcd's shape (tools parse its first line to
/// learn which etcd API a server speaks), then oxetcd's own lines.
pub fn version() -> String {
    format!(
        "etcd Version: {}\nGit SHA: {}\nGo OS/Arch: {}/{}\noxetcd Version: {}\n",
        crate::grpc::ETCD_VERSION,
        option_env!("OXETCD_GIT_SHA").unwrap_or("unknown"),
        std::env::consts::OS,
        std::env::consts::ARCH,
        env!("CARGO_PKG_VERSION"),
    )
}
