//! The client library's errors, and how etcd's clients word them.
//!
//! etcd's Go client turns a gRPC status whose message is one of etcd's own
//! (`etcdserver: …`) into that bare message and leaves every other status as
//! `rpc error: code = <Code> desc = <message>`; `etcdctl` prints the result
//! after `Error: `. [`Error`]'s `Display` follows the same rule, so scripts
//! that match on etcdctl's stderr match on ours.

use std::fmt;

/// Why a request failed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// No endpoints were given, or one could not be parsed as a URL.
    BadEndpoint(String),
    /// A configuration the client cannot honour (for example TLS flags,
    /// which this build does not support yet).
    Unsupported(String),
    /// The request did not complete within the command timeout, or no
    /// endpoint could be reached before it ran out; `last` is the most
    /// recent connection or server error, for diagnostics.
    DeadlineExceeded {
        /// The last failure seen while retrying, if any.
        last: Option<String>,
    },
    /// The server answered with a non-OK status.
    Status {
        /// The gRPC status code.
        code: tonic::Code,
        /// The status message, byte for byte (etcd's strings).
        message: String,
    },
    /// The server answered with something the client could not use (for
    /// example a stream that ended early).
    Protocol(String),
    /// TLS could not be set up: a certificate, key or CA file is unusable,
    /// or the server's certificate (or ours, for the server) was refused.
    Tls(String),
}

impl Error {
    /// The error for a gRPC status.
    pub fn from_status(status: &tonic::Status) -> Self {
        Self::Status {
            code: status.code(),
            message: status.message().to_owned(),
        }
    }

    /// The gRPC code, when the server answered.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            Self::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True when this is etcd's error with exactly this message.
    pub fn is_etcd(&self, message: &str) -> bool {
        matches!(self, Self::Status { message: m, .. } if m == message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadEndpoint(e) => write!(f, "bad endpoint: {e}"),
            Self::Unsupported(e) => f.write_str(e),
            Self::DeadlineExceeded { .. } => f.write_str("context deadline exceeded"),
            Self::Status { code, message } => {
                if ETCD_MESSAGES.contains(&message.as_str()) {
                    f.write_str(message)
                } else {
                    write!(f, "rpc error: code = {} desc = {message}", code_name(*code))
                }
            }
            Self::Protocol(e) | Self::Tls(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for Error {}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        Self::from_status(&status)
    }
}

/// gRPC code names as grpc-go spells them in `rpc error: code = …`.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// The server messages etcd's client recognises and prints bare (etcd 3.4's
/// `rpctypes` table, plus the 3.5+ additions a newer server may send).
pub const ETCD_MESSAGES: &[&str] = &[
    "etcdserver: Peer URLs already exists",
    "etcdserver: authentication failed, invalid user ID or password",
    "etcdserver: authentication is not enabled",
    "etcdserver: bad leader transferee",
    "etcdserver: can only promote a learner member which is in sync with leader",
    "etcdserver: can only promote a learner member",
    "etcdserver: cluster version not found during downgrade",
    "etcdserver: corrupt cluster",
    "etcdserver: downgrade is in progress",
    "etcdserver: duplicate key given in txn request",
    "etcdserver: given member URLs are invalid",
    "etcdserver: invalid auth management",
    "etcdserver: invalid auth token",
    "etcdserver: invalid downgrade target version",
    "etcdserver: key is not provided",
    "etcdserver: key not found",
    "etcdserver: leader changed",
    "etcdserver: lease already exists",
    "etcdserver: lease is provided",
    "etcdserver: member ID already exist",
    "etcdserver: member not found",
    "etcdserver: mvcc: database space exceeded",
    "etcdserver: mvcc: required revision has been compacted",
    "etcdserver: mvcc: required revision is a future revision",
    "etcdserver: no leader",
    "etcdserver: no active downgrade job",
    "etcdserver: not capable",
    "etcdserver: not leader",
    "etcdserver: permission denied",
    "etcdserver: permission is not granted to the role",
    "etcdserver: re-configuration failed due to not enough started members",
    "etcdserver: request is too large",
    "etcdserver: request timed out",
    "etcdserver: request timed out, possibly due to connection lost",
    "etcdserver: request timed out, possibly due to previous leader failure",
    "etcdserver: request timed out, waiting for the applied index took too long",
    "etcdserver: requested lease not found",
    "etcdserver: revision of auth store is old",
    "etcdserver: role is not granted to the user",
    "etcdserver: role name already exists",
    "etcdserver: role name is empty",
    "etcdserver: role name not found",
    "etcdserver: root user does not exist",
    "etcdserver: root user does not have root role",
    "etcdserver: rpc not supported for learner",
    "etcdserver: server stopped",
    "etcdserver: too large lease TTL",
    "etcdserver: too many learner members in cluster",
    "etcdserver: too many operations in txn request",
    "etcdserver: too many requests",
    "etcdserver: unhealthy cluster",
    "etcdserver: user name already exists",
    "etcdserver: user name is empty",
    "etcdserver: user name not found",
    "etcdserver: value is provided",
    "etcdserver: watch canceled",
];

/// The message a watch is cancelled with when its start revision was
/// compacted away.
pub const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";

/// The message for a lease the server does not know.
pub const LEASE_NOT_FOUND: &str = "etcdserver: requested lease not found";

/// The message a server without authentication answers `Authenticate` with.
pub const AUTH_NOT_ENABLED: &str = "etcdserver: authentication is not enabled";

/// The message for a token the server does not know (any more).
pub const INVALID_AUTH_TOKEN: &str = "etcdserver: invalid auth token";

/// The message `AuthEnable` refuses with while the root user lacks the
/// root role.
pub const ROOT_ROLE_NOT_EXIST: &str = "etcdserver: root user does not have root role";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_messages_print_bare_others_as_grpc_errors() {
        let compacted = Error::Status {
            code: tonic::Code::OutOfRange,
            message: COMPACTED.to_owned(),
        };
        assert_eq!(compacted.to_string(), COMPACTED);
        let unknown = Error::Status {
            code: tonic::Code::Unimplemented,
            message: "unknown service etcdserverpb.Lease".to_owned(),
        };
        assert_eq!(
            unknown.to_string(),
            "rpc error: code = Unimplemented desc = unknown service etcdserverpb.Lease"
        );
        assert_eq!(
            Error::DeadlineExceeded { last: None }.to_string(),
            "context deadline exceeded"
        );
    }
}
