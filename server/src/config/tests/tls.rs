use super::*;

#[test]
fn https_client_urls_need_a_certificate() {
    let e = error(&["--listen-client-urls=https://127.0.0.1:2379"], &[]);
    assert_eq!(
        e.to_string(),
        "invalid value \"https://127.0.0.1:2379\" for flag --listen-client-urls: TLS \
         key/cert (--cert-file, --key-file) must be provided for client url \
         https://127.0.0.1:2379 with HTTPS scheme"
    );
    let config = run(
        &[
            "--listen-client-urls=http://127.0.0.1:2379,HTTPS://127.0.0.1:2380",
            "--advertise-client-urls=https://example.com:2380",
            "--cert-file=/c.pem",
            "--key-file",
            "/k.pem",
            "--trusted-ca-file=/ca.pem",
        ],
        &[],
    );
    let secure: Vec<bool> = config
        .listen_client_urls
        .iter()
        .map(ListenUrl::is_secure)
        .collect();
    assert_eq!(secure, [false, true]);
    assert_eq!(config.listen_client_urls[1].url, "https://127.0.0.1:2380");
    assert_eq!(config.advertise_client_urls, ["https://example.com:2380"]);
    assert_eq!(config.client_tls.cert_file, Some(PathBuf::from("/c.pem")));
    assert_eq!(config.client_tls.key_file, Some(PathBuf::from("/k.pem")));
    assert_eq!(
        config.client_tls.trusted_ca_file,
        Some(PathBuf::from("/ca.pem"))
    );
    // The plaintext URL next to TLS flags is worth a warning, as in etcd.
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(config.warnings[0].contains("http://127.0.0.1:2379"));
    // --auto-tls stands in for the files.
    let config = run(
        &["--listen-client-urls=https://127.0.0.1:2379", "--auto-tls"],
        &[],
    );
    assert!(config.client_tls.auto_tls);
    assert_eq!(
        config.client_tls,
        PortTls {
            auto_tls: true,
            ..PortTls::default()
        }
    );
}

#[test]
fn tls_flags_are_checked() {
    let https = "--listen-client-urls=https://127.0.0.1:2379";
    let reason = |args: &[&str], env: &[(&str, &str)]| error(args, env).to_string();
    let r = reason(&[https, "--cert-file=/c.pem"], &[]);
    assert!(
        r.contains("--cert-file and --key-file must be given together"),
        "{r}"
    );
    let r = reason(&[https, "--key-file=/k.pem"], &[]);
    assert!(r.contains("must be given together"), "{r}");
    let r = reason(&[https, "--auto-tls", "--client-cert-auth"], &[]);
    assert!(
        r.contains("--client-cert-auth needs --trusted-ca-file"),
        "{r}"
    );
    let r = reason(&[https, "--auto-tls", "--tls-min-version=TLS1.1"], &[]);
    assert!(r.contains("TLS1.1 is not supported"), "{r}");
    let r = reason(
        &[
            https,
            "--auto-tls",
            "--tls-min-version=TLS1.3",
            "--tls-max-version=TLS1.2",
        ],
        &[],
    );
    assert!(r.contains("is above --tls-max-version"), "{r}");
    let r = reason(&[https, "--auto-tls", "--cipher-suites=TLS_NOPE"], &[]);
    assert!(r.contains("unknown cipher suite"), "{r}");
    let r = reason(
        &[
            https,
            "--auto-tls",
            "--tls-min-version=TLS1.3",
            "--cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        ],
        &[],
    );
    assert!(r.contains("only TLS1.3 is enabled"), "{r}");

    let config = run(
        &[
            https,
            "--cert-file=/c.pem",
            "--key-file=/k.pem",
            "--auto-tls",
            "--tls-min-version",
            "TLS1.3",
        ],
        &[],
    );
    assert!(
        !config.client_tls.auto_tls,
        "certificates win over --auto-tls"
    );
    assert_eq!(
        config.client_tls.versions.min(),
        oxetcd_tls::TlsVersion::Tls13
    );
    assert!(config.warnings[0].contains("ignoring client auto TLS"));
    let config = run(
        &[
            https,
            "--auto-tls",
            "--cipher-suites",
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_AES_128_CBC_SHA",
        ],
        &[],
    );
    assert_eq!(config.client_tls.cipher_suites.len(), 1);
    assert!(
        config
            .warnings
            .iter()
            .any(|w| w.contains("TLS_RSA_WITH_AES_128_CBC_SHA")),
        "{:?}",
        config.warnings
    );
}

#[test]
fn tls_flags_come_from_the_environment_too() {
    let config = run(
        &[],
        &[
            ("ETCD_LISTEN_CLIENT_URLS", "https://127.0.0.1:2379"),
            ("ETCD_CERT_FILE", "/c.pem"),
            ("ETCD_KEY_FILE", "/k.pem"),
            ("ETCD_TRUSTED_CA_FILE", "/ca.pem"),
            ("ETCD_CLIENT_CERT_AUTH", "true"),
            ("ETCD_TLS_MAX_VERSION", "TLS1.2"),
            (
                "ETCD_CIPHER_SUITES",
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            ),
        ],
    );
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    let tls = &config.client_tls;
    assert!(tls.client_cert_auth);
    assert_eq!(tls.trusted_ca_file, Some(PathBuf::from("/ca.pem")));
    assert_eq!(tls.versions.max(), oxetcd_tls::TlsVersion::Tls12);
    assert_eq!(tls.cipher_suites.len(), 1);
    let config = run(
        &["--listen-client-urls=https://127.0.0.1:2379"],
        &[("ETCD_AUTO_TLS", "true")],
    );
    assert!(config.client_tls.auto_tls);
}

#[test]
fn peer_tls_flags_are_checked_like_etcds() {
    let https = [
        "--listen-peer-urls=https://127.0.0.1:2380",
        "--initial-advertise-peer-urls=https://127.0.0.1:2380",
        "--initial-cluster=default=https://127.0.0.1:2380",
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        https.iter().chain(extra).map(|s| (*s).to_owned()).collect()
    };
    let reason = |extra: &[&str]| {
        let args = with(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        error(&args, &[]).to_string()
    };
    // An https:// peer URL needs a certificate, as in etcd.
    let e = reason(&[]);
    assert!(
        e.contains(
            "cannot listen on TLS for 127.0.0.1:2380: KeyFile and CertFile are not presented"
        ),
        "{e}"
    );
    let e = error(
        &[
            "--initial-advertise-peer-urls=https://127.0.0.1:2380",
            "--initial-cluster=default=https://127.0.0.1:2380",
        ],
        &[],
    )
    .to_string();
    assert!(e.contains("no peer certificate is given"), "{e}");
    let e = reason(&["--peer-cert-file=/c.pem"]);
    assert!(e.contains("must be given together"), "{e}");
    let e = reason(&["--peer-auto-tls", "--peer-client-cert-auth"]);
    assert!(e.contains("needs --peer-trusted-ca-file"), "{e}");
    let e = reason(&[
        "--peer-auto-tls",
        "--peer-cert-allowed-cn=a",
        "--peer-cert-allowed-hostname=b",
    ]);
    assert!(
        e.contains("AllowedCN and AllowedHostname are mutually exclusive"),
        "{e}"
    );
    let e = reason(&["--peer-auto-tls", "--peer-cert-allowed-cn=a"]);
    assert!(
        e.contains("--peer-cert-allowed-cn") && e.contains("trusted-ca"),
        "{e}"
    );

    let args = with(&[
        "--peer-cert-file=/p.pem",
        "--peer-key-file=/pk.pem",
        "--peer-trusted-ca-file=/ca.pem",
        "--peer-client-cert-auth",
        "--peer-cert-allowed-hostname=localhost",
        "--peer-auto-tls",
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let config = run(&args, &[]);
    assert_eq!(
        config.peer_tls,
        PortTls {
            cert_file: Some(PathBuf::from("/p.pem")),
            key_file: Some(PathBuf::from("/pk.pem")),
            trusted_ca_file: Some(PathBuf::from("/ca.pem")),
            client_cert_auth: true,
            auto_tls: false,
            crl_file: None,
            allowed: Some(oxetcd_tls::AllowedPeer::Hostname("localhost".into())),
            ..PortTls::default()
        }
    );
    assert!(config.warnings[0].contains("ignoring peer auto TLS"));
    assert!(config.listen_peer_urls[0].is_secure());

    // --peer-auto-tls stands in for the files; http:// peer URLs with
    // TLS flags are served in plaintext with a warning.
    let args = with(&["--peer-auto-tls"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(run(&args, &[]).peer_tls.auto_tls);
    let config = run(&["--peer-auto-tls", "--peer-client-cert-auth"], &[]);
    assert!(config
        .warnings
        .iter()
        .any(|w| w.contains("serving peer URL")));
    assert!(config
        .warnings
        .iter()
        .any(|w| w.contains("ignoring client cert auth")));
    assert_eq!(
        run(&["--peer-auto-tls=false"], &[]).peer_tls,
        PortTls::default()
    );
}

#[test]
fn peer_tls_flags_come_from_the_environment_too() {
    let config = run(
        &[],
        &[
            ("ETCD_LISTEN_PEER_URLS", "https://127.0.0.1:2380"),
            ("ETCD_INITIAL_ADVERTISE_PEER_URLS", "https://127.0.0.1:2380"),
            ("ETCD_INITIAL_CLUSTER", "default=https://127.0.0.1:2380"),
            ("ETCD_PEER_CERT_FILE", "/p.pem"),
            ("ETCD_PEER_KEY_FILE", "/pk.pem"),
            ("ETCD_PEER_TRUSTED_CA_FILE", "/ca.pem"),
            ("ETCD_PEER_CLIENT_CERT_AUTH", "true"),
            ("ETCD_PEER_CERT_ALLOWED_CN", "member"),
        ],
    );
    let tls = &config.peer_tls;
    assert!(tls.client_cert_auth);
    assert_eq!(tls.cert_file, Some(PathBuf::from("/p.pem")));
    assert_eq!(tls.trusted_ca_file, Some(PathBuf::from("/ca.pem")));
    assert_eq!(
        tls.allowed,
        Some(oxetcd_tls::AllowedPeer::CommonName("member".into()))
    );
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    let config = run(
        &[
            "--listen-peer-urls=https://127.0.0.1:2380",
            "--initial-advertise-peer-urls=https://127.0.0.1:2380",
            "--initial-cluster=default=https://127.0.0.1:2380",
        ],
        &[("ETCD_PEER_AUTO_TLS", "true")],
    );
    assert!(config.peer_tls.auto_tls);
}
