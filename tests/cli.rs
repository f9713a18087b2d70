//! The `jarvis` binary as a user runs it: separate processes sharing one database, a crash, keys.

mod support;

use std::process::Stdio;
use std::time::Duration;

use jarvis::ReplyState;
use jarvis_stub::{Script, Stub};
use support::*;
use tokio::io::AsyncReadExt;

#[tokio::test(flavor = "multi_thread")]
async fn ask_streams_the_reply_and_another_process_shows_it() {
    let stub = Stub::start().await.unwrap();
    let dir = Dir::new();
    let mut ask = jarvis(&dir);
    at_stub(&mut ask, &stub);
    let (code, stdout, stderr) = output(ask.args(["ask", "--new", "hello"])).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.starts_with("chat 1\n"), "{stderr}");
    assert_eq!(stdout, "You said: hello\n");

    let (code, shown, _) = output(jarvis(&dir).args(["show", "1"])).await;
    assert_eq!(code, 0);
    assert_eq!(
        shown,
        "# hello (chat 1)\nuser: hello\nassistant: You said: hello\n"
    );
    let (_, chats, _) = output(jarvis(&dir).arg("chats")).await;
    assert_eq!(chats, "1\tdone\thello\n");

    // `-` reads the question from stdin; --chat continues the chat.
    let mut ask = jarvis(&dir);
    at_stub(&mut ask, &stub);
    ask.args(["ask", "--chat", "1", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = ask.spawn().unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"from stdin").await.unwrap();
    }
    let out = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "You said: from stdin\n"
    );
    let (_, shown, _) = output(jarvis(&dir).args(["show", "1"])).await;
    assert!(
        shown.ends_with("user: from stdin\nassistant: You said: from stdin\n"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_replying_in_another_process_refuses_a_second_question() {
    let stub = Stub::start().await.unwrap();
    // The first process replies until the second has been refused.
    let gate = stub.gate();
    stub.push(
        Script::text("A slow and steady answer.")
            .deltas_of(1)
            .held_after(1, &gate),
    );
    let dir = Dir::new();
    let mut first = jarvis(&dir);
    at_stub(&mut first, &stub);
    let mut child = first
        .args(["ask", "--new", "slow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut byte = [0u8; 1];
    stdout.read_exact(&mut byte).await.unwrap(); // it is replying now

    let mut second = jarvis(&dir);
    at_stub(&mut second, &stub);
    let (code, _, stderr) = output(second.args(["ask", "--chat", "1", "me too"])).await;
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("chat 1 is still replying"), "{stderr}");
    gate.release();
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_killed_mid_reply_leaves_the_partial_text_interrupted() {
    let stub = Stub::start().await.unwrap();
    let answer = "First sentence here. Second one follows. Third never ends because";
    // Held after "First sentence here. Second" until the process is killed.
    let gate = stub.gate();
    stub.push(Script::text(answer).deltas_of(3).held_after(9, &gate));
    let dir = Dir::new();
    let mut ask = jarvis(&dir);
    at_stub(&mut ask, &stub);
    let mut child = ask
        .args(["ask", "--new", "tell me"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    read_until(&mut stdout, "Second").await;
    // Once the first sentence's progress is stored (the process writes it within a tick), SIGKILL.
    let store = dir.store();
    eventually("the first sentence to be stored", || {
        let stored = store.last_reply(jarvis::ChatId(1)).unwrap();
        stored.is_some_and(|r| r.text.starts_with("First sentence here."))
    })
    .await;
    drop(store);
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let store = dir.store(); // the next start
    let reply = store.last_reply(jarvis::ChatId(1)).unwrap().unwrap();
    assert_eq!(reply.state, ReplyState::Interrupted);
    assert!(
        reply.text.starts_with("First sentence here."),
        "{:?}",
        reply.text
    );
    assert!(answer.starts_with(&reply.text) && reply.text.len() < answer.len());
    let records = store.records(jarvis::ChatId(1)).unwrap();
    assert_eq!(records[0].text, "tell me", "the question is kept");
    assert_eq!(
        records[1].text, reply.text,
        "the partial answer is a record"
    );
    assert_eq!(store.integrity_check().unwrap(), "ok");

    let (_, shown, _) = output(jarvis(&dir).args(["show", "1"])).await;
    assert!(
        shown.contains("assistant (interrupted): First sentence here."),
        "{shown}"
    );
}

/// A disk that fills during a reply: the data directory is a 1 MiB tmpfs, mounted in a user and
/// mount namespace of the test's own (`unshare`), and the reply's progress fills it.
#[tokio::test(flavor = "multi_thread")]
async fn a_disk_that_fills_during_a_reply_fails_it_by_name_and_keeps_the_question_and_what_was_stored(
) {
    let stub = Stub::start().await.unwrap();
    let answer = "This sentence is one of many in a long answer. ".repeat(3000);
    stub.push(
        Script::text(&answer)
            .deltas_of(2000)
            .paced(Duration::from_millis(10)),
    );
    let dir = Dir::new();
    let (data, out) = (dir.path().join("data"), dir.path().join("out"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let script = r#"mount -t tmpfs -o size=1m tmpfs "$JARVIS_DATA_DIR" || exit 90
"$JARVIS" ask --new "Tell me a long story." > "$OUT/ask.out" 2> "$OUT/ask.err"
echo $? > "$OUT/ask.rc"
# Space is freed, as the user would; what the chat kept is read back.
mount -o remount,size=64m "$JARVIS_DATA_DIR"
"$JARVIS" show 1 > "$OUT/show.out" 2>&1
cp "$JARVIS_DATA_DIR"/jarvis.db* "$OUT/"
"#;
    let mut cmd = tokio::process::Command::new("unshare");
    cmd.args(["--user", "--map-root-user", "--mount", "sh", "-c", script])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("JARVIS_DATA_DIR", &data)
        .env("JARVIS_CONFIG", dir.path().join("settings.toml"))
        .env("JARVIS_KEYRING", "off")
        .env("JARVIS", env!("CARGO_BIN_EXE_jarvis"))
        .env("OUT", &out)
        .kill_on_drop(true);
    at_stub(&mut cmd, &stub);
    let (code, _, err) = output(&mut cmd).await;
    assert_eq!(
        code, 0,
        "a namespace with a small tmpfs (unshare, mount): {err}"
    );
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();

    // The whole answer was shown; the end says it could not be saved, and why.
    assert_eq!(read("ask.rc").trim(), "1");
    assert_eq!(read("ask.out").trim_end(), answer.trim_end());
    let said = read("ask.err");
    assert!(
        said.contains("the answer could not be saved") && said.contains("database or disk is full"),
        "{said}"
    );
    // What was kept: the question, and the answer as far as it was stored, in a sound database.
    let shown = read("show.out");
    assert!(
        shown.contains("Tell me a long story.")
            && shown.contains("assistant (interrupted): This sentence is one of many"),
        "{shown}"
    );
    let store = jarvis::store::Store::open(&out.join("jarvis.db"), Duration::from_secs(1)).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
    let reply = store.last_reply(jarvis::ChatId(1)).unwrap().unwrap();
    assert!(
        !reply.text.is_empty()
            && answer.starts_with(&reply.text)
            && reply.text.len() < answer.len(),
        "a prefix of the answer is kept: {} of {} characters",
        reply.text.len(),
        answer.len()
    );
    let records = store.records(jarvis::ChatId(1)).unwrap();
    assert_eq!(records.len(), 2, "one question, one answer");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_key_refuses_at_start_naming_the_variable() {
    let dir = Dir::new();
    for (backend, var) in [
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("openai", "OPENAI_API_KEY"),
    ] {
        let (code, stdout, stderr) = output(
            jarvis(&dir)
                .env("JARVIS_BACKEND", backend)
                .args(["ask", "--new", "hi"]),
        )
        .await;
        assert_eq!(code, 1);
        assert!(stdout.is_empty());
        assert!(stderr.contains(&format!("{var} is not set")), "{stderr}");
        let (code, doctor, _) =
            output(jarvis(&dir).env("JARVIS_BACKEND", backend).arg("doctor")).await;
        assert_ne!(code, 0);
        assert!(doctor.contains(&format!("key: {var} missing")), "{doctor}");
    }
    // Nothing was stored for the refused questions.
    let (_, chats, _) = output(jarvis(&dir).arg("chats")).await;
    assert_eq!(chats, "");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trace_log_of_a_whole_session_never_contains_the_key() {
    const KEY: &str = "sk-ant-api03-SECRET-do-not-log-0123456789";
    let stub = Stub::start().await.unwrap();
    let dir = Dir::new();
    let with_key = |cmd: &mut tokio::process::Command| {
        cmd.env("JARVIS_LOG", "trace")
            .env("JARVIS_BACKEND", "anthropic")
            .env("ANTHROPIC_BASE_URL", stub.anthropic_url())
            .env("ANTHROPIC_API_KEY", KEY);
    };
    let mut log = String::new();
    for args in [
        vec!["ask", "--new", "hello"],
        vec!["doctor"],
        vec!["chats"],
        vec!["show", "1"],
    ] {
        let mut cmd = jarvis(&dir);
        with_key(&mut cmd);
        let (_, stdout, stderr) = output(cmd.args(&args)).await;
        log.push_str(&stdout);
        log.push_str(&stderr);
    }
    assert!(log.contains("TRACE"), "trace logging was on");
    // Written to a pipe (a file, a log collector), it is plain text: no terminal colour codes.
    assert!(!log.contains('\x1b'), "colour codes in a piped log: {log}");
    assert!(log.contains("You said: hello"));
    assert!(!log.contains(KEY), "the key leaked into the log");
    assert!(
        !log.contains("SECRET"),
        "part of the key leaked into the log"
    );
    // It was sent, in its header only.
    let sent = &stub.received()[0];
    assert_eq!(sent.headers["x-api-key"], KEY);
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert!(!sent.body.to_string().contains(KEY));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_settings_file_is_a_clear_error_naming_file_line_and_key() {
    let dir = Dir::new();
    let path = dir.path().join("settings.toml");
    std::fs::write(
        &path,
        "backend = \"openai\"\n\n[retry]\nmax_retries = \"many\"\n",
    )
    .unwrap();
    let (code, _, stderr) = output(jarvis(&dir).arg("chats")).await;
    assert_eq!(code, 1);
    assert!(stderr.contains(&path.display().to_string()), "{stderr}");
    assert!(stderr.contains("line 4"), "{stderr}");
    assert!(stderr.contains("max_retries"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_during_ask_stops_the_reply_and_keeps_its_text() {
    let stub = Stub::start().await.unwrap();
    let gate = stub.gate();
    stub.push(
        Script::text("One word at a time, slowly.")
            .deltas_of(4)
            .held_after(1, &gate),
    );
    let dir = Dir::new();
    let mut ask = jarvis(&dir);
    at_stub(&mut ask, &stub);
    let mut child = ask
        .args(["ask", "--new", "go"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 4];
    stdout.read_exact(&mut first).await.unwrap();
    let pid = child.id().unwrap() as libc::pid_t;
    // SAFETY: sends SIGINT to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(4), "stopped");

    let reply = dir.store().last_reply(jarvis::ChatId(1)).unwrap().unwrap();
    assert_eq!(reply.state, ReplyState::Stopped);
    assert!(reply.text.starts_with("One "), "{:?}", reply.text);
    assert!(reply.text.len() < "One word at a time, slowly.".len());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_interactive_chat_asks_lists_opens_and_quits() {
    let stub = Stub::start().await.unwrap();
    let dir = Dir::new();
    let mut chat = jarvis(&dir);
    at_stub(&mut chat, &stub);
    chat.arg("chat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = chat.spawn().unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(
                b"first question\n/new\nsecond chat\n/chats\n/open 1\n/open 42\n/retry\n/quit\n",
            )
            .await
            .unwrap();
    }
    let out = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "> You said: first question\n",
        "> You said: second chat\n",
        "*2\tdone\tsecond chat\n 1\tdone\tfirst question\n",
        "# first question (chat 1)\nuser: first question\nassistant: You said: first question\n",
        "there is no chat 42\n",
        "[chat 1 has no failed or interrupted reply to try again]\n",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn remembered_facts_reach_the_model_as_the_profile_and_can_be_forgotten() {
    let stub = Stub::start().await.unwrap();
    let dir = Dir::new();
    std::fs::write(
        dir.path().join("settings.toml"),
        "[profile]\nname = \"Ada\"\n",
    )
    .unwrap();
    let (code, added, _) =
        output(jarvis(&dir).args(["facts", "add", "My", "dog", "is", "called", "Bruno"])).await;
    assert_eq!((code, added.as_str()), (0, "1\tMy dog is called Bruno\n"));
    output(jarvis(&dir).args(["facts", "add", "I live in Lyon"])).await;
    let (_, listed, _) = output(jarvis(&dir).arg("facts")).await;
    assert_eq!(
        listed,
        "1\tMy dog is called Bruno\tAdded by you\n2\tI live in Lyon\tAdded by you\n"
    );

    let mut ask = jarvis(&dir);
    at_stub(&mut ask, &stub);
    let (code, _, _) = output(ask.args(["ask", "--new", "hello"])).await;
    assert_eq!(code, 0);
    let system = stub.received()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        system.ends_with("About Ada:\n- My dog is called Bruno\n- I live in Lyon"),
        "{system}"
    );

    // Deleting really deletes: the next request no longer carries it.
    let (code, said, _) = output(jarvis(&dir).args(["facts", "rm", "1"])).await;
    assert_eq!((code, said.as_str()), (0, "fact 1 forgotten\n"));
    let (code, _, stderr) = output(jarvis(&dir).args(["facts", "rm", "1"])).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("there is no fact 1"), "{stderr}");
    let mut ask = jarvis(&dir);
    at_stub(&mut ask, &stub);
    output(ask.args(["ask", "--new", "hello again"])).await;
    let system = stub.received()[1].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !system.contains("Bruno") && system.ends_with("About Ada:\n- I live in Lyon"),
        "{system}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn facts_lists_the_summaries_jarvis_may_recall_and_forgets_one_keeping_its_chat() {
    let dir = Dir::new();
    let store = dir.store();
    let chat = store.create_chat("Sailing in June").unwrap().id;
    store
        .append_record(chat, jarvis::store::Role::User, "Where to sail?", None)
        .unwrap();
    store
        .upsert_summary(chat, "The user plans to sail\nin Brittany.", &[0.5; 384], 1)
        .unwrap();
    let (code, listed, _) = output(jarvis(&dir).args(["facts", "summaries"])).await;
    assert_eq!(code, 0);
    let fields: Vec<&str> = listed.trim_end().split('\t').collect();
    assert_eq!(fields.len(), 4, "{listed}");
    assert_eq!(
        (fields[0], fields[2], fields[3]),
        (
            "1",
            "Sailing in June",
            "The user plans to sail in Brittany."
        )
    );
    assert_eq!(fields[1].len(), "2026-12-02".len(), "{listed}");

    let (code, said, _) = output(jarvis(&dir).args(["facts", "rm-summary", "1"])).await;
    assert_eq!(
        (code, said.as_str()),
        (0, "the summary of chat 1 is forgotten; the chat is kept\n")
    );
    let (_, listed, _) = output(jarvis(&dir).args(["facts", "summaries"])).await;
    assert_eq!(listed, "");
    assert_eq!(dir.store().records(chat).unwrap().len(), 1);
    let (code, _, stderr) = output(jarvis(&dir).args(["facts", "rm-summary", "1"])).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("chat 1 has no summary"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn request_prints_exactly_what_the_model_would_get_and_sends_nothing() {
    const KEY: &str = "sk-ant-never-printed-42";
    let stub = Stub::start().await.unwrap();
    let dir = Dir::new();
    let mut ask = jarvis(&dir);
    at_stub(&mut ask, &stub);
    output(ask.args(["ask", "--new", "first question"])).await;
    output(jarvis(&dir).args(["facts", "add", "I like tea"])).await;

    let (code, printed, stderr) = output(
        jarvis(&dir)
            .env("JARVIS_BACKEND", "anthropic")
            .env("ANTHROPIC_BASE_URL", stub.anthropic_url())
            .env("ANTHROPIC_API_KEY", KEY)
            .args(["request", "--chat", "1", "and", "a", "second"]),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(!printed.contains(KEY), "the key is redacted");
    let shown: serde_json::Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(
        shown["url"],
        format!("{}/v1/messages", stub.anthropic_url())
    );
    assert_eq!(shown["headers"]["x-api-key"], "<redacted>");
    let body = &shown["body"];
    assert!(body["system"]
        .as_str()
        .unwrap()
        .ends_with("About the user:\n- I like tea"));
    let messages: Vec<(String, String)> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().into(),
                m["content"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(messages.len(), 3, "{messages:?}");
    // The day's first question opens with its day line; the answer is the text alone.
    assert!(messages[0].1.starts_with('[') && messages[0].1.ends_with("] first question"));
    assert_eq!(
        messages[1],
        ("assistant".into(), "You said: first question".into())
    );
    // The new question carries the one state block.
    assert!(
        messages[2].1.starts_with(jarvis::prompt::STATE_OPEN),
        "{}",
        messages[2].1
    );
    assert!(messages[2]
        .1
        .ends_with("[End of current state]\n\nand a second"));
    // Nothing was sent or stored.
    assert_eq!(stub.received().len(), 1);
    let (_, shown_chat, _) = output(jarvis(&dir).args(["show", "1"])).await;
    assert!(!shown_chat.contains("and a second"));

    // They are the backend's own headers: a real request carries each of them (the key aside).
    let (code, _, stderr) = output(
        jarvis(&dir)
            .env("JARVIS_BACKEND", "anthropic")
            .env("ANTHROPIC_BASE_URL", stub.anthropic_url())
            .env("ANTHROPIC_API_KEY", KEY)
            .args(["ask", "--chat", "1", "and", "a", "real", "one"]),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let sent = stub.received().last().unwrap().headers.clone();
    let headers = shown["headers"].as_object().unwrap();
    assert!(headers.contains_key("anthropic-version"), "{headers:?}");
    for (name, value) in headers {
        let carried = sent
            .get(name.as_str())
            .map(|v| v.to_str().unwrap().to_string());
        let expected = if name == "x-api-key" {
            KEY
        } else {
            value.as_str().unwrap()
        };
        assert_eq!(carried.as_deref(), Some(expected), "header {name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn chats_are_renamed_and_deleted_from_the_command_line() {
    let stub = Stub::start().await.unwrap();
    let dir = Dir::new();
    let mut ask = jarvis(&dir);
    at_stub(&mut ask, &stub);
    output(ask.args(["ask", "--new", "hello"])).await;
    let (code, _, _) = output(jarvis(&dir).args(["rename", "1", "Greetings"])).await;
    assert_eq!(code, 0);
    let (_, chats, _) = output(jarvis(&dir).arg("chats")).await;
    assert_eq!(chats, "1\tdone\tGreetings\n");
    let (code, said, _) = output(jarvis(&dir).args(["rm", "1"])).await;
    assert_eq!((code, said.as_str()), (0, "chat 1 deleted\n"));
    let (_, chats, _) = output(jarvis(&dir).arg("chats")).await;
    assert_eq!(chats, "");
    let (code, _, stderr) = output(jarvis(&dir).args(["rm", "1"])).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("there is no chat 1"), "{stderr}");
}

/// A pipe whose reader has gone: what `jarvis … | head` writes into once `head` has its lines.
fn reader_gone() -> Stdio {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: `pipe` fills two new descriptors; each is owned exactly once below.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    Stdio::from(writer)
}

/// Runs `cmd` writing into a pipe whose reader has gone; returns its status and stderr.
async fn into_gone_reader(cmd: &mut tokio::process::Command) -> (i32, String) {
    let mut child = cmd
        .stdout(reader_gone())
        .stderr(Stdio::piped())
        .spawn()
        .expect("jarvis runs");
    let mut stderr = String::new();
    let mut pipe = child.stderr.take().unwrap();
    let run = async {
        pipe.read_to_string(&mut stderr).await.unwrap();
        child.wait().await.unwrap()
    };
    let status = tokio::time::timeout(LIMIT, run).await.expect("it ended");
    (status.code().unwrap_or(-1), stderr)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reader_that_goes_away_ends_a_command_quietly_and_a_streamed_answer_is_stopped_and_kept()
{
    let stub = Stub::start().await.unwrap();
    let dir = Dir::new();
    let mut ask = jarvis(&dir);
    at_stub(&mut ask, &stub);
    output(ask.args(["ask", "--new", "first question"])).await;

    for args in [
        vec!["request", "--chat", "1", "what", "now"],
        vec!["chats"],
        vec!["show", "1"],
        vec!["doctor"],
    ] {
        let mut cmd = jarvis(&dir);
        at_stub(&mut cmd, &stub);
        let (code, stderr) = into_gone_reader(cmd.args(&args)).await;
        assert_eq!((code, stderr.as_str()), (0, ""), "jarvis {args:?}");
    }

    // An answer streamed into a pipe nobody reads: stopped, with what was written kept (the
    // rest is held back until then).
    let gate = stub.gate();
    stub.push(
        Script::text("One. Two. Three. Four. Five. Six.")
            .deltas_of(5)
            .held_after(1, &gate),
    );
    let mut cmd = jarvis(&dir);
    at_stub(&mut cmd, &stub);
    let (code, stderr) = into_gone_reader(cmd.args(["ask", "--chat", "1", "count slowly"])).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "{stderr}"
    );
    let reply = dir.store().last_reply(jarvis::ChatId(1)).unwrap().unwrap();
    assert_eq!(reply.state, ReplyState::Stopped, "{reply:?}");
    assert!(
        !reply.text.is_empty() && reply.text.len() < 34,
        "{:?}",
        reply.text
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_programs_jarvis_runs_never_inherit_an_api_key() {
    use std::os::unix::fs::PermissionsExt;
    const ANTHROPIC: &str = "sk-ant-not-for-children";
    const OPENAI: &str = "sk-openai-not-for-children";
    let dir = Dir::new();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let script = |name: &str, body: &str| {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    };
    // Each records its environment, then does its job (or fails, as a server that cannot load).
    let server_env = dir.path().join("server.env");
    let server = script(
        "jarvis-llm",
        &format!("env > {}\nexit 1", server_env.display()),
    );
    let espeak_env = dir.path().join("espeak.env");
    script(
        "espeak-ng",
        &format!(
            "env > {}\nexec /usr/bin/espeak-ng \"$@\"",
            espeak_env.display()
        ),
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let with_keys = |cmd: &mut tokio::process::Command| {
        cmd.env("PATH", &path)
            .env("ANTHROPIC_API_KEY", ANTHROPIC)
            .env("OPENAI_API_KEY", OPENAI)
            .env("JARVIS_LLM_SERVER", &server)
            // (Any file: the fake server is asked about it.)
            .env("JARVIS_MODEL", &server);
    };

    let mut doctor = jarvis(&dir);
    with_keys(&mut doctor);
    output(doctor.arg("doctor")).await;
    let mut say = jarvis(&dir);
    with_keys(&mut say);
    let wav = dir.path().join("hello.wav");
    let (code, _, stderr) = output(say.args(["say", "hello", "--out"]).arg(&wav)).await;
    assert_eq!(code, 0, "{stderr}");

    for (what, file) in [("jarvis-llm", &server_env), ("espeak-ng", &espeak_env)] {
        let seen = std::fs::read_to_string(file).unwrap_or_else(|_| panic!("{what} ran"));
        assert!(seen.contains("JARVIS_DATA_DIR="), "{what}: {seen}");
        assert!(
            !seen.contains(ANTHROPIC) && !seen.contains(OPENAI),
            "{what} got a key"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_jarvis_started_during_a_reply_whose_lease_ran_out_leaves_it_to_its_owner() {
    let stub = Stub::start().await.unwrap();
    // The answer is held after "A slow answer." until another Jarvis has started.
    let gate = stub.gate();
    stub.push(
        Script::text("A slow answer. It goes on. And it ends.")
            .deltas_of(2)
            .held_after(7, &gate),
    );
    let dir = Dir::new();
    drop(dir.store());
    // Every renewal of a lease runs out at once: what a long compaction or a laptop waking
    // from sleep looks like to another process.
    rusqlite::Connection::open(dir.db())
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER lease_runs_out AFTER UPDATE OF lease_until ON replies
             WHEN NEW.lease_until > 0
             BEGIN UPDATE replies SET lease_until = 0 WHERE id = NEW.id; END;
             CREATE TRIGGER lease_starts_out AFTER INSERT ON replies
             BEGIN UPDATE replies SET lease_until = 0 WHERE id = NEW.id; END;",
        )
        .unwrap();
    let mut first = jarvis(&dir);
    at_stub(&mut first, &stub);
    let mut child = first
        .args(["ask", "--new", "slow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = read_until(&mut stdout, "slow answer").await;
    // Another Jarvis starts (every command opens the store and looks for abandoned replies).
    let (code, chats, stderr) = output(jarvis(&dir).arg("chats")).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(chats.starts_with("1\trunning\t"), "{chats}");
    gate.release();
    tokio::time::timeout(LIMIT, stdout.read_to_end(&mut seen))
        .await
        .expect("the answer ended")
        .unwrap();
    assert!(child.wait().await.unwrap().success());

    let store = dir.store();
    let reply = store.last_reply(jarvis::ChatId(1)).unwrap().unwrap();
    assert_eq!(
        (reply.state, reply.text.as_str()),
        (ReplyState::Done, "A slow answer. It goes on. And it ends.")
    );
    let answers: Vec<_> = store
        .records(jarvis::ChatId(1))
        .unwrap()
        .into_iter()
        .filter(|r| r.role == jarvis::store::Role::Assistant)
        .map(|r| r.text)
        .collect();
    assert_eq!(answers.len(), 1, "one reply, one record: {answers:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_runs_integrity_check_and_names_a_damaged_database() {
    let dir = Dir::new();
    {
        let store = dir.store();
        let chat = store.create_chat("long").unwrap();
        let text = "a line of an ordinary chat, long enough to fill pages. ".repeat(20);
        for _ in 0..300 {
            store
                .append_record(chat.id, jarvis::store::Role::User, &text, None)
                .unwrap();
        }
    }
    let (code, report, _) = output(jarvis(&dir).arg("doctor")).await;
    assert!(report.contains("integrity_check ok"), "{code}: {report}");

    // Damage pages in the middle of the file, where the records' text lives.
    let db = dir.path().join("jarvis.db");
    let mut bytes = std::fs::read(&db).unwrap();
    let middle = bytes.len() / 2;
    for b in &mut bytes[middle..middle + 16 * 4096] {
        *b = 0xA5;
    }
    std::fs::write(&db, &bytes).unwrap();
    let (code, report, _) = output(jarvis(&dir).arg("doctor")).await;
    assert_ne!(code, 0, "{report}");
    assert!(report.contains("damaged"), "{report}");
}

/// A model folder an earlier version filled holds Whisper tiny.en in half precision only: it is
/// still used, and `jarvis doctor` says a lighter file can be installed.
#[tokio::test(flavor = "multi_thread")]
async fn doctor_says_when_the_speech_model_is_the_earlier_half_precision_file() {
    let dir = Dir::new();
    std::fs::create_dir_all(dir.path().join("models")).unwrap();
    std::fs::write(dir.path().join("models/ggml-tiny.en.bin"), b"ggml").unwrap();
    let (_, report, _) = output(jarvis(&dir).arg("doctor")).await;
    let line = report
        .lines()
        .find(|l| l.contains("speech model"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        line.contains("ggml-tiny.en.bin (installed, the earlier half-precision file")
            && line.contains("scripts/models voice installs the 8-bit one"),
        "{line}"
    );
    std::fs::write(dir.path().join("models/ggml-tiny.en-q8_0.bin"), b"ggml").unwrap();
    let (_, report, _) = output(jarvis(&dir).arg("doctor")).await;
    assert!(
        report.contains("ggml-tiny.en-q8_0.bin (installed)"),
        "{report}"
    );
}

/// Issue 30 item 7: an answer carrying terminal escape sequences (an OSC 52 clipboard write, a
/// window-title change, colours) that a page the model read put there: `jarvis ask` and
/// `jarvis show` print its words and not one escape byte.
#[tokio::test(flavor = "multi_thread")]
async fn ask_and_show_print_an_answer_without_its_escape_sequences() {
    let stub = Stub::start().await.unwrap();
    stub.push(
        Script::text(
            "Hello \u{1b}]52;c;cm0gLXJmIH4=\u{7}world\u{1b}]0;pwned\u{1b}\\! \u{1b}[31mred\u{1b}[0m",
        )
        .deltas_of(3),
    );
    let dir = Dir::new();
    let mut ask = jarvis(&dir);
    at_stub(&mut ask, &stub);
    let (code, stdout, stderr) = output(ask.args(["ask", "--new", "Summarise the page."])).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "Hello world! red\n");
    let (code, shown, _) = output(jarvis(&dir).args(["show", "1"])).await;
    assert_eq!(code, 0);
    assert!(
        !shown.contains('\u{1b}') && shown.contains("assistant: Hello world! red"),
        "{shown:?}"
    );
}
