//! The `--help` and `--version` texts.

use super::flags::FLAGS;

/// The `--help` text.
pub fn usage(program: &str) -> String {
    let mut text = format!(
        "Usage:\n\n  {program} [flags]\n\nStart an etcd-compatible server.\n\nFlags \
         (each may also be set by an ETCD_* environment variable, e.g. \
         --data-dir as ETCD_DATA_DIR; a flag wins over its variable):\n\n"
    );
    for flag in FLAGS {
        let head = match flag.value {
            Some(value) => format!("  --{} {value}", flag.name),
            None => format!("  --{}", flag.name),
        };
        text.push_str(&format!("{head}\n      {}", flag.help));
        if flag.value.is_some() {
            text.push_str(&format!(" (default: {:?})", flag.default));
        }
        text.push('\n');
    }
    text
}

/// The `--version` text. Its first line has the shape tools parse to learn
/// which etcd API a server speaks.
pub fn version() -> String {
    format!(
        "etcd Version: {}\noxetcd Version: {}\nOS/Arch: {}/{}\n",
        crate::grpc::ETCD_VERSION,
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH,
    )
}
