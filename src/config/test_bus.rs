//! Test rigs for the OS keyring: a private D-Bus session bus, and on it a Secret Service whose
//! collection is locked and whose unlock prompt nobody answers — what a Linux desktop's keyring
//! looks like to an app between login and the user typing the keyring's password. (A real
//! `gnome-keyring-daemon`, locked, needs a prompter on a display to ask with; one cannot be left
//! unanswered on purpose.) For tests only.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dbus::arg::Variant;
use dbus::blocking::Connection;
use dbus::channel::MatchingReceiver;
use dbus::message::MatchRule;
use dbus::{Message, Path};

/// The session bus's configuration without `<servicedir>`: no service is started on demand.
/// (The stock session configuration would start the system's own `gnome-keyring-daemon` for
/// the first message sent to the Secret Service before a test's own service has claimed it.)
const BUS_CONFIG: &str = r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:tmpdir=/tmp</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#;

/// A private session bus (`dbus-daemon`), stopped when dropped.
pub struct SessionBus {
    address: String,
    pid: u32,
    _dir: tempfile::TempDir,
}

impl SessionBus {
    /// Starts one. Panics when `dbus-daemon` is missing (`scripts/setup --test` installs it).
    pub fn start() -> SessionBus {
        let dir = tempfile::tempdir().expect("a temp dir");
        let config = dir.path().join("bus.conf");
        std::fs::write(&config, BUS_CONFIG).expect("the bus configuration written");
        let out = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--fork", "--print-address=1", "--print-pid=1"])
            .output()
            .expect("dbus-daemon is installed (scripts/setup --test installs it)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = text.lines();
        let address = lines.next().expect("the bus's address").trim().to_string();
        let pid = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("the bus's pid");
        SessionBus {
            address,
            pid,
            _dir: dir,
        }
    }

    /// Its address, for `DBUS_SESSION_BUS_ADDRESS`.
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl Drop for SessionBus {
    fn drop(&mut self) {
        // What is connected to it (a keyring daemon) leaves with it.
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
    }
}

/// A Secret Service on a [`SessionBus`] that holds one locked item for every search and, asked
/// to unlock it, opens a prompt that never completes. Stopped when dropped.
pub struct LockedKeyring {
    stop: Arc<AtomicBool>,
    prompts: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl LockedKeyring {
    /// Claims `org.freedesktop.secrets` on `bus` and answers on a thread of its own.
    pub fn serve(bus: &SessionBus) -> LockedKeyring {
        let connection = Connection::new_address(bus.address()).expect("a connection to the bus");
        connection
            .request_name("org.freedesktop.secrets", false, true, true)
            .expect("the Secret Service's name");
        let stop = Arc::new(AtomicBool::new(false));
        let prompts = Arc::new(AtomicUsize::new(0));
        let counted = prompts.clone();
        connection.start_receive(
            MatchRule::new_method_call(),
            Box::new(move |call: Message, conn: &Connection| {
                let _ = conn.channel().send(answer(&call, &counted));
                true
            }),
        );
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                if connection.process(Duration::from_millis(50)).is_err() {
                    break;
                }
            }
        });
        LockedKeyring {
            stop,
            prompts,
            thread: Some(thread),
        }
    }

    /// How many unlock prompts were opened (and left unanswered).
    pub fn prompts(&self) -> usize {
        self.prompts.load(Ordering::SeqCst)
    }

    /// Waits until `count` prompts were opened, for up to `limit`.
    pub fn wait_for_prompts(&self, count: usize, limit: Duration) -> bool {
        let start = Instant::now();
        while self.prompts() < count {
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }
}

impl Drop for LockedKeyring {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The Secret Service's answer to `call`, as a locked collection gives it.
fn answer(call: &Message, prompts: &AtomicUsize) -> Message {
    let item = Path::from("/org/freedesktop/secrets/collection/login/1");
    match call.member().as_deref() {
        // The service's half of the key exchange: any public key will do, nothing is sent.
        Some("OpenSession") => {
            let mut public = vec![0u8; 128];
            public[127] = 2;
            call.method_return().append2(
                Variant(public),
                Path::from("/org/freedesktop/secrets/session/1"),
            )
        }
        Some("SearchItems") => call.method_return().append2(Vec::<Path>::new(), vec![item]),
        Some("Unlock") => call.method_return().append2(
            Vec::<Path>::new(),
            Path::from("/org/freedesktop/secrets/prompt/1"),
        ),
        // Shown to the user, who does not answer: no Completed signal ever comes.
        Some("Prompt") => {
            prompts.fetch_add(1, Ordering::SeqCst);
            call.method_return()
        }
        _ => call.error(
            &"org.freedesktop.DBus.Error.UnknownMethod".into(),
            c"not offered by this keyring",
        ),
    }
}
