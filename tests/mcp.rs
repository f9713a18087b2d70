//! MCP servers over real stdio: the reference servers (`@modelcontextprotocol/server-everything`
//! and `server-filesystem`, installed from `tests/mcp-servers`' lockfile by
//! `scripts/mcp-servers`), and a server of the tests' own that misbehaves on purpose
//! (`tests/mcp-servers/misbehaving.py`).

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use jarvis::config::{Approve, BackendKind, McpServerSettings, McpSettings};
use jarvis::mcp::{McpError, ServerState, Servers};
use jarvis::store::Role;
use jarvis::{Consent, Event, ReplyState, Service, ServiceOptions};
use jarvis_stub::{Script, Stub};
use serde_json::json;
use support::*;

/// The bound on a reply that starts a reference server (Node) first: only a hang reaches it on
/// two busy cores.
const SERVER_LIMIT: Duration = Duration::from_secs(90);

fn servers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-servers")
}

/// A reference server's program, installed by `scripts/mcp-servers`.
fn reference(program: &str) -> String {
    let path = servers_dir().join("node_modules/.bin").join(program);
    assert!(
        path.exists(),
        "the reference MCP servers are missing: run scripts/mcp-servers"
    );
    path.display().to_string()
}

fn server(name: &str, command: &str, args: &[&str]) -> McpServerSettings {
    McpServerSettings {
        name: name.into(),
        command: command.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        ..McpServerSettings::default()
    }
}

fn misbehaving(name: &str, mode: &str) -> McpServerSettings {
    let script = servers_dir().join("misbehaving.py").display().to_string();
    server(name, "python3", &[&script, mode])
}

fn servers(list: Vec<McpServerSettings>, call_timeout_secs: f64) -> Servers {
    Servers::new(&McpSettings {
        servers: list,
        call_timeout_secs,
        // Four servers start on two loaded cores: their starts are not what is under test.
        start_timeout_secs: 60.0,
    })
}

fn state(servers: &Servers, name: &str) -> ServerState {
    servers
        .states()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, s)| s)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_everything_servers_echo_and_sum_answer_and_the_server_keeps_running() {
    let everything = reference("mcp-server-everything");
    let servers = servers(vec![server("everything", &everything, &["stdio"])], 30.0);
    assert_eq!(
        state(&servers, "everything"),
        ServerState::NotStarted,
        "started when first needed"
    );
    let tools = servers.tools("everything").await.unwrap();
    let echo = tools.iter().find(|t| t.name == "echo").expect("echo");
    assert!(!echo.description.is_empty());
    assert_eq!(echo.input_schema["required"], json!(["message"]));
    assert_eq!(
        state(&servers, "everything"),
        ServerState::Running { tools: tools.len() }
    );

    let echoed = servers
        .call("everything", "echo", json!({"message": "hello, Jarvis"}))
        .await
        .unwrap();
    assert!(!echoed.is_error);
    assert!(echoed.text.contains("hello, Jarvis"), "{echoed:?}");
    let sum = servers
        .call("everything", "get-sum", json!({"a": 2, "b": 3}))
        .await
        .unwrap();
    assert!(sum.text.contains('5') && !sum.is_error, "{sum:?}");

    let missing = servers.call("everything", "add", json!({})).await;
    assert!(
        matches!(&missing, Err(McpError::NoTool { tool, .. }) if tool == "add"),
        "{missing:?}"
    );
    let bad = servers.call("everything", "echo", json!([1, 2])).await;
    assert!(matches!(bad, Err(McpError::Arguments(_))), "{bad:?}");
    let unknown = servers.tools("nobody").await;
    assert!(matches!(unknown, Err(McpError::Unknown(_))), "{unknown:?}");
    servers.stop_all().await;
    assert_eq!(state(&servers, "everything"), ServerState::NotStarted);
}

/// The everything server running by itself, answering MCP's streamable HTTP on a port of its
/// own (a random one; another is tried where that one is taken); stopped when dropped.
async fn everything_over_http() -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt as _;
    let everything = reference("mcp-server-everything");
    for _ in 0..8 {
        let port = fastrand::u16(20_000..32_000);
        let mut child = tokio::process::Command::new(&everything)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the everything server runs");
        let mut said = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let listening = tokio::time::timeout(LIMIT, async {
            while let Ok(Some(line)) = said.next_line().await {
                if line.contains("listening on port") {
                    return true;
                }
            }
            false
        })
        .await
        .expect("the everything server never said it listens");
        if listening {
            // (What it says later is its own log.)
            tokio::spawn(async move { while let Ok(Some(_)) = said.next_line().await {} });
            return (child, format!("http://127.0.0.1:{port}/mcp"));
        }
    }
    panic!("the everything server found no free port in 8 tries")
}

fn at_url(name: &str, url: &str) -> McpServerSettings {
    McpServerSettings {
        name: name.into(),
        url: url.into(),
        ..McpServerSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_at_a_url_is_spoken_to_over_streamable_http_and_one_not_there_is_named() {
    let (mut everything, url) = everything_over_http().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nobody = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let lost = url.replace("/mcp", "/nothing");
    let servers = servers(
        vec![
            at_url("web", &url),
            at_url("gone", &nobody),
            at_url("lost", &lost),
        ],
        30.0,
    );
    let tools = servers.tools("web").await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");
    assert_eq!(
        state(&servers, "web"),
        ServerState::Running { tools: tools.len() }
    );
    let echoed = servers
        .call("web", "echo", json!({"message": "over HTTP"}))
        .await
        .unwrap();
    assert!(
        echoed.text.contains("over HTTP") && !echoed.is_error,
        "{echoed:?}"
    );
    let sum = servers
        .call("web", "get-sum", json!({"a": 20, "b": 22}))
        .await
        .unwrap();
    assert!(sum.text.contains("42"), "{sum:?}");

    // Nobody there, and a page that is not MCP: each named, on one line.
    for (name, why) in [("gone", "Connection refused"), ("lost", "404")] {
        match servers.tools(name).await {
            Err(McpError::Start { server, reason }) => {
                assert_eq!(server, name);
                assert!(
                    reason.contains("the handshake with http://127.0.0.1:")
                        && reason.contains(why)
                        && !reason.contains('\n'),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    // Gone after it answered: the next call says why, on one line.
    everything.kill().await.unwrap();
    match servers
        .call("web", "echo", json!({"message": "anyone?"}))
        .await
    {
        Err(McpError::Failed { reason, .. }) => assert!(
            reason.contains("it could not be reached: Connection refused")
                && !reason.contains('\n'),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    servers.stop_all().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_filesystem_server_reads_a_file_in_its_folder_and_refuses_one_outside() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "Bruno is a dog.\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "not for the model").unwrap();
    let folder = dir.path().display().to_string();
    let filesystem = reference("mcp-server-filesystem");
    let servers = servers(vec![server("files", &filesystem, &[&folder])], 30.0);

    let read = servers
        .call(
            "files",
            "read_text_file",
            json!({"path": dir.path().join("notes.txt")}),
        )
        .await
        .unwrap();
    assert_eq!(read.text.trim(), "Bruno is a dog.");
    assert!(!read.is_error);
    let refused = servers
        .call(
            "files",
            "read_text_file",
            json!({"path": outside.path().join("secret.txt")}),
        )
        .await
        .unwrap();
    assert!(refused.is_error, "{refused:?}");
    assert!(!refused.text.contains("not for the model"), "{refused:?}");
    servers.stop_all().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_exits_hangs_or_answers_garbage_mid_call_is_an_error_with_a_reason() {
    let servers = servers(
        vec![
            misbehaving("exits", "exit"),
            misbehaving("hangs", "silent"),
            misbehaving("garbles", "garbage"),
            misbehaving("fine", "fine"),
            server("absent", "/nonexistent/mcp-server", &[]),
        ],
        2.0,
    );

    let exited = servers.call("exits", "work", json!({})).await;
    match &exited {
        Err(McpError::Failed { reason, what, .. }) => {
            assert_eq!(what, "the call to work");
            assert!(reason.contains("exited"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(state(&servers, "exits"), ServerState::Failed { .. }),
        "{:?}",
        servers.states()
    );
    // The next use starts it again.
    assert_eq!(servers.tools("exits").await.unwrap().len(), 1);
    assert_eq!(state(&servers, "exits"), ServerState::Running { tools: 1 });

    let hung = servers.call("hangs", "work", json!({})).await;
    assert!(
        matches!(&hung, Err(McpError::Timeout { what, secs, .. }) if what == "the call to work" && *secs == 2.0),
        "{hung:?}"
    );
    assert_eq!(
        state(&servers, "hangs"),
        ServerState::Running { tools: 1 },
        "a call that timed out leaves the server running"
    );

    // A line that is not JSON-RPC, then an answer that is no tool result: an error (or the
    // timeout, an answer never made), never a result, and the server goes on.
    let garbled = servers.call("garbles", "work", json!({})).await;
    assert!(
        matches!(
            garbled,
            Err(McpError::Failed { .. } | McpError::Timeout { .. })
        ),
        "{garbled:?}"
    );

    let absent = servers.tools("absent").await;
    match &absent {
        Err(McpError::Start { reason, .. }) => {
            assert!(
                reason.contains("cannot run \"/nonexistent/mcp-server\""),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    match state(&servers, "absent") {
        ServerState::Failed { reason } => assert!(reason.contains("cannot run"), "{reason}"),
        other => panic!("{other:?}"),
    }

    // None of it touched the server that behaves.
    let fine = servers.call("fine", "work", json!(null)).await.unwrap();
    assert_eq!(fine.text, "worked");

    // Stopped: none runs, none starts again.
    servers.stop_all().await;
    assert!(servers
        .states()
        .iter()
        .all(|(_, s)| !matches!(s, ServerState::Running { .. })));
    let after = servers.call("fine", "work", json!(null)).await;
    assert!(matches!(after, Err(McpError::Stopped)), "{after:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_never_shakes_hands_or_says_why_it_cannot_start_is_named_with_its_reason() {
    let servers = Servers::new(&McpSettings {
        servers: vec![
            // Runs, but never says a word of MCP.
            server("mute", "sleep", &["600"]),
            // Exits at once, saying why on stderr.
            server(
                "complains",
                "sh",
                &["-c", "echo 'cannot open /srv/calendar.db' >&2; exit 2"],
            ),
        ],
        call_timeout_secs: 30.0,
        start_timeout_secs: 2.0,
    });
    let mute = servers.tools("mute").await;
    assert!(
        matches!(&mute, Err(McpError::Timeout { what, .. }) if what == "the handshake and its tool list"),
        "{mute:?}"
    );
    let complains = servers.tools("complains").await;
    match &complains {
        Err(McpError::Start { reason, .. }) => {
            assert!(reason.contains("cannot open /srv/calendar.db"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    servers.stop_all().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_says_its_tools_changed_has_them_listed_again_before_the_next_use() {
    let servers = servers(vec![misbehaving("grows", "grows")], 30.0);
    let names = |tools: Vec<jarvis::mcp::ToolInfo>| -> Vec<String> {
        tools.into_iter().map(|t| t.name).collect()
    };
    assert_eq!(names(servers.tools("grows").await.unwrap()), ["work"]);
    let more = servers.call("grows", "more", json!({})).await;
    assert!(
        matches!(&more, Err(McpError::NoTool { .. })),
        "not offered yet: {more:?}"
    );
    // The call adds a tool, and the server says so.
    assert_eq!(
        servers.call("grows", "work", json!({})).await.unwrap().text,
        "worked"
    );
    let listed = tokio::time::timeout(LIMIT, async {
        loop {
            let now = names(servers.tools("grows").await.unwrap());
            if now.len() > 1 {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the new tool was never listed");
    assert_eq!(listed, ["work", "more"]);
    assert_eq!(state(&servers, "grows"), ServerState::Running { tools: 2 });
    assert_eq!(
        servers.call("grows", "more", json!({})).await.unwrap().text,
        "more worked"
    );
    servers.stop_all().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_added_beside_running_ones_leaves_them_running_and_only_a_changed_one_starts_anew()
{
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("settings.toml");
    let script = servers_dir().join("misbehaving.py").display().to_string();
    std::fs::write(
        &config,
        format!(
            "[mcp]\nstart_timeout_secs = 3600\n\n\
             [[mcp.servers]]\nname = \"kept\"\ncommand = \"python3\"\nargs = [{script:?}, \"fine\"]\n\n\
             [[mcp.servers]]\nname = \"changed\"\ncommand = \"python3\"\nargs = [{script:?}, \"fine\"]\n"
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let env: jarvis::session::Env = std::sync::Arc::new(move |name: &str| match name {
        "JARVIS_KEYRING" => Some("off".into()),
        "JARVIS_CONFIG" => Some(config.display().to_string()),
        "JARVIS_DATA_DIR" => Some(data.display().to_string()),
        "JARVIS_MODEL_SERVERS" => Some(String::new()),
        _ => None,
    });
    let session = jarvis::session::Session::open(env, jarvis::session::device_parts()).unwrap();
    let states = |view: &jarvis::session::tools::ToolsView| -> Vec<(String, ServerState)> {
        view.servers
            .iter()
            .map(|s| (s.name.clone(), s.state.clone()))
            .collect()
    };
    // Both started with the session.
    let running = ServerState::Running { tools: 1 };
    tokio::time::timeout(LIMIT, async {
        loop {
            let view = session.tools_view().await.unwrap();
            if states(&view).iter().all(|(_, s)| *s == running) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the servers never started");

    // (A server that never shakes hands: "starting" for as long as the test looks.)
    let view = session
        .add_tool_server(jarvis::session::tools::ServerForm {
            name: "added".into(),
            command: "sleep 600".into(),
            approve: Approve::Ask,
        })
        .await
        .unwrap();
    let now = states(&view);
    assert_eq!(now[0], ("kept".to_string(), running.clone()), "{now:?}");
    assert_eq!(now[1], ("changed".to_string(), running.clone()), "{now:?}");
    assert!(
        matches!(now[2].1, ServerState::NotStarted | ServerState::Starting),
        "the new one starts: {now:?}"
    );

    // A server whose program changes starts anew; the others go on.
    let text = std::fs::read_to_string(dir.path().join("settings.toml")).unwrap();
    let changed = text.replacen(
        &format!("name = \"changed\"\ncommand = \"python3\"\nargs = [{script:?}, \"fine\"]"),
        "name = \"changed\"\ncommand = \"sleep\"\nargs = [\"600\"]",
        1,
    );
    assert_ne!(text, changed);
    std::fs::write(dir.path().join("settings.toml"), changed).unwrap();
    let view = session.remove_tool_server("added".into()).await.unwrap();
    let now = states(&view);
    assert_eq!(now.len(), 2);
    assert_eq!(now[0], ("kept".to_string(), running.clone()), "{now:?}");
    assert!(
        matches!(now[1].1, ServerState::NotStarted | ServerState::Starting),
        "its program changed: {now:?}"
    );
    // Quitting does not wait for a server that never finishes starting.
    tokio::time::timeout(LIMIT, session.stop_tools())
        .await
        .expect("quitting waited for a server still starting");
    let view = session.tools_view().await.unwrap();
    assert_eq!(states(&view)[1].1, ServerState::NotStarted);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_died_between_calls_is_seen_gone_and_the_next_call_starts_it_again() {
    let marker = tempfile::tempdir().unwrap();
    let first_run = marker.path().join("started-once").display().to_string();
    let script = servers_dir().join("misbehaving.py").display().to_string();
    // Its first run exits right after saying its tools.
    let servers = servers(
        vec![server("flaky", "python3", &[&script, "fine", &first_run])],
        30.0,
    );
    assert_eq!(servers.tools("flaky").await.unwrap().len(), 1);
    eventually("the exited server seen gone", || {
        !matches!(state(&servers, "flaky"), ServerState::Running { .. })
    })
    .await;
    let called = servers.call("flaky", "work", json!({})).await.unwrap();
    assert_eq!(called.text, "worked", "started again for the call");
    assert_eq!(state(&servers, "flaky"), ServerState::Running { tools: 1 });
    servers.stop_all().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn jarvis_mcp_lists_the_servers_shows_a_servers_tools_and_calls_one() {
    let dir = Dir::new();
    let everything = reference("mcp-server-everything");
    std::fs::write(
        dir.path().join("settings.toml"),
        format!(
            "[[mcp.servers]]\nname = \"everything\"\ncommand = {everything:?}\nargs = [\"stdio\"]\n\n\
             [[mcp.servers]]\nname = \"absent\"\ncommand = \"/nonexistent/mcp-server\"\n"
        ),
    )
    .unwrap();

    let (code, listed, _) = output(jarvis(&dir).args(["mcp", "list"])).await;
    assert_eq!(code, 0);
    let lines: Vec<&str> = listed.lines().collect();
    assert!(
        lines[0].starts_with("everything\trunning, ") && lines[0].ends_with(" tools"),
        "{listed}"
    );
    assert!(
        lines[1].starts_with("absent\tfailed: the MCP server absent could not be started"),
        "{listed}"
    );

    // What the model would be sent lists the server's tools, as a reply offers them.
    let (code, request, err) = output(jarvis(&dir).args(["request", "Echo", "hi"])).await;
    assert_eq!(code, 0, "{err}");
    let request: serde_json::Value = serde_json::from_str(&request).unwrap();
    let offered = request["body"]["tools"].to_string();
    assert!(
        offered.contains("everything__echo") && offered.contains("remember_fact"),
        "{request:#}"
    );

    let (code, tools, _) = output(jarvis(&dir).args(["mcp", "tools", "everything"])).await;
    assert_eq!(code, 0);
    let echo = tools
        .lines()
        .find(|l| l.starts_with("echo\t"))
        .unwrap_or_else(|| panic!("{tools}"));
    assert!(echo.ends_with("\tmessage*"), "{echo}");

    let (code, sum, _) = output(jarvis(&dir).args([
        "mcp",
        "call",
        "everything",
        "get-sum",
        r#"{"a": 2, "b": 3}"#,
    ]))
    .await;
    assert_eq!(code, 0);
    assert!(sum.contains('5'), "{sum}");

    // A server is never handed Jarvis's API keys.
    let (code, seen, _) = output(
        jarvis(&dir)
            .env("ANTHROPIC_API_KEY", "sk-ant-test-never-passed-on")
            .env("OPENAI_API_KEY", "sk-test-never-passed-on")
            .args(["mcp", "call", "everything", "get-env"]),
    )
    .await;
    assert_eq!(code, 0);
    assert!(seen.contains("PATH"), "{seen}");
    assert!(!seen.contains("never-passed-on"), "{seen}");

    let (code, _, err) = output(jarvis(&dir).args(["mcp", "call", "everything", "add"])).await;
    assert_ne!(code, 0);
    assert!(err.contains("offers no tool \"add\""), "{err}");
    let (code, _, err) =
        output(jarvis(&dir).args(["mcp", "call", "everything", "echo", "[1]"])).await;
    assert_ne!(code, 0);
    assert!(err.contains("arguments are a JSON object"), "{err}");

    let (_, report, _) = output(jarvis(&dir).arg("doctor")).await;
    assert!(
        report.contains("mcp server: everything: running, "),
        "{report}"
    );
    assert!(report.contains("mcp server: absent: failed: "), "{report}");

    // A server with no program is refused with the line to fix.
    std::fs::write(
        dir.path().join("settings.toml"),
        "[[mcp.servers]]\nname = \"broken\"\nargs = [\"x\"]\n",
    )
    .unwrap();
    let (code, _, err) = output(jarvis(&dir).args(["mcp", "list"])).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("[[mcp.servers]] number 1 (broken): command is missing"),
        "{err}"
    );
    // A name its tools could not be offered under; a url that is not one, or beside a program.
    for (server, why) in [
        (
            "name = \"my files\"\ncommand = \"x\"",
            "a server's name is 1 to 32 letters",
        ),
        (
            "name = \"web\"\nurl = \"ftp://host/mcp\"",
            "(web): url = \"ftp://host/mcp\" is not an http:// or https:// address",
        ),
        (
            "name = \"web\"\ncommand = \"x\"\nurl = \"http://host/mcp\"",
            "(web): command and url are both given",
        ),
        (
            "name = \"web\"\nurl = \"http://host/mcp\"\nargs = [\"-v\"]",
            "(web): args and env are for a program Jarvis runs",
        ),
        (
            "name = \"web\"\nurl = \"https://ada:secret@host/mcp\"",
            "(web): the url holds a user name or password",
        ),
    ] {
        std::fs::write(
            dir.path().join("settings.toml"),
            format!("[[mcp.servers]]\n{server}\n"),
        )
        .unwrap();
        let (code, _, err) = output(jarvis(&dir).args(["mcp", "list"])).await;
        assert_ne!(code, 0);
        assert!(err.contains(why), "{err}");
    }
    // A server at a url, reached from the command line.
    let (_everything, url) = everything_over_http().await;
    std::fs::write(
        dir.path().join("settings.toml"),
        format!("[[mcp.servers]]\nname = \"web\"\nurl = \"{url}\"\n"),
    )
    .unwrap();
    let (code, listed, err) = output(jarvis(&dir).args(["mcp", "list"])).await;
    assert_eq!(code, 0, "{err}");
    assert!(listed.starts_with("web\trunning, "), "{listed}");
    let (code, echoed, err) = output(jarvis(&dir).args([
        "mcp",
        "call",
        "web",
        "echo",
        r#"{"message": "from the terminal"}"#,
    ]))
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(echoed.contains("from the terminal"), "{echoed}");
    assert!(err.is_empty(), "nothing logged: {err}");
}

// ---- The model's calls to the servers' tools, through the service, against the stub. ----

/// The service answering through the stub, with `mcp`'s servers' tools offered.
fn service_with_tools(dir: &Dir, stub: &Stub, kind: BackendKind, mcp: McpSettings) -> Service {
    let mut settings = settings(kind, stub);
    settings.mcp = mcp;
    let config = dir.config(settings);
    let backend =
        jarvis::llm::from_config(&config, &env_with(&[("ANTHROPIC_API_KEY", "test-key")]))
            .expect("backend");
    let options =
        ServiceOptions::from_settings(&config.settings).with_mcp(Servers::of(&config.settings.mcp));
    Service::start(dir.store(), backend, options)
}

fn mcp(list: Vec<McpServerSettings>, call_timeout_secs: f64) -> McpSettings {
    McpSettings {
        servers: list,
        call_timeout_secs,
        start_timeout_secs: 60.0,
    }
}

fn approving(mut server: McpServerSettings, approve: Approve) -> McpServerSettings {
    server.approve = approve;
    server
}

/// The tools a request body offers, as (name, description, schema), either wire format.
fn offered(body: &serde_json::Value) -> Vec<(String, String, serde_json::Value)> {
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    let f = if t["function"].is_object() {
                        &t["function"]
                    } else {
                        t
                    };
                    let schema = if f["parameters"].is_object() {
                        f["parameters"].clone()
                    } else {
                        f["input_schema"].clone()
                    };
                    (
                        f["name"].as_str().unwrap_or_default().to_string(),
                        f["description"].as_str().unwrap_or_default().to_string(),
                        schema,
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The chat's action lines (tool records), in order.
fn action_lines(service: &Service, chat: jarvis::ChatId) -> Vec<String> {
    service
        .store()
        .records(chat)
        .unwrap()
        .into_iter()
        .filter(|r| r.role == Role::Tool)
        .map(|r| r.text)
        .collect()
}

/// Reads `reply`'s events until a call waits for consent; returns it (call id, server, tool,
/// arguments).
async fn until_consent(
    attachment: &mut jarvis::Attachment,
    reply: jarvis::ReplyId,
) -> (String, String, String, String) {
    let read = async {
        while let Some(event) = attachment.next_of(reply).await {
            match event {
                Event::Consent {
                    call,
                    server,
                    tool,
                    arguments,
                    ..
                } => return (call, server, tool, arguments),
                Event::ReplyEnded { state, reason, .. } => {
                    panic!("the reply ended ({state:?}, {reason:?}) without asking")
                }
                _ => {}
            }
        }
        panic!("the service went away")
    };
    tokio::time::timeout(LIMIT, read)
        .await
        .expect("no call waited for consent")
}

async fn the_models_calls_reach_the_everything_server_and_its_results_the_next_request(
    kind: BackendKind,
) {
    let stub = Stub::start().await.unwrap();
    stub.push(
        Script::text("Let me check.")
            .tool_call("c1", "everything__echo", r#"{"message": "hello, Jarvis"}"#)
            .tool_call("c2", "everything__get-sum", r#"{"a": 2, "b": 3}"#),
    );
    stub.push(Script::text("It says hello, and 2 and 3 make 5."));
    let dir = Dir::new();
    let everything = reference("mcp-server-everything");
    let service = service_with_tools(
        &dir,
        &stub,
        kind,
        mcp(
            vec![approving(
                server("everything", &everything, &["stdio"]),
                Approve::Always,
            )],
            30.0,
        ),
    );
    let (chat, reply, mut attachment) = ask_new(&service, "Echo hello and add 2 and 3.").await;
    let events = until_end_within(Duration::from_secs(90), &mut attachment, reply).await;
    assert_eq!(ending(&events), (ReplyState::Done, None), "{events:?}");
    assert_eq!(
        text_of(&events),
        "Let me check.\n\nIt says hello, and 2 and 3 make 5."
    );
    let received = stub.received();
    assert_eq!(received.len(), 2);
    // Offered beside the memory tools, namespaced, with the server's description and schema.
    let tools = offered(&received[0].body);
    let names: Vec<&str> = tools.iter().map(|t| t.0.as_str()).collect();
    assert!(
        names.contains(&"remember_fact") && names.contains(&"forget_fact"),
        "{names:?}"
    );
    let echo = tools
        .iter()
        .find(|t| t.0 == "everything__echo")
        .unwrap_or_else(|| panic!("echo offered: {names:?}"));
    assert!(echo.1.to_lowercase().contains("echo"), "{}", echo.1);
    assert_eq!(echo.2["required"], json!(["message"]));
    assert_eq!(echo.2["properties"]["message"]["type"], "string");
    assert!(names.contains(&"everything__get-sum"), "{names:?}");
    // Both results went back, marked as text from outside.
    let results = tool_results(&received[1].body);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].contains("Echo: hello, Jarvis"), "{results:?}");
    assert!(
        results[1].contains("The sum of 2 and 3 is 5."),
        "{results:?}"
    );
    assert!(
        results
            .iter()
            .all(|r| r.starts_with(jarvis::envelope::OUTSIDE_OPEN)),
        "{results:?}"
    );
    // The chat keeps each call as an action line: what was called, with what, and what came.
    let lines = action_lines(&service, chat);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with("Used everything · echo\n"),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains("\"message\": \"hello, Jarvis\""),
        "{}",
        lines[0]
    );
    assert!(lines[0].ends_with("Echo: hello, Jarvis"), "{}", lines[0]);
    assert!(
        lines[1].starts_with("Used everything · get-sum\n"),
        "{}",
        lines[1]
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::ToolCalled { .. }))
            .count(),
        2
    );
    assert!(
        !events.iter().any(|e| matches!(e, Event::Consent { .. })),
        "approve = always asks nothing"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_models_calls_reach_the_everything_server_and_its_results_the_next_request_anthropic() {
    the_models_calls_reach_the_everything_server_and_its_results_the_next_request(
        BackendKind::Anthropic,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_models_calls_reach_the_everything_server_and_its_results_the_next_request_openai() {
    the_models_calls_reach_the_everything_server_and_its_results_the_next_request(
        BackendKind::Openai,
    )
    .await;
}

/// A folder holding plans.txt ("The launch is on Tuesday."), the file's path, and the stub
/// scripted for `replies` replies that each ask the filesystem server (`files`) to read it once,
/// then answer "Answer N.".
async fn plans_the_model_asks_to_read(replies: usize) -> (tempfile::TempDir, String, Stub) {
    let folder = tempfile::tempdir().unwrap();
    let plans = folder.path().join("plans.txt");
    std::fs::write(&plans, "The launch is on Tuesday.").unwrap();
    let path = plans.display().to_string();
    let call = format!(r#"{{"path": {}}}"#, json!(path));
    let stub = Stub::start().await.unwrap();
    for n in 1..=replies {
        stub.push(Script::text("").tool_call(&format!("c{n}"), "files__read_text_file", &call));
        stub.push(Script::text(format!("Answer {n}.")));
    }
    (folder, path, stub)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_is_read_only_after_the_users_allow_and_a_deny_reaches_the_model_as_a_refusal() {
    let (folder, path, stub) = plans_the_model_asks_to_read(4).await;
    let dir = Dir::new();
    let filesystem = reference("mcp-server-filesystem");
    let folder_arg = folder.path().display().to_string();
    let service = service_with_tools(
        &dir,
        &stub,
        BackendKind::Anthropic,
        mcp(vec![server("files", &filesystem, &[&folder_arg])], 30.0),
    );
    let chat = service.new_chat(None).await.unwrap().id;
    let mut attachment = service.attach(chat).await.unwrap();

    // Denied: nothing is read, and the model is told as a tool's ordinary result.
    let reply = service.ask(chat, "What is in plans.txt?").await.unwrap();
    let (id, server_name, tool, arguments) = until_consent(&mut attachment, reply).await;
    assert_eq!(
        (id.as_str(), server_name.as_str(), tool.as_str()),
        ("c1", "files", "read_text_file")
    );
    assert!(arguments.contains(&path), "{arguments}");
    assert_eq!(
        service.actions_running(chat),
        1,
        "a call waiting for consent is an action still running"
    );
    assert!(service.consent(reply, "c1", Consent::Deny));
    assert!(
        !service.consent(reply, "c1", Consent::Once),
        "answered once"
    );
    let events = until_end_within(Duration::from_secs(90), &mut attachment, reply).await;
    assert_eq!(ending(&events).0, ReplyState::Done);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Consented { call, allowed: false, .. } if call == "c1")));
    let denied = tool_results(&stub.received()[1].body);
    assert_eq!(denied.len(), 1);
    assert!(
        denied[0].contains("was not run: the user denied it"),
        "{denied:?}"
    );
    assert!(!denied[0].contains("Tuesday"), "{denied:?}");
    assert_eq!(service.actions_running(chat), 0);

    // Allowed once: read, and the next call asks again.
    let reply = service.ask(chat, "Please read it.").await.unwrap();
    until_consent(&mut attachment, reply).await;
    assert!(service.consent(reply, "c2", Consent::Once));
    until_end_within(Duration::from_secs(90), &mut attachment, reply).await;
    let read = tool_results(&stub.received()[3].body);
    assert!(
        read.last().unwrap().contains("The launch is on Tuesday."),
        "{read:?}"
    );

    // Always allowed: this call runs, and the next without asking.
    let reply = service.ask(chat, "And again.").await.unwrap();
    until_consent(&mut attachment, reply).await;
    assert!(service.consent(reply, "c3", Consent::Always));
    until_end_within(Duration::from_secs(90), &mut attachment, reply).await;
    assert_eq!(
        dir.store().allowed_tools().unwrap(),
        [("files".to_string(), "read_text_file".to_string())]
    );
    let reply = service.ask(chat, "Once more.").await.unwrap();
    let events = until_end_within(Duration::from_secs(90), &mut attachment, reply).await;
    assert!(
        !events.iter().any(|e| matches!(e, Event::Consent { .. })),
        "{events:?}"
    );
    let read = tool_results(&stub.received()[7].body);
    assert!(
        read.last().unwrap().contains("The launch is on Tuesday."),
        "{read:?}"
    );

    let lines = action_lines(&service, chat);
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines[0].starts_with("Not run: files · read_text_file — denied\n"),
        "{}",
        lines[0]
    );
    assert!(!lines[0].contains("Tuesday"));
    for line in &lines[1..] {
        assert!(line.starts_with("Used files · read_text_file\n"), "{line}");
        assert!(line.ends_with("The launch is on Tuesday."), "{line}");
    }
}

/// `jarvis ask` asks on its terminal before a tool runs, naming the server, the tool and what it
/// would be given; "o" runs it once and what it read reaches the model. Without a terminal to
/// ask, the call is denied, the user is told why, and the model is told as a tool's result.
#[tokio::test(flavor = "multi_thread")]
async fn jarvis_ask_runs_a_tool_only_after_a_yes_on_its_terminal_and_denies_it_without_one() {
    let (folder, path, stub) = plans_the_model_asks_to_read(2).await;
    let dir = Dir::new();
    std::fs::write(
        dir.path().join("settings.toml"),
        format!(
            "[[mcp.servers]]\nname = \"files\"\ncommand = {:?}\nargs = [{:?}]\n",
            reference("mcp-server-filesystem"),
            folder.path().display().to_string()
        ),
    )
    .unwrap();
    let ask = |question: &str| {
        let mut cmd = jarvis(&dir);
        at_stub(&mut cmd, &stub);
        cmd.args(["ask", "--new", question]);
        cmd
    };

    // On a terminal: asked there, and "o" (once) lets the file be read.
    let mut on_tty = on_a_terminal(&ask("What is in plans.txt?"));
    on_tty
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = on_tty.spawn().unwrap();
    let mut typed = child.stdin.take().unwrap();
    let mut shown = child.stdout.take().unwrap();
    let asked =
        String::from_utf8_lossy(&read_until_within(SERVER_LIMIT, &mut shown, "Allow it?").await)
            .into_owned();
    assert!(
        asked.contains("Jarvis wants to use files · read_text_file with:") && asked.contains(&path),
        "{asked}"
    );
    assert_eq!(
        stub.received().len(),
        1,
        "nothing was read before the user answered"
    );
    {
        use tokio::io::AsyncWriteExt as _;
        typed.write_all(b"o\n").await.unwrap();
    }
    // Everything it shows after, to its end (an answer streamed in pieces may have a log line
    // of stderr between them on the terminal, so the answer is read back from the chat).
    let mut rest = Vec::new();
    {
        use tokio::io::AsyncReadExt as _;
        tokio::time::timeout(SERVER_LIMIT, shown.read_to_end(&mut rest))
            .await
            .unwrap()
            .unwrap();
    }
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    drop(typed);
    assert!(
        status.success(),
        "{asked}{}",
        String::from_utf8_lossy(&rest)
    );
    let read = tool_results(&stub.received()[1].body);
    assert!(
        read.last().unwrap().contains("The launch is on Tuesday."),
        "{read:?}"
    );
    let (_, shown, _) = output(jarvis(&dir).args(["show", "1"])).await;
    assert!(shown.ends_with("assistant: Answer 1.\n"), "{shown}");

    // With no terminal (a session of its own has none): denied, and said so.
    let mut detached = ask("And now?");
    // SAFETY: setsid is async-signal-safe and touches nothing of the parent's. Should it fail,
    // the command does not run (it would ask on the terminal the tests run in).
    unsafe {
        detached.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (code, out, err) = output_within(SERVER_LIMIT, &mut detached).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("(denied: there is no terminal to ask"),
        "{err}"
    );
    assert_eq!(out.trim_end(), "Answer 2.");
    let denied = tool_results(&stub.received()[3].body);
    assert!(
        denied
            .last()
            .unwrap()
            .contains("was not run: the user denied it"),
        "{denied:?}"
    );
    assert!(!denied.last().unwrap().contains("Tuesday"), "{denied:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_ends_a_reply_whose_call_waits_for_consent_or_runs() {
    let stub = Stub::start().await.unwrap();
    stub.push(Script::text("").tool_call("c1", "asks__work", "{}"));
    stub.push(Script::text("").tool_call("c2", "slow__work", "{}"));
    let dir = Dir::new();
    let service = service_with_tools(
        &dir,
        &stub,
        BackendKind::Anthropic,
        mcp(
            vec![
                misbehaving("asks", "fine"),
                approving(misbehaving("slow", "silent"), Approve::Always),
            ],
            // Longer than any test: only Stop ends the silent call.
            600.0,
        ),
    );
    // Stop while the call waits for the user.
    let (chat, reply, mut attachment) = ask_new(&service, "Do some work.").await;
    until_consent(&mut attachment, reply).await;
    assert!(service.stop(chat).await.unwrap());
    let events = until_end(&mut attachment, reply).await;
    assert_eq!(ending(&events).0, ReplyState::Stopped, "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Consented { allowed: false, .. })),
        "the card goes"
    );
    assert!(
        !service.consent(reply, "c1", Consent::Once),
        "no longer waits"
    );
    assert_eq!(service.actions_running(chat), 0);

    // Stop while the call runs: the call counts as an action until then.
    let reply = service.ask(chat, "Do slow work.").await.unwrap();
    let read = async {
        while let Some(event) = attachment.next_of(reply).await {
            if matches!(&event, Event::Action { label, .. } if label == "Using slow · work…") {
                return;
            }
            assert!(!matches!(event, Event::ReplyEnded { .. }), "{event:?}");
        }
    };
    tokio::time::timeout(LIMIT, read)
        .await
        .expect("the call ran");
    assert_eq!(service.actions_running(chat), 1);
    assert!(service.stop(chat).await.unwrap());
    let events = until_end(&mut attachment, reply).await;
    assert_eq!(ending(&events).0, ReplyState::Stopped, "{events:?}");
    assert_eq!(service.actions_running(chat), 0);
    assert_eq!(stub.received().len(), 2, "nothing more was asked");
    // It may have done something: the chat keeps that it was called.
    let lines = action_lines(&service, chat);
    assert_eq!(
        lines.last().map(|l| l.lines().next().unwrap_or_default()),
        Some("Stopped: slow · work — stopped while it ran"),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_card_nobody_answers_holds_no_other_chat_back_from_a_one_at_a_time_backend() {
    let stub = Stub::start().await.unwrap();
    stub.push(Script::text("").tool_call("c1", "asks__work", "{}"));
    stub.push(Script::text("The other chat's answer."));
    stub.push(Script::text("Worked."));
    let dir = Dir::new();
    let mut settings = settings(BackendKind::Openai, &stub);
    settings.replies.max_concurrent = 1;
    settings.mcp = mcp(vec![misbehaving("asks", "fine")], 30.0);
    let config = dir.config(settings);
    let backend = jarvis::llm::from_config(&config, &env_with(&[])).expect("backend");
    let service = Service::start(
        dir.store(),
        backend,
        ServiceOptions::from_settings(&config.settings).with_mcp(Servers::of(&config.settings.mcp)),
    );
    let (_, waiting, mut card) = ask_new(&service, "Do some work.").await;
    until_consent(&mut card, waiting).await;
    // The card waits; another chat is answered meanwhile.
    let (_, other, mut attachment) = ask_new(&service, "Something else?").await;
    let events = until_end(&mut attachment, other).await;
    assert_eq!(ending(&events).0, ReplyState::Done, "{events:?}");
    assert_eq!(text_of(&events), "The other chat's answer.");
    // Allowed, the first reply takes the backend again and ends.
    assert!(service.consent(waiting, "c1", Consent::Once));
    let events = until_end(&mut card, waiting).await;
    assert_eq!(ending(&events), (ReplyState::Done, None), "{events:?}");
    assert_eq!(text_of(&events), "Worked.");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_exits_hangs_or_cannot_start_is_a_tool_error_and_the_reply_goes_on() {
    let stub = Stub::start().await.unwrap();
    stub.push(
        Script::text("")
            .tool_call("c1", "crashes__work", "{}")
            .tool_call("c2", "hangs__work", "{}")
            .tool_call("c3", "missing__work", "{}")
            .tool_call("c4", "fine__work", "{}"),
    );
    stub.push(Script::text("Some of it worked."));
    let dir = Dir::new();
    let always = |s| approving(s, Approve::Always);
    let service = service_with_tools(
        &dir,
        &stub,
        BackendKind::Openai,
        mcp(
            vec![
                always(misbehaving("crashes", "exit")),
                always(misbehaving("hangs", "silent")),
                always(server("missing", "/nonexistent/mcp-server", &[])),
                always(misbehaving("fine", "fine")),
            ],
            2.0,
        ),
    );
    let (chat, reply, mut attachment) = ask_new(&service, "Work.").await;
    let events = until_end(&mut attachment, reply).await;
    assert_eq!(ending(&events), (ReplyState::Done, None), "{events:?}");
    assert_eq!(text_of(&events), "Some of it worked.");
    let names: Vec<String> = offered(&stub.received()[0].body)
        .into_iter()
        .map(|t| t.0)
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with("missing__")),
        "a server that cannot start offers nothing: {names:?}"
    );
    let results = tool_results(&stub.received()[1].body);
    assert_eq!(results.len(), 4, "{results:?}");
    assert!(results[0].contains("exited while answering"), "{results:?}");
    assert!(
        results[1].contains("did not answer the call to work within 2 s"),
        "{results:?}"
    );
    assert!(
        results[2].contains("was not run: the MCP server missing could not be started")
            && results[2].contains("/nonexistent/mcp-server"),
        "{results:?}"
    );
    assert!(results[3].contains("worked"), "{results:?}");
    let lines = action_lines(&service, chat);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[0].starts_with("Used crashes · work — failed\n"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("Used hangs · work — failed\n"),
        "{lines:?}"
    );
    assert!(lines[2].starts_with("Used fine · work\n"), "{lines:?}");
}

/// The last message of a request body, as text (the question, after its state block).
fn last_user_text(body: &serde_json::Value) -> String {
    let last = body["messages"].as_array().unwrap().last().unwrap();
    match &last["content"] {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Whether the last tool result of a request body says a call waits for the user's consent.
fn asks_consent(body: &serde_json::Value) -> bool {
    tool_results(body)
        .last()
        .is_some_and(|r| r.contains("was not run: it needs the user's consent"))
}

/// Waits until the voice conversation has no reply running; returns whether Jarvis waits for the
/// user's answer to a question of its own.
async fn voice_settled(service: &Service) -> bool {
    let mut status = service.voice_status();
    let settled = status.wait_for(|s| s.replying.is_none() && s.queue.is_empty());
    let awaiting = tokio::time::timeout(LIMIT, settled)
        .await
        .expect("the voice reply never ended")
        .expect("the service went away")
        .awaiting_answer;
    awaiting
}

#[tokio::test(flavor = "multi_thread")]
async fn in_the_voice_conversation_a_call_is_asked_aloud_and_runs_only_after_the_users_own_yes() {
    let folder = tempfile::tempdir().unwrap();
    let secret = folder.path().join("plans.txt");
    std::fs::write(&secret, "The launch is on Tuesday.").unwrap();
    let call = format!(r#"{{"path": {}}}"#, json!(secret.display().to_string()));
    let other = format!(
        r#"{{"path": {}}}"#,
        json!(folder.path().join("other.txt").display().to_string())
    );
    let stub = Stub::start().await.unwrap();
    // 1: asked aloud; calling again in the same answer runs nothing either.
    stub.push(Script::text("").tool_call("c1", "files__read_text_file", &call));
    stub.push(Script::text("").tool_call("c2", "files__read_text_file", &call));
    stub.push(Script::text("Shall I read plans.txt?"));
    // 2: the user's "yes": the same call runs.
    stub.push(Script::text("").tool_call("c3", "files__read_text_file", &call));
    stub.push(Script::text("The launch is on Tuesday."));
    // 3: a new call is asked; 4: "no", and the model does not call; 5: a call made on no yes
    // of the user's to the question that lapsed is asked again, not run.
    stub.push(Script::text("").tool_call("c4", "files__read_text_file", &call));
    stub.push(Script::text("Shall I read it again?"));
    stub.push(Script::text("Alright, I won't."));
    stub.push(Script::text("").tool_call("c5", "files__read_text_file", &call));
    stub.push(Script::text("Shall I?"));
    // 6: a yes answers only the call asked: another file is asked about first.
    stub.push(Script::text("").tool_call("c6", "files__read_text_file", &other));
    stub.push(Script::text("Shall I read other.txt instead?"));
    // 7: a yes, then text from outside read (a tool that runs unasked) before the call: not
    // run, asked again.
    stub.push(Script::text("").tool_call("c7", "free__work", "{}"));
    stub.push(Script::text("").tool_call("c8", "files__read_text_file", &other));
    stub.push(Script::text("Shall I?"));
    let dir = Dir::new();
    let filesystem = reference("mcp-server-filesystem");
    let folder_arg = folder.path().display().to_string();
    let service = service_with_tools(
        &dir,
        &stub,
        BackendKind::Anthropic,
        mcp(
            vec![
                server("files", &filesystem, &[&folder_arg]),
                approving(misbehaving("free", "fine"), Approve::Always),
            ],
            30.0,
        ),
    );
    // Typed into the orb: the voice conversation, which shows no action card.
    service.voice_ask("What is in plans.txt?").await.unwrap();
    assert!(
        voice_settled(&service).await,
        "Jarvis waits for the answer to its question"
    );
    let received = stub.received();
    assert_eq!(received.len(), 3);
    let asked = tool_results(&received[1].body);
    assert!(
        asked[0].contains("files__read_text_file was not run: it needs the user's consent")
            && asked[0].contains("Ask them"),
        "{asked:?}"
    );
    let again = tool_results(&received[2].body);
    assert!(
        again
            .last()
            .unwrap()
            .contains("was not run: the user has not answered yet"),
        "{again:?}"
    );
    assert!(
        !format!("{asked:?}{again:?}").contains("Tuesday"),
        "nothing was read"
    );

    service.voice_ask("Yes, go ahead.").await.unwrap();
    voice_settled(&service).await;
    let received = stub.received();
    assert_eq!(received.len(), 5);
    let question = format!(
        "Shall I use read_text_file of your files server, with path {}?",
        secret.display()
    );
    assert!(
        asked[0].contains(&format!("in these words: \"{question}\"")),
        "the model is given Jarvis's own words for the call: {asked:?}"
    );
    let said = last_user_text(&received[3].body);
    assert!(
        said.contains(&format!(
            "Waiting for the user to confirm: {question} (if this message says yes to it, call files__read_text_file again with the same arguments; otherwise it is not run)"
        )) && said.ends_with("Yes, go ahead."),
        "{said}"
    );
    let read = tool_results(&received[4].body);
    assert!(
        read.last().unwrap().contains("The launch is on Tuesday."),
        "{read:?}"
    );

    service.voice_ask("Read it once more.").await.unwrap();
    assert!(voice_settled(&service).await);
    service.voice_ask("No.").await.unwrap();
    voice_settled(&service).await;
    service.voice_ask("Well?").await.unwrap();
    voice_settled(&service).await;
    let received = stub.received();
    assert_eq!(received.len(), 10);
    assert!(
        !last_user_text(&received[8].body).contains("Waiting for the user to confirm"),
        "the question lapsed with the answer that said no"
    );
    assert!(asks_consent(&received[9].body), "{:?}", received[9].body);

    service.voice_ask("Yes.").await.unwrap();
    voice_settled(&service).await;
    let received = stub.received();
    assert!(asks_consent(&received[11].body), "{:?}", received[11].body);

    service.voice_ask("Yes.").await.unwrap();
    voice_settled(&service).await;
    let received = stub.received();
    assert_eq!(received.len(), 15);
    let refused = tool_results(&received[14].body);
    assert!(
        refused
            .last()
            .unwrap()
            .contains("has read text from outside (a tool's result) since the user spoke"),
        "{refused:?}"
    );

    let chat = service.voice_status().borrow().chat.unwrap();
    let lines = action_lines(&service, chat);
    let heads: Vec<&str> = lines.iter().map(|l| l.lines().next().unwrap()).collect();
    assert_eq!(
        heads,
        [
            "Not run: files · read_text_file — asked aloud for consent",
            "Not run: files · read_text_file — not answered yet",
            "Used files · read_text_file",
            "Not run: files · read_text_file — asked aloud for consent",
            "Not run: files · read_text_file — asked aloud for consent",
            "Not run: files · read_text_file — asked aloud for consent",
            "Used free · work",
            "Not run: files · read_text_file — asked aloud again",
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_asked_aloud_by_a_reply_that_was_stopped_is_not_answered_by_the_next_words() {
    let stub = Stub::start().await.unwrap();
    stub.push(Script::text("").tool_call("c1", "asks__work", "{}"));
    let gate = stub.gate();
    stub.push(
        Script::text("Shall I do the work?")
            .deltas_of(2)
            .held_after(1, &gate),
    );
    stub.push(Script::text("").tool_call("c2", "asks__work", "{}"));
    stub.push(Script::text("Shall I?"));
    let dir = Dir::new();
    let service = service_with_tools(
        &dir,
        &stub,
        BackendKind::Anthropic,
        mcp(vec![misbehaving("asks", "fine")], 30.0),
    );
    service.voice_ask("Do some work.").await.unwrap();
    reached(&gate).await;
    // Stopped before the question was heard.
    assert!(service.voice_stop().await.unwrap());
    voice_settled(&service).await;
    service.voice_ask("Yes.").await.unwrap();
    voice_settled(&service).await;
    let received = stub.received();
    assert_eq!(received.len(), 4);
    assert!(
        !last_user_text(&received[2].body).contains("Waiting for the user to confirm"),
        "the question lapsed with the stop"
    );
    assert!(asks_consent(&received[3].body), "{:?}", received[3].body);
}
