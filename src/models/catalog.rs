//! The catalog: the models `jarvis models` offers, from the app's assets (`assets/models.toml`).

use serde::Deserialize;

use super::ModelsError;

/// The variable naming a catalog file to use instead of the app's own.
pub const CATALOG_VAR: &str = "JARVIS_MODEL_CATALOG";

/// One model of the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogModel {
    /// What the user types: `jarvis models pull qwen2.5-1.5b`.
    pub name: String,
    /// What the user reads.
    pub title: String,
    /// The file's name in the model folder (as upstream names it).
    pub file: String,
    /// Where it is downloaded from.
    pub url: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its sha256, as the hub publishes it (lowercase hex).
    pub sha256: Option<String>,
    /// Its licence, in a few words.
    pub licence: String,
    /// The memory it wants to run well beside the app, in GiB.
    pub memory_gb: u32,
    /// Whether its chat template offers Jarvis's tools (remember, forget).
    pub tools: bool,
    /// One sentence on what it is good for.
    pub about: String,
}

/// The catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    models: Vec<CatalogModel>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    model: Vec<CatalogModel>,
}

impl Catalog {
    /// The catalog the app ships.
    pub fn builtin() -> Catalog {
        Catalog::parse(include_str!("../../assets/models.toml"))
            .expect("assets/models.toml is checked by a test")
    }

    /// The catalog in force: the file `JARVIS_MODEL_CATALOG` names (a mirror's, or a test's own
    /// loopback server's), else the one the app ships.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Catalog, ModelsError> {
        match env(CATALOG_VAR).filter(|p| !p.is_empty()) {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|source| ModelsError::Io {
                    path: path.clone().into(),
                    source,
                })?;
                Catalog::parse(&text)
                    .map_err(|e| ModelsError::Catalog(format!("{path} ({CATALOG_VAR}): {e}")))
            }
            None => Ok(Catalog::builtin()),
        }
    }

    /// A catalog from its TOML text: each model named once, a file name and not a path, a sha256
    /// of 64 hex digits where one is given.
    pub fn parse(text: &str) -> Result<Catalog, ModelsError> {
        let file: CatalogFile =
            toml::from_str(text).map_err(|e| ModelsError::Catalog(e.to_string()))?;
        for (i, model) in file.model.iter().enumerate() {
            if file.model[..i].iter().any(|m| m.name == model.name) {
                return Err(ModelsError::Catalog(format!(
                    "`{}` is named twice",
                    model.name
                )));
            }
            super::check_file_name(&model.file)?;
            if let Some(sha) = &model.sha256 {
                super::check_sha256(sha)
                    .map_err(|e| ModelsError::Catalog(format!("`{}`: {e}", model.name)))?;
            }
        }
        Ok(Catalog { models: file.model })
    }

    /// Every model, smallest first as the file lists them.
    pub fn models(&self) -> &[CatalogModel] {
        &self.models
    }

    /// The model called `name` (or whose file is `name`).
    pub fn find(&self, name: &str) -> Option<&CatalogModel> {
        self.models
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(name) || m.file == name)
    }

    /// The model to offer a machine with `memory_gb` GiB: the largest that offers the tools and
    /// fits in it (none where none fits; the memory unknown: the smallest that offers the tools).
    pub fn recommended(&self, memory_gb: Option<u64>) -> Option<&CatalogModel> {
        let with_tools = || self.models.iter().filter(|m| m.tools);
        match memory_gb {
            Some(gb) => with_tools()
                .filter(|m| u64::from(m.memory_gb) <= gb)
                .max_by_key(|m| (m.memory_gb, m.size)),
            None => with_tools().min_by_key(|m| (m.memory_gb, m.size)),
        }
    }
}

/// A catalog file's text with one model, `body` served at `url`, as a test writes one for its
/// own loopback server (memory 1 GiB: every machine's pick; it offers the tools).
#[cfg(feature = "test-support")]
pub fn test_catalog(name: &str, title: &str, file: &str, url: &str, body: &[u8]) -> String {
    use sha2::Digest;
    let sha256 = super::hex_digest(sha2::Sha256::new_with_prefix(body));
    format!(
        "[[model]]\nname = \"{name}\"\ntitle = \"{title}\"\nfile = \"{file}\"\nurl = \"{url}\"\n\
         size = {}\nsha256 = \"{sha256}\"\nlicence = \"MIT\"\nmemory_gb = 1\ntools = true\n\
         about = \"A model a test serves.\"\n",
        body.len()
    )
}

/// This machine's memory in GiB (rounded), where the system says.
pub fn machine_memory_gb() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((kib + 512 * 1024) / (1024 * 1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_catalog_parses_and_names_each_model_once() {
        let catalog = Catalog::builtin();
        assert!(catalog.models().len() >= 4);
        for model in catalog.models() {
            assert!(model.url.starts_with("https://"), "{}", model.name);
            assert!(model.file.ends_with(".gguf"), "{}", model.name);
            assert!(model.sha256.is_some(), "{}", model.name);
        }
    }

    #[test]
    fn the_recommended_model_is_the_largest_with_tools_that_fits_the_memory() {
        let catalog = Catalog::builtin();
        let name = |gb| catalog.recommended(gb).map(|m| m.name.as_str());
        assert_eq!(name(Some(2)), None);
        assert_eq!(name(Some(4)), Some("qwen2.5-1.5b"));
        assert_eq!(name(Some(6)), Some("qwen2.5-1.5b"));
        assert_eq!(name(Some(16)), Some("qwen2.5-3b"));
        assert_eq!(name(None), Some("qwen2.5-1.5b"));
    }

    #[test]
    fn a_catalog_with_a_path_for_a_file_or_a_bad_sha256_is_refused() {
        let entry = |file: &str, sha: &str| {
            format!(
                "[[model]]\nname = \"x\"\ntitle = \"X\"\nfile = \"{file}\"\nurl = \"https://h/x\"\n\
                 size = 1\nsha256 = \"{sha}\"\nlicence = \"MIT\"\nmemory_gb = 1\ntools = false\n\
                 about = \"x\"\n"
            )
        };
        let good = "ab".repeat(32);
        assert!(Catalog::parse(&entry("x.gguf", &good)).is_ok());
        assert!(Catalog::parse(&entry("../x.gguf", &good)).is_err());
        assert!(Catalog::parse(&entry("x.gguf", "abc")).is_err());
        let twice = format!("{}{}", entry("x.gguf", &good), entry("y.gguf", &good));
        assert!(Catalog::parse(&twice).is_err());
    }
}
