//! API keys from the OS keyring: a private D-Bus session with its own unlocked GNOME keyring (the
//! Secret Service a Linux desktop has), so nothing touches the user's real keyring.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};

use jarvis::config::test_bus::SessionBus;
use jarvis_stub::Stub;
use support::*;

const KEY: &str = "sk-ant-from-the-keyring-0123456789";

/// A session bus and a keyring daemon on it, stopped when dropped.
struct Keyring {
    bus: SessionBus,
    dir: tempfile::TempDir,
}

impl Keyring {
    fn start() -> Keyring {
        let dir = tempfile::tempdir().unwrap();
        let keyring = Keyring {
            bus: SessionBus::start(),
            dir,
        };
        let mut daemon = Command::new("gnome-keyring-daemon")
            .args(["--unlock", "--components=secrets", "--daemonize"])
            .envs(keyring.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("gnome-keyring-daemon is installed (scripts/setup --test installs it)");
        daemon
            .stdin
            .take()
            .unwrap()
            .write_all(b"test-password")
            .unwrap();
        assert!(
            daemon.wait().unwrap().success(),
            "the keyring daemon started"
        );
        // The daemon forks before it owns the Secret Service's name and before its default
        // collection exists; wait until it answers for that collection (until then the bus says
        // the name has no owner), so the first store does not race the daemon's start.
        let ready = || {
            Command::new("dbus-send")
                .args([
                    "--session",
                    "--print-reply",
                    "--dest=org.freedesktop.secrets",
                    "/org/freedesktop/secrets/aliases/default",
                    "org.freedesktop.DBus.Properties.Get",
                    "string:org.freedesktop.Secret.Collection",
                    "string:Label",
                ])
                .envs(keyring.env())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let start = std::time::Instant::now();
        while !ready() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "the keyring's default collection did not appear"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        keyring
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let home = self.dir.path().display().to_string();
        vec![
            ("DBUS_SESSION_BUS_ADDRESS", self.bus.address().to_string()),
            ("HOME", home.clone()),
            ("XDG_RUNTIME_DIR", home.clone()),
            ("XDG_DATA_HOME", format!("{home}/data")),
        ]
    }

    fn jarvis(&self, dir: &Dir) -> tokio::process::Command {
        let mut cmd = jarvis(dir);
        cmd.env_remove("JARVIS_KEYRING").envs(self.env());
        cmd
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_stored_in_the_os_keyring_is_used_and_never_logged() {
    let keyring = Keyring::start();
    let stub = Stub::start().await.unwrap();
    let dir = Dir::new();
    let at_stub = |cmd: &mut tokio::process::Command| {
        cmd.env("JARVIS_BACKEND", "anthropic")
            .env("ANTHROPIC_BASE_URL", stub.anthropic_url());
    };

    // Stored from stdin.
    let mut set = keyring.jarvis(&dir);
    set.args(["key", "set", "ANTHROPIC_API_KEY"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = set.spawn().unwrap();
    {
        use tokio::io::AsyncWriteExt;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{KEY}\n").as_bytes())
            .await
            .unwrap();
    }
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ANTHROPIC_API_KEY stored in the OS keyring\n"
    );

    let mut doctor = keyring.jarvis(&dir);
    at_stub(&mut doctor);
    let (_, report, _) = output(doctor.arg("doctor")).await;
    assert!(
        report.contains("key: ANTHROPIC_API_KEY present (OS keyring)"),
        "{report}"
    );
    assert!(!report.contains(KEY));

    // Used for a question, never written to the trace log.
    let mut ask = keyring.jarvis(&dir);
    at_stub(&mut ask);
    let (code, stdout, log) =
        output(ask.env("JARVIS_LOG", "trace").args(["ask", "--new", "hi"])).await;
    assert_eq!((code, stdout.as_str()), (0, "You said: hi\n"), "{log}");
    assert!(log.contains("TRACE") && !log.contains(KEY));
    assert_eq!(stub.received()[0].headers["x-api-key"], KEY);

    // Removed: a question is refused at start-up, naming the variable.
    let (code, stdout, _) =
        output(
            keyring
                .jarvis(&dir)
                .args(["key", "delete", "ANTHROPIC_API_KEY"]),
        )
        .await;
    assert_eq!(
        (code, stdout.as_str()),
        (0, "ANTHROPIC_API_KEY removed from the OS keyring\n")
    );
    let mut ask = keyring.jarvis(&dir);
    at_stub(&mut ask);
    let (code, _, stderr) = output(ask.args(["ask", "--new", "hi"])).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("ANTHROPIC_API_KEY is not set"), "{stderr}");

    // An unknown variable is refused rather than stored.
    let (code, _, stderr) = output(keyring.jarvis(&dir).args(["key", "delete", "PATH"])).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("PATH is not a key Jarvis uses"), "{stderr}");
}
