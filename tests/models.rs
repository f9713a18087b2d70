//! The model manager: the downloader against a loopback HTTP server of the test's own serving a
//! GGUF-headed file — resumed after a cut connection, started over where the server ignores the
//! range, stopped and resumed, given up on a stall, refused when it is not the model expected —
//! and `jarvis models` over it.

mod support;

use std::time::Duration;

use jarvis::models::{self, ModelsError, Progress, PullOptions, Source};
use jarvis::session::{ModelState, PullStatus};
use jarvis_stub::files::{FileServer, Mode};
use sha2::Digest;
use support::*;
use tokio_util::sync::CancellationToken;

/// What a test asks of the file server beyond serving.
trait Served {
    fn sha256(&self) -> String;
    fn source(&self, file: &str) -> Source;
}

impl Served for FileServer {
    fn sha256(&self) -> String {
        models::hex_digest(sha2::Sha256::new_with_prefix(self.body()))
    }

    fn source(&self, file: &str) -> Source {
        Source {
            url: self.url().to_string(),
            file: file.to_string(),
            size: Some(self.body().len() as u64),
            sha256: Some(self.sha256()),
        }
    }
}

async fn serving(body: Vec<u8>, name: &str) -> FileServer {
    FileServer::start(body, name)
        .await
        .expect("a loopback port")
}

/// A file as a GGUF model starts (magic, version 3), then 3 MiB of noise.
fn gguf_file(seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut body = b"GGUF\x03\0\0\0".to_vec();
    body.extend((0..3 << 20).map(|_| rng.u8(..)));
    body
}

async fn pull_into(
    dir: &std::path::Path,
    source: &Source,
    options: &PullOptions,
    cancel: &CancellationToken,
) -> (Result<std::path::PathBuf, ModelsError>, Vec<Progress>) {
    let mut seen = Vec::new();
    let result = models::pull(source, dir, options, &mut |p| seen.push(p), cancel).await;
    (result, seen)
}

const FILE: &str = "model-q4.gguf";

#[tokio::test]
async fn a_pull_cut_off_at_forty_percent_goes_on_from_where_it_stopped_and_the_file_is_whole() {
    let dir = Dir::new();
    let server = serving(gguf_file(1), FILE).await;
    let len = server.body().len() as u64;
    let cut = len * 2 / 5;
    server.mode(Mode::CutAt(cut));
    let source = server.source(FILE);
    let options = PullOptions::default();
    let (first, _) = pull_into(dir.path(), &source, &options, &CancellationToken::new()).await;
    let err = first.expect_err("the connection was cut");
    assert!(matches!(err, ModelsError::Http { .. }), "{err}");
    assert!(!dir.path().join(FILE).exists(), "nothing in place yet");
    // What came is kept: the server handed `cut` bytes to a connection it then dropped, and the
    // last of them may not have reached the client.
    let kept = models::partial(dir.path(), FILE).expect("the part kept");
    assert!(kept > 0 && kept <= cut, "kept {kept} of {cut}");

    server.mode(Mode::Whole);
    let (second, seen) = pull_into(dir.path(), &source, &options, &CancellationToken::new()).await;
    let path = second.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), *server.body());
    assert_eq!(server.ranges(), [None, Some(format!("bytes={kept}-"))]);
    assert_eq!(
        server.sent_per_request()[1],
        len - kept,
        "the second pull asked only for what was missing"
    );
    assert_eq!(
        seen.first(),
        Some(&Progress::Downloading {
            done: kept,
            total: Some(len),
            resumed: kept
        })
    );
    assert_eq!(seen.last(), Some(&Progress::Checking));
    assert_eq!(models::partial(dir.path(), FILE), None);
}

#[tokio::test]
async fn a_server_that_ignores_the_range_is_downloaded_from_the_start_and_the_file_is_whole() {
    let dir = Dir::new();
    let server = serving(gguf_file(2), FILE).await;
    server.mode(Mode::CutAt(1 << 20));
    let source = server.source(FILE);
    let options = PullOptions::default();
    let cancel = CancellationToken::new();
    assert!(pull_into(dir.path(), &source, &options, &cancel)
        .await
        .0
        .is_err());
    let kept = models::partial(dir.path(), FILE).expect("the part kept");
    server.mode(Mode::IgnoringRanges);
    let path = pull_into(dir.path(), &source, &options, &cancel)
        .await
        .0
        .unwrap();
    assert_eq!(std::fs::read(path).unwrap(), *server.body());
    assert_eq!(server.ranges()[1], Some(format!("bytes={kept}-")));
    assert_eq!(server.sent_per_request()[1], server.body().len() as u64);
}

#[tokio::test]
async fn a_stopped_pull_keeps_what_came_and_the_next_goes_on_from_there() {
    let dir = Dir::new();
    let server = serving(gguf_file(3), FILE).await;
    let held = 1 << 20;
    server.mode(Mode::HoldAt(held));
    let source = server.source(FILE);
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    // The server sends nothing after `held` bytes: only the stop ends this pull.
    let result = models::pull(
        &source,
        dir.path(),
        &PullOptions::default(),
        &mut |p| {
            if matches!(p, Progress::Downloading { done, .. } if done >= held) {
                stop.cancel();
            }
        },
        &cancel,
    )
    .await;
    assert!(
        matches!(result, Err(ModelsError::Cancelled { kept }) if kept == held),
        "{result:?}"
    );
    assert_eq!(models::partial(dir.path(), FILE), Some(held));
    assert!(!dir.path().join(FILE).exists());
    server.mode(Mode::Whole);
    let path = pull_into(
        dir.path(),
        &source,
        &PullOptions::default(),
        &CancellationToken::new(),
    )
    .await
    .0
    .unwrap();
    assert_eq!(std::fs::read(path).unwrap(), *server.body());
    assert_eq!(server.ranges()[1], Some(format!("bytes={held}-")));
}

#[tokio::test]
async fn a_server_that_stops_sending_is_given_up_and_what_came_is_kept() {
    let dir = Dir::new();
    let server = serving(gguf_file(4), FILE).await;
    server.mode(Mode::HoldAt(512 * 1024));
    let options = PullOptions {
        stall: Duration::from_secs(1),
    };
    let (result, _) = pull_into(
        dir.path(),
        &server.source(FILE),
        &options,
        &CancellationToken::new(),
    )
    .await;
    let err = result.expect_err("a stall is an error");
    assert!(matches!(err, ModelsError::Http { .. }), "{err}");
    assert_eq!(models::partial(dir.path(), FILE), Some(512 * 1024));
}

#[tokio::test]
async fn a_download_that_is_not_the_model_expected_is_removed_and_says_why() {
    let dir = Dir::new();
    let cancel = CancellationToken::new();
    let options = PullOptions::default();
    // Another sha256 than the file's.
    let server = serving(gguf_file(5), FILE).await;
    let mut source = server.source(FILE);
    source.sha256 = Some("0".repeat(64));
    let err = pull_into(dir.path(), &source, &options, &cancel)
        .await
        .0
        .unwrap_err()
        .to_string();
    assert!(err.contains("sha256"), "{err}");
    // A page where the model should be (a sign-in page, a moved file).
    let page = serving(b"<!DOCTYPE html><html>sign in</html>".to_vec(), FILE).await;
    let source = Source::from_url(page.url(), None).unwrap();
    let err = pull_into(dir.path(), &source, &options, &cancel)
        .await
        .0
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a GGUF model"), "{err}");
    // Nothing at the address.
    let gone = server.url().replace("/models/", "/moved/");
    let source = Source::from_url(&gone, None).unwrap();
    let err = pull_into(dir.path(), &source, &options, &cancel)
        .await
        .0
        .unwrap_err()
        .to_string();
    assert!(err.contains("answered HTTP 404"), "{err}");
    // A size other than the catalog's is refused as the server names its size, nothing written.
    let mut source = server.source(FILE);
    source.size = Some(12);
    let err = pull_into(dir.path(), &source, &options, &cancel)
        .await
        .0
        .unwrap_err()
        .to_string();
    assert!(err.contains("the catalog says 12"), "{err}");
    assert!(!dir.path().join(FILE).exists());
    assert_eq!(models::partial(dir.path(), FILE), None);
}

#[tokio::test]
async fn jarvis_models_pulls_lists_uses_and_removes_a_model() {
    let dir = Dir::new();
    let server = serving(gguf_file(6), FILE).await;
    let models_dir = dir.path().join("models");
    let run = |args: Vec<String>| {
        let mut cmd = jarvis(&dir);
        cmd.arg("models").args(args);
        cmd
    };
    let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    let (code, _, err) = output(&mut run(args(&[
        "pull",
        server.url(),
        "--sha256",
        &"1".repeat(64),
    ])))
    .await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("sha256"), "{err}");
    let (code, out, err) = output(&mut run(args(&[
        "pull",
        server.url(),
        "--sha256",
        &server.sha256(),
    ])))
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("installed {}", models_dir.join(FILE).display())),
        "{out}"
    );
    assert_eq!(
        std::fs::read(models_dir.join(FILE)).unwrap(),
        *server.body()
    );

    let (code, out, _) = output(&mut run(args(&["list"]))).await;
    assert_eq!(code, 0);
    assert!(out.contains(&format!("{FILE}\t4 MB\tinstalled\t")), "{out}");
    assert!(out.contains("qwen2.5-1.5b\t1.1 GB\t-\t"), "{out}");

    let (code, out, err) = output(&mut run(args(&["use", FILE]))).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(FILE), "{out}");
    let settings = std::fs::read_to_string(dir.path().join("settings.toml")).unwrap();
    let settings: toml::Value = toml::from_str(&settings).unwrap();
    assert_eq!(settings["backend"].as_str(), Some("local"));
    assert_eq!(settings["local"]["model"].as_str(), Some(FILE));
    let (_, out, _) = output(&mut run(args(&["list"]))).await;
    assert!(out.contains(&format!("{FILE}\t4 MB\tin use\t")), "{out}");

    let (code, _, err) = output(&mut run(args(&["rm", FILE]))).await;
    assert_eq!(code, 1);
    assert!(err.contains("answers with"), "{err}");
    assert!(models_dir.join(FILE).exists());

    let (code, _, err) = output(&mut run(args(&["use", "qwen2.5-1.5b"]))).await;
    assert_eq!(code, 1);
    assert!(err.contains("jarvis models pull qwen2.5-1.5b"), "{err}");
    let (code, _, err) = output(&mut run(args(&["pull", "no-such-model"]))).await;
    assert_eq!(code, 1);
    assert!(err.contains("no model is called `no-such-model`"), "{err}");
}

#[tokio::test]
async fn a_pull_the_disk_has_no_room_for_is_refused_before_anything_is_written() {
    // The data folder is a 2 MiB tmpfs, mounted in a user and mount namespace of the command's
    // own (`unshare`: no privilege needed), which lists the model folder after the pull.
    let dir = Dir::new();
    let server = serving(gguf_file(7), FILE).await;
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let script = r#"mount -t tmpfs -o size=2m tmpfs "$JARVIS_DATA_DIR" || exit 99
"$0" "$@"; status=$?
echo "left:$(ls -A "$JARVIS_DATA_DIR/models" 2>/dev/null)"
exit $status"#;
    let mut cmd = tokio::process::Command::new("unshare");
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("JARVIS_DATA_DIR", &data)
        .env("JARVIS_CONFIG", dir.path().join("settings.toml"))
        .env("JARVIS_KEYRING", "off")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", script])
        .arg(env!("CARGO_BIN_EXE_jarvis"))
        .args(["models", "pull", server.url()])
        .kill_on_drop(true);
    let (code, out, err) = output(&mut cmd).await;
    assert_ne!(code, 99, "the tmpfs could not be mounted: {err}");
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("not enough free space") && err.contains("needs 3145736 more bytes"),
        "{err}"
    );
    assert!(
        out.contains("left:\n") || out.trim_end().ends_with("left:"),
        "{out}"
    );
}

#[tokio::test]
async fn a_part_an_earlier_pull_finished_is_checked_and_put_in_place_without_downloading_it_again()
{
    let dir = Dir::new();
    let server = serving(gguf_file(8), FILE).await;
    let cancel = CancellationToken::new();
    let options = PullOptions::default();
    let models_dir = dir.path().join("models");
    std::fs::create_dir(&models_dir).unwrap();
    let part = models::part_path(&models_dir, FILE);
    // Stopped during the checks, by URL (the size unknown until the server says it): the server
    // finds the range past the end, and the part is the whole file.
    std::fs::write(&part, server.body()).unwrap();
    let source = Source::from_url(server.url(), Some(server.sha256())).unwrap();
    let path = pull_into(&models_dir, &source, &options, &cancel)
        .await
        .0
        .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), *server.body());
    assert_eq!(server.sent_per_request(), [0]);
    // The same from the catalog (the size known): nothing is asked for at all.
    std::fs::rename(&path, &part).unwrap();
    pull_into(&models_dir, &server.source(FILE), &options, &cancel)
        .await
        .0
        .unwrap();
    assert_eq!(server.ranges().len(), 1);
    // A part longer than the file is no part of it: the pull starts over.
    std::fs::remove_file(&path).unwrap();
    let mut longer = server.body().to_vec();
    longer.extend_from_slice(b"trailing");
    std::fs::write(&part, longer).unwrap();
    let path = pull_into(&models_dir, &server.source(FILE), &options, &cancel)
        .await
        .0
        .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), *server.body());
    assert_eq!(server.ranges().last(), Some(&None));
}

#[tokio::test]
async fn a_model_of_a_server_running_here_is_listed_and_one_use_makes_jarvis_answer_with_it() {
    let dir = Dir::new();
    // "Ollama" is the project's stub server, which lists models as Ollama's `/v1/models` does
    // and answers chat completions; "LM Studio" is not running.
    let stub = jarvis_stub::Stub::start().await.unwrap();
    stub.set_models(&["qwen2.5:3b", "llama3.2:latest"]);
    // "LM Studio" is a port that takes each connection and closes it at once.
    let closing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_addr = closing.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((connection, _)) = closing.accept().await {
            drop(connection);
        }
    });
    let servers = format!(
        "ollama={},lmstudio=http://{closed_addr}/v1",
        stub.openai_url()
    );
    let run = |args: &[&str]| {
        let mut cmd = jarvis(&dir);
        cmd.env("JARVIS_MODEL_SERVERS", &servers).args(args);
        cmd
    };
    let (code, out, err) = output(&mut run(&["models", "list"])).await;
    assert_eq!(code, 0, "{err}");
    let served = format!(
        "ollama:qwen2.5:3b\t-\tserved\ton Ollama ({})",
        stub.openai_url()
    );
    assert!(out.contains(&served), "{out}");
    assert!(out.contains("ollama:llama3.2:latest\t-\tserved\t"), "{out}");
    assert!(!out.contains("lmstudio:"), "{out}");

    let (code, _, err) = output(&mut run(&["models", "use", "ollama:mistral"])).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("Ollama does not offer `mistral`; it offers: qwen2.5:3b, llama3.2:latest"),
        "{err}"
    );
    let (code, _, err) = output(&mut run(&["models", "use", "lmstudio:any"])).await;
    assert_eq!(code, 1);
    assert!(err.contains("LM Studio does not answer at"), "{err}");

    let (code, out, err) = output(&mut run(&["models", "use", "ollama:qwen2.5:3b"])).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Jarvis answers with qwen2.5:3b on Ollama"),
        "{out}"
    );
    assert!(!err.contains("overrides"), "{err}");
    // Where the environment names another backend, the user is told that it wins.
    let (code, _, err) =
        output(run(&["models", "use", "ollama:qwen2.5:3b"]).env("JARVIS_BACKEND", "anthropic"))
            .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("the environment overrides it") && err.contains("(anthropic)"),
        "{err}"
    );
    let (_, out, _) = output(&mut run(&["models", "list"])).await;
    assert!(out.contains("ollama:qwen2.5:3b\t-\tin use\t"), "{out}");

    // The next question goes to that server, for that model, with no key.
    let (code, out, err) = output(&mut run(&["ask", "hello there"])).await;
    assert_eq!(code, 0, "{err}");
    assert!(!out.trim().is_empty(), "{err}");
    let asked = stub.received();
    assert!(!asked.is_empty());
    for request in &asked {
        assert_eq!(request.body["model"], "qwen2.5:3b");
        assert!(request.headers.get("authorization").is_none());
    }
}

/// A session whose catalog is one model served by `server` and whose local model is the small
/// one the app starts with (not installed here).
fn session_offering(dir: &Dir, server: &FileServer) -> std::sync::Arc<jarvis::session::Session> {
    session_offering_with(dir, server, None)
}

/// As [`session_offering`], with `JARVIS_MODEL` set to `model` where given.
fn session_offering_with(
    dir: &Dir,
    server: &FileServer,
    model: Option<&str>,
) -> std::sync::Arc<jarvis::session::Session> {
    let model = model.map(str::to_string);
    let catalog = dir.path().join("catalog.toml");
    let body = models::test_catalog(
        "test-3b",
        "Test 3B Instruct",
        FILE,
        server.url(),
        server.body(),
    );
    std::fs::write(&catalog, body).unwrap();
    let config = dir.path().join("settings.toml");
    let data = dir.path().join("data");
    let env: jarvis::session::Env = std::sync::Arc::new(move |name: &str| match name {
        "JARVIS_KEYRING" => Some("off".into()),
        "JARVIS_CONFIG" => Some(config.display().to_string()),
        "JARVIS_DATA_DIR" => Some(data.display().to_string()),
        "JARVIS_MODEL_CATALOG" => Some(catalog.display().to_string()),
        "JARVIS_MODEL_SERVERS" => Some(String::new()),
        "JARVIS_MODEL" => model.clone(),
        _ => None,
    });
    let session = jarvis::session::Session::open(env, jarvis::session::device_parts()).unwrap();
    std::sync::Arc::new(session)
}

/// Waits for the download's status to satisfy `done`, and returns it.
async fn pull_status(
    session: &jarvis::session::Session,
    what: &str,
    done: impl Fn(&PullStatus) -> bool,
) -> PullStatus {
    let mut watch = session.watch_pull();
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let now = watch.borrow_and_update().clone();
            if done(&now) {
                return now;
            }
            watch.changed().await.expect("the session lives");
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("{what}: still {:?}", *watch.borrow()))
}

#[tokio::test]
async fn the_offered_model_downloads_in_the_background_and_one_click_makes_it_the_one_that_answers()
{
    let dir = Dir::new();
    let server = serving(gguf_file(9), FILE).await;
    let len = server.body().len() as u64;
    let session = session_offering(&dir, &server);

    let offer = session.model_offer().expect("only a small model is here");
    assert_eq!(
        (offer.name.as_str(), offer.size, offer.state),
        ("test-3b", len, ModelState::Absent)
    );
    let held = len * 2 / 5;
    server.mode(Mode::HoldAt(held));
    // Asked from a thread outside the runtime, as a shell's main thread asks.
    let asking = session.clone();
    std::thread::spawn(move || asking.pull_model("test-3b", true))
        .join()
        .unwrap()
        .unwrap();
    let refused = session.pull_model("test-3b", true).unwrap_err().to_string();
    assert!(refused.contains("one download at a time"), "{refused}");
    let at = pull_status(
        &session,
        "the download reaches 40 %",
        |s| matches!(s, PullStatus::Downloading { done, .. } if *done == held),
    )
    .await;
    let PullStatus::Downloading { total, .. } = at else {
        unreachable!()
    };
    assert_eq!(total, Some(len));
    assert!(session.model_offer().is_some(), "a part is not a model");

    server.mode(Mode::Whole);
    let end = pull_status(&session, "the download ends", |s| {
        !matches!(
            s,
            PullStatus::Downloading { .. } | PullStatus::Checking { .. }
        )
    })
    .await;
    assert_eq!(
        end,
        PullStatus::Done {
            name: "test-3b".into(),
            title: "Test 3B Instruct".into(),
            in_use: true,
            not_used: None,
        }
    );
    assert_eq!(server.ranges(), vec![None], "one request, never resumed");
    let settings: toml::Value =
        toml::from_str(&std::fs::read_to_string(dir.path().join("settings.toml")).unwrap())
            .unwrap();
    assert_eq!(settings["backend"].as_str(), Some("local"));
    assert_eq!(settings["local"]["model"].as_str(), Some(FILE));
    assert_eq!(
        session.config().local_model_path(),
        dir.path().join("data/models").join(FILE)
    );
    assert_eq!(session.model_offer(), None, "a catalog model is in use");
    let view = session.models_view().await.unwrap();
    let listed = view.models.iter().find(|m| m.name == "test-3b").unwrap();
    assert_eq!(listed.state, ModelState::InUse);
    let removing = session
        .remove_model("test-3b")
        .await
        .unwrap_err()
        .to_string();
    assert!(removing.contains("answers with"), "{removing}");
}

#[tokio::test]
async fn a_download_stopped_from_the_page_keeps_its_part_and_the_next_goes_on_from_there() {
    let dir = Dir::new();
    let server = serving(gguf_file(10), FILE).await;
    let len = server.body().len() as u64;
    let session = session_offering(&dir, &server);
    let held = len * 2 / 5;
    server.mode(Mode::HoldAt(held));
    session.pull_model("test-3b", false).unwrap();
    pull_status(
        &session,
        "the download reaches 40 %",
        |s| matches!(s, PullStatus::Downloading { done, .. } if *done == held),
    )
    .await;
    let removing = session
        .remove_model("test-3b")
        .await
        .unwrap_err()
        .to_string();
    assert!(removing.contains("is downloading"), "{removing}");
    assert!(session.stop_pull());
    let stopped = pull_status(&session, "the download stops", |s| {
        matches!(s, PullStatus::Stopped { .. })
    })
    .await;
    assert!(matches!(stopped, PullStatus::Stopped { kept, .. } if kept == held));
    let view = session.models_view().await.unwrap();
    assert_eq!(view.models[0].partial, Some(held));
    assert_eq!(view.models[0].state, ModelState::Absent);
    assert!(!session.stop_pull(), "nothing runs now");

    server.mode(Mode::Whole);
    session.pull_model("test-3b", false).unwrap();
    let end = pull_status(&session, "the download ends", |s| {
        matches!(s, PullStatus::Done { .. } | PullStatus::Failed { .. })
    })
    .await;
    assert!(
        matches!(end, PullStatus::Done { in_use: false, .. }),
        "{end:?}"
    );
    assert_eq!(server.ranges()[1], Some(format!("bytes={held}-")));
    let view = session.models_view().await.unwrap();
    assert_eq!(view.models[0].state, ModelState::Installed);
    assert_eq!(view.models[0].partial, None);
    assert_eq!(
        session.settings().local.model,
        jarvis::config::Settings::default().local.model,
        "downloaded, not put in use"
    );
    // Installed but not in use: the offer is made no more (a catalog model is here).
    assert_eq!(session.model_offer(), None);
    session.remove_model("test-3b").await.unwrap();
    assert!(!dir.path().join("data/models").join(FILE).exists());
}

#[tokio::test]
async fn not_now_is_remembered_and_the_offer_is_not_made_again() {
    let dir = Dir::new();
    let server = serving(gguf_file(11), FILE).await;
    let session = session_offering(&dir, &server);
    assert!(session.model_offer().is_some());
    session.dismiss_model_offer().await.unwrap();
    assert_eq!(session.model_offer(), None);
    drop(session);
    let again = session_offering(&dir, &server);
    assert_eq!(again.model_offer(), None, "after a restart too");
    assert!(server.ranges().is_empty(), "nothing was downloaded");
}

#[tokio::test]
async fn a_model_chosen_while_the_offered_one_downloads_is_kept_and_the_environment_is_never_overruled(
) {
    let dir = Dir::new();
    let server = serving(gguf_file(12), FILE).await;
    let len = server.body().len() as u64;
    let session = session_offering(&dir, &server);
    let models_dir = dir.path().join("data/models");
    std::fs::create_dir_all(&models_dir).unwrap();
    std::fs::write(models_dir.join("mine.gguf"), gguf_file(13)).unwrap();
    server.mode(Mode::HoldAt(len / 2));
    session.pull_model("test-3b", true).unwrap();
    pull_status(
        &session,
        "the download held",
        |s| matches!(s, PullStatus::Downloading { done, .. } if *done == len / 2),
    )
    .await;
    // The user picks a model of their own meanwhile: the download ending does not undo it.
    session.use_model("mine.gguf").await.unwrap();
    server.mode(Mode::Whole);
    let end = pull_status(&session, "the download ends", |s| {
        matches!(s, PullStatus::Done { .. } | PullStatus::Failed { .. })
    })
    .await;
    assert_eq!(
        end,
        PullStatus::Done {
            name: "test-3b".into(),
            title: "Test 3B Instruct".into(),
            in_use: false,
            not_used: Some("another model was chosen meanwhile".into()),
        }
    );
    assert_eq!(session.settings().local.model, "mine.gguf");
    drop(session);

    // Where JARVIS_MODEL decides, "use" changes nothing and says why.
    let session = session_offering_with(&dir, &server, Some("mine.gguf"));
    let before = std::fs::read_to_string(dir.path().join("settings.toml")).unwrap();
    let refused = session.use_model("test-3b").await.unwrap_err().to_string();
    assert!(refused.contains("the environment decides"), "{refused}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("settings.toml")).unwrap(),
        before
    );
    assert_eq!(session.settings().local.model, "mine.gguf");
}
