//! jsonwebtoken's signatures, computed by ring.
//!
//! jsonwebtoken 10 leaves the cryptography to a process-wide
//! `CryptoProvider`; it ships one on aws-lc and one on RustCrypto. This is
//! a third on ring, which the workspace already builds for rustls: no
//! aws-lc (and its C build), and not the `rsa` crate, whose private-key
//! operations are not constant-time (RUSTSEC-2023-0071).
//!
//! The keys arrive in jsonwebtoken's own forms (`keys.rs` makes them):
//! RSA private keys as PKCS#1 DER, EC private keys as PKCS#8 DER, RSA
//! public keys as PKCS#1 `RSAPublicKey` DER, EC public keys as uncompressed
//! points, HMAC secrets as bytes. A key ring cannot use is an error, never
//! a panic. The JWK helpers are left out (they panic if called); this
//! server never builds a JWK.

use jsonwebtoken::crypto::{CryptoProvider, JwkUtils, JwtSigner, JwtVerifier};
use jsonwebtoken::errors::{new_error, ErrorKind, Result};
use jsonwebtoken::signature::{self, Signer, Verifier};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::hmac;
use ring::rand::SystemRandom;
use ring::signature::{self as ring_signature, EcdsaKeyPair, RsaEncoding, RsaKeyPair};
use tracing::warn;

static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: new_signer,
    verifier_factory: new_verifier,
    jwk_utils: JwkUtils::new_unimplemented(),
};

/// Makes ring jsonwebtoken's provider for this process, unless one already
/// is. Called before any token is signed or verified.
pub(super) fn install() {
    if let Err(installed) = PROVIDER.install_default() {
        if !std::ptr::eq(installed, &PROVIDER) {
            warn!("another jsonwebtoken crypto provider is installed; JWT tokens use it");
        }
    }
}

fn new_signer(algorithm: &Algorithm, key: &EncodingKey) -> Result<Box<dyn JwtSigner>> {
    let suite = Suite::of(*algorithm, key.family())?;
    let key = match suite {
        Suite::Rsa(encoding, _) => RsaKeyPair::from_der(key.inner())
            .map(|pair| SigningKey::Rsa(pair, encoding))
            .map_err(|e| new_error(ErrorKind::InvalidRsaKey(e.to_string())))?,
        Suite::Ecdsa(signing, _) => {
            EcdsaKeyPair::from_pkcs8(signing, key.inner(), &SystemRandom::new())
                .map(SigningKey::Ecdsa)
                .map_err(|_| new_error(ErrorKind::InvalidEcdsaKey))?
        }
        Suite::Hmac(hmac_algorithm) => {
            SigningKey::Hmac(hmac::Key::new(hmac_algorithm, key.try_get_hmac_secret()?))
        }
    };
    Ok(Box::new(RingSigner {
        algorithm: *algorithm,
        key,
    }))
}

fn new_verifier(algorithm: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>> {
    let suite = Suite::of(*algorithm, key.family())?;
    let public = |verification: &'static dyn ring_signature::VerificationAlgorithm| match key.kind()
    {
        DecodingKeyKind::SecretOrDer(der) => Ok(VerifyingKey::Public(verification, der.clone())),
        // Made only from a JWK, which this server never reads.
        DecodingKeyKind::RsaModulusExponent { .. } => Err(new_error(ErrorKind::InvalidKeyFormat)),
    };
    let key = match suite {
        Suite::Rsa(_, verification) => public(verification)?,
        Suite::Ecdsa(_, verification) => public(verification)?,
        Suite::Hmac(hmac_algorithm) => {
            VerifyingKey::Hmac(hmac::Key::new(hmac_algorithm, key.try_get_hmac_secret()?))
        }
    };
    Ok(Box::new(RingVerifier {
        algorithm: *algorithm,
        key,
    }))
}

/// ring's algorithms for one JWT `alg`, to sign and to verify: the one
/// table of which ring algorithm each JWT method is.
enum Suite {
    Rsa(
        &'static dyn RsaEncoding,
        &'static ring_signature::RsaParameters,
    ),
    Ecdsa(
        &'static ring_signature::EcdsaSigningAlgorithm,
        &'static ring_signature::EcdsaVerificationAlgorithm,
    ),
    Hmac(hmac::Algorithm),
}

impl Suite {
    /// The suite of `algorithm`, if a key of `family` fits it.
    fn of(algorithm: Algorithm, family: AlgorithmFamily) -> Result<Self> {
        use ring_signature as sig;
        // ring verifies RSA signatures of 2048- to 8192-bit keys.
        let suite = match algorithm {
            Algorithm::RS256 => Self::Rsa(&sig::RSA_PKCS1_SHA256, &sig::RSA_PKCS1_2048_8192_SHA256),
            Algorithm::RS384 => Self::Rsa(&sig::RSA_PKCS1_SHA384, &sig::RSA_PKCS1_2048_8192_SHA384),
            Algorithm::RS512 => Self::Rsa(&sig::RSA_PKCS1_SHA512, &sig::RSA_PKCS1_2048_8192_SHA512),
            Algorithm::PS256 => Self::Rsa(&sig::RSA_PSS_SHA256, &sig::RSA_PSS_2048_8192_SHA256),
            Algorithm::PS384 => Self::Rsa(&sig::RSA_PSS_SHA384, &sig::RSA_PSS_2048_8192_SHA384),
            Algorithm::PS512 => Self::Rsa(&sig::RSA_PSS_SHA512, &sig::RSA_PSS_2048_8192_SHA512),
            Algorithm::ES256 => Self::Ecdsa(
                &sig::ECDSA_P256_SHA256_FIXED_SIGNING,
                &sig::ECDSA_P256_SHA256_FIXED,
            ),
            Algorithm::ES384 => Self::Ecdsa(
                &sig::ECDSA_P384_SHA384_FIXED_SIGNING,
                &sig::ECDSA_P384_SHA384_FIXED,
            ),
            Algorithm::HS256 => Self::Hmac(hmac::HMAC_SHA256),
            Algorithm::HS384 => Self::Hmac(hmac::HMAC_SHA384),
            Algorithm::HS512 => Self::Hmac(hmac::HMAC_SHA512),
            Algorithm::EdDSA => return Err(new_error(ErrorKind::InvalidAlgorithm)),
        };
        let fits = match suite {
            Self::Rsa(..) => family == AlgorithmFamily::Rsa,
            Self::Ecdsa(..) => family == AlgorithmFamily::Ec,
            Self::Hmac(_) => family == AlgorithmFamily::Hmac,
        };
        match fits {
            true => Ok(suite),
            false => Err(new_error(ErrorKind::InvalidAlgorithm)),
        }
    }
}

struct RingSigner {
    algorithm: Algorithm,
    key: SigningKey,
}

enum SigningKey {
    Rsa(RsaKeyPair, &'static dyn RsaEncoding),
    Ecdsa(EcdsaKeyPair),
    Hmac(hmac::Key),
}

impl Signer<Vec<u8>> for RingSigner {
    fn try_sign(&self, message: &[u8]) -> std::result::Result<Vec<u8>, signature::Error> {
        let rng = SystemRandom::new();
        match &self.key {
            SigningKey::Rsa(pair, encoding) => {
                let mut signature = vec![0; pair.public().modulus_len()];
                pair.sign(*encoding, &rng, message, &mut signature)
                    .map_err(|_| signature::Error::new())?;
                Ok(signature)
            }
            SigningKey::Ecdsa(pair) => pair
                .sign(&rng, message)
                .map(|signature| signature.as_ref().to_vec())
                .map_err(|_| signature::Error::new()),
            SigningKey::Hmac(key) => Ok(hmac::sign(key, message).as_ref().to_vec()),
        }
    }
}

impl JwtSigner for RingSigner {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

struct RingVerifier {
    algorithm: Algorithm,
    key: VerifyingKey,
}

enum VerifyingKey {
    Public(&'static dyn ring_signature::VerificationAlgorithm, Vec<u8>),
    Hmac(hmac::Key),
}

impl Verifier<Vec<u8>> for RingVerifier {
    fn verify(
        &self,
        message: &[u8],
        signature: &Vec<u8>,
    ) -> std::result::Result<(), signature::Error> {
        match &self.key {
            VerifyingKey::Public(algorithm, public) => {
                ring_signature::UnparsedPublicKey::new(*algorithm, public)
                    .verify(message, signature)
            }
            // Constant-time comparison.
            VerifyingKey::Hmac(key) => hmac::verify(key, message, signature),
        }
        .map_err(|_| signature::Error::new())
    }
}

impl JwtVerifier for RingVerifier {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}
