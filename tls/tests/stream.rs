//! `TlsStream` end to end over an in-memory pipe: handshakes, certificate
//! checks both ways, versions, ALPN, bulk data through small buffers,
//! close_notify, and garbage from the peer. Certificates are made here
//! by `oxetcd_tls::test_pki`; no network and no runtime (futures-lite's `block_on`).

use std::collections::VecDeque;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures_lite::future;
use hyper::rt::{Read, ReadBufCursor, Write};
use oxetcd_tls::rustls::pki_types::ServerName;
use oxetcd_tls::test_pki::TestPkiIn;
use oxetcd_tls::{
    tls_cause, AllowedPeer, ClientSettings, Port, PortSettings, TlsStream, TlsVersion, Versions,
};

/// Bytes one direction of the pipe holds; small, so writers often wait.
const PIPE_BYTES: usize = 1024;

// ---------------------------------------------------------------------
// Certificates.

/// The test PKI in a temporary directory that lives as long as it.
type Pki = TestPkiIn<tempfile::TempDir>;

fn pki() -> Pki {
    TestPkiIn::write(tempfile::tempdir().expect("temp dir")).expect("test PKI")
}

// ---------------------------------------------------------------------
// An in-memory, bounded, bidirectional pipe with hyper's I/O traits.

#[derive(Default)]
struct Direction {
    bytes: VecDeque<u8>,
    closed: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

struct End {
    incoming: Arc<Mutex<Direction>>,
    outgoing: Arc<Mutex<Direction>>,
}

fn pipe() -> (End, End) {
    let a = Arc::new(Mutex::new(Direction::default()));
    let b = Arc::new(Mutex::new(Direction::default()));
    (
        End {
            incoming: a.clone(),
            outgoing: b.clone(),
        },
        End {
            incoming: b,
            outgoing: a,
        },
    )
}

fn lock(direction: &Mutex<Direction>) -> std::sync::MutexGuard<'_, Direction> {
    direction.lock().unwrap_or_else(|e| e.into_inner())
}

impl Read for End {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let mut d = lock(&self.incoming);
        if d.bytes.is_empty() {
            if d.closed {
                return Poll::Ready(Ok(()));
            }
            d.reader = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = d.bytes.len().min(buf.remaining());
        let chunk: Vec<u8> = d.bytes.drain(..n).collect();
        buf.put_slice(&chunk);
        if let Some(w) = d.writer.take() {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }
}

impl Write for End {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut d = lock(&self.outgoing);
        if d.closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let room = PIPE_BYTES - d.bytes.len();
        if room == 0 {
            d.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = room.min(buf.len());
        d.bytes.extend(&buf[..n]);
        if let Some(w) = d.reader.take() {
            w.wake();
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut d = lock(&self.outgoing);
        d.closed = true;
        if let Some(w) = d.reader.take() {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for End {
    fn drop(&mut self) {
        for direction in [&self.incoming, &self.outgoing] {
            let mut d = lock(direction);
            d.closed = true;
            for w in [d.reader.take(), d.writer.take()].into_iter().flatten() {
                w.wake();
            }
        }
    }
}

// ---------------------------------------------------------------------
// Async helpers over hyper's traits.

async fn write_all<T: Write + Unpin>(io: &mut T, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        let n = std::future::poll_fn(|cx| Pin::new(&mut *io).poll_write(cx, data)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        data = &data[n..];
    }
    std::future::poll_fn(|cx| Pin::new(&mut *io).poll_flush(cx)).await
}

async fn read_some<T: Read + Unpin>(io: &mut T, max: usize) -> io::Result<Vec<u8>> {
    let mut storage = vec![0u8; max];
    let mut buf = hyper::rt::ReadBuf::new(&mut storage);
    std::future::poll_fn(|cx| Pin::new(&mut *io).poll_read(cx, buf.unfilled())).await?;
    Ok(buf.filled().to_vec())
}

async fn read_exact<T: Read + Unpin>(io: &mut T, len: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let chunk = read_some(io, len - out.len()).await?;
        if chunk.is_empty() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        out.extend(chunk);
    }
    Ok(out)
}

async fn shutdown<T: Write + Unpin>(io: &mut T) -> io::Result<()> {
    std::future::poll_fn(|cx| Pin::new(&mut *io).poll_shutdown(cx)).await
}

fn localhost() -> ServerName<'static> {
    ServerName::try_from("localhost").expect("name")
}

fn server_settings(pki: &Pki) -> PortSettings {
    PortSettings::new(Port::Client, &pki.server_cert, &pki.server_key)
}

fn client_settings(ca: &Path) -> ClientSettings {
    ClientSettings {
        ca_file: Some(ca.to_path_buf()),
        ..Default::default()
    }
}

/// Runs a server and a client stream over one pipe: both handshakes, then
/// `client_side` and `server_side` concurrently.
fn connect(
    server: &PortSettings,
    client: &ClientSettings,
    name: ServerName<'static>,
) -> (io::Result<TlsStream<End>>, io::Result<TlsStream<End>>) {
    connect_with(server.server().expect("server config"), client, name)
}

/// [`connect`] with a server configuration built once by the caller.
fn connect_with(
    server: Arc<oxetcd_tls::rustls::ServerConfig>,
    client: &ClientSettings,
    name: ServerName<'static>,
) -> (io::Result<TlsStream<End>>, io::Result<TlsStream<End>>) {
    let client = client.build().expect("client config");
    let (a, b) = pipe();
    let mut server = TlsStream::server(a, server).expect("server stream");
    let mut client = TlsStream::client(b, client, name).expect("client stream");
    let (s, c) = future::block_on(future::zip(server.handshake(), client.handshake()));
    (s.map(|()| server), c.map(|()| client))
}

// ---------------------------------------------------------------------

#[test]
fn handshake_negotiates_h2_and_carries_data_both_ways() {
    let pki = pki();
    let (server, client) = connect(
        &server_settings(&pki),
        &client_settings(&pki.ca),
        localhost(),
    );
    let (mut server, mut client) = (server.expect("server"), client.expect("client"));
    assert_eq!(server.connection().alpn_protocol(), Some(&b"h2"[..]));
    assert_eq!(client.connection().alpn_protocol(), Some(&b"h2"[..]));
    // 300 KB each way through a 1 KiB pipe: every Pending path is taken.
    let up: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let down: Vec<u8> = up.iter().rev().copied().collect();
    let (sent, received) = future::block_on(future::zip(
        async {
            write_all(&mut client, &up).await?;
            read_exact(&mut client, down.len()).await
        },
        async {
            let got = read_exact(&mut server, up.len()).await?;
            write_all(&mut server, &down).await?;
            Ok::<_, io::Error>(got)
        },
    ));
    assert_eq!(received.expect("server read"), up);
    assert_eq!(sent.expect("client read"), down);

    // close_notify: a clean end of file on the other side.
    let (closed, eof) = future::block_on(future::zip(
        shutdown(&mut client),
        read_some(&mut server, 16),
    ));
    closed.expect("shutdown");
    assert_eq!(eof.expect("clean eof"), Vec::<u8>::new());
}

#[test]
fn ip_address_names_verify() {
    let pki = pki();
    let name = ServerName::try_from("127.0.0.1").expect("ip name");
    let (server, client) = connect(&server_settings(&pki), &client_settings(&pki.ca), name);
    server.expect("server");
    client.expect("client");
}

#[test]
fn versions_are_honoured() {
    let pki = pki();
    for (min, max) in [
        (TlsVersion::Tls12, TlsVersion::Tls12),
        (TlsVersion::Tls13, TlsVersion::Tls13),
    ] {
        let mut settings = server_settings(&pki);
        settings.versions = Versions::new(min, max).expect("versions");
        let (server, client) = connect(&settings, &client_settings(&pki.ca), localhost());
        let server = server.expect("server");
        client.expect("client");
        let expected = match min {
            TlsVersion::Tls12 => oxetcd_tls::rustls::ProtocolVersion::TLSv1_2,
            TlsVersion::Tls13 => oxetcd_tls::rustls::ProtocolVersion::TLSv1_3,
        };
        assert_eq!(server.connection().protocol_version(), Some(expected));
    }
    assert!(Versions::new(TlsVersion::Tls13, TlsVersion::Tls12).is_err());
}

#[test]
fn chosen_cipher_suite_is_used_on_tls12() {
    let pki = pki();
    let suites = oxetcd_tls::parse_cipher_suites(&["TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305"])
        .expect("suites");
    let mut settings = server_settings(&pki);
    settings.versions = Versions::new(TlsVersion::Tls12, TlsVersion::Tls12).expect("versions");
    settings.cipher_suites = suites.tls12.clone();
    let (server, client) = connect(&settings, &client_settings(&pki.ca), localhost());
    client.expect("client");
    let server = server.expect("server");
    let negotiated = server
        .connection()
        .negotiated_cipher_suite()
        .expect("suite")
        .suite();
    assert_eq!(vec![negotiated], suites.tls12);
}

#[test]
fn an_unknown_ca_fails_the_client_with_a_certificate_error() {
    let pki = pki();
    let (_server, client) = connect(
        &server_settings(&pki),
        &client_settings(&pki.other_ca),
        localhost(),
    );
    let error = client.err().expect("the client must refuse the server");
    assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
    let cause = tls_cause(&error).expect("a TLS cause");
    assert!(
        matches!(cause, oxetcd_tls::rustls::Error::InvalidCertificate(_)),
        "{cause:?}"
    );
}

#[test]
fn a_wrong_name_fails_verification() {
    let pki = pki();
    let name = ServerName::try_from("example.com").expect("name");
    let (_server, client) = connect(&server_settings(&pki), &client_settings(&pki.ca), name);
    let error = client.err().expect("refused");
    assert!(error.to_string().contains("certificate"), "{error}");
}

#[test]
fn skip_verify_accepts_any_server_certificate() {
    let pki = pki();
    let client = ClientSettings {
        skip_verify: true,
        ..Default::default()
    };
    let name = ServerName::try_from("not-the-name.example").expect("name");
    let (server, client) = connect(&server_settings(&pki), &client, name);
    server.expect("server");
    client.expect("client");
}

#[test]
fn client_certificates_are_required_when_a_client_ca_is_set() {
    let pki = pki();
    let mut settings = server_settings(&pki);
    settings.trusted_ca_file = Some(pki.ca.clone());

    // Without a certificate: the server refuses (the TLS 1.3 client may
    // finish its side first and learn it from the alert on first read).
    let (server, client) = connect(&settings, &client_settings(&pki.ca), localhost());
    let error = server.err().expect("the server must refuse");
    assert!(tls_cause(&error).is_some(), "{error}");
    if let Ok(mut client) = client {
        // read_ahead surfaces the server's alert.
        let error = future::block_on(client.read_ahead()).expect_err("refused");
        assert!(
            matches!(
                tls_cause(&error),
                Some(oxetcd_tls::rustls::Error::AlertReceived(_))
            ),
            "{error}"
        );
    }

    // With one signed by another CA: refused as well.
    let stranger = self::pki();
    let client = ClientSettings {
        cert_file: Some(stranger.client_cert.clone()),
        key_file: Some(stranger.client_key.clone()),
        ..client_settings(&pki.ca)
    };
    let (server, _client) = connect(&settings, &client, localhost());
    assert!(server.is_err());

    // With the right one: accepted, and the server sees it.
    let client = ClientSettings {
        cert_file: Some(pki.client_cert.clone()),
        key_file: Some(pki.client_key.clone()),
        ..client_settings(&pki.ca)
    };
    let (server, client) = connect(&settings, &client, localhost());
    let mut client = client.expect("client");
    let mut server = server.expect("server");
    assert_eq!(
        server.connection().peer_certificates().map(<[_]>::len),
        Some(1)
    );
    // read_ahead waits for data and keeps it for the next read.
    let (written, ahead) = future::block_on(future::zip(
        write_all(&mut server, b"settings"),
        client.read_ahead(),
    ));
    written.expect("write");
    ahead.expect("read ahead");
    assert_eq!(
        future::block_on(read_exact(&mut client, 8)).expect("read"),
        b"settings"
    );
}

#[test]
fn plaintext_and_garbage_fail_the_handshake_cleanly() {
    let pki = pki();
    let config = server_settings(&pki).server().expect("config");
    for garbage in [
        &b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        &[0x16, 0x03, 0x01, 0xff, 0xff, 0x01, 0x00][..],
        &[0u8; 64],
    ] {
        let (a, mut b) = pipe();
        let mut server = TlsStream::server(a, config.clone()).expect("stream");
        let (result, _) = future::block_on(future::zip(server.handshake(), async {
            write_all(&mut b, garbage).await.expect("write");
            shutdown(&mut b).await.expect("shutdown");
        }));
        let error = result.expect_err("garbage must fail");
        assert!(
            matches!(
                error.kind(),
                io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
            ),
            "{garbage:?}: {error}"
        );
    }
}

#[test]
fn a_peer_that_vanishes_mid_handshake_is_an_error_not_a_hang() {
    let pki = pki();
    let config = server_settings(&pki).server().expect("config");
    let (a, b) = pipe();
    drop(b);
    let mut server = TlsStream::server(a, config).expect("stream");
    let error = future::block_on(server.handshake()).expect_err("eof");
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
}

#[test]
fn self_signed_certificates_are_made_once_and_verify() {
    let dir = tempfile::tempdir().expect("dir");
    let fixtures = dir.path().join("fixtures").join("client");
    let hosts = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    let (cert, key) = oxetcd_tls::self_signed(&fixtures, &hosts).expect("generate");
    let first = std::fs::read(&cert).expect("cert");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).expect("key").permissions().mode();
        assert_eq!(mode & 0o077, 0, "the key must be private: {mode:o}");
    }
    let (again, _) = oxetcd_tls::self_signed(&fixtures, &hosts).expect("reuse");
    assert_eq!(
        std::fs::read(again).expect("cert"),
        first,
        "reused, not remade"
    );

    // Trusting the certificate itself verifies it.
    let (server, client) = connect(
        &PortSettings::new(Port::Client, &cert, &key),
        &client_settings(&cert),
        ServerName::try_from("127.0.0.1").expect("name"),
    );
    server.expect("server");
    client.expect("client");
}

#[test]
fn a_rotated_certificate_is_served_without_a_restart() {
    let pki = pki();
    let config = server_settings(&pki).server().expect("config");
    let skip = ClientSettings {
        skip_verify: true,
        ..Default::default()
    };
    let served = |config: &Arc<oxetcd_tls::rustls::ServerConfig>| {
        let (server, client) = connect_with(config.clone(), &skip, localhost());
        server.expect("server");
        let client = client.expect("client");
        let chain = client.connection().peer_certificates().expect("chain");
        chain[0].as_ref().to_vec()
    };
    let first = served(&config);
    assert_eq!(served(&config), first, "unchanged files, same certificate");

    // Rotate: a new certificate and key in the same files.
    let next = self::pki();
    let cert = std::fs::read(&next.server_cert).expect("read cert");
    let key = std::fs::read(&next.server_key).expect("read key");
    let stamp = |path: &Path, seconds: u64| {
        let file = std::fs::File::options()
            .write(true)
            .open(path)
            .expect("open");
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds);
        file.set_modified(when).expect("set mtime");
    };
    std::fs::write(&pki.server_key, key).expect("write key");
    std::fs::write(&pki.server_cert, cert).expect("write cert");
    stamp(&pki.server_key, 1_000_000);
    stamp(&pki.server_cert, 1_000_000);
    let second = served(&config);
    assert_ne!(second, first, "the rotated certificate is served");

    // A rotation caught half-way (garbage, or a key that does not match)
    // keeps the last good certificate.
    std::fs::write(&pki.server_cert, "-----BEGIN CERTIFICATE-----\ntrunc").expect("write");
    stamp(&pki.server_cert, 2_000_000);
    assert_eq!(served(&config), second);
    std::fs::copy(&pki.client_cert, &pki.server_cert).expect("copy");
    stamp(&pki.server_cert, 3_000_000);
    assert_eq!(served(&config), second);
    std::fs::remove_file(&pki.server_cert).expect("remove");
    assert_eq!(served(&config), second);
}

// ---------------------------------------------------------------------
// Between members: the peer port's `PortSettings`, both sides from one
// set of flags.

/// Both handshakes between a member accepting with `server` and one
/// dialing with `client`, to `127.0.0.1`. Under TLS 1.3 a refused client
/// certificate reaches the client only on its first read, so a client that
/// finished its side reads ahead once (the server writes a byte).
fn connect_peers(server: &PortSettings, client: &PortSettings) -> (bool, bool) {
    let server = server.server().expect("server config");
    let client = client.client().expect("client config");
    let (a, b) = pipe();
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut server = TlsStream::server(a, server).expect("server stream");
    let mut client = TlsStream::client(b, client, name).expect("client stream");
    let (s, c) = future::block_on(future::zip(server.handshake(), client.handshake()));
    let accepted = s.is_ok();
    let connected = c.is_ok()
        && future::block_on(future::zip(
            async {
                if accepted {
                    let _ = write_all(&mut server, b"!").await;
                }
                drop(server);
            },
            client.read_ahead(),
        ))
        .1
        .is_ok();
    (accepted, connected)
}

fn peer_settings(pki: &Pki) -> PortSettings {
    PortSettings {
        trusted_ca_file: Some(pki.ca.clone()),
        ..PortSettings::new(Port::Peer, &pki.peer_cert, &pki.peer_key)
    }
}

#[test]
fn members_authenticate_each_other_with_one_certificate() {
    let pki = pki();
    let member = peer_settings(&pki);
    assert_eq!(connect_peers(&member, &member), (true, true));

    // A certificate made for servers only cannot dial: its usage is
    // checked, which is why peer certificates carry both.
    let server_only = PortSettings {
        trusted_ca_file: Some(pki.ca.clone()),
        ..PortSettings::new(Port::Peer, &pki.server_cert, &pki.server_key)
    };
    assert_eq!(connect_peers(&member, &server_only), (false, false));

    // A member whose certificate another CA signed is refused both ways.
    let stranger = PortSettings {
        trusted_ca_file: Some(pki.ca.clone()),
        ..PortSettings::new(Port::Peer, &pki.other_peer_cert, &pki.other_peer_key)
    };
    assert_eq!(connect_peers(&member, &stranger), (false, false));
    assert!(!connect_peers(&stranger, &member).1);

    // --peer-auto-tls: the dialer accepts any certificate, and a listener
    // without a trusted CA asks for none.
    let auto = PortSettings {
        skip_verify: true,
        ..PortSettings::new(Port::Peer, &pki.other_peer_cert, &pki.other_peer_key)
    };
    assert_eq!(connect_peers(&auto, &auto), (true, true));
}

#[test]
fn allowed_common_names_and_host_names_narrow_whom_a_member_accepts() {
    let pki = pki();
    let member = peer_settings(&pki);
    let with = |allowed: AllowedPeer| PortSettings {
        allowed: Some(allowed),
        ..peer_settings(&pki)
    };
    for (allowed, accepted) in [
        (AllowedPeer::CommonName("oxetcd test".into()), true),
        (AllowedPeer::CommonName("someone else".into()), false),
        (AllowedPeer::Hostname("127.0.0.1".into()), true),
        (AllowedPeer::Hostname("localhost".into()), true),
        (AllowedPeer::Hostname("node-9.example".into()), false),
    ] {
        let got = connect_peers(&with(allowed.clone()), &member);
        assert_eq!(got, (accepted, accepted), "{allowed:?}");
    }
}
