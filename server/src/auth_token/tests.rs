//! Every method signs and verifies; every way a token can be wrong is its
//! own error; the options and keys fail as etcd's do.

use std::time::{Duration, SystemTime};

use super::*;

/// The fixtures' directory (see its README for where each file is from).
pub(super) fn fixture(name: &str) -> String {
    format!(
        "{}/src/auth_token/testdata/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn read_fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).expect("fixture")
}

/// 2023-11-14T22:13:20Z, a fixed moment to sign and check at.
fn at(seconds: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + seconds)
}

const TTL: Duration = Duration::from_secs(300);

/// A fresh EC key on the curve of `method` (ES256 or ES384): PKCS#8 and
/// SPKI PEM.
pub(super) fn ec_key(method: SignMethod) -> (String, String) {
    let algorithm = match method {
        SignMethod::ES256 => &rcgen::PKCS_ECDSA_P256_SHA256,
        SignMethod::ES384 => &rcgen::PKCS_ECDSA_P384_SHA384,
        other => panic!("{other} is not an EC method"),
    };
    let key = rcgen::KeyPair::generate_for(algorithm).expect("EC key");
    (key.serialize_pem(), key.public_key_pem())
}

/// Tokens for `method` with a private key (and the matching public key)
/// of the right kind.
fn tokens(method: SignMethod) -> JwtTokens {
    let (private, public) = match method {
        SignMethod::ES256 | SignMethod::ES384 => {
            let (private, public) = ec_key(method);
            (private.into_bytes(), Some(public.into_bytes()))
        }
        SignMethod::HS256 | SignMethod::HS384 | SignMethod::HS512 => {
            (b"a shared secret\n".to_vec(), None)
        }
        _ => (
            read_fixture("server.key.insecure"),
            Some(read_fixture("server.crt")),
        ),
    };
    JwtTokens::from_pem(method, public.as_deref(), Some(&private), TTL).expect("keys load")
}

/// The wiring shares one `JwtTokens` between connections.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<JwtTokens>();
};

#[test]
fn every_method_signs_and_verifies() {
    for method in SignMethod::ALL {
        let tokens = tokens(method);
        let token = tokens.sign("root", 7, at(0)).expect("signs");
        assert_eq!(
            tokens.verify(&token, at(1)),
            Ok(("root".to_owned(), 7)),
            "{method}"
        );
    }
}

#[test]
fn tokens_carry_etcds_header_and_claims() {
    let tokens = tokens(SignMethod::RS256);
    let token = tokens.sign("root", 3, at(0)).expect("signs");
    let header = jsonwebtoken::decode_header(&token).expect("header");
    assert_eq!(
        (header.alg, header.typ.as_deref()),
        (Algorithm::RS256, Some("JWT"))
    );
    // etcd: jwt.MapClaims{"username", "revision", "exp": now + ttl}.
    let claims = jsonwebtoken::dangerous::insecure_decode::<serde_json::Value>(&token)
        .expect("claims")
        .claims;
    assert_eq!(
        claims,
        serde_json::json!({"exp": 1_700_000_300u64, "revision": 3, "username": "root"})
    );
}

/// A token Debian's etcd 3.4.23 issued (`/v3/auth/authenticate`, root
/// after `auth enable`) with
/// `--auth-token jwt,pub-key=server.crt,priv-key=server.key.insecure,sign-method=RS256,ttl=10m`.
const ETCD_RS256_TOKEN: &str = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjE3OTU1NDg2NTIsInJldmlzaW9uIjozLCJ1c2VybmFtZSI6InJvb3QifQ.ohejp1yY1gMeinmFVz29ZAWY8rUb50L-5AzxqU5nKDJbdXL1Ee178cTd-5O224VUx7qIXh4lsOhSXwtEQnacwYx6px6pJICN01oInAdZ3H7yOaQEVlhHuvVwcKYFYonaEF8PG10sufh8fURBaOqwL7IDPFykc55OBl5P3DSkZQzYfYr9sHzUvWInyqw8aroY_PH3mFMYIAgiYuYhzf6WrgYRlPImGVkFyaA4kXlFL40dvOay8I8dk6K3K8wAoli3EVK0Ejzzssa_QiYX4szLINR7FmnP9Y6bWffeptr-7JD7A75Mpn5EtejnxDBOv4CBRADWksZ9uai3VlpPq_NGYQ";
const ETCD_RS256_TOKEN_EXP: u64 = 1_795_548_652;

#[test]
fn a_token_etcd_issued_verifies() {
    let before_exp = SystemTime::UNIX_EPOCH + Duration::from_secs(ETCD_RS256_TOKEN_EXP - 1);
    // With the key pair, with the certificate alone, with the SPKI alone.
    for (public, private) in [
        (Some("server.crt"), Some("server.key.insecure")),
        (Some("server.crt"), None),
        (Some("server.pub"), None),
        (None, Some("server.pkcs8.key.insecure")),
    ] {
        let public = public.map(read_fixture);
        let private = private.map(read_fixture);
        let tokens = JwtTokens::from_pem(
            SignMethod::RS256,
            public.as_deref(),
            private.as_deref(),
            TTL,
        )
        .expect("keys load");
        assert_eq!(
            tokens.verify(ETCD_RS256_TOKEN, before_exp),
            Ok(("root".to_owned(), 3))
        );
    }
}

#[test]
fn expiry_is_golang_jwt_v4s() {
    let tokens = tokens(SignMethod::ES256);
    let token = tokens.sign("alice", 1, at(0)).expect("signs");
    assert!(tokens.verify(&token, at(299)).is_ok());
    // Valid while now < exp; exp itself is too late.
    assert_eq!(
        tokens.verify(&token, at(300)),
        Err(TokenError::Expired {
            exp: 1_700_000_300,
            now: 1_700_000_300
        })
    );
    // Sub-second parts add before truncation, as Go's Add(ttl).Unix().
    let tokens = JwtTokens::from_pem(
        SignMethod::HS256,
        None,
        Some(b"secret"),
        Duration::from_millis(1_500),
    )
    .expect("keys load");
    let token = tokens
        .sign("alice", 1, at(0) + Duration::from_millis(600))
        .expect("signs");
    assert!(tokens.verify(&token, at(1)).is_ok());
    assert!(matches!(
        tokens.verify(&token, at(2)),
        Err(TokenError::Expired {
            exp: 1_700_000_002,
            ..
        })
    ));
}

#[test]
fn user_names_survive_json_escaping() {
    let tokens = tokens(SignMethod::HS512);
    for name in ["", "a\"b\\c", "ünïcødé ☃", "new\nline"] {
        let token = tokens.sign(name, u64::MAX, at(0)).expect("signs");
        assert_eq!(
            tokens.verify(&token, at(0)),
            Ok((name.to_owned(), u64::MAX))
        );
    }
}

#[test]
fn verify_only_checks_but_does_not_sign() {
    let (private, public) = ec_key(SignMethod::ES384);
    let full = JwtTokens::from_pem(
        SignMethod::ES384,
        Some(public.as_bytes()),
        Some(private.as_bytes()),
        TTL,
    )
    .expect("keys load");
    let verify_only = JwtTokens::from_pem(SignMethod::ES384, Some(public.as_bytes()), None, TTL)
        .expect("keys load");
    assert!(full.can_sign());
    assert!(!verify_only.can_sign());
    assert_eq!(
        verify_only.sign("root", 1, at(0)),
        Err(TokenError::VerifyOnly)
    );
    let token = full.sign("root", 9, at(0)).expect("signs");
    assert_eq!(
        verify_only.verify(&token, at(0)),
        Ok(("root".to_owned(), 9))
    );
}

#[test]
fn another_keys_signature_is_bad() {
    for method in [SignMethod::ES256, SignMethod::HS256] {
        let ours = tokens(method);
        let theirs = match method {
            SignMethod::HS256 => {
                JwtTokens::from_pem(method, None, Some(b"another secret"), TTL).expect("keys")
            }
            _ => tokens(method),
        };
        let token = theirs.sign("root", 1, at(0)).expect("signs");
        assert_eq!(
            ours.verify(&token, at(0)),
            Err(TokenError::BadSignature),
            "{method}"
        );
    }
}

#[test]
fn changed_claims_break_the_signature() {
    for method in SignMethod::ALL {
        let tokens = tokens(method);
        let alice = tokens.sign("alice", 1, at(0)).expect("signs");
        let root = tokens.sign("root", 1, at(0)).expect("signs");
        let alice: Vec<&str> = alice.split('.').collect();
        let root: Vec<&str> = root.split('.').collect();
        // Alice's header and signature around root's claims.
        let forged = format!("{}.{}.{}", alice[0], root[1], alice[2]);
        assert_eq!(
            tokens.verify(&forged, at(0)),
            Err(TokenError::BadSignature),
            "{method}"
        );
    }
}

#[test]
fn another_method_is_refused_before_its_signature() {
    let rs256 = tokens(SignMethod::RS256);
    let rs384 = tokens(SignMethod::RS384);
    let token = rs384.sign("root", 1, at(0)).expect("signs");
    assert_eq!(
        rs256.verify(&token, at(0)),
        Err(TokenError::WrongMethod {
            expected: SignMethod::RS256,
            found: "RS384".to_owned()
        })
    );
    // The classic confusion: HS256 keyed with the RSA public key's bytes.
    let public = read_fixture("server.crt");
    let confused = JwtTokens::from_pem(SignMethod::HS256, None, Some(&public), TTL)
        .expect("keys load")
        .sign("root", 1, at(0))
        .expect("signs");
    assert!(matches!(
        rs256.verify(&confused, at(0)),
        Err(TokenError::WrongMethod { .. })
    ));
}

#[test]
fn garbage_is_malformed() {
    let tokens = tokens(SignMethod::RS256);
    for garbage in [
        "",
        "garbage",
        "a.b",
        "a.b.c",
        "....",
        "eyJhbGciOiJSUzI1NiJ9",
        // {"alg":"none","typ":"JWT"} with no signature.
        "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJ1c2VybmFtZSI6InJvb3QifQ.",
        // {"alg":"ES512"}: a method etcd has and this server does not.
        "eyJhbGciOiJFUzUxMiJ9.e30.AAAA",
    ] {
        assert_eq!(
            tokens.verify(garbage, at(0)),
            Err(TokenError::Malformed),
            "{garbage:?}"
        );
    }
}

#[test]
fn claims_must_be_etcds_with_their_types() {
    // Signed with the right key, but not claims etcd makes.
    let secret = b"secret";
    let tokens = JwtTokens::from_pem(SignMethod::HS256, None, Some(secret), TTL).expect("keys");
    let header = jsonwebtoken::Header::new(Algorithm::HS256);
    let key = EncodingKey::from_secret(secret);
    for claims in [
        serde_json::json!({"revision": 1, "exp": 1_800_000_000u64}),
        serde_json::json!({"username": "root", "exp": 1_800_000_000u64}),
        serde_json::json!({"username": "root", "revision": 1}),
        serde_json::json!({"username": "root", "revision": "1", "exp": 1_800_000_000u64}),
        serde_json::json!({"username": "root", "revision": 1, "exp": "never"}),
        serde_json::json!({"username": 7, "revision": 1, "exp": 1_800_000_000u64}),
        serde_json::json!(["root", 1]),
    ] {
        let token = jsonwebtoken::encode(&header, &claims, &key).expect("encodes");
        assert!(
            matches!(tokens.verify(&token, at(0)), Err(TokenError::BadClaims(_))),
            "{claims}"
        );
    }
}

#[test]
fn every_rsa_key_form_loads() {
    let pkcs1 = read_fixture("server.key.insecure");
    let pkcs8 = read_fixture("server.pkcs8.key.insecure");
    let certificate = read_fixture("server.crt");
    let spki = read_fixture("server.pub");
    for (public, private) in [
        (None, Some(&pkcs1)),
        (None, Some(&pkcs8)),
        (Some(&certificate), Some(&pkcs8)),
        (Some(&spki), Some(&pkcs1)),
    ] {
        let tokens = JwtTokens::from_pem(
            SignMethod::PS256,
            public.map(Vec::as_slice),
            private.map(Vec::as_slice),
            TTL,
        )
        .expect("keys load");
        let token = tokens.sign("root", 1, at(0)).expect("signs");
        assert!(tokens.verify(&token, at(0)).is_ok());
    }
}

#[test]
fn etcds_sec1_ec_key_and_certificate_load() {
    let private = read_fixture("server-ecdsa.key.insecure");
    let certificate = read_fixture("server-ecdsa.crt");
    let tokens = JwtTokens::from_pem(SignMethod::ES256, Some(&certificate), Some(&private), TTL)
        .expect("keys load");
    let token = tokens.sign("root", 1, at(0)).expect("signs");
    let verify_only =
        JwtTokens::from_pem(SignMethod::ES256, Some(&certificate), None, TTL).expect("keys load");
    assert_eq!(
        verify_only.verify(&token, at(0)),
        Ok(("root".to_owned(), 1))
    );
}

fn load_error(
    method: SignMethod,
    public: Option<&[u8]>,
    private: Option<&[u8]>,
) -> TokenConfigError {
    JwtTokens::from_pem(method, public, private, TTL).expect_err("keys are refused")
}

#[test]
fn keys_that_do_not_fit_are_refused() {
    let rsa = read_fixture("server.key.insecure");
    let rsa_certificate = read_fixture("server.crt");
    let p256 = read_fixture("server-ecdsa.key.insecure");
    let p256_certificate = read_fixture("server-ecdsa.crt");
    let (p384, p384_public) = ec_key(SignMethod::ES384);
    let private = |e: TokenConfigError| {
        assert!(
            matches!(
                e,
                TokenConfigError::InvalidKey {
                    option: "priv-key",
                    ..
                }
            ),
            "{e}"
        )
    };
    let public = |e: TokenConfigError| {
        assert!(
            matches!(
                e,
                TokenConfigError::InvalidKey {
                    option: "pub-key",
                    ..
                }
            ),
            "{e}"
        )
    };
    private(load_error(SignMethod::ES256, None, Some(p384.as_bytes())));
    private(load_error(SignMethod::ES384, None, Some(&p256)));
    private(load_error(SignMethod::ES256, None, Some(&rsa)));
    private(load_error(SignMethod::RS256, None, Some(&p256)));
    private(load_error(SignMethod::RS256, None, Some(&rsa_certificate)));
    private(load_error(SignMethod::RS256, None, Some(b"not PEM")));
    public(load_error(
        SignMethod::ES256,
        Some(p384_public.as_bytes()),
        None,
    ));
    public(load_error(SignMethod::ES256, Some(&rsa_certificate), None));
    public(load_error(SignMethod::RS256, Some(&p256_certificate), None));
    public(load_error(SignMethod::RS256, Some(&rsa), None));
    public(load_error(SignMethod::RS256, Some(b"no PEM here"), None));
}

#[test]
fn missing_and_mismatched_keys_are_etcds_errors() {
    for method in [SignMethod::RS256, SignMethod::ES256, SignMethod::HS256] {
        assert_eq!(load_error(method, None, None), TokenConfigError::MissingKey);
    }
    // An empty file is no key, as in etcd; HS*: a public key is no secret.
    assert_eq!(
        load_error(SignMethod::HS256, None, Some(b"")),
        TokenConfigError::MissingKey
    );
    assert_eq!(
        load_error(SignMethod::RS256, Some(b""), Some(b"")),
        TokenConfigError::MissingKey
    );
    assert_eq!(
        load_error(SignMethod::HS256, Some(b"key"), None),
        TokenConfigError::MissingKey
    );
    let (private, _) = ec_key(SignMethod::ES256);
    let (_, other_public) = ec_key(SignMethod::ES256);
    let error = load_error(
        SignMethod::ES256,
        Some(other_public.as_bytes()),
        Some(private.as_bytes()),
    );
    assert_eq!(error, TokenConfigError::KeyMismatch);
    assert_eq!(
        error.to_string(),
        "auth: public and private keys don't match"
    );
}

#[test]
fn spec_splits_as_etcds_decompose_opts() {
    let spec = AuthTokenSpec::parse("jwt,pub-key=a,priv-key=,sign-method=RS256").expect("splits");
    assert_eq!(spec.kind, TokenKind::Jwt);
    assert_eq!(spec.option("pub-key"), Some("a"));
    assert_eq!(spec.option("priv-key"), None, "empty counts as absent");
    assert_eq!(spec.option("ttl"), None);
    assert_eq!(
        AuthTokenSpec::parse("simple").map(|s| s.kind),
        Ok(TokenKind::Simple)
    );
    // etcd ignores options after `simple`.
    assert_eq!(
        AuthTokenSpec::parse("simple,x=y").map(|s| s.kind),
        Ok(TokenKind::Simple)
    );
    for bad in [
        "",
        "magic",
        "JWT",
        "jwt,",
        "jwt,ttl",
        "jwt,ttl=1s=2s",
        "jwt,ttl=1s,ttl=2s",
        " jwt",
    ] {
        assert!(AuthTokenSpec::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn config_parses_simple_and_jwt() {
    let ttl = Duration::from_secs(300);
    assert!(matches!(
        TokenConfig::parse("simple", ttl),
        Ok(TokenConfig::Simple { ttl: t }) if t == ttl
    ));
    let spec = format!(
        "jwt,pub-key={},priv-key={},sign-method=RS256",
        fixture("server.crt"),
        fixture("server.key.insecure")
    );
    let Ok(TokenConfig::Jwt(tokens)) = TokenConfig::parse(&spec, ttl) else {
        panic!("{spec} is a JWT config");
    };
    assert_eq!(tokens.sign_method(), SignMethod::RS256);
    assert_eq!(tokens.ttl(), JWT_TTL_DEFAULT);
    assert!(tokens.can_sign());
    // Unknown options are warned about, not refused; `ttl` is a Go duration.
    let spec = format!(
        "jwt,priv-key={},sign-method=HS384,ttl=1m30s,colour=blue",
        fixture("server.key.insecure")
    );
    let Ok(TokenConfig::Jwt(tokens)) = TokenConfig::parse(&spec, ttl) else {
        panic!("{spec} is a JWT config");
    };
    assert_eq!(tokens.ttl(), Duration::from_secs(90));
    assert_eq!(tokens.sign_method(), SignMethod::HS384);
}

#[test]
fn config_errors_are_etcds() {
    let key = fixture("server.key.insecure");
    let error = |spec: &str| TokenConfig::parse(spec, TTL).expect_err("refused");
    let invalid_options = |spec: &str, reason: &str| {
        let e = error(spec);
        assert!(
            matches!(&e, TokenConfigError::InvalidOptions(_))
                && e.to_string().starts_with("auth: invalid auth options: ")
                && e.to_string().contains(reason),
            "{spec}: {e}"
        );
    };
    invalid_options("jwt,ttl", "not key=value");
    invalid_options(
        &format!("jwt,priv-key={key}"),
        "invalid auth signature method",
    );
    invalid_options(
        &format!("jwt,priv-key={key},sign-method=rs256"),
        "invalid auth signature method",
    );
    invalid_options(
        &format!("jwt,priv-key={key},sign-method=RS256,ttl=5"),
        "missing unit",
    );
    invalid_options(
        "jwt,priv-key=/nonexistent/key,sign-method=RS256",
        "/nonexistent/key",
    );
    for method in ["ES512", "EdDSA", "none"] {
        assert_eq!(
            error(&format!("jwt,priv-key={key},sign-method={method}")),
            TokenConfigError::UnsupportedSignMethod(method.to_owned())
        );
    }
    assert_eq!(error("jwt,sign-method=RS256"), TokenConfigError::MissingKey);
    assert_eq!(
        error("jwt,sign-method=RS256").to_string(),
        "auth: missing key data"
    );
}

#[test]
fn huge_key_files_are_refused_unread() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("huge.pem");
    let file = std::fs::File::create(&path).expect("create");
    file.set_len(keys::KEY_FILE_BYTES_MAX + 1)
        .expect("sparse file");
    let spec = format!("jwt,priv-key={},sign-method=HS256", path.display());
    let e = TokenConfig::parse(&spec, TTL).expect_err("refused");
    assert!(e.to_string().contains("longer than"), "{e}");
}

#[test]
fn the_flag_checks_the_spec_and_ttl_syntax_only() {
    use crate::config::{parse, Command, ConfigError};
    let flag = |value: &str| parse(["--auth-token", value], std::iter::empty::<(&str, &str)>());
    for accepted in [
        "simple",
        "jwt",
        "jwt,sign-method=RS256,ttl=10m",
        // Unknown options and missing files are for the start to judge.
        "jwt,colour=blue,priv-key=/nonexistent",
    ] {
        let Ok(Command::Run(config)) = flag(accepted) else {
            panic!("--auth-token {accepted} is refused");
        };
        assert_eq!(config.auth_token, accepted);
    }
    for refused in [
        "magic",
        "jwt,ttl=5",
        "jwt,ttl=-1s",
        "jwt,ttl",
        "jwt,a=1,a=2",
    ] {
        assert!(
            matches!(
                flag(refused),
                Err(ConfigError::InvalidValue {
                    flag: "auth-token",
                    ..
                })
            ),
            "--auth-token {refused}"
        );
    }
}
