//! `cargo run --release -p xtask -- package [--debug]`: the `.deb` and `.rpm` of the release
//! build (or of the debug build the tests ran, as CI checks the package), made by Tauri's
//! bundler (the library `cargo tauri bundle` drives), holding `jarvis-desktop`, `jarvis` and
//! `jarvis-llm` in `/usr/bin`, the icons, the desktop entry and the AppStream metainfo, with the
//! system libraries they load declared. The models are not in the package: the app offers them
//! at first run (`jarvis models`, `scripts/models`). No AppImage: its bundler downloads its tools
//! at build time, which an offline build cannot do.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use tauri_bundler::bundle::{
    BundleBinary, BundleSettings, DebianSettings, PackageSettings, PackageType, RpmSettings,
    SettingsBuilder,
};

/// The binaries the package holds; the first is the app.
const BINARIES: [&str; 3] = ["jarvis-desktop", "jarvis", "jarvis-llm"];

/// Where the AppStream metainfo goes, and where it comes from.
const METAINFO: (&str, &str) = (
    "/usr/share/metainfo/app.jarvis.desktop.metainfo.xml",
    "assets/linux/app.jarvis.desktop.metainfo.xml",
);

/// The libraries the app loads, by the packages that hold them (Debian's names): WebKitGTK and
/// GTK for the windows, libsoup for WebKit, ALSA for the audio devices, Ayatana's app indicator
/// for the tray icon (loaded at run time, so no linker lists it), OpenMP for llama.cpp in
/// `jarvis-llm`, and the C++ runtime (whisper.cpp, llama.cpp): what `objdump -p` names for the
/// three binaries, by the package each comes with (GTK's own libraries come with GTK).
const DEB_DEPENDS: &[&str] = &[
    "libwebkit2gtk-4.1-0",
    "libgtk-3-0",
    "libsoup-3.0-0",
    "libasound2",
    "libayatana-appindicator3-1",
    "libgomp1",
    "libstdc++6",
];
/// The same by Fedora's names.
const RPM_DEPENDS: &[&str] = &[
    "webkit2gtk4.1",
    "gtk3",
    "libsoup3",
    "alsa-lib",
    "libayatana-appindicator-gtk3",
    "libgomp",
    "libstdc++",
];
/// Not needed to start: espeak-ng speaks where Piper's voice is not installed.
const RECOMMENDS: &[&str] = &["espeak-ng"];

/// Builds the packages from the binaries in `built` (the release build, or the debug one; the
/// workspace at `root`); returns their paths.
pub fn run(root: &Path, built: &Path) -> Result<Vec<PathBuf>> {
    for binary in BINARIES {
        let path = built.join(binary);
        if !path.is_file() {
            let how = if built.ends_with("debug") {
                "cargo build --workspace --bins --tests (scripts/package --debug does)"
            } else {
                "cargo build --release -p jarvis-desktop -p jarvis -p jarvis-llm (scripts/package does)"
            };
            bail!("{} is not built: {how}", path.display());
        }
    }
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("tauri.conf.json")).context("tauri.conf.json")?,
    )
    .context("tauri.conf.json is not JSON")?;
    let text = |pointer: &str| {
        config
            .pointer(pointer)
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .with_context(|| format!("tauri.conf.json has no {pointer}"))
    };
    let icons: Vec<String> = config
        .pointer("/bundle/icon")
        .and_then(|v| v.as_array())
        .context("tauri.conf.json has no bundle.icon")?
        .iter()
        .filter_map(|v| v.as_str())
        .map(|p| root.join(p).display().to_string())
        .collect();
    // The files map is read relative to the working directory.
    std::env::set_current_dir(root)?;
    let files = HashMap::from([(PathBuf::from(METAINFO.0), PathBuf::from(METAINFO.1))]);
    let list = |names: &[&str]| Some(names.iter().map(|n| n.to_string()).collect());
    let summary = "A desktop AI assistant you can talk to, offline by default".to_string();
    let settings = SettingsBuilder::new()
        .project_out_directory(built)
        .package_settings(PackageSettings {
            product_name: text("/productName")?,
            version: text("/version")?,
            description: summary.clone(),
            homepage: None,
            authors: Some(vec!["The Jarvis developers".into()]),
            default_run: None,
        })
        .bundle_settings(BundleSettings {
            identifier: Some(text("/identifier")?),
            publisher: Some("The Jarvis developers".into()),
            icon: Some(icons),
            category: Some(tauri_bundler::AppCategory::Utility),
            short_description: Some(summary),
            long_description: Some(
                "Jarvis answers in a chat window and in a floating orb you can speak to, with a \
                 local model, local speech recognition and a local voice by default."
                    .into(),
            ),
            license: Some("MIT".into()),
            deb: DebianSettings {
                depends: list(DEB_DEPENDS),
                recommends: list(RECOMMENDS),
                files: files.clone(),
                section: Some("utils".into()),
                ..DebianSettings::default()
            },
            rpm: RpmSettings {
                depends: list(RPM_DEPENDS),
                recommends: list(RECOMMENDS),
                release: "1".into(),
                files,
                ..RpmSettings::default()
            },
            ..BundleSettings::default()
        })
        .binaries(
            BINARIES
                .iter()
                .enumerate()
                .map(|(i, name)| BundleBinary::new(name.to_string(), i == 0))
                .collect(),
        )
        .package_types(vec![PackageType::Deb, PackageType::Rpm])
        .build()
        .context("the bundler's settings")?;
    let bundles = tauri_bundler::bundle_project(&settings).context("bundling")?;
    Ok(bundles.into_iter().flat_map(|b| b.bundle_paths).collect())
}
