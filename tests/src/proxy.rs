//! A fault-injecting TCP proxy in front of each member's peer port, on
//! 127.0.0.1 only: members advertise and dial the proxies, each proxy
//! forwards to its member's real peer listener, and a test decides per
//! member and per direction what happens to the bytes on the way.
//!
//! Design:
//! - Faults are data: each member has a [`Link`] for the bytes toward it
//!   and one for the bytes from it ([`Direction`]). A chunk travels from
//!   one member to another and is forwarded under the stricter of its
//!   source's `From` link and its destination's `Toward` link, looked up
//!   for every chunk, so a change applies at once to open connections.
//! - A connection's two ends are known from oxetcd's peer hello (sender
//!   and receiver IDs, see `server/src/peer/wire.rs`): the listener is the
//!   proxy's member, whose ID the proxy learns from the first hello naming
//!   a receiver; the dialer is the member whose proxy learned the sender
//!   ID. A connection that does not open with our hello (TLS peers, etcd's
//!   HTTP) has an unknown dialer, and only its listener's links apply.
//! - [`Link::Cut`] concerns whole connections: open ones that would carry
//!   a cut byte are shut, new ones are accepted and closed.
//!   [`Link::Blackhole`] reads and discards: the connection stays open and
//!   the traffic goes nowhere. A stream that lost bytes has a hole, which
//!   TCP never delivers, so such a connection is shut the moment it would
//!   carry bytes again. [`Link::Slow`] sleeps before forwarding each chunk.
//! - Threads, not a runtime: one accepting per proxy, two per connection
//!   (one per direction). Every blocking call has a timeout ([`IO_POLL`]),
//!   every loop ends on the stop flag or after [`LIFETIME_MAX`], and
//!   dropping [`PeerProxies`] stops and joins them all.
//!
//! Only the proxy's own sockets are touched; it never binds anything but
//! 127.0.0.1.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::ports::Ports;

/// How long any blocking accept, read or write waits before the thread
/// looks at the stop flag again: dropping the proxies takes about this.
const IO_POLL: Duration = Duration::from_millis(50);

/// No proxy thread runs longer than this, whatever happens: longer than
/// any run of the fault matrix's long version.
const LIFETIME_MAX: Duration = Duration::from_secs(3_600);

/// Longest wait for a dialer's first bytes (the hello) before the
/// connection is forwarded with an unknown dialer.
const HELLO_WAIT: Duration = Duration::from_secs(2);

/// Bytes of oxetcd's peer hello; the sender and receiver IDs are its last
/// 16 (`server/src/peer/wire.rs`).
const HELLO_BYTES: usize = 36;

/// The hello's first bytes.
const HELLO_MAGIC: &[u8; 8] = b"oxetcdpr";

/// Bytes read and forwarded at once.
const CHUNK_BYTES: usize = 64 * 1024;

/// Open connections over all proxies at most; beyond it new ones are
/// refused. A three-member cluster opens a handful (one messages stream
/// per ordered pair, a snapshot stream now and then, redials).
const CONNECTIONS_MAX: usize = 256;

/// Attempts at binding a proxy's port: a port of [`Ports`] may be taken
/// between its choice and the bind.
const BIND_ATTEMPTS: usize = 8;

/// What happens to bytes on a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Forwarded as they come.
    Pass,
    /// Each chunk forwarded after this delay.
    Slow(Duration),
    /// Read and discarded; the connection stays open.
    Blackhole,
    /// Open connections shut, new ones refused.
    Cut,
}

impl Link {
    /// The stricter of two links: Cut over Blackhole over Slow over Pass,
    /// the longer of two delays.
    fn stricter(self, other: Self) -> Self {
        match (self, other) {
            (Self::Cut, _) | (_, Self::Cut) => Self::Cut,
            (Self::Blackhole, _) | (_, Self::Blackhole) => Self::Blackhole,
            (Self::Slow(a), Self::Slow(b)) => Self::Slow(a.max(b)),
            (Self::Slow(a), Self::Pass) | (Self::Pass, Self::Slow(a)) => Self::Slow(a),
            (Self::Pass, Self::Pass) => Self::Pass,
        }
    }
}

/// Which of a member's bytes a [`Link`] applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Bytes other members send it.
    Toward,
    /// Bytes it sends other members.
    From,
}

/// The proxies of one cluster, one per member, keyed by member name.
pub struct PeerProxies {
    shared: Arc<Shared>,
    /// The accepting threads; each joins its connections' threads.
    acceptors: Mutex<Vec<JoinHandle<()>>>,
}

impl PeerProxies {
    /// No proxies yet.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                stop: AtomicBool::new(false),
                next_connection: AtomicU64::new(0),
                state: Mutex::new(State::default()),
            }),
            acceptors: Mutex::new(Vec::new()),
        }
    }

    /// Starts a proxy for member `name` on a port of `ports`, forwarding to
    /// `target` (the member's peer listener) on 127.0.0.1; answers the
    /// proxy's port, the one the member is to advertise. Its links pass.
    pub fn front(&self, name: &str, target: u16, ports: Ports) -> u16 {
        let listener = (0..BIND_ATTEMPTS)
            .find_map(|_| TcpListener::bind(("127.0.0.1", ports.take())).ok())
            .unwrap_or_else(|| panic!("no port for {name}'s peer proxy"));
        listener
            .set_nonblocking(true)
            .unwrap_or_else(|e| panic!("{name}'s peer proxy: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("{name}'s peer proxy: {e}"))
            .port();
        let member = {
            let mut state = self.shared.lock();
            assert!(
                state.members.iter().all(|m| m.name != name),
                "{name} has a proxy already"
            );
            state.members.push(MemberLinks::new(name));
            state.members.len() - 1
        };
        let shared = self.shared.clone();
        let acceptor = thread::Builder::new()
            .name(format!("proxy-{name}"))
            .spawn(move || accept(&shared, &listener, member, target))
            .unwrap_or_else(|e| panic!("{name}'s peer proxy thread: {e}"));
        lock(&self.acceptors).push(acceptor);
        port
    }

    /// Bytes in `direction` of member `name` go as `link` says, from now
    /// on, on open connections too.
    pub fn set(&self, name: &str, direction: Direction, link: Link) {
        let mut state = self.shared.lock();
        let member = state.position(name);
        match direction {
            Direction::Toward => state.members[member].toward = link,
            Direction::From => state.members[member].from = link,
        }
        if link == Link::Cut {
            state.shut_cut_connections();
        }
    }

    /// Member `name` cut off both ways (links [`Link::Cut`]).
    pub fn cut(&self, name: &str) {
        self.set(name, Direction::Toward, Link::Cut);
        self.set(name, Direction::From, Link::Cut);
    }

    /// Member `name`'s traffic, both ways, going nowhere (links
    /// [`Link::Blackhole`]).
    pub fn blackhole(&self, name: &str) {
        self.set(name, Direction::Toward, Link::Blackhole);
        self.set(name, Direction::From, Link::Blackhole);
    }

    /// Both of member `name`'s links back to [`Link::Pass`].
    pub fn heal(&self, name: &str) {
        self.set(name, Direction::Toward, Link::Pass);
        self.set(name, Direction::From, Link::Pass);
    }

    /// Every member's links back to [`Link::Pass`].
    pub fn heal_all(&self) {
        let mut state = self.shared.lock();
        for member in &mut state.members {
            member.toward = Link::Pass;
            member.from = Link::Pass;
        }
    }

    /// The member ID `name`'s proxy learned from a hello, if any yet.
    pub fn member_id(&self, name: &str) -> Option<u64> {
        let state = self.shared.lock();
        state.members[state.position(name)].id
    }

    /// Connections open through every proxy now.
    pub fn open_connections(&self) -> usize {
        self.shared.lock().connections.len()
    }
}

impl Default for PeerProxies {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for PeerProxies {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for connection in &self.shared.lock().connections {
            connection.shut();
        }
        for acceptor in lock(&self.acceptors).drain(..) {
            let _ = acceptor.join();
        }
    }
}

/// What the threads share.
struct Shared {
    stop: AtomicBool,
    next_connection: AtomicU64,
    state: Mutex<State>,
}

impl Shared {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

#[derive(Default)]
struct State {
    /// By proxy, in the order they were started.
    members: Vec<MemberLinks>,
    connections: Vec<Connection>,
}

impl State {
    fn position(&self, name: &str) -> usize {
        self.members
            .iter()
            .position(|m| m.name == name)
            .unwrap_or_else(|| panic!("no peer proxy for {name}"))
    }

    /// The member a hello's ID names, once its proxy learned it.
    fn member_of(&self, id: Option<u64>) -> Option<usize> {
        let id = id?;
        self.members.iter().position(|m| m.id == Some(id))
    }

    /// The link for a chunk from `source` to `destination`; an unknown
    /// end adds nothing.
    fn link(&self, source: Option<usize>, destination: Option<usize>) -> Link {
        let from = source.map_or(Link::Pass, |m| self.members[m].from);
        let toward = destination.map_or(Link::Pass, |m| self.members[m].toward);
        from.stricter(toward)
    }

    /// The link for a chunk of `connection` flowing `flow`.
    fn link_of(&self, connection: &Ends, flow: Flow) -> Link {
        let dialer = self.member_of(connection.dialer_id);
        match flow {
            Flow::ToListener => self.link(dialer, Some(connection.listener)),
            Flow::ToDialer => self.link(Some(connection.listener), dialer),
        }
    }

    /// Whether any byte of `connection` is cut.
    fn is_cut(&self, connection: &Ends) -> bool {
        self.link_of(connection, Flow::ToListener) == Link::Cut
            || self.link_of(connection, Flow::ToDialer) == Link::Cut
    }

    fn shut_cut_connections(&self) {
        for connection in &self.connections {
            if self.is_cut(&connection.ends) {
                connection.shut();
            }
        }
    }
}

struct MemberLinks {
    name: String,
    /// Its member ID, from the first hello naming a receiver.
    id: Option<u64>,
    toward: Link,
    from: Link,
}

impl MemberLinks {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            id: None,
            toward: Link::Pass,
            from: Link::Pass,
        }
    }
}

/// Who is on either side of a proxied connection.
#[derive(Clone, Copy)]
struct Ends {
    /// The proxy's member.
    listener: usize,
    /// The sender ID of the dialer's hello; `None` without one.
    dialer_id: Option<u64>,
}

/// An open connection, for shutting it from another thread.
struct Connection {
    id: u64,
    ends: Ends,
    dialer: TcpStream,
    listener: TcpStream,
}

impl Connection {
    fn shut(&self) {
        let _ = self.dialer.shutdown(Shutdown::Both);
        let _ = self.listener.shutdown(Shutdown::Both);
    }
}

/// Which way a chunk flows on a connection.
#[derive(Clone, Copy)]
enum Flow {
    ToListener,
    ToDialer,
}

/// The accepting loop of one proxy: until stopped, every connection gets
/// a thread; they are joined before it returns.
fn accept(shared: &Arc<Shared>, listener: &TcpListener, member: usize, target: u16) {
    let started = Instant::now();
    let mut handlers: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stopped() && started.elapsed() < LIFETIME_MAX {
        match listener.accept() {
            Ok((dialer, _)) => {
                handlers.retain(|h| !h.is_finished());
                let shared = shared.clone();
                let spawned = thread::Builder::new()
                    .name("proxy-link".into())
                    .spawn(move || handle(&shared, dialer, member, target));
                if let Ok(handler) = spawned {
                    handlers.push(handler);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(IO_POLL),
            Err(_) => thread::sleep(IO_POLL),
        }
    }
    for handler in handlers {
        let _ = handler.join();
    }
}

/// One connection: its hello read, its ends known, the member dialed, the
/// bytes pumped both ways until either side closes, it is cut, or the
/// proxies stop.
fn handle(shared: &Arc<Shared>, dialer: TcpStream, member: usize, target: u16) {
    let _ = dialer.set_nonblocking(false);
    let (first, dialer_id, receiver_id) = read_hello(shared, &dialer);
    let ends = Ends {
        listener: member,
        dialer_id,
    };
    {
        let mut state = shared.lock();
        if let Some(receiver) = receiver_id {
            let links = &mut state.members[member];
            links.id = links.id.or(Some(receiver));
        }
        if state.is_cut(&ends) || state.connections.len() >= CONNECTIONS_MAX {
            let _ = dialer.shutdown(Shutdown::Both);
            return;
        }
    }
    let Ok(listener) = TcpStream::connect_timeout(&([127, 0, 0, 1], target).into(), HELLO_WAIT)
    else {
        let _ = dialer.shutdown(Shutdown::Both);
        return;
    };
    let streams = [&dialer, &listener].map(|s| {
        s.set_read_timeout(Some(IO_POLL))
            .and_then(|()| s.set_write_timeout(Some(IO_POLL)))
            .and_then(|()| s.try_clone())
    });
    let [Ok(dialer_copy), Ok(listener_copy)] = streams else {
        return;
    };
    let id = shared.next_connection.fetch_add(1, Ordering::Relaxed);
    {
        let mut state = shared.lock();
        // Cut between the check above and now: refused all the same.
        if state.is_cut(&ends) {
            return;
        }
        state.connections.push(Connection {
            id,
            ends,
            dialer: dialer_copy,
            listener: listener_copy,
        });
    }
    let back = {
        let (shared, from, to) = (shared.clone(), listener.try_clone(), dialer.try_clone());
        match (from, to) {
            (Ok(from), Ok(to)) => thread::Builder::new()
                .name("proxy-back".into())
                .spawn(move || pump(&shared, ends, Flow::ToDialer, &from, &to, &[]))
                .ok(),
            _ => None,
        }
    };
    if back.is_some() {
        pump(shared, ends, Flow::ToListener, &dialer, &listener, &first);
    }
    let _ = dialer.shutdown(Shutdown::Both);
    let _ = listener.shutdown(Shutdown::Both);
    if let Some(back) = back {
        let _ = back.join();
    }
    shared.lock().connections.retain(|c| c.id != id);
}

/// The dialer's first bytes, up to a hello's worth or [`HELLO_WAIT`], and
/// the sender and receiver IDs if they are an oxetcd hello (a zero ID,
/// as a joining member's members stream sends, is none).
fn read_hello(shared: &Shared, dialer: &TcpStream) -> (Vec<u8>, Option<u64>, Option<u64>) {
    let _ = dialer.set_read_timeout(Some(IO_POLL));
    let mut hello = [0u8; HELLO_BYTES];
    let mut filled = 0;
    let started = Instant::now();
    while filled < HELLO_BYTES && started.elapsed() < HELLO_WAIT && !shared.stopped() {
        match (&*dialer).read(&mut hello[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if is_timeout(&e) => {}
            Err(_) => break,
        }
        if !hello[..filled.min(HELLO_MAGIC.len())]
            .starts_with(&HELLO_MAGIC[..filled.min(HELLO_MAGIC.len())])
        {
            break;
        }
    }
    let first = hello[..filled].to_vec();
    if filled < HELLO_BYTES || !hello.starts_with(HELLO_MAGIC) {
        return (first, None, None);
    }
    let id_at = |at: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&hello[at..at + 8]);
        Some(u64::from_be_bytes(bytes)).filter(|id| *id != 0)
    };
    (first, id_at(20), id_at(28))
}

/// Forwards `from` to `to` (after `first`, bytes already read) under the
/// links of `ends` for `flow`, until either side closes, the link is cut,
/// a hole would be delivered, or the proxies stop.
fn pump(
    shared: &Shared,
    ends: Ends,
    flow: Flow,
    mut from: &TcpStream,
    to: &TcpStream,
    first: &[u8],
) {
    let started = Instant::now();
    let mut chunk = vec![0u8; CHUNK_BYTES];
    let mut pending = first.len();
    chunk[..pending].copy_from_slice(first);
    let mut holed = false;
    while !shared.stopped() && started.elapsed() < LIFETIME_MAX {
        if pending == 0 {
            pending = match from.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if is_timeout(&e) => continue,
                Err(_) => break,
            };
        }
        let link = shared.lock().link_of(&ends, flow);
        match link {
            Link::Pass => {}
            Link::Slow(delay) => sleep_unless_stopped(shared, delay),
            Link::Blackhole => {
                holed = true;
                pending = 0;
                continue;
            }
            Link::Cut => break,
        }
        if holed || !write_all(shared, to, &chunk[..pending]) {
            break;
        }
        pending = 0;
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Writes all of `bytes` unless the socket fails or the proxies stop
/// (a stopped member's buffers may stay full for a long time).
fn write_all(shared: &Shared, mut to: &TcpStream, bytes: &[u8]) -> bool {
    let mut written = 0;
    let started = Instant::now();
    while written < bytes.len() {
        if shared.stopped() || started.elapsed() > LIFETIME_MAX {
            return false;
        }
        match to.write(&bytes[written..]) {
            Ok(0) => return false,
            Ok(n) => written += n,
            Err(e) if is_timeout(&e) => {}
            Err(_) => return false,
        }
    }
    true
}

fn sleep_unless_stopped(shared: &Shared, delay: Duration) {
    let started = Instant::now();
    while !shared.stopped() {
        let left = delay.saturating_sub(started.elapsed());
        if left.is_zero() {
            return;
        }
        thread::sleep(left.min(IO_POLL));
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// A lock whose holder panicked still guards usable data: every update
/// under it is a single assignment or push.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on 127.0.0.1 that stops after `connections`.
    fn echo(connections: usize) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            for stream in listener.incoming().take(connections) {
                let mut stream = stream.unwrap();
                thread::spawn(move || {
                    let mut reader = stream.try_clone().unwrap();
                    let _ = std::io::copy(&mut reader, &mut stream);
                });
            }
        });
        port
    }

    fn hello(sender: u64, receiver: u64) -> Vec<u8> {
        let mut hello = HELLO_MAGIC.to_vec();
        hello.extend([0u8; 12]);
        hello.extend(sender.to_be_bytes());
        hello.extend(receiver.to_be_bytes());
        hello
    }

    fn dial(port: u16, hello: &[u8]) -> TcpStream {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        stream.write_all(hello).unwrap();
        let mut echoed = vec![0u8; hello.len()];
        stream.read_exact(&mut echoed).unwrap();
        assert_eq!(echoed, hello);
        stream
    }

    fn round_trip(stream: &mut TcpStream, bytes: &[u8]) -> Option<Vec<u8>> {
        stream.write_all(bytes).ok()?;
        let mut back = vec![0u8; bytes.len()];
        stream.read_exact(&mut back).ok()?;
        Some(back)
    }

    #[test]
    fn links_apply_by_direction_and_member() {
        let proxies = PeerProxies::new();
        let a = proxies.front("a", echo(8), Ports::Kernel);
        let b = proxies.front("b", echo(8), Ports::Kernel);
        // b dials a; a dials b: each proxy learns its member's ID.
        let mut b_to_a = dial(a, &hello(2, 1));
        let mut a_to_b = dial(b, &hello(1, 2));
        assert_eq!(proxies.member_id("a"), Some(1));
        assert_eq!(proxies.member_id("b"), Some(2));
        assert_eq!(round_trip(&mut b_to_a, b"ping"), Some(b"ping".to_vec()));

        // A slow link delays a round trip by about two chunks' delay.
        proxies.set(
            "a",
            Direction::Toward,
            Link::Slow(Duration::from_millis(100)),
        );
        let started = Instant::now();
        assert_eq!(round_trip(&mut b_to_a, b"slow"), Some(b"slow".to_vec()));
        assert!(started.elapsed() >= Duration::from_millis(100));
        proxies.heal("a");

        // Bytes from a go nowhere: on a's own proxy the echo back, and on
        // b's proxy what a sends.
        proxies.set("a", Direction::From, Link::Blackhole);
        assert_eq!(round_trip(&mut b_to_a, b"lost"), None);
        assert_eq!(round_trip(&mut a_to_b, b"lost"), None);
        proxies.heal("a");
        // Those streams have holes: shut when they carry bytes again.
        assert_eq!(round_trip(&mut a_to_b, b"again"), None);

        // A cut refuses new connections and shuts open ones.
        let mut fresh = dial(b, &hello(1, 2));
        proxies.cut("a");
        assert_eq!(round_trip(&mut fresh, b"cut"), None);
        let mut refused = TcpStream::connect(("127.0.0.1", b)).unwrap();
        refused
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        refused.write_all(&hello(1, 2)).unwrap();
        assert!(matches!(refused.read(&mut [0u8; 1]), Ok(0) | Err(_)));
        proxies.heal_all();
        let mut healed = dial(b, &hello(1, 2));
        assert_eq!(round_trip(&mut healed, b"back"), Some(b"back".to_vec()));
    }

    #[test]
    fn dropping_the_proxies_stops_them() {
        let proxies = PeerProxies::new();
        let port = proxies.front("a", echo(1), Ports::Kernel);
        let mut open = dial(port, &hello(2, 1));
        let started = Instant::now();
        drop(proxies);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(round_trip(&mut open, b"gone"), None);
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    }
}
