//! MCP servers over real stdio: the reference servers (`@modelcontextprotocol/server-everything`
//! and `server-filesystem`, installed from `tests/mcp-servers`' lockfile by
//! `scripts/mcp-servers`), and a server of the tests' own that misbehaves on purpose
//! (`tests/mcp-servers/misbehaving.py`).

mod support;

use std::path::{Path, PathBuf};

use jarvis::config::{McpServerSettings, McpSettings};
use jarvis::mcp::{McpError, ServerState, Servers};
use serde_json::json;
use support::*;

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
    // A name its tools could not be offered under.
    std::fs::write(
        dir.path().join("settings.toml"),
        "[[mcp.servers]]\nname = \"my files\"\ncommand = \"x\"\n",
    )
    .unwrap();
    let (code, _, err) = output(jarvis(&dir).args(["mcp", "list"])).await;
    assert_ne!(code, 0);
    assert!(err.contains("a server's name is 1 to 32 letters"), "{err}");
}
