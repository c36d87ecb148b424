//! Who a gRPC call comes from: the token in its metadata.
//!
//! Design. etcd's clients send the token from `Authenticate` as the
//! metadata entry `token` (the JSON gateway's clients as
//! `authorization`). The [`Gate`] turns it into the core's
//! [`Credentials`]; the node resolves and checks them. A call without a
//! token on a connection with a verified client certificate
//! (`--client-cert-auth`) is the certificate's common name, as in etcd;
//! any other is anonymous: with auth on, the node refuses what needs a
//! user.

use std::sync::Arc;
use std::time::SystemTime;

use oxetcd_core::auth::Credentials;

use crate::auth_token::{JwtTokens, TokenConfig};

use crate::serve::ClientCommonName;

/// The metadata entry a token comes in (or `authorization`), named once:
/// a lookup by `&str` parses and checks the name on every call.
static TOKEN: http::HeaderName = http::HeaderName::from_static("token");

/// Reads credentials off calls; cloned into every service.
#[derive(Clone, Debug, Default)]
pub struct Gate {
    /// With `--auth-token jwt,…`: the keys tokens are signed and checked
    /// with. Without, tokens are simple ones, which the node resolves.
    jwt: Option<Arc<JwtTokens>>,
}

impl Gate {
    /// A gate for the tokens `--auth-token` asks for.
    pub fn new(tokens: TokenConfig) -> Self {
        match tokens {
            TokenConfig::Simple { .. } => Self::default(),
            TokenConfig::Jwt(jwt) => Self {
                jwt: Some(Arc::new(jwt)),
            },
        }
    }

    /// The JWT keys, when tokens are JWTs.
    pub fn jwt(&self) -> Option<&JwtTokens> {
        self.jwt.as_deref()
    }

    /// The credentials `request` carries.
    pub fn credentials<T>(&self, request: &tonic::Request<T>) -> Credentials {
        self.credentials_of(request.metadata().as_ref(), request.extensions())
    }

    /// The credentials a call with these headers (its metadata) and
    /// extensions carries.
    pub fn credentials_of(
        &self,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
    ) -> Credentials {
        let token = [&TOKEN, &http::header::AUTHORIZATION]
            .into_iter()
            .find_map(|key| headers.get(key)?.to_str().ok());
        if let Some(token) = token.filter(|t| !t.is_empty()) {
            // A JWT that does not verify goes on as a token nobody holds:
            // refused while auth is on, ignored while it is off, as etcd.
            return match self.jwt().map(|jwt| jwt.verify(token, SystemTime::now())) {
                Some(Ok((name, revision))) => Credentials::User {
                    name,
                    revision: Some(revision),
                },
                _ => Credentials::Token(token.to_owned()),
            };
        }
        match extensions.get::<ClientCommonName>() {
            Some(ClientCommonName(name)) => Credentials::User {
                name: name.clone(),
                revision: None,
            },
            None => Credentials::Anonymous,
        }
    }
}
