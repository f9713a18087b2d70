//! Start at login: the XDG autostart entry (`$XDG_CONFIG_HOME/autostart/jarvis.desktop`, by the
//! freedesktop.org Desktop Application Autostart Specification) that starts the desktop app
//! hidden in the tray, written while `[desktop] start_at_login` is on and removed when it is off.

use std::path::{Path, PathBuf};

/// The entry's file name.
pub const ENTRY: &str = "jarvis.desktop";

/// The argument that starts the desktop app hidden: the chat window unshown, the orb as it was
/// when Jarvis last quit.
pub const START_HIDDEN: &str = "--start-hidden";

/// Where the entry goes: `$XDG_CONFIG_HOME/autostart`, else `$HOME/.config/autostart` (`None`
/// without a home).
pub fn entry_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let config = env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            env("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| Path::new(&h).join(".config"))
        })?;
    Some(config.join("autostart").join(ENTRY))
}

/// A path as the Exec key takes it: quoted, with `"`, `` ` ``, `$` and `\` escaped, and `%`
/// doubled (field codes).
fn exec_arg(path: &Path) -> String {
    let mut quoted = String::from("\"");
    for c in path.to_string_lossy().chars() {
        match c {
            // The spec escapes inside quotes with a backslash, and the file's string escaping
            // then doubles every backslash: `\` within quotes is `\\\\` in the file.
            '\\' => quoted.push_str("\\\\\\\\"),
            '"' | '`' | '$' => {
                quoted.push_str("\\\\");
                quoted.push(c);
            }
            '%' => quoted.push_str("%%"),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// The entry that starts `exe` hidden.
pub fn entry_text(exe: &Path) -> String {
    format!(
        "[Desktop Entry]\n\
         Type=Application\n\
         Name=Jarvis\n\
         Comment=Desktop AI assistant, started hidden in the tray\n\
         Exec={} {START_HIDDEN}\n\
         Icon=jarvis-desktop\n\
         Terminal=false\n\
         Categories=Utility;\n\
         X-GNOME-Autostart-enabled=true\n",
        exec_arg(exe)
    )
}

/// Writes the entry starting `exe` (`on`), or removes it; does nothing where it is already as
/// asked. Returns the entry's path.
pub fn set(env: &dyn Fn(&str) -> Option<String>, on: bool, exe: &Path) -> std::io::Result<PathBuf> {
    let path = entry_path(env).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no home folder to keep the autostart entry in",
        )
    })?;
    if on {
        let text = entry_text(exe);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
            return Ok(path);
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // Whole or not at all: a session starting meanwhile never reads half an entry.
        let part = path.with_extension("desktop.part");
        std::fs::write(&part, text)?;
        std::fs::rename(&part, &path)?;
    } else {
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_goes_to_the_xdg_config_folder_else_home() {
        let xdg = |name: &str| match name {
            "XDG_CONFIG_HOME" => Some("/x/config".into()),
            "HOME" => Some("/home/ada".into()),
            _ => None,
        };
        assert_eq!(
            entry_path(&xdg),
            Some(PathBuf::from("/x/config/autostart/jarvis.desktop"))
        );
        let home = |name: &str| (name == "HOME").then(|| "/home/ada".to_string());
        assert_eq!(
            entry_path(&home),
            Some(PathBuf::from("/home/ada/.config/autostart/jarvis.desktop"))
        );
        // A relative XDG_CONFIG_HOME is invalid by the spec: ignored.
        let relative = |name: &str| match name {
            "XDG_CONFIG_HOME" => Some("config".into()),
            "HOME" => Some("/home/ada".into()),
            _ => None,
        };
        assert_eq!(entry_path(&relative), entry_path(&home));
        assert_eq!(entry_path(&|_| None), None);
    }

    #[test]
    fn a_path_with_spaces_quotes_backslashes_and_percents_is_one_quoted_argument() {
        let text = entry_text(Path::new("/opt/My Apps/jar$vis\"%d\\x"));
        let exec = text.lines().find(|l| l.starts_with("Exec=")).unwrap();
        assert_eq!(
            exec,
            r#"Exec="/opt/My Apps/jar\\$vis\\"%%d\\\\x" --start-hidden"#
        );
    }
}
