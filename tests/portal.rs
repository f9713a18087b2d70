//! The push-to-talk shortcut on Wayland: bound through the desktop portal's GlobalShortcuts over
//! real D-Bus (a private session bus, the tests' own portal speaking the specification's
//! protocol), its presses and releases reaching the voice conversation; and where the desktop
//! offers no global shortcuts, `jarvis doctor` says how to bind a key by hand.

mod support;

use std::time::Duration;

use jarvis::config::test_bus::SessionBus;
use jarvis::config::BackendKind;
use jarvis::session::shortcut::{self, PortalShortcut, ShortcutError, Way};
use jarvis::session::test_portal::FakePortal;
use jarvis_stub::Stub;
use support::*;

fn wayland(bus: &SessionBus) -> impl Fn(&str) -> Option<String> + Sync {
    env_with(&[
        ("XDG_SESSION_TYPE", "wayland"),
        ("WAYLAND_DISPLAY", "wayland-0"),
        ("DISPLAY", ":0"),
        ("DBUS_SESSION_BUS_ADDRESS", bus.address()),
    ])
}

/// The orb's view of the microphone.
struct Orb(jarvis::service::VoiceAttachment, Option<bool>);

impl Orb {
    async fn attach(service: &jarvis::Service) -> Orb {
        Orb(service.voice_attach().await.unwrap(), None)
    }

    /// Waits until the microphone is `open`.
    async fn until(&mut self, open: bool) {
        while self.1 != Some(open) {
            let update = tokio::time::timeout(LIMIT, self.0.next())
                .await
                .unwrap_or_else(|_| panic!("the microphone never became open={open}"))
                .expect("the service runs");
            if let jarvis::service::VoiceUpdate::Status(status) = update {
                self.1 = Some(status.listening);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn on_wayland_the_shortcut_is_bound_through_the_portal_and_its_press_and_release_reach_the_orb(
) {
    let bus = SessionBus::start();
    let portal = FakePortal::serve(&bus).await;
    let env = wayland(&bus);
    assert_eq!(Way::find(&env).await, Way::Portal { version: 1 });

    let stub = Stub::start().await.unwrap();
    let dir = Dir::new();
    let service = service(&dir, settings(BackendKind::Openai, &stub));
    let pushed = service.clone();
    let connection = shortcut::session_bus(&env).await.unwrap();
    let bound = PortalShortcut::bind(connection, "Ctrl+Alt+Space", move |pressed| {
        let service = pushed.clone();
        tokio::spawn(async move { service.push_to_talk(pressed).await.unwrap() });
    })
    .await
    .expect("bound through the portal");

    let asked = portal.bound();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].id, shortcut::SHORTCUT_ID);
    assert_eq!(asked[0].description, shortcut::SHORTCUT_DESCRIPTION);
    assert_eq!(
        asked[0].preferred_trigger.as_deref(),
        Some("CTRL+ALT+space"),
        "the preferred key as the XDG shortcuts specification writes it"
    );
    assert_eq!(
        bound.trigger(),
        Some("Press CTRL+ALT+space"),
        "the desktop's own words"
    );

    let mut orb = Orb::attach(&service).await;
    orb.until(false).await;
    portal.press(shortcut::SHORTCUT_ID).await;
    orb.until(true).await;
    portal.release(shortcut::SHORTCUT_ID).await;
    orb.until(false).await;

    // A new key from Settings: the old session is closed, and the new binding hears each edge
    // once.
    let first_session = asked[0].session.clone();
    bound.close().await;
    portal
        .wait_until("the old session closed", |_, closed| {
            closed.contains(&first_session)
        })
        .await;
    let (edges, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let connection = shortcut::session_bus(&env).await.unwrap();
    let again = PortalShortcut::bind(connection, "Ctrl+Shift+J", move |pressed| {
        let _ = edges.send(pressed);
    })
    .await
    .unwrap();
    assert_eq!(
        portal.bound()[1].preferred_trigger.as_deref(),
        Some("CTRL+SHIFT+j")
    );
    portal.press(shortcut::SHORTCUT_ID).await;
    portal.release(shortcut::SHORTCUT_ID).await;
    let mut seen = Vec::new();
    while seen.len() < 2 {
        seen.push(
            tokio::time::timeout(LIMIT, heard.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert_eq!(seen, [true, false], "one press and one release, once each");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), heard.recv())
            .await
            .is_err(),
        "nothing more"
    );
    drop(again);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shortcut_the_user_refuses_or_the_desktop_gives_no_key_is_never_said_to_be_bound() {
    let bus = SessionBus::start();
    let portal = FakePortal::serve(&bus).await;
    // The key is taken, or the user unticked it in the desktop's dialog.
    portal.assign_nothing();
    let connection = shortcut::session_bus(&wayland(&bus)).await.unwrap();
    let unassigned = PortalShortcut::bind(connection, "Ctrl+Alt+Space", |_| {})
        .await
        .unwrap();
    assert_eq!(unassigned.trigger(), None, "no key, not the one asked for");
    portal.refuse_binding();
    let connection = shortcut::session_bus(&wayland(&bus)).await.unwrap();
    let refused = PortalShortcut::bind(connection, "Ctrl+Alt+Space", |_| {}).await;
    let err = refused.err().expect("refused");
    assert!(matches!(err, ShortcutError::Refused), "{err:?}");
    assert!(err.to_string().contains("did not bind"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn where_the_desktop_offers_no_global_shortcuts_the_way_is_a_key_bound_by_hand() {
    // A portal without the interface (as GTK's), and a bus with no portal at all.
    let bus = SessionBus::start();
    let _portal = FakePortal::without_shortcuts(&bus).await;
    let way = Way::find(&wayland(&bus)).await;
    let Way::ByHand { why } = &way else {
        panic!("{way:?}")
    };
    assert!(why.contains("no GlobalShortcuts interface"), "{why}");
    let said = way.describe("Ctrl+Alt+Space");
    assert!(said.contains("`jarvis-desktop --action talk`"), "{said}");

    let empty = SessionBus::start();
    let way = Way::find(&wayland(&empty)).await;
    assert_eq!(
        way,
        Way::ByHand {
            why: ShortcutError::NoDesktopPortal.to_string()
        }
    );
    let connection = shortcut::session_bus(&wayland(&empty)).await.unwrap();
    let err = PortalShortcut::bind(connection, "Ctrl+Alt+Space", |_| {})
        .await
        .err()
        .expect("no portal to bind with");
    assert!(
        matches!(
            err,
            ShortcutError::NoDesktopPortal | ShortcutError::NoPortal
        ),
        "{err:?}"
    );

    // On X11 the shell grabs the key; with no display there is nothing to bind.
    assert_eq!(Way::find(&env_with(&[("DISPLAY", ":0")])).await, Way::X11);
    assert!(matches!(
        Way::find(&env_with(&[])).await,
        Way::ByHand { .. }
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn jarvis_doctor_says_which_way_the_push_to_talk_shortcut_comes_in() {
    let bus = SessionBus::start();
    let dir = Dir::new();
    std::fs::write(
        dir.path().join("settings.toml"),
        "[desktop]\nshortcut = \"Ctrl+Shift+J\"\n",
    )
    .unwrap();
    let doctor = |session_type: &str| {
        let mut cmd = jarvis(&dir);
        cmd.env("XDG_SESSION_TYPE", session_type)
            .env("DISPLAY", ":0")
            .env("DBUS_SESSION_BUS_ADDRESS", bus.address())
            .arg("doctor");
        cmd
    };
    let line = |report: &str| {
        report
            .lines()
            .find(|l| l.contains("push to talk"))
            .unwrap_or_else(|| panic!("no push-to-talk line in {report}"))
            .to_string()
    };

    let (_, report, _) = output(&mut doctor("x11")).await;
    assert!(
        line(&report).contains("Ctrl+Shift+J, grabbed on the X11 display"),
        "{report}"
    );

    let (_, report, _) = output(&mut doctor("wayland")).await;
    let said = line(&report);
    assert!(said.contains("no desktop portal runs"), "{said}");
    assert!(said.contains("jarvis-desktop --action talk"), "{said}");

    let _portal = FakePortal::serve(&bus).await;
    let (_, report, _) = output(&mut doctor("wayland")).await;
    let said = line(&report);
    assert!(
        said.contains("Ctrl+Shift+J asked of the desktop through its GlobalShortcuts portal"),
        "{said}"
    );
}
