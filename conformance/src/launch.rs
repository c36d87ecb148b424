//! Starting server processes for tests: `oxetcd`, `oxetcd-smol` or Debian's
//! etcd, on 127.0.0.1 with free ports, killed (SIGKILL) when dropped.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Longest a server may take from spawn to accepting clients.
const READY_DEADLINE: Duration = Duration::from_secs(20);

/// Pause between readiness checks.
const READY_POLL: Duration = Duration::from_millis(20);

/// Attempts at starting a server when a port picked as free was taken by
/// someone else in between.
const START_ATTEMPTS_MAX: usize = 3;

/// The line etcd (and oxetcd) log once the client listener serves.
pub const READY_LINE: &str = "enabled capabilities for version";

/// Where Debian's `etcd-server` package installs etcd.
pub const ETCD_PATH: &str = "/usr/bin/etcd";

/// Which server program to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// The tokio binary, `oxetcd`.
    Oxetcd,
    /// The smol binary, `oxetcd-smol`.
    OxetcdSmol,
    /// The reference: Debian's etcd.
    Etcd,
}

impl ServerKind {
    /// The program's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Oxetcd => "oxetcd",
            Self::OxetcdSmol => "oxetcd-smol",
            Self::Etcd => "etcd",
        }
    }

    /// The program to run; an error (never a skip) when it is missing.
    pub fn program(self) -> Result<PathBuf, String> {
        match self {
            Self::Oxetcd | Self::OxetcdSmol => binary_path(self.name()),
            Self::Etcd => {
                let path = PathBuf::from(ETCD_PATH);
                if path.is_file() {
                    Ok(path)
                } else {
                    Err(format!(
                        "{ETCD_PATH} is missing: install Debian's etcd-server \
                         (scripts/test.sh does this)"
                    ))
                }
            }
        }
    }
}

/// The path of a workspace binary built into the same target directory and
/// profile as the running test (`target/<profile>/deps/<test>` →
/// `target/<profile>/<name>`).
pub fn binary_path(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: build the binaries first (cargo build --workspace --bins, \
             with the same profile as the tests)",
            path.display()
        ))
    }
}

/// A port on 127.0.0.1 that was free a moment ago, never one handed out
/// before in this process: the kernel may give a port again as soon as
/// its probe closes, and two servers started side by side (or a server's
/// client and peer ports) would then share one.
pub fn free_port() -> Result<u16, String> {
    /// Ports handed out so far.
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    /// Kernel choices tried before giving up.
    const ATTEMPTS: usize = 100;
    let mut given = GIVEN.lock().unwrap_or_else(PoisonError::into_inner);
    for _ in 0..ATTEMPTS {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("bind: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("local_addr: {e}"))?
            .port();
        if given.insert(port) {
            return Ok(port);
        }
    }
    Err("the kernel gave only ports handed out before".into())
}

/// A running server process. Dropping it kills the process (SIGKILL) and
/// removes its temporary directories.
pub struct Server {
    kind: ServerKind,
    child: Option<Child>,
    port: u16,
    endpoint: String,
    data_dir: PathBuf,
    log_path: PathBuf,
    // Holds the log (and, for `start`, the data dir) until the server drops.
    _scratch: tempfile::TempDir,
}

impl Server {
    /// Starts `kind` on a fresh temporary data dir.
    pub fn start(kind: ServerKind) -> Result<Self, String> {
        Self::start_with(kind, None, &[])
    }

    /// Starts `kind` on a fresh temporary data dir with `flags` added to
    /// the usual ones.
    pub fn start_flags(kind: ServerKind, flags: &[&str]) -> Result<Self, String> {
        Self::start_with(kind, None, flags)
    }

    /// Starts `kind` on `data_dir`, which is kept when the server drops (to
    /// restart on it).
    pub fn start_in(kind: ServerKind, data_dir: &Path) -> Result<Self, String> {
        Self::start_with(kind, Some(data_dir), &[])
    }

    fn start_with(
        kind: ServerKind,
        data_dir: Option<&Path>,
        flags: &[&str],
    ) -> Result<Self, String> {
        let program = kind.program()?;
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS_MAX {
            let scratch = tempfile::Builder::new()
                .prefix(&format!("{}-", kind.name()))
                .tempdir()
                .map_err(|e| format!("temp dir: {e}"))?;
            let data_dir = data_dir.map_or_else(|| scratch.path().join("data"), Path::to_path_buf);
            match Self::spawn(kind, &program, scratch, data_dir, flags) {
                Ok(server) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    fn spawn(
        kind: ServerKind,
        program: &Path,
        scratch: tempfile::TempDir,
        data_dir: PathBuf,
        flags: &[&str],
    ) -> Result<Self, String> {
        let port = free_port()?;
        let endpoint = format!("http://127.0.0.1:{port}");
        // A second peer listener on etcd's default port would collide with
        // parallel servers. The advertised peer URL stays etcd's default, so
        // member and cluster IDs are the default ones.
        let peer_port = free_port()?;
        let mut args: Vec<OsString> = vec![
            "--name".into(),
            "default".into(),
            "--data-dir".into(),
            data_dir.clone().into(),
            "--listen-client-urls".into(),
            endpoint.clone().into(),
            "--advertise-client-urls".into(),
            endpoint.into(),
            "--listen-peer-urls".into(),
            format!("http://127.0.0.1:{peer_port}").into(),
        ];
        args.extend(flags.iter().map(OsString::from));
        Self::launch(kind, program, &args, port, data_dir, scratch)
    }

    /// Starts `kind` with exactly `args`, serving clients on `port` of
    /// 127.0.0.1 (the caller passes the matching client URL flags) and
    /// keeping its data in `data_dir` (kept when the server drops). For
    /// cluster members, whose ports and flags the caller plans; there is no
    /// retry on a port taken meanwhile.
    pub fn start_args(
        kind: ServerKind,
        port: u16,
        data_dir: &Path,
        args: &[String],
    ) -> Result<Self, String> {
        let program = kind.program()?;
        let scratch = tempfile::Builder::new()
            .prefix(&format!("{}-", kind.name()))
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        Self::launch(kind, &program, &args, port, data_dir.to_path_buf(), scratch)
    }

    /// Runs `program` with `args`, its output in a log file in `scratch`
    /// and no inherited `ETCD*` variables, then waits until it is ready.
    fn launch(
        kind: ServerKind,
        program: &Path,
        args: &[OsString],
        port: u16,
        data_dir: PathBuf,
        scratch: tempfile::TempDir,
    ) -> Result<Self, String> {
        let log_path = scratch.path().join("server.log");
        let log = File::create(&log_path).map_err(|e| format!("log file: {e}"))?;
        let log_err = log.try_clone().map_err(|e| format!("log file: {e}"))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err));
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ETCD") {
                command.env_remove(name);
            }
        }
        let child = command
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", program.display()))?;
        let mut server = Self {
            kind,
            child: Some(child),
            port,
            endpoint: format!("http://127.0.0.1:{port}"),
            data_dir,
            log_path,
            _scratch: scratch,
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// The process ID, while the process is ours (not killed).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Waits until the readiness line is logged or the client port accepts
    /// connections; fails if the process exits or [`READY_DEADLINE`] passes.
    fn wait_ready(&mut self) -> Result<(), String> {
        let started = Instant::now();
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        while started.elapsed() < READY_DEADLINE {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!(
                        "{} exited before it was ready ({status})\n--- log ---\n{}",
                        self.kind.name(),
                        self.log_tail()
                    ));
                }
            }
            if self.log().contains(READY_LINE)
                || TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok()
            {
                return Ok(());
            }
            std::thread::sleep(READY_POLL);
        }
        Err(format!(
            "{} not ready within {READY_DEADLINE:?}\n--- log ---\n{}",
            self.kind.name(),
            self.log_tail()
        ))
    }

    /// Which program this is.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// `127.0.0.1:<port>`, as etcdctl's `--endpoints` takes it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Everything the process logged so far (stdout and stderr).
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The last lines of the log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Asks the process to stop with SIGTERM (through the `kill` command, so
    /// no libc binding is needed) and waits up to `within` for it to exit.
    pub fn terminate(&mut self, within: Duration) -> Result<ExitStatus, String> {
        let Some(child) = self.child.as_mut() else {
            return Err("the server is not running".to_owned());
        };
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .map_err(|e| format!("kill -TERM: {e}"))?;
        if !sent.success() {
            return Err(format!("kill -TERM {} failed: {sent}", child.id()));
        }
        let started = Instant::now();
        while started.elapsed() < within {
            if let Some(status) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
                self.child = None;
                return Ok(status);
            }
            std::thread::sleep(READY_POLL);
        }
        Err(format!(
            "{} still running {within:?} after SIGTERM\n--- log ---\n{}",
            self.kind.name(),
            self.log_tail()
        ))
    }

    /// Waits up to `within` for the process to exit on its own; its exit
    /// status, or `None` if it still runs (or was never running).
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        while started.elapsed() < within {
            let child = self.child.as_mut()?;
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(READY_POLL);
        }
        None
    }

    /// Kills the process with SIGKILL and reaps it. Idempotent.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}
