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

use oxetcd_core::auth::Credentials;

use crate::serve::ClientCommonName;

/// Reads credentials off calls; cloned into every service.
#[derive(Clone, Debug, Default)]
pub struct Gate {}

impl Gate {
    /// The credentials `request` carries.
    pub fn credentials<T>(&self, request: &tonic::Request<T>) -> Credentials {
        let metadata = request.metadata();
        let token = ["token", "authorization"]
            .iter()
            .find_map(|key| metadata.get(*key)?.to_str().ok());
        if let Some(token) = token.filter(|t| !t.is_empty()) {
            return Credentials::Token(token.to_owned());
        }
        match request.extensions().get::<ClientCommonName>() {
            Some(ClientCommonName(name)) => Credentials::User {
                name: name.clone(),
                revision: None,
            },
            None => Credentials::Anonymous,
        }
    }
}
