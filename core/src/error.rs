//! Every error a client can see, with etcd's gRPC code and message.
//!
//! Clients match on these strings, so they come from this one table and
//! nowhere else. The server turns [`Error::code`] into a gRPC status.
//!
//! [`Error::DiskFull`] has no etcd counterpart (etcd exits when its disk
//! fills). It is answered with gRPC's `ResourceExhausted`, whose definition
//! names a full file system, and `etcdserver: no space left on device`, in
//! etcd's style. It is not etcd's NOSPACE alarm: that one is about the
//! backend quota, is replicated, and clears only when an operator disarms
//! it; a full disk is local to one member and clears by itself once space
//! returns.

use std::fmt;

use crate::storage::StorageError;

/// gRPC status codes used by etcd's errors (numbers as in gRPC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Code {
    /// The request was cancelled.
    Cancelled = 1,
    /// An error etcd passes on without a gRPC code of its own.
    Unknown = 2,
    /// Bad input.
    InvalidArgument = 3,
    /// The deadline passed.
    DeadlineExceeded = 4,
    /// Something named does not exist.
    NotFound = 5,
    /// Something being created exists already.
    AlreadyExists = 6,
    /// The caller may not do this.
    PermissionDenied = 7,
    /// A quota or limit was hit.
    ResourceExhausted = 8,
    /// The state does not allow this now.
    FailedPrecondition = 9,
    /// A revision is outside the stored range.
    OutOfRange = 11,
    /// The server does not implement this.
    Unimplemented = 12,
    /// A bug or a storage failure.
    Internal = 13,
    /// Try again (maybe elsewhere).
    Unavailable = 14,
    /// Data was lost or corrupted.
    DataLoss = 15,
    /// The caller is not authenticated.
    Unauthenticated = 16,
}

impl Code {
    /// The code's name as Go's gRPC prints it (`rpc error: code = … desc
    /// = …`).
    pub fn go_name(self) -> &'static str {
        match self {
            Self::Cancelled => "Canceled",
            Self::Unknown => "Unknown",
            Self::InvalidArgument => "InvalidArgument",
            Self::DeadlineExceeded => "DeadlineExceeded",
            Self::NotFound => "NotFound",
            Self::AlreadyExists => "AlreadyExists",
            Self::PermissionDenied => "PermissionDenied",
            Self::ResourceExhausted => "ResourceExhausted",
            Self::FailedPrecondition => "FailedPrecondition",
            Self::OutOfRange => "OutOfRange",
            Self::Unimplemented => "Unimplemented",
            Self::Internal => "Internal",
            Self::Unavailable => "Unavailable",
            Self::DataLoss => "DataLoss",
            Self::Unauthenticated => "Unauthenticated",
        }
    }
}

/// A client-visible error. One variant per cause.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A key was required and is empty.
    EmptyKey,
    /// `ignore_value` was set together with a value.
    ValueProvided,
    /// `ignore_lease` was set together with a lease.
    LeaseProvided,
    /// A txn has more operations than allowed.
    TooManyOps,
    /// A txn writes the same key twice in one branch.
    DuplicateKey,
    /// The sort order or target is not one etcd knows.
    InvalidSortOption,
    /// A put with `ignore_value` or `ignore_lease` names a key that does not
    /// exist, or a txn holds an empty operation.
    KeyNotFound,
    /// The requested revision has been compacted away.
    Compacted,
    /// The requested revision is newer than the store.
    FutureRevision,
    /// The request is larger than `--max-request-bytes`.
    RequestTooLarge,
    /// Too many proposals are waiting to be applied.
    TooManyRequests,
    /// The backend quota is exhausted, or a NOSPACE alarm is active.
    NoSpace,
    /// The member's disk is full: its log cannot be written, so no write
    /// is admitted until space returns (reads are still served).
    DiskFull,
    /// A CORRUPT alarm is active: no write is served.
    Corrupt,
    /// The named lease does not exist.
    LeaseNotFound,
    /// A grant names a lease ID that is taken.
    LeaseExists,
    /// A grant asks for more than the largest TTL.
    LeaseTtlTooLarge,
    /// A request could not be completed because the leader changed.
    LeaderChanged,
    /// There is no leader.
    NoLeader,
    /// The request timed out.
    Timeout,
    /// The server is stopping.
    Stopped,
    /// This member is a learner: it serves no client reads or writes.
    NotSupportedForLearner,
    /// Only the leader does this.
    NotLeader,
    /// A member add names an ID that is taken.
    MemberExists,
    /// A member add or update names peer URLs another member has.
    PeerUrlExists,
    /// The named member does not exist.
    MemberNotFound,
    /// A promote names a voter.
    MemberNotLearner,
    /// A promote names a learner that is not caught up with the leader.
    LearnerNotReady,
    /// A learner add would exceed the learner limit.
    TooManyLearners,
    /// The change would leave too few started members for a quorum.
    MemberNotEnoughStarted,
    /// Peer URLs are missing or malformed.
    MemberBadUrls,
    /// A leader transfer names a member that cannot lead.
    BadLeaderTransferee,
    /// The RPC is not served by this server (yet).
    Unimplemented(&'static str),
    /// Storage failed; the node stops.
    Storage(StorageError),
    /// `etcdserver: user name is empty`.
    UserEmpty,
    /// `etcdserver: user name already exists`.
    UserAlreadyExists,
    /// `etcdserver: user name not found`.
    UserNotFound,
    /// `etcdserver: role name is empty`.
    RoleEmpty,
    /// `etcdserver: role name already exists`.
    RoleAlreadyExists,
    /// `etcdserver: role name not found`.
    RoleNotFound,
    /// `etcdserver: role is not granted to the user`.
    RoleNotGranted,
    /// `etcdserver: permission is not granted to the role`.
    PermissionNotGranted,
    /// `etcdserver: invalid auth management`: root may not be deleted or
    /// lose the root role while auth is enabled.
    InvalidAuthManagement,
    /// `etcdserver: authentication is not enabled`.
    AuthNotEnabled,
    /// `etcdserver: root user does not exist`: auth cannot be enabled.
    RootUserNotExist,
    /// `etcdserver: root user does not have root role`.
    RootRoleNotExist,
    /// `etcdserver: authentication failed, invalid user ID or password`.
    AuthFailed,
    /// `etcdserver: permission denied`.
    PermissionDenied,
    /// `etcdserver: invalid auth token`.
    InvalidAuthToken,
    /// `etcdserver: revision of auth store is old`: the auth store changed
    /// between the request's admission and its apply.
    AuthOldRevision,
    /// `auth: authentication failed, password was given for no password
    /// user`: `Authenticate` as a user added without a password. etcd's
    /// auth package error, which etcd passes on unconverted (code
    /// `Unknown`).
    NoPasswordUser,
    /// `etcdserver: cluster version not found during downgrade`.
    ClusterVersionUnavailable,
    /// `etcdserver: wrong downgrade target version format`.
    WrongDowngradeVersionFormat,
    /// `etcdserver: invalid downgrade target version`: not exactly one
    /// minor below the cluster version.
    InvalidDowngradeTargetVersion,
    /// `etcdserver: cluster has a downgrade job in progress`.
    DowngradeInProcess,
    /// `etcdserver: no inflight downgrade job`.
    NoInflightDowngrade,
}

impl Error {
    /// The gRPC status code etcd answers with.
    pub fn code(&self) -> Code {
        match self {
            Self::EmptyKey
            | Self::ValueProvided
            | Self::LeaseProvided
            | Self::TooManyOps
            | Self::DuplicateKey
            | Self::InvalidSortOption
            | Self::KeyNotFound
            | Self::RequestTooLarge => Code::InvalidArgument,
            Self::Compacted | Self::FutureRevision => Code::OutOfRange,
            Self::TooManyRequests | Self::NoSpace | Self::DiskFull => Code::ResourceExhausted,
            Self::Corrupt => Code::DataLoss,
            Self::LeaseNotFound => Code::NotFound,
            Self::LeaseExists => Code::FailedPrecondition,
            Self::LeaseTtlTooLarge => Code::OutOfRange,
            Self::LeaderChanged
            | Self::NoLeader
            | Self::Timeout
            | Self::Stopped
            | Self::NotSupportedForLearner => Code::Unavailable,
            Self::NotLeader
            | Self::MemberExists
            | Self::PeerUrlExists
            | Self::MemberNotLearner
            | Self::LearnerNotReady
            | Self::TooManyLearners
            | Self::MemberNotEnoughStarted
            | Self::BadLeaderTransferee => Code::FailedPrecondition,
            Self::MemberNotFound => Code::NotFound,
            Self::MemberBadUrls => Code::InvalidArgument,
            Self::Unimplemented(_) => Code::Unimplemented,
            Self::Storage(_) => Code::Internal,
            Self::UserEmpty | Self::RoleEmpty | Self::InvalidAuthManagement => {
                Code::InvalidArgument
            }
            Self::UserAlreadyExists
            | Self::UserNotFound
            | Self::RoleAlreadyExists
            | Self::RoleNotFound
            | Self::RoleNotGranted
            | Self::PermissionNotGranted
            | Self::AuthNotEnabled
            | Self::RootUserNotExist
            | Self::RootRoleNotExist => Code::FailedPrecondition,
            Self::AuthFailed | Self::AuthOldRevision => Code::InvalidArgument,
            Self::PermissionDenied => Code::PermissionDenied,
            Self::InvalidAuthToken => Code::Unauthenticated,
            Self::NoPasswordUser => Code::Unknown,
            Self::ClusterVersionUnavailable => Code::Unavailable,
            Self::WrongDowngradeVersionFormat | Self::InvalidDowngradeTargetVersion => {
                Code::InvalidArgument
            }
            Self::DowngradeInProcess | Self::NoInflightDowngrade => Code::FailedPrecondition,
        }
    }

    /// Whether this is a refusal of auth: who the caller is, or what it
    /// may do.
    pub fn is_auth(&self) -> bool {
        self.auth_package_message().is_some()
    }

    /// The words of etcd's auth package for a refusal of auth
    /// ([`Error::is_auth`]), which etcd passes on unconverted where it
    /// checks auth itself rather than through its server (maintenance's
    /// admin check): `auth: user not found` rather than `etcdserver: user
    /// name not found`.
    pub fn auth_package_message(&self) -> Option<&'static str> {
        Some(match self {
            Self::UserEmpty => "auth: user name is empty",
            Self::UserNotFound => "auth: user not found",
            Self::PermissionDenied => "auth: permission denied",
            Self::InvalidAuthToken => "auth: invalid auth token",
            Self::AuthOldRevision => "auth: revision in header is old",
            _ => return None,
        })
    }

    /// The message etcd answers with, byte for byte.
    pub fn message(&self) -> String {
        let fixed = match self {
            Self::EmptyKey => "etcdserver: key is not provided",
            Self::ValueProvided => "etcdserver: value is provided",
            Self::LeaseProvided => "etcdserver: lease is provided",
            Self::TooManyOps => "etcdserver: too many operations in txn request",
            Self::DuplicateKey => "etcdserver: duplicate key given in txn request",
            Self::InvalidSortOption => "etcdserver: invalid sort option",
            Self::KeyNotFound => "etcdserver: key not found",
            Self::Compacted => "etcdserver: mvcc: required revision has been compacted",
            Self::FutureRevision => "etcdserver: mvcc: required revision is a future revision",
            Self::RequestTooLarge => "etcdserver: request is too large",
            Self::TooManyRequests => "etcdserver: too many requests",
            Self::NoSpace => "etcdserver: mvcc: database space exceeded",
            Self::DiskFull => "etcdserver: no space left on device",
            Self::Corrupt => "etcdserver: corrupt cluster",
            Self::LeaseNotFound => "etcdserver: requested lease not found",
            Self::LeaseExists => "etcdserver: lease already exists",
            Self::LeaseTtlTooLarge => "etcdserver: too large lease TTL",
            Self::LeaderChanged => "etcdserver: leader changed",
            Self::NoLeader => "etcdserver: no leader",
            Self::Timeout => "etcdserver: request timed out",
            Self::Stopped => "etcdserver: server stopped",
            Self::NotSupportedForLearner => "etcdserver: rpc not supported for learner",
            Self::NotLeader => "etcdserver: not leader",
            Self::MemberExists => "etcdserver: member ID already exist",
            Self::PeerUrlExists => "etcdserver: Peer URLs already exists",
            Self::MemberNotFound => "etcdserver: member not found",
            Self::MemberNotLearner => "etcdserver: can only promote a learner member",
            Self::LearnerNotReady => {
                "etcdserver: can only promote a learner member which is in sync with leader"
            }
            Self::TooManyLearners => "etcdserver: too many learner members in cluster",
            Self::MemberNotEnoughStarted => {
                "etcdserver: re-configuration failed due to not enough started members"
            }
            Self::MemberBadUrls => "etcdserver: given member URLs are invalid",
            Self::BadLeaderTransferee => "etcdserver: bad leader transferee",
            Self::UserEmpty => "etcdserver: user name is empty",
            Self::UserAlreadyExists => "etcdserver: user name already exists",
            Self::UserNotFound => "etcdserver: user name not found",
            Self::RoleEmpty => "etcdserver: role name is empty",
            Self::RoleAlreadyExists => "etcdserver: role name already exists",
            Self::RoleNotFound => "etcdserver: role name not found",
            Self::RoleNotGranted => "etcdserver: role is not granted to the user",
            Self::PermissionNotGranted => "etcdserver: permission is not granted to the role",
            Self::InvalidAuthManagement => "etcdserver: invalid auth management",
            Self::AuthNotEnabled => "etcdserver: authentication is not enabled",
            Self::RootUserNotExist => "etcdserver: root user does not exist",
            Self::RootRoleNotExist => "etcdserver: root user does not have root role",
            Self::AuthFailed => "etcdserver: authentication failed, invalid user ID or password",
            Self::PermissionDenied => "etcdserver: permission denied",
            Self::InvalidAuthToken => "etcdserver: invalid auth token",
            Self::AuthOldRevision => "etcdserver: revision of auth store is old",
            Self::NoPasswordUser => {
                "auth: authentication failed, password was given for no password user"
            }
            Self::ClusterVersionUnavailable => {
                "etcdserver: cluster version not found during downgrade"
            }
            Self::WrongDowngradeVersionFormat => {
                "etcdserver: wrong downgrade target version format"
            }
            Self::InvalidDowngradeTargetVersion => "etcdserver: invalid downgrade target version",
            Self::DowngradeInProcess => "etcdserver: cluster has a downgrade job in progress",
            Self::NoInflightDowngrade => "etcdserver: no inflight downgrade job",
            Self::Unimplemented(what) => return format!("unknown service {what}"),
            Self::Storage(e) => return format!("etcdserver: storage: {e}"),
        };
        fixed.to_owned()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for Error {}

impl From<StorageError> for Error {
    fn from(e: StorageError) -> Self {
        Self::Storage(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacted_matches_etcd() {
        let e = Error::Compacted;
        assert_eq!(e.code(), Code::OutOfRange);
        assert_eq!(
            e.message(),
            "etcdserver: mvcc: required revision has been compacted"
        );
    }

    /// A storage failure reaches a client as `etcdserver: storage: ...`.
    #[test]
    fn storage_errors_say_so() {
        let e = Error::from(StorageError::IndexPoisoned);
        assert_eq!(e.code(), Code::Internal);
        assert!(e.message().starts_with("etcdserver: storage: kv index: "));
    }

    /// Codes and messages of the cluster errors, as etcd's rpctypes table.
    #[test]
    fn cluster_errors_match_etcd() {
        let cases = [
            (
                Error::NotSupportedForLearner,
                Code::Unavailable,
                "etcdserver: rpc not supported for learner",
            ),
            (
                Error::NotLeader,
                Code::FailedPrecondition,
                "etcdserver: not leader",
            ),
            (
                Error::MemberExists,
                Code::FailedPrecondition,
                "etcdserver: member ID already exist",
            ),
            (
                Error::PeerUrlExists,
                Code::FailedPrecondition,
                "etcdserver: Peer URLs already exists",
            ),
            (
                Error::MemberNotFound,
                Code::NotFound,
                "etcdserver: member not found",
            ),
            (
                Error::LearnerNotReady,
                Code::FailedPrecondition,
                "etcdserver: can only promote a learner member which is in sync with leader",
            ),
            (
                Error::TooManyLearners,
                Code::FailedPrecondition,
                "etcdserver: too many learner members in cluster",
            ),
            (
                Error::MemberNotEnoughStarted,
                Code::FailedPrecondition,
                "etcdserver: re-configuration failed due to not enough started members",
            ),
            (
                Error::LeaderChanged,
                Code::Unavailable,
                "etcdserver: leader changed",
            ),
        ];
        for (error, code, message) in cases {
            assert_eq!((error.code(), error.message().as_str()), (code, message));
        }
    }
}
