//! The downloader: one model file over HTTP into the model folder — resumed where an earlier pull
//! stopped (HTTP Range), its progress reported as it comes, cancellable, checked (free space
//! first; then size, GGUF header and sha256) and only then renamed into place.

use std::io::{Read, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::Digest;
use tokio_util::sync::CancellationToken;

use super::ModelsError;

/// What to download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Where from.
    pub url: String,
    /// The file's name in the model folder.
    pub file: String,
    /// Its size, where known beforehand (the catalog's); else the server's word is taken.
    pub size: Option<u64>,
    /// Its sha256 (hex), where known.
    pub sha256: Option<String>,
}

impl Source {
    /// A file named by its URL alone (`jarvis models pull URL`): the last part of its path.
    pub fn from_url(url: &str, sha256: Option<String>) -> Result<Source, ModelsError> {
        let parsed = reqwest::Url::parse(url).map_err(|e| ModelsError::Http {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ModelsError::Http {
                url: url.to_string(),
                reason: "only http and https addresses are downloaded".into(),
            });
        }
        let file = parsed
            .path_segments()
            .and_then(|mut s| s.next_back())
            .unwrap_or_default()
            .to_string();
        super::check_file_name(&file)?;
        if let Some(sha) = &sha256 {
            super::check_sha256(sha)?;
        }
        Ok(Source {
            url: url.to_string(),
            file,
            size: None,
            sha256: sha256.map(|s| s.to_ascii_lowercase()),
        })
    }
}

/// How far a pull has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Bytes on disk so far (`resumed` of them from an earlier pull), of `total` where known.
    Downloading {
        /// Bytes on disk.
        done: u64,
        /// The whole file's size, where known.
        total: Option<u64>,
        /// What an earlier pull had already brought.
        resumed: u64,
    },
    /// All bytes are here; the size, header and sha256 are being checked.
    Checking,
}

/// How a pull behaves.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// A connection that sends nothing for this long is given up (the part kept).
    pub stall: Duration,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            stall: Duration::from_secs(60),
        }
    }
}

/// Where an unfinished download of `file` waits in `dir` for the next pull.
pub fn part_path(dir: &Path, file: &str) -> PathBuf {
    dir.join(format!("{file}.part"))
}

/// Downloads `source` into `dir`: resumed from its `.part` file where one is there, `progress`
/// told as bytes arrive, stopped (the part kept) when `cancel` fires. The file appears under
/// its name only whole and checked; a check that fails removes the part (it cannot be resumed
/// into a good file) and says what was wrong.
pub async fn pull(
    source: &Source,
    dir: &Path,
    options: &PullOptions,
    progress: &mut (dyn FnMut(Progress) + Send),
    cancel: &CancellationToken,
) -> Result<PathBuf, ModelsError> {
    super::check_file_name(&source.file)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source: std::io::Error| ModelsError::Io { path, source }
    };
    tokio::fs::create_dir_all(dir).await.map_err(io(dir))?;
    let part = part_path(dir, &source.file);
    let client = reqwest::Client::builder()
        .user_agent(concat!("jarvis/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(20))
        .read_timeout(options.stall)
        .build()
        .map_err(|e| http(&source.url, &e))?;
    let mut have = match tokio::fs::metadata(&part).await {
        Ok(meta) => meta.len(),
        Err(_) => 0,
    };
    if source.size.is_some_and(|size| have > size) {
        have = 0;
    }
    // The sha256 of the part, made as its bytes are written (where they are).
    let (total, hashed) = match source.size {
        // An earlier pull brought every byte and stopped before the checks.
        Some(size) if have == size => (size, None),
        _ => {
            // What an earlier pull brought is hashed before the server is asked (the file is
            // read once; a server may drop a connection left unread while gigabytes are hashed).
            let prefix = if have > 0 {
                let earlier = part.clone();
                let stop = cancel.clone();
                let hashed =
                    tokio::task::spawn_blocking(move || hash_file(&earlier, have, Some(&stop)))
                        .await
                        .map_err(|e| io(&part)(std::io::Error::other(e)))?
                        .map_err(io(&part))?;
                Some(hashed.ok_or(ModelsError::Cancelled { kept: have })?)
            } else {
                None
            };
            let answer = tokio::select! {
                answer = request(&client, source, have) => answer?,
                () = cancel.cancelled() => return Err(ModelsError::Cancelled { kept: have }),
            };
            let (response, told) = match answer {
                Answer::Whole(len) => (None, Some(len)),
                Answer::Body(response, told) => (Some(response), told),
            };
            if response
                .as_ref()
                .is_some_and(|r| r.status() != reqwest::StatusCode::PARTIAL_CONTENT)
            {
                have = 0;
            }
            // A model is gigabytes: a download with no end in sight is not begun.
            let total = told.or(source.size).ok_or_else(|| ModelsError::Http {
                url: source.url.clone(),
                reason: "the server does not say how large the file is".into(),
            })?;
            if source.size.is_some_and(|size| size != total) {
                return Err(ModelsError::Refused(format!(
                    "the server offers {total} bytes, the catalog says {}",
                    source.size.unwrap_or_default()
                )));
            }
            match response {
                // The part is the whole file: its hash was made before the server was asked.
                None => (total, prefix.map(super::hex_digest)),
                Some(response) => {
                    ensure_space(dir, total.saturating_sub(have))?;
                    let hasher = match prefix {
                        Some(prefix) if have > 0 => prefix,
                        _ => sha2::Sha256::new(),
                    };
                    let hashed = receive(
                        response,
                        &part,
                        (have, hasher),
                        total,
                        progress,
                        cancel,
                        &source.url,
                    )
                    .await?;
                    (total, Some(super::hex_digest(hashed)))
                }
            }
        }
    };
    progress(Progress::Checking);
    let expected = Expected {
        size: total,
        sha256: source.sha256.clone(),
        hashed,
        name: dir.join(&source.file),
        cancel: cancel.clone(),
    };
    let checked = {
        let checked_part = part.clone();
        tokio::task::spawn_blocking(move || expected.check(&checked_part))
            .await
            .map_err(|e| io(&part)(std::io::Error::other(e)))?
    };
    match checked {
        // What came is not the file: it cannot be resumed into it either.
        Err(err @ (ModelsError::Mismatch(_) | ModelsError::NotGguf { .. })) => {
            let _ = tokio::fs::remove_file(&part).await;
            return Err(err);
        }
        Err(err) => return Err(err),
        Ok(()) => {}
    }
    let dest = dir.join(&source.file);
    tokio::fs::rename(&part, &dest).await.map_err(io(&dest))?;
    if let Ok(folder) = tokio::fs::File::open(dir).await {
        let _ = folder.sync_all().await;
    }
    Ok(dest)
}

/// Writes `response` after the `have` bytes already in `part`, up to `total`: what came is on
/// disk when this returns, whatever ended it (the end, a cut connection, a stall, `cancel`), so
/// the next pull goes on from there — except bytes past `total`, which spoil the part.
async fn receive(
    mut response: reqwest::Response,
    part: &Path,
    (have, mut hasher): (u64, sha2::Sha256),
    total: u64,
    progress: &mut (dyn FnMut(Progress) + Send),
    cancel: &CancellationToken,
    url: &str,
) -> Result<sha2::Sha256, ModelsError> {
    let io = |source: std::io::Error| ModelsError::Io {
        path: part.to_path_buf(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(have == 0)
        .open(part)
        .map_err(io)?;
    file.set_len(have).map_err(io)?;
    std::io::Seek::seek(&mut file, SeekFrom::End(0)).map_err(io)?;
    // The bytes are written and hashed on a thread of their own while the next ones arrive.
    let (chunks, mut to_write) = tokio::sync::mpsc::channel::<bytes::Bytes>(64);
    let writer = tokio::task::spawn_blocking(move || -> std::io::Result<sha2::Sha256> {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        while let Some(chunk) = to_write.blocking_recv() {
            out.write_all(&chunk)?;
            hasher.update(&chunk);
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        Ok(hasher)
    });
    let mut done = have;
    let mut tell = |done| {
        progress(Progress::Downloading {
            done,
            total: Some(total),
            resumed: have,
        })
    };
    tell(done);
    let received: Result<(), ModelsError> = async {
        loop {
            let chunk = tokio::select! {
                chunk = response.chunk() => chunk.map_err(|e| http(url, &e))?,
                () = cancel.cancelled() => return Err(ModelsError::Cancelled { kept: done }),
            };
            let Some(chunk) = chunk else {
                return Ok(());
            };
            if done + chunk.len() as u64 > total {
                return Err(ModelsError::Http {
                    url: url.to_string(),
                    reason: format!(
                        "the server sent more than the {total} bytes it announced; the {done} before are kept"
                    ),
                });
            }
            let len = chunk.len() as u64;
            if chunks.send(chunk).await.is_err() {
                // The writer stopped: its error is the one to tell.
                return Ok(());
            }
            done += len;
            tell(done);
        }
    }
    .await;
    // Whatever ended the download, what came is on disk before this returns.
    drop(chunks);
    let hasher = writer
        .await
        .map_err(|e| io(std::io::Error::other(e)))?
        .map_err(io)?;
    match received {
        Err(err) => Err(err),
        Ok(()) if done < total => Err(ModelsError::Http {
            url: url.to_string(),
            reason: format!(
                "the connection closed after {done} of {total} bytes; pulling again goes on from there"
            ),
        }),
        Ok(()) => Ok(hasher),
    }
}

/// The sha256 of the first `len` bytes of `path` (none where `cancel` fired first).
fn hash_file(
    path: &Path,
    len: u64,
    cancel: Option<&CancellationToken>,
) -> std::io::Result<Option<sha2::Sha256>> {
    let mut hasher = sha2::Sha256::new();
    let mut file = std::fs::File::open(path)?.take(len);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        if cancel.is_some_and(CancellationToken::is_cancelled) {
            return Ok(None);
        }
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(Some(hasher));
        }
        hasher.update(&buf[..n]);
    }
}

fn http(url: &str, err: &reqwest::Error) -> ModelsError {
    let mut reason = err.to_string();
    let mut cause = std::error::Error::source(err);
    while let Some(inner) = cause {
        reason = format!("{reason}: {inner}");
        cause = inner.source();
    }
    ModelsError::Http {
        url: url.to_string(),
        reason,
    }
}

/// Asks for the file from byte `have` on. A server that ignores the range answers 200 with the
/// whole file (the caller starts over); one that finds the range past the end (416) either says
/// the part is the whole file or is asked again for all of it.
async fn request(
    client: &reqwest::Client,
    source: &Source,
    have: u64,
) -> Result<Answer, ModelsError> {
    let mut from = have;
    loop {
        let mut req = client.get(&source.url);
        if from > 0 {
            req = req.header(reqwest::header::RANGE, format!("bytes={from}-"));
        }
        let response = req.send().await.map_err(|e| http(&source.url, &e))?;
        let status = response.status();
        if status == reqwest::StatusCode::RANGE_NOT_SATISFIABLE && from > 0 {
            // Past the end: the part is whole where the file is exactly that long (an earlier
            // pull stopped during the checks); else it is asked for again from the start.
            let whole = response
                .headers()
                .get(reqwest::header::CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().strip_prefix("bytes */"))
                .and_then(|len| len.trim().parse::<u64>().ok());
            if whole == Some(from) {
                return Ok(Answer::Whole(from));
            }
            from = 0;
            continue;
        }
        if status == reqwest::StatusCode::PARTIAL_CONTENT {
            let range = response
                .headers()
                .get(reqwest::header::CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_content_range);
            return match range {
                Some((start, total)) if start == from => Ok(Answer::Body(response, total)),
                _ => Err(ModelsError::Http {
                    url: source.url.clone(),
                    reason: format!("asked for bytes from {from}, the server sent another range"),
                }),
            };
        }
        if !status.is_success() {
            return Err(ModelsError::Status {
                url: source.url.clone(),
                status: status.as_u16(),
            });
        }
        let total = response.content_length();
        return Ok(Answer::Body(response, total));
    }
}

/// What a request brought.
enum Answer {
    /// The file from the byte asked for (200: from the start), and its whole size where said.
    Body(reqwest::Response, Option<u64>),
    /// The part on disk is the whole file, this long.
    Whole(u64),
}

/// `bytes START-END/TOTAL` → (START, TOTAL where not `*`).
fn parse_content_range(value: &str) -> Option<(u64, Option<u64>)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let start = range.split_once('-')?.0.trim().parse().ok()?;
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    Some((start, total))
}

/// Refuses a download the disk has no room for (`needed` more bytes).
fn ensure_space(dir: &Path, needed: u64) -> Result<(), ModelsError> {
    match free_space(dir) {
        Some(free) => enough_space(dir, needed, free),
        None => Ok(()),
    }
}

/// Whether `needed` bytes fit in `free`, keeping 64 MiB for everything else.
pub(crate) fn enough_space(dir: &Path, needed: u64, free: u64) -> Result<(), ModelsError> {
    const KEEP: u64 = 64 << 20;
    if needed.saturating_add(KEEP) > free {
        return Err(ModelsError::NoSpace {
            dir: dir.to_path_buf(),
            needed,
            free,
        });
    }
    Ok(())
}

/// Bytes free for this user on the file system holding `dir`.
fn free_space(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `stat` a statvfs the call fills in.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    // The fields' types differ between platforms (u64 on Linux x86-64).
    #[allow(clippy::useless_conversion)]
    Some(u64::from(stat.f_bavail) * u64::from(stat.f_frsize))
}

/// What a whole download must be.
struct Expected {
    size: u64,
    sha256: Option<String>,
    /// The file's sha256 as it was written, where it was.
    hashed: Option<String>,
    /// The file's name in the model folder, for messages.
    name: PathBuf,
    /// Stops a sha256 read from the disk between blocks.
    cancel: CancellationToken,
}

impl Expected {
    fn check(&self, path: &Path) -> Result<(), ModelsError> {
        let io = |source| ModelsError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len != self.size {
            return Err(ModelsError::Mismatch(format!(
                "{len} bytes came, {} were expected",
                self.size
            )));
        }
        super::check_gguf_header(&mut file, &self.name)?;
        if let Some(expected) = &self.sha256 {
            let got = match &self.hashed {
                Some(hashed) => hashed.clone(),
                None => match hash_file(path, len, Some(&self.cancel)).map_err(io)? {
                    Some(hasher) => super::hex_digest(hasher),
                    None => return Err(ModelsError::Cancelled { kept: len }),
                },
            };
            if !got.eq_ignore_ascii_case(expected) {
                return Err(ModelsError::Mismatch(format!(
                    "its sha256 is {got}, {expected} was expected"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_range_gives_its_start_and_the_whole_size() {
        assert_eq!(
            parse_content_range("bytes 100-199/1000"),
            Some((100, Some(1000)))
        );
        assert_eq!(parse_content_range("bytes 5-9/*"), Some((5, None)));
        assert_eq!(parse_content_range("bytes */1000"), None);
        assert_eq!(parse_content_range("items 1-2/3"), None);
    }

    #[test]
    fn a_download_the_disk_has_no_room_for_is_refused_before_it_starts() {
        let dir = Path::new("/models");
        assert!(enough_space(dir, 1 << 30, 2 << 30).is_ok());
        let err = enough_space(dir, 2 << 30, 2 << 30).unwrap_err().to_string();
        assert!(err.contains("not enough free space"), "{err}");
    }

    #[test]
    fn a_url_names_the_file_after_its_last_part() {
        let source = Source::from_url("https://h.example/a/b/model-Q4.gguf?download=1", None);
        assert_eq!(source.unwrap().file, "model-Q4.gguf");
        assert!(Source::from_url("https://h.example/", None).is_err());
        assert!(Source::from_url("ftp://h.example/m.gguf", None).is_err());
        assert!(Source::from_url("https://h.example/m.bin", None).is_err());
    }
}
