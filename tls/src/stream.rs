//! [`TlsStream`]: a rustls connection over any hyper I/O, itself hyper I/O.
//!
//! Design: rustls is sans-io — it takes TLS bytes with `read_tls`, hands
//! out TLS bytes with `write_tls`, and buffers plaintext both ways. This
//! stream moves bytes between it and the transport inside `poll_*`: a
//! short-lived adapter presents the transport as `std::io::Read + Write`
//! for one poll, mapping `Pending` to `WouldBlock` (the transport's waker
//! is registered by that same poll, so a `WouldBlock` always has a wakeup
//! behind it). The handshake is driven by whichever poll comes first, or
//! explicitly by [`TlsStream::handshake`] so a server can bound it with a
//! timeout and a client can report a certificate problem at dial time.
//!
//! Invariants: a read never waits for the transport to become writable
//! (pending writes are pushed opportunistically only), so a peer that
//! stops reading cannot stall our reads; a write reports only plaintext
//! rustls has accepted; every TLS error is an `io::Error` of kind
//! `InvalidData` carrying the `rustls::Error` (see [`crate::tls_cause`]),
//! after the alert that explains it was offered to the peer. Nothing a
//! peer sends can panic this code, and no unsafe code is used: plaintext
//! is copied out of rustls's buffer with `put_slice`.

use std::future::poll_fn;
use std::io::{self, BufRead, IoSlice, Write as _};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, Connection, ServerConfig, ServerConnection};

/// A TLS connection (client or server side) over `IO`.
pub struct TlsStream<IO> {
    io: IO,
    conn: Connection,
    /// The transport reported end of file.
    transport_eof: bool,
    /// `close_notify` is queued (by `poll_shutdown`).
    close_notify_queued: bool,
}

impl<IO> TlsStream<IO>
where
    IO: Read + Write + Unpin,
{
    /// The server side of a connection accepted as `io`.
    pub fn server(io: IO, config: Arc<ServerConfig>) -> Result<Self, rustls::Error> {
        Ok(Self::new(io, ServerConnection::new(config)?.into()))
    }

    /// The client side of a connection to `server_name`, opened as `io`.
    pub fn client(
        io: IO,
        config: Arc<ClientConfig>,
        server_name: ServerName<'static>,
    ) -> Result<Self, rustls::Error> {
        Ok(Self::new(
            io,
            ClientConnection::new(config, server_name)?.into(),
        ))
    }

    fn new(io: IO, conn: Connection) -> Self {
        Self {
            io,
            conn,
            transport_eof: false,
            close_notify_queued: false,
        }
    }

    /// Completes the handshake (a no-op once it is done). Reads and writes
    /// do this themselves; calling it first lets the caller bound it in
    /// time and see certificate errors before any request is made.
    pub async fn handshake(&mut self) -> io::Result<()> {
        poll_fn(|cx| self.poll_handshake(cx)).await
    }

    /// Waits until the peer has sent application data (kept for the next
    /// read) or closed the session, and reports a TLS error or alert that
    /// comes instead. Under TLS 1.3 a server refuses a client certificate
    /// only after the client's handshake is complete; an HTTP/2 server
    /// speaks first, so this tells such a refusal from acceptance.
    pub async fn read_ahead(&mut self) -> io::Result<()> {
        poll_fn(|cx| self.poll_fill(cx)).await
    }

    /// The rustls connection: negotiated protocol version, ALPN protocol,
    /// the peer's certificates.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The transport.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.conn.is_handshaking() {
            ready!(self.poll_flush_tls(cx))?;
            if !self.conn.is_handshaking() {
                break;
            }
            if ready!(self.poll_read_tls(cx))? == 0 {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed the connection during the TLS handshake",
                )));
            }
        }
        // The last flight (a client's Finished) may still be queued.
        ready!(self.poll_flush_tls(cx))?;
        Poll::Ready(Ok(()))
    }

    /// Reads TLS bytes from the transport into rustls and processes them.
    /// `Ok(0)` is the transport's end of file.
    fn poll_read_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let read = self.conn.read_tls(&mut TransportIo {
            io: &mut self.io,
            cx,
        });
        let n = match read {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        };
        if n == 0 {
            self.transport_eof = true;
        }
        if let Err(error) = self.conn.process_new_packets() {
            // rustls queued an alert saying why; offer it to the peer, but
            // never wait for it.
            let _ = self.poll_flush_tls(cx);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, error)));
        }
        Poll::Ready(Ok(n))
    }

    /// Writes every TLS byte rustls has queued to the transport.
    fn poll_flush_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.conn.wants_write() {
            let written = self.conn.write_tls(&mut TransportIo {
                io: &mut self.io,
                cx,
            });
            match written {
                Ok(0) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the transport accepted no TLS bytes",
                    )))
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Reads until plaintext is buffered in rustls or the peer closed the
    /// session with close_notify.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.conn.is_handshaking() {
            ready!(self.poll_handshake(cx))?;
        }
        loop {
            match self.conn.reader().fill_buf() {
                Ok(_) => return Poll::Ready(Ok(())),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // UnexpectedEof: the transport ended without close_notify.
                Err(e) => return Poll::Ready(Err(e)),
            }
            if self.transport_eof {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            // Alerts and key updates rustls queued while reading go out
            // when the transport has room; a read never waits for that.
            if self.conn.wants_write() {
                let _ = self.poll_flush_tls(cx);
            }
            ready!(self.poll_read_tls(cx))?;
        }
    }

    /// Hands plaintext to rustls with `write` and pushes the records out.
    /// Reports what rustls accepted; `Pending` only when it accepted
    /// nothing and the transport is full.
    fn poll_write_plaintext(
        &mut self,
        cx: &mut Context<'_>,
        mut write: impl FnMut(&mut rustls::Writer<'_>) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        if self.conn.is_handshaking() {
            ready!(self.poll_handshake(cx))?;
        }
        // Twice at most: when rustls's send buffer is full, the first round
        // makes room and the second must be accepted.
        for _ in 0..2 {
            let accepted = write(&mut self.conn.writer())?;
            match self.poll_flush_tls(cx) {
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                _ if accepted > 0 => return Poll::Ready(Ok(accepted)),
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) => {}
            }
        }
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "the TLS connection accepts no more data",
        )))
    }
}

impl<IO> Read for TlsStream<IO>
where
    IO: Read + Write + Unpin,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_fill(cx))?;
        let mut reader = this.conn.reader();
        // Empty: the peer sent close_notify, a clean end of file.
        let chunk = reader.fill_buf()?;
        let n = chunk.len().min(buf.remaining());
        buf.put_slice(&chunk[..n]);
        reader.consume(n);
        Poll::Ready(Ok(()))
    }
}

impl<IO> Write for TlsStream<IO>
where
    IO: Read + Write + Unpin,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        self.get_mut()
            .poll_write_plaintext(cx, |writer| writer.write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        self.get_mut()
            .poll_write_plaintext(cx, |writer| writer.write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.conn.is_handshaking() {
            ready!(this.poll_handshake(cx))?;
        }
        ready!(this.poll_flush_tls(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.close_notify_queued {
            this.conn.send_close_notify();
            this.close_notify_queued = true;
        }
        // A peer that is already gone cannot hear close_notify; shutting
        // the transport down is all that is left to do.
        if let Err(e) = ready!(this.poll_flush_tls(cx)) {
            if !matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ) {
                return Poll::Ready(Err(e));
            }
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// The transport as `std::io::Read + Write` for the length of one poll:
/// `Pending` becomes `WouldBlock`, with the waker registered.
struct TransportIo<'a, 'b, IO> {
    io: &'a mut IO,
    cx: &'a mut Context<'b>,
}

impl<IO: Read + Write + Unpin> io::Read for TransportIo<'_, '_, IO> {
    fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        let mut buf = ReadBuf::new(dst);
        match Pin::new(&mut *self.io).poll_read(self.cx, buf.unfilled()) {
            Poll::Ready(Ok(())) => Ok(buf.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<IO: Read + Write + Unpin> io::Write for TransportIo<'_, '_, IO> {
    fn write(&mut self, src: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write(self.cx, src) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write_vectored(self.cx, bufs) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match Pin::new(&mut *self.io).poll_flush(self.cx) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}
