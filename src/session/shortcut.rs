//! How the push-to-talk shortcut reaches Jarvis. On X11 the desktop shell grabs the key itself
//! (its global-shortcut plugin). On Wayland no program may grab a key: the shortcut is asked of
//! the desktop through the XDG desktop portal's GlobalShortcuts interface, which binds it (the
//! user may choose another key in the desktop's own settings) and tells Jarvis when it goes down
//! and up. Where neither works (a Wayland desktop without that portal, no display), the user
//! binds a key by hand to `jarvis-desktop --action talk`, which `jarvis doctor` and the chat
//! window say.

use std::collections::HashMap;
use std::time::Duration;

use ashpd::desktop::global_shortcuts::{BindShortcutsOptions, GlobalShortcuts, NewShortcut};
use ashpd::desktop::{CreateSessionOptions, Session};
use futures::StreamExt as _;
use tokio::task::JoinHandle;

/// The shortcut's id in the portal (the desktop keeps the user's key for it under this id).
pub const SHORTCUT_ID: &str = "push-to-talk";

/// What the desktop shows beside the shortcut in its settings.
pub const SHORTCUT_DESCRIPTION: &str = "Jarvis: push to talk (hold to speak)";

/// How long the session bus and the portal are given to answer whether the portal is there
/// (`jarvis doctor`; the app gives a portal started at login longer).
const ASK_FOR: Duration = Duration::from_secs(5);

const PORTAL: &str = "org.freedesktop.portal.Desktop";
const PORTAL_PATH: &str = "/org/freedesktop/portal/desktop";
const INTERFACE: &str = "org.freedesktop.portal.GlobalShortcuts";

/// The command a key bound by hand runs: each press opens the microphone or ends the utterance.
pub const BY_HAND: &str = "jarvis-desktop --action talk";

/// The kind of display the session runs on, from its environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Display {
    /// A Wayland session.
    Wayland,
    /// An X11 display.
    X11,
    /// Neither: no window can show, no shortcut can be had.
    None,
}

impl Display {
    /// `WAYLAND_DISPLAY` or `XDG_SESSION_TYPE=wayland` is Wayland (even with XWayland's
    /// `DISPLAY` beside it: an X11 grab there only sees keys while an X11 window has the focus);
    /// otherwise `DISPLAY` is X11.
    pub fn of(env: &dyn Fn(&str) -> Option<String>) -> Display {
        let set = |name: &str| env(name).is_some_and(|v| !v.trim().is_empty());
        let session_type = env("XDG_SESSION_TYPE").unwrap_or_default();
        if set("WAYLAND_DISPLAY") || session_type.trim().eq_ignore_ascii_case("wayland") {
            Display::Wayland
        } else if set("DISPLAY") {
            Display::X11
        } else {
            Display::None
        }
    }
}

/// The way the push-to-talk shortcut is had on this session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Way {
    /// The shell grabs the key on the X11 display.
    X11,
    /// The desktop portal's GlobalShortcuts binds it.
    Portal {
        /// The interface's version.
        version: u32,
    },
    /// Neither: the user binds a key to [`BY_HAND`].
    ByHand {
        /// Why neither works.
        why: String,
    },
}

impl Way {
    /// Looks: the display from `env`, and on Wayland whether the session bus (`env`'s
    /// `DBUS_SESSION_BUS_ADDRESS`, else the usual one) has the portal's GlobalShortcuts.
    pub async fn find(env: &(dyn Fn(&str) -> Option<String> + Sync)) -> Way {
        Self::find_within(env, ASK_FOR).await
    }

    /// [`Way::find`], giving the session bus and the portal `within` to answer each (a portal
    /// started on demand at login may be slow).
    pub async fn find_within(
        env: &(dyn Fn(&str) -> Option<String> + Sync),
        within: Duration,
    ) -> Way {
        match Display::of(env) {
            Display::X11 => Way::X11,
            Display::None => Way::ByHand {
                why: "there is no display (neither WAYLAND_DISPLAY nor DISPLAY is set)".into(),
            },
            Display::Wayland => match tokio::time::timeout(within, session_bus(env))
                .await
                .unwrap_or_else(|_| {
                    Err(ShortcutError::Bus(format!(
                        "the session bus did not answer within {} s",
                        within.as_secs()
                    )))
                }) {
                Err(err) => Way::ByHand {
                    why: err.to_string(),
                },
                Ok(bus) => match portal_version(&bus, within).await {
                    Ok(version) => Way::Portal { version },
                    Err(err) => Way::ByHand {
                        why: err.to_string(),
                    },
                },
            },
        }
    }

    /// One line saying how `shortcut` (as Settings writes it) reaches Jarvis, and what to do
    /// where it cannot.
    pub fn describe(&self, shortcut: &str) -> String {
        match self {
            Way::X11 => format!("{shortcut}, grabbed on the X11 display"),
            Way::Portal { version } => format!(
                "{shortcut} asked of the desktop through its GlobalShortcuts portal (version \
                 {version}, Wayland); the desktop's keyboard settings may give it another key"
            ),
            Way::ByHand { why } => format!("none: {why}. {}", by_hand()),
        }
    }
}

/// What to do where no shortcut can be had.
pub fn by_hand() -> String {
    format!(
        "Bind a key in your desktop's keyboard settings to the command `{BY_HAND}`: each press \
         opens the microphone, the next sends what was said"
    )
}

/// Why the shortcut could not be had through the portal.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each says what it is in its message
pub enum ShortcutError {
    #[error("the session bus cannot be reached: {0}")]
    Bus(String),
    #[error("no desktop portal runs on the session bus (xdg-desktop-portal)")]
    NoDesktopPortal,
    #[error(
        "the desktop offers no global shortcuts (its portal has no GlobalShortcuts interface)"
    )]
    NoPortal,
    #[error("the desktop did not bind the shortcut (the request was cancelled or refused)")]
    Refused,
    #[error("the desktop's shortcut portal failed: {0}")]
    Portal(String),
}

impl From<ashpd::Error> for ShortcutError {
    fn from(err: ashpd::Error) -> Self {
        use ashpd::PortalError;
        let method_error = match &err {
            ashpd::Error::Zbus(zbus::Error::MethodError(name, _, _))
            | ashpd::Error::Portal(PortalError::ZBus(zbus::Error::MethodError(name, _, _))) => {
                Some(name.as_str().to_string())
            }
            _ => None,
        };
        match (method_error.as_deref(), err) {
            (Some("org.freedesktop.DBus.Error.ServiceUnknown"), _) => {
                ShortcutError::NoDesktopPortal
            }
            (
                Some(
                    "org.freedesktop.DBus.Error.UnknownInterface"
                    | "org.freedesktop.DBus.Error.UnknownMethod",
                ),
                _,
            )
            | (_, ashpd::Error::PortalNotFound(_)) => ShortcutError::NoPortal,
            (_, ashpd::Error::Response(_) | ashpd::Error::Portal(PortalError::Cancelled(_))) => {
                ShortcutError::Refused
            }
            (_, other) => ShortcutError::Portal(other.to_string()),
        }
    }
}

/// The version of the portal's GlobalShortcuts interface, asked of the portal itself (at most
/// `within`: a portal started on demand may be slow, or hang).
pub async fn portal_version(
    bus: &zbus::Connection,
    within: Duration,
) -> Result<u32, ShortcutError> {
    use zbus::fdo::Error as Fdo;
    let asked = async {
        let properties = zbus::fdo::PropertiesProxy::builder(bus)
            .destination(PORTAL)?
            .path(PORTAL_PATH)?
            .build()
            .await?;
        let interface = zbus::names::InterfaceName::from_static_str_unchecked(INTERFACE);
        let version = properties.get(interface, "version").await?;
        u32::try_from(version).map_err(|e| Fdo::Failed(e.to_string()))
    };
    match tokio::time::timeout(within, asked).await {
        Err(_) => Err(ShortcutError::Portal(format!(
            "the desktop portal did not answer within {} s",
            within.as_secs()
        ))),
        Ok(Ok(version)) => Ok(version),
        Ok(Err(Fdo::ServiceUnknown(_) | Fdo::NameHasNoOwner(_))) => {
            Err(ShortcutError::NoDesktopPortal)
        }
        Ok(Err(
            Fdo::InvalidArgs(_)
            | Fdo::UnknownInterface(_)
            | Fdo::UnknownObject(_)
            | Fdo::UnknownProperty(_),
        )) => Err(ShortcutError::NoPortal),
        Ok(Err(other)) => Err(ShortcutError::Portal(other.to_string())),
    }
}

/// The session bus: `env`'s `DBUS_SESSION_BUS_ADDRESS` where set, else the usual one.
pub async fn session_bus(
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<zbus::Connection, ShortcutError> {
    let bus = match env("DBUS_SESSION_BUS_ADDRESS").filter(|a| !a.trim().is_empty()) {
        Some(address) => {
            let builder = zbus::connection::Builder::address(address.trim())
                .map_err(|e| ShortcutError::Bus(e.to_string()))?;
            builder.build().await
        }
        None => zbus::Connection::session().await,
    };
    bus.map_err(|e| ShortcutError::Bus(e.to_string()))
}

/// The push-to-talk shortcut bound through the portal: while it lives, each press and release
/// the desktop reports goes to `on_edge` (`true` pressed). Dropped, it stops listening; closed,
/// the desktop forgets the session too.
pub struct PortalShortcut {
    session: Session<GlobalShortcuts>,
    trigger: Option<String>,
    edges: JoinHandle<()>,
}

impl PortalShortcut {
    /// Binds `shortcut` (as Settings writes it, e.g. `Ctrl+Alt+Space`) as the preferred key.
    /// The desktop may ask the user first: this returns once it has answered.
    pub async fn bind(
        bus: zbus::Connection,
        shortcut: &str,
        on_edge: impl Fn(bool) + Send + Sync + 'static,
    ) -> Result<PortalShortcut, ShortcutError> {
        // (No app id is registered with the portal's registry: it takes only an id with a
        // desktop entry of that name, and the package's entry is named after the product. The
        // portal knows Jarvis as the desktop launched it.)
        // Asked first: ashpd takes a portal that does not say its version for version 1.
        portal_version(&bus, ASK_FOR).await?;
        let portal = GlobalShortcuts::with_connection(bus.clone()).await?;
        let session = portal
            .create_session(CreateSessionOptions::default())
            .await?;
        // Listening before binding: a press right after the answer is not missed. Presses and
        // releases on one stream, in the order sent: a quick tap read as two streams could come
        // out release first and leave the microphone open.
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .interface(INTERFACE)
            .and_then(|r| r.path(PORTAL_PATH))
            .map_err(|e| ShortcutError::Portal(e.to_string()))?
            .build();
        let mut signals = zbus::MessageStream::for_match_rule(rule, &bus, None)
            .await
            .map_err(|e| ShortcutError::Portal(e.to_string()))?;
        let trigger = portal_trigger(shortcut);
        let wanted = NewShortcut::new(SHORTCUT_ID, SHORTCUT_DESCRIPTION)
            .preferred_trigger(Some(trigger.as_str()));
        let bound = portal
            .bind_shortcuts(&session, &[wanted], None, BindShortcutsOptions::default())
            .await?
            .response()?;
        // A desktop that left the key unassigned (taken by something else, or unticked by the
        // user in its dialog) leaves the shortcut out or describes no key.
        let trigger = bound
            .shortcuts()
            .iter()
            .find(|s| s.id() == SHORTCUT_ID)
            .map(|s| s.trigger_description().trim().to_string())
            .filter(|t| !t.is_empty());
        let ours = session_path(&session)?;
        let edges = tokio::spawn(async move {
            while let Some(message) = signals.next().await {
                let Ok(message) = message else { continue };
                let down = match message.header().member().map(|m| m.as_str()) {
                    Some("Activated") => true,
                    Some("Deactivated") => false,
                    _ => continue,
                };
                type Edge<'a> = (
                    zbus::zvariant::ObjectPath<'a>,
                    &'a str,
                    u64,
                    HashMap<&'a str, zbus::zvariant::Value<'a>>,
                );
                let body = message.body();
                let Ok((session, id, _, _)) = body.deserialize::<Edge<'_>>() else {
                    continue;
                };
                if id == SHORTCUT_ID && session.as_str() == ours {
                    on_edge(down);
                }
            }
        });
        Ok(PortalShortcut {
            session,
            trigger,
            edges,
        })
    }

    /// The key as the desktop describes it, in its own words; none where it assigned none (the
    /// user then gives the shortcut a key in the desktop's settings).
    pub fn trigger(&self) -> Option<&str> {
        self.trigger.as_deref()
    }

    /// Stops listening and ends the portal session.
    pub async fn close(self) {
        self.edges.abort();
        if let Err(err) = self.session.close().await {
            tracing::debug!(%err, "closing the shortcut's portal session");
        }
    }
}

impl Drop for PortalShortcut {
    fn drop(&mut self) {
        self.edges.abort();
    }
}

/// The session's object path (its handle in the portal's signals): `Session` is sent as it.
fn session_path(session: &Session<GlobalShortcuts>) -> Result<String, ShortcutError> {
    use zbus::zvariant::{serialized::Context, to_bytes, OwnedObjectPath, LE};
    let bytes = to_bytes(Context::new_dbus(LE, 0), session)
        .map_err(|e| ShortcutError::Portal(e.to_string()))?;
    let (path, _): (OwnedObjectPath, _) = bytes
        .deserialize()
        .map_err(|e| ShortcutError::Portal(e.to_string()))?;
    Ok(path.as_str().to_string())
}

/// A shortcut as Settings writes it (`Ctrl+Alt+Space`, Tauri's accelerator form) in the form of
/// the XDG shortcuts specification that the portal takes (`CTRL+ALT+space`: modifiers in
/// capitals, the key by its XKB keysym name).
pub fn portal_trigger(shortcut: &str) -> String {
    let parts: Vec<&str> = shortcut
        .split('+')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    let Some((key, modifiers)) = parts.split_last() else {
        return String::new();
    };
    let mut out: Vec<String> = modifiers
        .iter()
        .map(|m| match m.to_ascii_lowercase().as_str() {
            "ctrl" | "control" | "cmdorctrl" | "commandorcontrol" | "cmdorcontrol" => "CTRL".into(),
            "alt" | "option" => "ALT".into(),
            "shift" => "SHIFT".into(),
            "super" | "meta" | "cmd" | "command" | "logo" | "win" => "LOGO".into(),
            other => other.to_ascii_uppercase(),
        })
        .collect();
    out.push(keysym(key));
    out.join("+")
}

/// A key's name as Tauri writes it, as its XKB keysym name.
fn keysym(key: &str) -> String {
    let lower = key.to_ascii_lowercase();
    let named = HashMap::from([
        ("space", "space"),
        ("enter", "Return"),
        ("return", "Return"),
        ("tab", "Tab"),
        ("escape", "Escape"),
        ("esc", "Escape"),
        ("backspace", "BackSpace"),
        ("delete", "Delete"),
        ("insert", "Insert"),
        ("home", "Home"),
        ("end", "End"),
        ("pageup", "Page_Up"),
        ("pagedown", "Page_Down"),
        ("up", "Up"),
        ("down", "Down"),
        ("left", "Left"),
        ("right", "Right"),
        ("arrowup", "Up"),
        ("arrowdown", "Down"),
        ("arrowleft", "Left"),
        ("arrowright", "Right"),
        ("comma", "comma"),
        ("period", "period"),
        ("slash", "slash"),
        ("backslash", "backslash"),
        ("semicolon", "semicolon"),
        ("quote", "apostrophe"),
        ("backquote", "grave"),
        ("minus", "minus"),
        ("equal", "equal"),
        ("bracketleft", "bracketleft"),
        ("bracketright", "bracketright"),
        ("printscreen", "Print"),
        ("scrolllock", "Scroll_Lock"),
        ("capslock", "Caps_Lock"),
        ("numlock", "Num_Lock"),
        ("pause", "Pause"),
        ("audiovolumeup", "XF86AudioRaiseVolume"),
        ("audiovolumedown", "XF86AudioLowerVolume"),
        ("audiovolumemute", "XF86AudioMute"),
        ("mediaplaypause", "XF86AudioPlay"),
        ("mediaplay", "XF86AudioPlay"),
        ("mediapause", "XF86AudioPause"),
        ("mediastop", "XF86AudioStop"),
        ("mediatracknext", "XF86AudioNext"),
        ("mediatrackprevious", "XF86AudioPrev"),
        ("numpadadd", "KP_Add"),
        ("numpadsubtract", "KP_Subtract"),
        ("numpadmultiply", "KP_Multiply"),
        ("numpaddivide", "KP_Divide"),
        ("numpaddecimal", "KP_Decimal"),
        ("numpadenter", "KP_Enter"),
    ]);
    if let Some(name) = named.get(lower.as_str()) {
        return (*name).to_string();
    }
    // `Numpad4`: the keypad's.
    if let Some(n) = lower.strip_prefix("numpad").filter(|n| n.len() == 1) {
        return format!("KP_{n}");
    }
    // `KeyJ`, `Digit4`: the letter or digit itself.
    let bare = lower
        .strip_prefix("key")
        .filter(|r| r.len() == 1)
        .or_else(|| lower.strip_prefix("digit").filter(|r| r.len() == 1))
        .unwrap_or(&lower);
    if bare.len() == 1 {
        return bare.to_string();
    }
    // F1…F24 keep their capital.
    if let Some(n) = lower.strip_prefix('f').filter(|n| n.parse::<u8>().is_ok()) {
        return format!("F{n}");
    }
    key.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn wayland_is_told_by_its_display_or_the_session_type_even_beside_xwayland() {
        assert_eq!(
            Display::of(&env(&[("WAYLAND_DISPLAY", "wayland-0"), ("DISPLAY", ":0")])),
            Display::Wayland
        );
        assert_eq!(
            Display::of(&env(&[("XDG_SESSION_TYPE", "wayland"), ("DISPLAY", ":1")])),
            Display::Wayland
        );
        assert_eq!(
            Display::of(&env(&[("XDG_SESSION_TYPE", "x11"), ("DISPLAY", ":0")])),
            Display::X11
        );
        assert_eq!(
            Display::of(&env(&[("WAYLAND_DISPLAY", ""), ("DISPLAY", ":0")])),
            Display::X11
        );
        assert_eq!(Display::of(&env(&[])), Display::None);
    }

    #[test]
    fn shortcuts_are_written_for_the_portal_as_the_xdg_specification_says() {
        assert_eq!(portal_trigger("Ctrl+Alt+Space"), "CTRL+ALT+space");
        assert_eq!(portal_trigger(" ctrl + shift + J "), "CTRL+SHIFT+j");
        assert_eq!(portal_trigger("Super+KeyK"), "LOGO+k");
        assert_eq!(portal_trigger("CmdOrCtrl+Digit4"), "CTRL+4");
        assert_eq!(portal_trigger("Alt+F12"), "ALT+F12");
        assert_eq!(
            portal_trigger("Ctrl+Shift+PageDown"),
            "CTRL+SHIFT+Page_Down"
        );
        assert_eq!(portal_trigger("Ctrl+Enter"), "CTRL+Return");
        assert_eq!(portal_trigger("Shift+PrintScreen"), "SHIFT+Print");
        assert_eq!(portal_trigger("Ctrl+Numpad0"), "CTRL+KP_0");
        assert_eq!(portal_trigger("AudioVolumeMute"), "XF86AudioMute");
    }
}
