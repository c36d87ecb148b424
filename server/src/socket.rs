//! Sockets of either kind: TCP, or a unix domain socket (`unix://` and
//! `unixs://` URLs).
//!
//! Design: everything above the runtime sees one type per role —
//! [`SocketAddress`] to bind or dial, [`BoundSocket`] for a bound listener
//! handed to the runtime, [`Remote`] for who connected, and [`Either`] as
//! the stream, which reads and writes through hyper's I/O traits whichever
//! kind it holds. So TLS, HTTP/2 and the peer protocol run unchanged over
//! both. Binding a unix socket removes a stale socket file first, as etcd
//! does; a path that holds anything else is an error, never deleted.

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Where to listen, or what to dial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SocketAddress {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A unix domain socket's path.
    Unix(PathBuf),
}

impl fmt::Display for SocketAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SocketAddress::Tcp(addr) => addr.fmt(f),
            SocketAddress::Unix(path) => path.display().fmt(f),
        }
    }
}

/// A bound, non-blocking listening socket, before the runtime registers it.
#[derive(Debug)]
pub enum BoundSocket {
    /// A TCP listener.
    Tcp(TcpListener),
    /// A unix socket listener.
    Unix(UnixListener),
}

impl BoundSocket {
    /// Binds `address`, non-blocking.
    pub fn bind(address: &SocketAddress) -> io::Result<Self> {
        let socket = match address {
            SocketAddress::Tcp(addr) => BoundSocket::Tcp(TcpListener::bind(addr)?),
            SocketAddress::Unix(path) => {
                remove_stale_socket(path)?;
                BoundSocket::Unix(UnixListener::bind(path)?)
            }
        };
        socket.set_nonblocking()?;
        Ok(socket)
    }

    /// Makes accepting non-blocking, as a runtime's reactor needs.
    pub fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            BoundSocket::Tcp(listener) => listener.set_nonblocking(true),
            BoundSocket::Unix(listener) => listener.set_nonblocking(true),
        }
    }

    /// The address bound: for TCP the port chosen when asked for port 0.
    pub fn local_address(&self) -> io::Result<SocketAddress> {
        match self {
            BoundSocket::Tcp(listener) => listener.local_addr().map(SocketAddress::Tcp),
            BoundSocket::Unix(listener) => {
                let addr = listener.local_addr()?;
                let path = addr.as_pathname().unwrap_or(Path::new("")).to_path_buf();
                Ok(SocketAddress::Unix(path))
            }
        }
    }
}

impl From<TcpListener> for BoundSocket {
    /// A TCP listener bound by the caller, made non-blocking when it is
    /// registered.
    fn from(listener: TcpListener) -> Self {
        BoundSocket::Tcp(listener)
    }
}

/// A socket file left by an earlier run is removed; anything else at the
/// path is left alone (bind then fails, naming it).
fn remove_stale_socket(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Where an accepted connection came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remote {
    /// A TCP peer's address.
    Tcp(SocketAddr),
    /// A client of a unix socket (such clients are unnamed).
    Unix,
}

impl fmt::Display for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Remote::Tcp(addr) => addr.fmt(f),
            Remote::Unix => f.write_str("unix socket"),
        }
    }
}

/// One of two kinds of stream (or listener), used as one.
#[derive(Debug)]
pub enum Either<A, B> {
    /// The first kind (TCP).
    Left(A),
    /// The second kind (unix).
    Right(B),
}

impl<A, B> hyper::rt::Read for Either<A, B>
where
    A: hyper::rt::Read + Unpin,
    B: hyper::rt::Read + Unpin,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Left(a) => Pin::new(a).poll_read(cx, buf),
            Either::Right(b) => Pin::new(b).poll_read(cx, buf),
        }
    }
}

impl<A, B> hyper::rt::Write for Either<A, B>
where
    A: hyper::rt::Write + Unpin,
    B: hyper::rt::Write + Unpin,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Either::Left(a) => Pin::new(a).poll_write(cx, buf),
            Either::Right(b) => Pin::new(b).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Left(a) => Pin::new(a).poll_flush(cx),
            Either::Right(b) => Pin::new(b).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Left(a) => Pin::new(a).poll_shutdown(cx),
            Either::Right(b) => Pin::new(b).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Either::Left(a) => a.is_write_vectored(),
            Either::Right(b) => b.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Either::Left(a) => Pin::new(a).poll_write_vectored(cx, bufs),
            Either::Right(b) => Pin::new(b).poll_write_vectored(cx, bufs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_socket_file_is_replaced_and_other_files_are_kept() {
        let dir = std::env::temp_dir().join(format!("oxetcd-socket-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let address = SocketAddress::Unix(path.clone());
        drop(BoundSocket::bind(&address).unwrap());
        // The file outlives its listener; binding again replaces it.
        assert!(path.exists());
        let bound = BoundSocket::bind(&address).unwrap();
        assert_eq!(bound.local_address().unwrap(), address);
        drop(bound);
        let plain = dir.join("plain");
        std::fs::write(&plain, b"keep").unwrap();
        assert!(BoundSocket::bind(&SocketAddress::Unix(plain.clone())).is_err());
        assert_eq!(std::fs::read(&plain).unwrap(), b"keep");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
