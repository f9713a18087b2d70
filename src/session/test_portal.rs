//! A desktop portal of the tests' own on a private session bus
//! ([`crate::config::test_bus::SessionBus`]): `org.freedesktop.portal.GlobalShortcuts` as the
//! XDG desktop portal specification describes it — each request answered by its object path and
//! then a `Response` signal on that path, `CreateSession` making a session object that `Close`
//! ends, `Activated` and `Deactivated` when the test presses and releases a bound shortcut. No
//! desktop whose portal offers global shortcuts (KDE's, GNOME's, Hyprland's) runs here without
//! its compositor; this lets the desktop's Wayland path run over real D-Bus. Or, made without
//! the interface, a portal like GTK's, which has none. For tests only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use zbus::message::Header;
use zbus::object_server::ObjectServer;
use zbus::zvariant::{ObjectPath, OwnedObjectPath, OwnedValue, Value};

use crate::config::test_bus::SessionBus;

const PATH: &str = "/org/freedesktop/portal/desktop";
const NAME: &str = "org.freedesktop.portal.Desktop";
const INTERFACE: &str = "org.freedesktop.portal.GlobalShortcuts";

/// A shortcut an app asked the portal to bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// The session it was bound in (its object path).
    pub session: String,
    /// The shortcut's id.
    pub id: String,
    /// What the app says it does.
    pub description: String,
    /// The key the app would like, as it wrote it.
    pub preferred_trigger: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    bound: Vec<Bound>,
    open: Vec<String>,
    closed: Vec<String>,
    /// Binding is answered "cancelled" (the user dismissed the desktop's dialog).
    refuse: bool,
    /// Binding assigns no key (it was taken, or the user unticked it).
    assign_nothing: bool,
}

type Shared = Arc<(Mutex<State>, watch::Sender<u64>)>;

fn change(shared: &Shared, f: impl FnOnce(&mut State)) {
    f(&mut shared.0.lock().unwrap_or_else(|e| e.into_inner()));
    shared.1.send_modify(|n| *n += 1);
}

/// The portal, serving until dropped.
pub struct FakePortal {
    bus: zbus::Connection,
    shared: Shared,
}

impl FakePortal {
    /// Claims the portal's name on `bus` and serves GlobalShortcuts (version 1).
    pub async fn serve(bus: &SessionBus) -> FakePortal {
        Self::start(bus, true).await
    }

    /// Claims the portal's name on `bus` with no GlobalShortcuts interface (as GTK's portal).
    pub async fn without_shortcuts(bus: &SessionBus) -> FakePortal {
        Self::start(bus, false).await
    }

    async fn start(bus: &SessionBus, shortcuts: bool) -> FakePortal {
        let shared: Shared = Arc::new((Mutex::new(State::default()), watch::channel(0).0));
        let builder = zbus::connection::Builder::address(bus.address())
            .expect("the bus's address")
            .name(NAME)
            .expect("the portal's name");
        let builder = if shortcuts {
            builder.serve_at(
                PATH,
                Shortcuts {
                    shared: shared.clone(),
                },
            )
        } else {
            builder.serve_at(PATH, OtherPortal)
        }
        .expect("the portal's object");
        let bus = builder.build().await.expect("the portal on the bus");
        FakePortal { bus, shared }
    }

    /// From now on a bind is answered "cancelled", as when the user dismisses the dialog.
    pub fn refuse_binding(&self) {
        change(&self.shared, |s| s.refuse = true);
    }

    /// From now on a bind assigns no key: the shortcut is answered with an empty trigger
    /// description, as a desktop does when the key is taken or the user unticked it.
    pub fn assign_nothing(&self) {
        change(&self.shared, |s| s.assign_nothing = true);
    }

    /// Every shortcut bound so far, in order.
    pub fn bound(&self) -> Vec<Bound> {
        self.state(|s| s.bound.clone())
    }

    /// The sessions closed so far (their paths).
    pub fn closed(&self) -> Vec<String> {
        self.state(|s| s.closed.clone())
    }

    /// Waits (at most 20 s) until `ready` holds of the shortcuts bound and sessions closed.
    pub async fn wait_until(&self, what: &str, ready: impl Fn(&[Bound], &[String]) -> bool) {
        let mut changes = self.shared.1.subscribe();
        let waited = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                if self.state(|s| ready(&s.bound, &s.closed)) {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "the portal never saw {what}: {:?}",
            self.state(|s| format!("{s:?}"))
        );
    }

    /// The user presses the key of `id`: `Activated` in each open session that bound it.
    pub async fn press(&self, id: &str) {
        self.edge("Activated", id).await
    }

    /// The user lets go of it: `Deactivated`.
    pub async fn release(&self, id: &str) {
        self.edge("Deactivated", id).await
    }

    async fn edge(&self, signal: &str, id: &str) {
        let sessions: Vec<String> = self.state(|s| {
            s.bound
                .iter()
                .filter(|b| b.id == id && s.open.contains(&b.session))
                .map(|b| b.session.clone())
                .collect()
        });
        assert!(
            !sessions.is_empty(),
            "nobody bound {id:?} in an open session"
        );
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        for session in sessions {
            let path = ObjectPath::try_from(session.as_str()).expect("a session path");
            let options: HashMap<&str, Value<'_>> = HashMap::new();
            self.bus
                .emit_signal(
                    None::<&str>,
                    PATH,
                    INTERFACE,
                    signal,
                    &(path, id, millis, options),
                )
                .await
                .expect("the signal sent");
        }
    }

    fn state<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.shared.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// `:1.42` as the portal writes it in its object paths: `1_42`.
fn sender_part(header: &Header<'_>) -> String {
    header
        .sender()
        .map(|s| s.trim_start_matches(':').replace('.', "_"))
        .unwrap_or_default()
}

fn token(options: &HashMap<String, OwnedValue>, key: &str) -> String {
    options
        .get(key)
        .and_then(|v| String::try_from(v.clone()).ok())
        .unwrap_or_else(|| "t".into())
}

/// Answers the request at `path`: `Response(code, results)`, as the portal does once the user
/// (or nobody) has decided.
async fn respond(
    bus: &zbus::Connection,
    path: &str,
    code: u32,
    results: HashMap<&str, Value<'_>>,
) -> zbus::fdo::Result<()> {
    bus.emit_signal(
        None::<&str>,
        path,
        "org.freedesktop.portal.Request",
        "Response",
        &(code, results),
    )
    .await
    .map_err(|e| zbus::fdo::Error::Failed(e.to_string()))
}

struct Shortcuts {
    shared: Shared,
}

#[zbus::interface(name = "org.freedesktop.portal.GlobalShortcuts")]
impl Shortcuts {
    async fn create_session(
        &self,
        options: HashMap<String, OwnedValue>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] bus: &zbus::Connection,
        #[zbus(object_server)] server: &ObjectServer,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        let sender = sender_part(&header);
        let request = format!(
            "{PATH}/request/{sender}/{}",
            token(&options, "handle_token")
        );
        let session = format!(
            "{PATH}/session/{sender}/{}",
            token(&options, "session_handle_token")
        );
        server
            .at(
                session.as_str(),
                PortalSession {
                    shared: self.shared.clone(),
                    path: session.clone(),
                },
            )
            .await?;
        change(&self.shared, |s| s.open.push(session.clone()));
        // The handle as a string, as the portal sends it.
        let results = HashMap::from([("session_handle", Value::from(session.as_str()))]);
        respond(bus, &request, 0, results).await?;
        OwnedObjectPath::try_from(request).map_err(|e| zbus::fdo::Error::Failed(e.to_string()))
    }

    async fn bind_shortcuts(
        &self,
        session_handle: OwnedObjectPath,
        shortcuts: Vec<(String, HashMap<String, OwnedValue>)>,
        _parent_window: String,
        options: HashMap<String, OwnedValue>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] bus: &zbus::Connection,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        let request = format!(
            "{PATH}/request/{}/{}",
            sender_part(&header),
            token(&options, "handle_token")
        );
        let text = |info: &HashMap<String, OwnedValue>, key: &str| {
            info.get(key).and_then(|v| String::try_from(v.clone()).ok())
        };
        let (refuse, assign_nothing) = {
            let state = self.shared.0.lock().unwrap_or_else(|e| e.into_inner());
            (state.refuse, state.assign_nothing)
        };
        let session = session_handle.as_str().to_string();
        let mut answered: Vec<(String, HashMap<String, Value<'static>>)> = Vec::new();
        if !refuse {
            change(&self.shared, |s| {
                for (id, info) in &shortcuts {
                    let bound = Bound {
                        session: session.clone(),
                        id: id.clone(),
                        description: text(info, "description").unwrap_or_default(),
                        preferred_trigger: text(info, "preferred_trigger"),
                    };
                    // A desktop's own words for the key it bound (KDE and GNOME write it so).
                    let described = match &bound.preferred_trigger {
                        Some(t) if !assign_nothing => format!("Press {t}"),
                        _ => String::new(),
                    };
                    answered.push((
                        id.clone(),
                        HashMap::from([
                            (
                                "description".to_string(),
                                Value::from(bound.description.clone()),
                            ),
                            ("trigger_description".to_string(), Value::from(described)),
                        ]),
                    ));
                    s.bound.push(bound);
                }
            });
        }
        let results = HashMap::from([("shortcuts", Value::from(answered))]);
        respond(bus, &request, if refuse { 1 } else { 0 }, results).await?;
        OwnedObjectPath::try_from(request).map_err(|e| zbus::fdo::Error::Failed(e.to_string()))
    }

    #[zbus(property, name = "version")]
    fn version(&self) -> u32 {
        1
    }
}

/// Another of the portal's interfaces (the object is there, GlobalShortcuts is not).
struct OtherPortal;

#[zbus::interface(name = "org.freedesktop.portal.Settings")]
impl OtherPortal {
    #[zbus(property, name = "version")]
    fn version(&self) -> u32 {
        2
    }
}

struct PortalSession {
    shared: Shared,
    path: String,
}

#[zbus::interface(name = "org.freedesktop.portal.Session")]
impl PortalSession {
    fn close(&self) {
        let path = self.path.clone();
        change(&self.shared, |s| {
            s.open.retain(|p| *p != path);
            s.closed.push(path.clone());
        });
    }

    #[zbus(property, name = "version")]
    fn version(&self) -> u32 {
        1
    }
}
