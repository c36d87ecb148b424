//! etcd's `--auth-token`: which kind of token `Authenticate` hands out, and
//! the JWT kind's signing and checking.
//!
//! `simple` tokens are random strings the server remembers; `jwt` tokens
//! carry the user name and the auth revision themselves, signed, so a member
//! holding the key checks them without any state. [`JwtTokens`] makes and
//! checks them exactly as etcd 3.4 does (`auth/jwt.go`, `auth/options.go`):
//! the claims `username`, `revision` and `exp`, one configured signing
//! method, keys from PEM files. A token etcd signed verifies here and the
//! other way round; `etcd_interop` tests both against Debian's etcd 3.4.23.
//!
//! This module never reads the clock (`now` is an argument) and reads files
//! only in [`TokenConfig::parse`], once at start. Every [`TokenError`] from
//! [`JwtTokens::verify`] means the same to a client,
//! `etcdserver: invalid auth token`; the variants are for the log.
//!
//! Where it deliberately differs from etcd 3.4:
//! - ES512 (P-521) is refused at start ([`TokenConfigError::UnsupportedSignMethod`]):
//!   ring has no P-521, and jsonwebtoken has no ES512.
//! - A key that does not fit the method (a P-384 key for ES256, an RSA key
//!   for ES256) is refused at start; etcd starts and then fails every
//!   `Authenticate`.
//! - A public key that is not the private key's is refused at start with
//!   etcd's own `auth: public and private keys don't match`; etcd 3.4's check
//!   compares with `&&` where `||` was meant, so it almost never fires and
//!   the public key is then ignored.
//! - RSA keys must be 2048 to 4096 bits long (ring's range for signing).
//! - `ttl` cannot be negative.

mod keys;
mod ring_provider;

#[cfg(test)]
mod etcd_interop;
#[cfg(test)]
mod tests;

use std::fmt;
use std::time::{Duration, SystemTime};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use tracing::warn;

/// What `--auth-token` and `--auth-token-ttl` configure.
#[derive(Debug)]
pub enum TokenConfig {
    /// `simple`: random tokens the server keeps, each valid for `ttl` after
    /// its last use (`--auth-token-ttl`, 300 s by default).
    Simple {
        /// `--auth-token-ttl`.
        ttl: Duration,
    },
    /// `jwt,...`: signed tokens; the keys are loaded and checked.
    Jwt(JwtTokens),
}

impl TokenConfig {
    /// Reads `--auth-token` (`spec`) as etcd's `NewTokenProvider` does,
    /// loading the JWT key files. `ttl` is `--auth-token-ttl`, which only
    /// `simple` tokens use (JWT has its own `ttl` option, 5 minutes by
    /// default).
    pub fn parse(spec: &str, ttl: Duration) -> Result<Self, TokenConfigError> {
        let spec = AuthTokenSpec::parse(spec).map_err(TokenConfigError::InvalidOptions)?;
        match spec.kind {
            TokenKind::Simple => Ok(Self::Simple { ttl }),
            TokenKind::Jwt => JwtTokens::from_options(&spec).map(Self::Jwt),
        }
    }
}

/// A JWT signing method etcd 3.4 accepts for `sign-method` and this module
/// supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SignMethod {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    RS384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    RS512,
    /// RSASSA-PSS with SHA-256.
    PS256,
    /// RSASSA-PSS with SHA-384.
    PS384,
    /// RSASSA-PSS with SHA-512.
    PS512,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// ECDSA on P-384 with SHA-384.
    ES384,
    /// HMAC with SHA-256; the key is the `priv-key` file's bytes.
    HS256,
    /// HMAC with SHA-384; the key is the `priv-key` file's bytes.
    HS384,
    /// HMAC with SHA-512; the key is the `priv-key` file's bytes.
    HS512,
}

impl SignMethod {
    /// Every supported method.
    pub const ALL: [Self; 11] = [
        Self::RS256,
        Self::RS384,
        Self::RS512,
        Self::PS256,
        Self::PS384,
        Self::PS512,
        Self::ES256,
        Self::ES384,
        Self::HS256,
        Self::HS384,
        Self::HS512,
    ];

    /// The name in `sign-method` and in a token's `alg` header.
    pub fn name(self) -> &'static str {
        match self {
            Self::RS256 => "RS256",
            Self::RS384 => "RS384",
            Self::RS512 => "RS512",
            Self::PS256 => "PS256",
            Self::PS384 => "PS384",
            Self::PS512 => "PS512",
            Self::ES256 => "ES256",
            Self::ES384 => "ES384",
            Self::HS256 => "HS256",
            Self::HS384 => "HS384",
            Self::HS512 => "HS512",
        }
    }

    /// The method `sign-method=name` asks for. Names are case-sensitive,
    /// as in etcd.
    pub fn from_name(name: &str) -> Result<Self, TokenConfigError> {
        if let Some(method) = Self::ALL.into_iter().find(|m| m.name() == name) {
            return Ok(method);
        }
        // Names etcd 3.4's JWT library knows but etcd cannot use (`none`,
        // `EdDSA`), or that it uses and this module cannot (`ES512`).
        if matches!(name, "ES512" | "EdDSA" | "none") {
            Err(TokenConfigError::UnsupportedSignMethod(name.to_owned()))
        } else {
            Err(TokenConfigError::InvalidOptions(format!(
                "auth: invalid auth signature method {name:?}"
            )))
        }
    }

    fn algorithm(self) -> Algorithm {
        match self {
            Self::RS256 => Algorithm::RS256,
            Self::RS384 => Algorithm::RS384,
            Self::RS512 => Algorithm::RS512,
            Self::PS256 => Algorithm::PS256,
            Self::PS384 => Algorithm::PS384,
            Self::PS512 => Algorithm::PS512,
            Self::ES256 => Algorithm::ES256,
            Self::ES384 => Algorithm::ES384,
            Self::HS256 => Algorithm::HS256,
            Self::HS384 => Algorithm::HS384,
            Self::HS512 => Algorithm::HS512,
        }
    }
}

impl fmt::Display for SignMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// etcd's JWT tokens under one method and key: signs them for
/// `Authenticate` and checks them on every request.
pub struct JwtTokens {
    method: SignMethod,
    /// `None`: only `pub-key` was given, so tokens are checked, never made.
    signing: Option<EncodingKey>,
    verifying: DecodingKey,
    ttl: Duration,
}

/// etcd's default lifetime of a JWT token (`auth.DefaultTTL`).
pub const JWT_TTL_DEFAULT: Duration = Duration::from_secs(5 * 60);

impl JwtTokens {
    /// Tokens under `method` with keys in PEM: a private key (or, for HS*,
    /// the secret's bytes) to sign and check, a public key to check only,
    /// or both, which must match. Tokens made live `ttl`.
    pub fn from_pem(
        method: SignMethod,
        public_pem: Option<&[u8]>,
        private_pem: Option<&[u8]>,
        ttl: Duration,
    ) -> Result<Self, TokenConfigError> {
        let keys = keys::load(method, public_pem, private_pem)?;
        ring_provider::install();
        Ok(Self {
            method,
            signing: keys.signing,
            verifying: keys.verifying,
            ttl,
        })
    }

    /// The `jwt,...` options, the key files read, as etcd's
    /// `newTokenProviderJWT` takes them.
    fn from_options(spec: &AuthTokenSpec<'_>) -> Result<Self, TokenConfigError> {
        let unknown: Vec<&str> = spec
            .options
            .iter()
            .map(|(key, _)| *key)
            .filter(|key| !JWT_OPTIONS.contains(key))
            .collect();
        if !unknown.is_empty() {
            warn!(keys = ?unknown, "unknown JWT options");
        }
        let ttl = match spec.option(OPTION_TTL) {
            None => JWT_TTL_DEFAULT,
            Some(text) => crate::config::parse_duration("auth-token", text)
                .map_err(|e| TokenConfigError::InvalidOptions(e.to_string()))?,
        };
        let public = spec
            .option(OPTION_PUBLIC_KEY)
            .map(|path| keys::read_file(OPTION_PUBLIC_KEY, path))
            .transpose()?;
        let private = spec
            .option(OPTION_PRIVATE_KEY)
            .map(|path| keys::read_file(OPTION_PRIVATE_KEY, path))
            .transpose()?;
        let method = SignMethod::from_name(spec.option(OPTION_SIGN_METHOD).unwrap_or(""))?;
        Self::from_pem(method, public.as_deref(), private.as_deref(), ttl)
    }

    /// The configured method.
    pub fn sign_method(&self) -> SignMethod {
        self.method
    }

    /// How long a token made now stays valid.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// False when only a public key was given: such a member checks tokens
    /// but cannot make them.
    pub fn can_sign(&self) -> bool {
        self.signing.is_some()
    }

    /// A token for `username` at auth revision `revision`, expiring `ttl`
    /// after `now` (whole seconds, as etcd's `exp`).
    pub fn sign(
        &self,
        username: &str,
        revision: u64,
        now: SystemTime,
    ) -> Result<String, TokenError> {
        let key = self.signing.as_ref().ok_or(TokenError::VerifyOnly)?;
        // Go's `time.Now().Add(ttl).Unix()`: added, then truncated.
        let exp = since_epoch(now).saturating_add(self.ttl).as_secs();
        let claims = SignedClaims {
            exp,
            revision,
            username,
        };
        jsonwebtoken::encode(&Header::new(self.method.algorithm()), &claims, key)
            .map_err(|e| TokenError::Crypto(e.to_string()))
    }

    /// The user name and auth revision `token` carries, if it is signed
    /// with this method and key and has not expired at `now`.
    pub fn verify(&self, token: &str, now: SystemTime) -> Result<(String, u64), TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Malformed)?;
        if header.alg != self.method.algorithm() {
            return Err(TokenError::WrongMethod {
                expected: self.method,
                found: format!("{:?}", header.alg),
            });
        }
        let mut validation = Validation::new(self.method.algorithm());
        // Expiry is checked below against `now`; jsonwebtoken would read
        // the clock. etcd's tokens have no `aud`, and etcd requires no
        // claim to be present, but `exp` is required by `Claims` itself.
        validation.validate_exp = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        let claims = jsonwebtoken::decode::<Claims>(token, &self.verifying, &validation)
            .map_err(TokenError::from_decode)?
            .claims;
        let now = since_epoch(now).as_secs();
        // golang-jwt v4 (Debian's etcd 3.4.23): valid while now < exp.
        if now >= claims.exp {
            return Err(TokenError::Expired {
                exp: claims.exp,
                now,
            });
        }
        Ok((claims.username, claims.revision))
    }
}

impl fmt::Debug for JwtTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No key material in logs.
        f.debug_struct("JwtTokens")
            .field("method", &self.method)
            .field("can_sign", &self.can_sign())
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// The claims etcd puts in a token, in the order Go's JSON encoder writes
/// its map (sorted keys).
#[derive(Serialize)]
struct SignedClaims<'a> {
    exp: u64,
    revision: u64,
    username: &'a str,
}

/// The claims read from a token. Each must be present with its JSON type;
/// others are ignored.
#[derive(Deserialize)]
struct Claims {
    exp: u64,
    revision: u64,
    username: String,
}

/// Time since the Unix epoch; zero before it.
fn since_epoch(time: SystemTime) -> Duration {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

/// Why a token was not made or not accepted. A client sees every verify
/// error as `etcdserver: invalid auth token`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenError {
    /// Signing was asked of a member that has only the public key.
    VerifyOnly,
    /// Not a JWT: not three dot-separated base64url parts, or a header that
    /// is not JSON naming a known algorithm.
    Malformed,
    /// Signed with another method than the configured one.
    WrongMethod {
        /// The configured method.
        expected: SignMethod,
        /// The token's `alg`.
        found: String,
    },
    /// The signature is not this key's over this header and these claims.
    BadSignature,
    /// `username`, `revision` or `exp` is missing or of the wrong JSON type.
    BadClaims(String),
    /// The token expired: `now` (Unix seconds) is at or past `exp`.
    Expired {
        /// The token's `exp`.
        exp: u64,
        /// The time it was checked at.
        now: u64,
    },
    /// The crypto library refused the key or the operation.
    Crypto(String),
}

impl TokenError {
    fn from_decode(e: jsonwebtoken::errors::Error) -> Self {
        use jsonwebtoken::errors::ErrorKind;
        match e.kind() {
            ErrorKind::InvalidToken | ErrorKind::Base64(_) | ErrorKind::Utf8(_) => Self::Malformed,
            ErrorKind::InvalidSignature => Self::BadSignature,
            // The header parsed above, so JSON trouble is in the claims.
            ErrorKind::Json(json) => Self::BadClaims(json.to_string()),
            _ => Self::Crypto(e.to_string()),
        }
    }
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // etcd's ErrVerifyOnly.
            Self::VerifyOnly => f.write_str("auth: token signing attempted with verify-only key"),
            Self::Malformed => f.write_str("token is not a JWT"),
            Self::WrongMethod { expected, found } => {
                write!(f, "token is signed with {found}, not {expected}")
            }
            Self::BadSignature => f.write_str("token signature is invalid"),
            Self::BadClaims(reason) => write!(f, "token claims are invalid: {reason}"),
            Self::Expired { exp, now } => write!(f, "token expired at {exp} (now {now})"),
            Self::Crypto(reason) => write!(f, "token signature could not be computed: {reason}"),
        }
    }
}

impl std::error::Error for TokenError {}

/// Why `--auth-token` cannot be used; the server does not start. The
/// messages are etcd's where etcd has one.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenConfigError {
    /// etcd's `auth: invalid auth options`: the spec does not split into a
    /// type and `key=value` options, or a `jwt` option is unusable (an
    /// unknown `sign-method`, a bad `ttl`, an unreadable key file). etcd
    /// logs the reason on the line before; here it follows the colon.
    InvalidOptions(String),
    /// A method etcd 3.4's JWT library names but this server (or etcd)
    /// cannot sign with: `ES512`, `EdDSA`, `none`.
    UnsupportedSignMethod(String),
    /// etcd's `auth: missing key data`: neither key given (HS*: no
    /// `priv-key`).
    MissingKey,
    /// etcd's `auth: public and private keys don't match`.
    KeyMismatch,
    /// A key file holds no usable key for the method.
    InvalidKey {
        /// `pub-key` or `priv-key`.
        option: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

impl fmt::Display for TokenConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidOptions(reason) => write!(f, "auth: invalid auth options: {reason}"),
            Self::UnsupportedSignMethod(name) => write!(f, "unsupported signing method: {name}"),
            Self::MissingKey => f.write_str("auth: missing key data"),
            Self::KeyMismatch => f.write_str("auth: public and private keys don't match"),
            Self::InvalidKey { option, reason } => write!(f, "invalid {option}: {reason}"),
        }
    }
}

impl std::error::Error for TokenConfigError {}

/// The `jwt` options etcd 3.4 knows (`auth/options.go`); others are warned
/// about and ignored, as etcd does.
const JWT_OPTIONS: [&str; 4] = [
    OPTION_SIGN_METHOD,
    OPTION_PUBLIC_KEY,
    OPTION_PRIVATE_KEY,
    OPTION_TTL,
];
const OPTION_SIGN_METHOD: &str = "sign-method";
const OPTION_PUBLIC_KEY: &str = "pub-key";
const OPTION_PRIVATE_KEY: &str = "priv-key";
/// The option whose value is a Go duration; the flag parser checks it.
pub(crate) const OPTION_TTL: &str = "ttl";

/// `--auth-token` split as etcd's `decomposeOpts` splits it: the token
/// type, then comma-separated `key=value` options, each key once. The flag
/// parser (`config/values.rs`) and [`TokenConfig::parse`] both read the
/// spec through this.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct AuthTokenSpec<'a> {
    pub(crate) kind: TokenKind,
    /// In the order given; values may be empty.
    pub(crate) options: Vec<(&'a str, &'a str)>,
}

/// The token type, the spec's first word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenKind {
    Simple,
    Jwt,
}

impl<'a> AuthTokenSpec<'a> {
    /// Splits `spec`; the error is the reason, for a message that names
    /// the flag.
    pub(crate) fn parse(spec: &'a str) -> Result<Self, String> {
        let mut parts = spec.split(',');
        let kind = match parts.next() {
            Some("simple") => TokenKind::Simple,
            Some("jwt") => TokenKind::Jwt,
            _ => {
                return Err(
                    "expected simple or jwt,pub-key=...,priv-key=...,sign-method=...".to_owned(),
                )
            }
        };
        let mut options: Vec<(&str, &str)> = Vec::new();
        for part in parts {
            let mut pair = part.split('=');
            let (Some(key), Some(value), None) = (pair.next(), pair.next(), pair.next()) else {
                return Err(format!("option {part:?} is not key=value"));
            };
            if options.iter().any(|(seen, _)| *seen == key) {
                return Err(format!("option {key:?} is given twice"));
            }
            options.push((key, value));
        }
        Ok(Self { kind, options })
    }

    /// The value of option `key`; an empty value counts as absent, as in
    /// etcd.
    pub(crate) fn option(&self, key: &str) -> Option<&'a str> {
        self.options
            .iter()
            .find(|(name, value)| *name == key && !value.is_empty())
            .map(|(_, value)| *value)
    }
}
