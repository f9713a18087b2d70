//! Backend failures over real HTTP to the stub: each ends in the right state with a clear reason,
//! never a hang, and keeps what was written.

mod support;

use std::time::{Duration, Instant};

use jarvis::config::{BackendKind, Settings};
use jarvis::{Event, ReplyState};
use jarvis_stub::{Ending, Script, Stub};
use support::*;

const WIRES: [BackendKind; 2] = [BackendKind::Openai, BackendKind::Anthropic];

async fn run_one(settings: Settings, stub: &Stub) -> (Vec<Event>, String, jarvis::store::Reply) {
    let dir = Dir::new();
    let service = service(&dir, settings);
    let (_, reply, mut attachment) = ask_new(&service, "question").await;
    let events = until_end(&mut attachment, reply).await;
    let stored = service.store().reply(reply).unwrap().unwrap();
    let _ = stub;
    (events.clone(), text_of(&events), stored)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_429_is_retried_after_its_retry_after_then_answered() {
    for kind in WIRES {
        let stub = Stub::start().await.unwrap();
        stub.push(Script::status(429, Some(1)));
        stub.push(Script::text("Fine now."));
        let started = Instant::now();
        let (events, text, stored) = run_one(settings(kind, &stub), &stub).await;
        assert_eq!(
            (text.as_str(), stored.state),
            ("Fine now.", ReplyState::Done),
            "{kind}"
        );
        let retry = events
            .iter()
            .find_map(|e| match e {
                Event::Retrying {
                    attempt,
                    wait_ms,
                    reason,
                    ..
                } => Some((*attempt, *wait_ms, reason.clone())),
                _ => None,
            })
            .expect("a retrying event");
        assert_eq!(
            (retry.0, retry.1),
            (1, 1000),
            "retry-after honoured: {retry:?}"
        );
        assert!(retry.2.contains("429"), "{}", retry.2);
        assert!(started.elapsed() >= Duration::from_secs(1));
        assert_eq!(stub.received().len(), 2);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn overload_and_server_errors_are_retried_a_bounded_number_of_times() {
    let stub = Stub::start().await.unwrap();
    for _ in 0..4 {
        stub.push(Script::status(529, None));
    }
    let (events, _, stored) = run_one(settings(BackendKind::Anthropic, &stub), &stub).await;
    assert_eq!(stored.state, ReplyState::Failed);
    let reason = stored.reason.unwrap();
    assert!(
        reason.contains("529") && reason.contains("Overloaded"),
        "{reason}"
    );
    let retries = events
        .iter()
        .filter(|e| matches!(e, Event::Retrying { .. }))
        .count();
    assert_eq!(retries, 3);
    assert_eq!(stub.received().len(), 4, "one try and three retries");

    let stub = Stub::start().await.unwrap();
    stub.push(Script::status(503, None));
    stub.push(Script::text("Recovered."));
    let (_, text, stored) = run_one(settings(BackendKind::Openai, &stub), &stub).await;
    assert_eq!(
        (text.as_str(), stored.state),
        ("Recovered.", ReplyState::Done)
    );

    // A client error is not retried.
    let stub = Stub::start().await.unwrap();
    stub.push(Script::status(401, None));
    let (_, _, stored) = run_one(settings(BackendKind::Anthropic, &stub), &stub).await;
    assert_eq!(stored.state, ReplyState::Failed);
    assert!(stored.reason.unwrap().contains("401"));
    assert_eq!(stub.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_overloaded_error_event_is_retried_before_the_first_token_and_fails_after_it() {
    let overloaded = Ending::ErrorEvent {
        error_type: "overloaded_error".into(),
        message: "Overloaded".into(),
    };
    for kind in WIRES {
        let stub = Stub::start().await.unwrap();
        stub.push(Script::text("never shown").ending_after(0, overloaded.clone()));
        stub.push(Script::text("Second try."));
        let (_, text, stored) = run_one(settings(kind, &stub), &stub).await;
        assert_eq!(
            (text.as_str(), stored.state),
            ("Second try.", ReplyState::Done),
            "{kind}"
        );

        let stub = Stub::start().await.unwrap();
        stub.push(
            Script::text("Partly written answer")
                .deltas_of(4)
                .ending_after(3, overloaded.clone()),
        );
        let (_, text, stored) = run_one(settings(kind, &stub), &stub).await;
        assert_eq!(stored.state, ReplyState::Failed, "{kind}");
        assert_eq!(text, "Partly writt");
        assert_eq!(stored.text, "Partly writt", "the text is kept");
        let reason = stored.reason.unwrap();
        assert!(
            reason.contains("overloaded_error") && reason.contains("Overloaded"),
            "{reason}"
        );
        assert_eq!(stub.received().len(), 1, "no retry after the first token");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_dropped_mid_stream_fails_the_reply_and_keeps_the_text() {
    for kind in WIRES {
        let stub = Stub::start().await.unwrap();
        stub.push(
            Script::text("Some words then")
                .deltas_of(5)
                .ending_after(2, Ending::Drop),
        );
        let (_, text, stored) = run_one(settings(kind, &stub), &stub).await;
        assert_eq!(
            (stored.state, stored.text.as_str(), text.as_str()),
            (ReplyState::Failed, "Some words", "Some words"),
            "{kind}"
        );
        let reason = stored.reason.unwrap();
        assert!(reason.starts_with("the stream broke"), "{kind}: {reason}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stall_past_the_idle_timeout_fails_promptly() {
    for kind in WIRES {
        let stub = Stub::start().await.unwrap();
        stub.push(
            Script::text("Hello there")
                .deltas_of(5)
                .ending_after(1, Ending::Stall),
        );
        let (_, _, stored) = run_one(settings(kind, &stub), &stub).await;
        assert_eq!(
            (stored.state, stored.text.as_str()),
            (ReplyState::Failed, "Hello"),
            "{kind}"
        );
        assert_eq!(
            stored.reason.as_deref(),
            Some("the stream stalled: nothing arrived for 1 s")
        );
    }
}

/// Issue 28 item 12: after the first word, a server that sends only keep-alives (an Anthropic
/// `ping`, an SSE comment) held the reply — and on the local one-at-a-time backend every other
/// chat — until Stop. Keep-alives keep the connection, not the answer: it fails, named, keeping
/// what was written.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_that_only_sends_keep_alives_after_its_first_words_fails_as_stalled() {
    for kind in WIRES {
        let stub = Stub::start().await.unwrap();
        let gate = stub.gate();
        stub.push(
            Script::text("Hello there")
                .deltas_of(5)
                .held_after(1, &gate),
        );
        let mut s = settings(kind, &stub);
        s.timeouts.stall_secs = 1.5;
        let (_, _, stored) = run_one(s, &stub).await;
        assert!(gate.is_reached(), "{kind}: it was held with keep-alives");
        assert_eq!(
            (stored.state, stored.text.as_str()),
            (ReplyState::Failed, "Hello"),
            "{kind}"
        );
        assert_eq!(
            stored.reason.as_deref(),
            Some("the answer stalled: no new words for 1.5 s"),
            "{kind}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_first_token_in_time_is_a_named_failure() {
    let stub = Stub::start().await.unwrap();
    stub.push(Script::text("late").ending_after(0, Ending::Stall));
    let mut s = settings(BackendKind::Openai, &stub);
    s.timeouts.first_token_secs = 0.5;
    s.timeouts.idle_secs = 10.0;
    let (_, _, stored) = run_one(s, &stub).await;
    assert_eq!(stored.state, ReplyState::Failed);
    assert_eq!(
        stored.reason.as_deref(),
        Some("no answer began within 0.5 s")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_json_in_a_data_line_fails_with_a_clear_reason() {
    for kind in WIRES {
        let stub = Stub::start().await.unwrap();
        stub.push(
            Script::text("Good start")
                .deltas_of(5)
                .ending_after(2, Ending::MalformedJson),
        );
        let (_, _, stored) = run_one(settings(kind, &stub), &stub).await;
        assert_eq!(
            (stored.state, stored.text.as_str()),
            (ReplyState::Failed, "Good start"),
            "{kind}"
        );
        let reason = stored.reason.unwrap();
        assert!(
            reason.starts_with("the server sent malformed data"),
            "{kind}: {reason}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_server_fails_with_its_address() {
    // Bind and drop a listener so the port is closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let stub = Stub::start().await.unwrap();
    let mut s = settings(BackendKind::Openai, &stub);
    s.openai.base_url = format!("http://127.0.0.1:{port}/v1");
    let (_, _, stored) = run_one(s, &stub).await;
    assert_eq!(stored.state, ReplyState::Failed);
    let reason = stored.reason.unwrap();
    assert!(
        reason.starts_with(&format!(
            "cannot connect to http://127.0.0.1:{port}/v1/chat/completions"
        )),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_that_ends_early_without_its_end_marker_is_a_failure() {
    for kind in WIRES {
        let stub = Stub::start().await.unwrap();
        // Complete ending after two deltas: the body closes cleanly but without stop/[DONE].
        stub.push(
            Script::text("Cut short here")
                .deltas_of(4)
                .ending_after(2, Ending::Complete),
        );
        let (_, _, stored) = run_one(settings(kind, &stub), &stub).await;
        assert_eq!(
            (stored.state, stored.text.as_str()),
            (ReplyState::Failed, "Cut shor"),
            "{kind}"
        );
        assert_eq!(
            stored.reason.as_deref(),
            Some("the stream ended before the reply was complete")
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_never_accepts_is_a_connect_timeout() {
    // A listener whose one-slot backlog is filled: further connection attempts go unanswered.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let attempt = tokio::time::timeout(
            Duration::from_millis(300),
            tokio::net::TcpStream::connect(addr),
        )
        .await;
        match attempt {
            Ok(Ok(stream)) => fillers.push(stream),
            _ => break, // the backlog is full
        }
    }
    let stub = Stub::start().await.unwrap();
    let mut s = settings(BackendKind::Openai, &stub);
    s.openai.base_url = format!("http://{addr}/v1");
    s.timeouts.connect_secs = 0.5;
    let (_, _, stored) = run_one(s, &stub).await;
    assert_eq!(stored.state, ReplyState::Failed);
    assert_eq!(
        stored.reason.as_deref(),
        Some(
            format!("connecting to http://{addr}/v1/chat/completions timed out after 0.5 s")
                .as_str()
        )
    );
    drop(listener);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_given_as_an_http_date_is_waited_for() {
    let stub = Stub::start().await.unwrap();
    // The date is stamped when the stub answers: three seconds on, in whole seconds.
    stub.push(Script::RetryAtDate {
        status: 429,
        after_secs: 3,
    });
    stub.push(Script::text("Fine now."));
    let (events, text, stored) = run_one(settings(BackendKind::Openai, &stub), &stub).await;
    assert_eq!(
        (text.as_str(), stored.state),
        ("Fine now.", ReplyState::Done)
    );
    let wait = events
        .iter()
        .find_map(|e| match e {
            Event::Retrying { wait_ms, .. } => Some(*wait_ms),
            _ => None,
        })
        .expect("a retrying event");
    // (The date has whole seconds: between two and three seconds from the answer, less the time
    // the answer took to be read; the backoff here is 20 ms.)
    assert!(
        (1000..=3000).contains(&wait),
        "waited {wait} ms, not the date's"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_servers_giant_error_message_is_kept_cut_to_a_readable_length() {
    let stub = Stub::start().await.unwrap();
    let message = "The request was refused because ".to_string() + &"very ".repeat(40_000);
    let body = serde_json::json!({"error": {"message": message}}).to_string();
    stub.push(Script::raw(
        400,
        &[("content-type", "application/json")],
        body,
    ));
    let (_, _, stored) = run_one(settings(BackendKind::Openai, &stub), &stub).await;
    assert_eq!(stored.state, ReplyState::Failed);
    let reason = stored.reason.expect("a reason");
    assert!(
        reason.contains("The request was refused because"),
        "{reason}"
    );
    assert!(
        reason.chars().count() < 400,
        "{} characters",
        reason.chars().count()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_is_never_followed_and_the_key_stays_with_the_base_url() {
    let stub = Stub::start().await.unwrap();
    let elsewhere = Stub::start().await.unwrap();
    let target = format!("{}/v1/messages", elsewhere.anthropic_url());
    stub.push(Script::raw(307, &[("location", &target)], ""));
    let (_, _, stored) = run_one(settings(BackendKind::Anthropic, &stub), &stub).await;
    assert_eq!(stored.state, ReplyState::Failed);
    let reason = stored.reason.unwrap();
    assert!(
        reason.contains("redirected") && reason.contains(&target),
        "{reason}"
    );
    assert!(
        elsewhere.received().is_empty(),
        "the request (and its key) went elsewhere"
    );
    assert_eq!(stub.received().len(), 1, "a redirect is not retried");
}

#[test]
fn plain_http_to_another_machine_needs_allow_insecure() {
    let config = |url: &str, allow: bool| {
        let dir = Dir::new();
        let mut s = Settings {
            backend: BackendKind::Openai,
            ..Settings::default()
        };
        s.openai.base_url = url.into();
        s.openai.requires_key = false;
        s.openai.allow_insecure = allow;
        dir.config(s)
    };
    let env = env_with(&[]);
    for url in ["http://192.0.2.7:8080/v1", "http://models.example.org/v1"] {
        let err = jarvis::llm::from_config(&config(url, false), &env)
            .err()
            .expect("refused");
        assert!(
            err.to_string()
                .contains("allow_insecure = true in [openai]"),
            "{err}"
        );
        assert!(jarvis::llm::from_config(&config(url, true), &env).is_ok());
    }
    for url in [
        "http://127.0.0.1:11434/v1",
        "http://localhost:1234/v1",
        "http://[::1]:8080/v1",
        "https://models.example.org/v1",
    ] {
        assert!(
            jarvis::llm::from_config(&config(url, false), &env).is_ok(),
            "{url}"
        );
    }
}

/// Runs one reply, failing the test if it has not ended within `limit` (an old decoder froze).
async fn run_within(
    limit: Duration,
    settings: Settings,
    stub: &Stub,
) -> (Vec<Event>, String, jarvis::store::Reply) {
    tokio::time::timeout(limit, run_one(settings, stub))
        .await
        .expect("the reply froze instead of ending in a named failure")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_byte_that_is_not_utf8_fails_the_reply_at_once_and_keeps_the_text() {
    for kind in WIRES {
        let stub = Stub::start().await.unwrap();
        stub.push(Script::text("Before the bad byte. ").ending(Ending::InvalidUtf8));
        let mut s = settings(kind, &stub);
        // Far off, so a decoder that waits for the stream's end cannot pass by its stall.
        s.timeouts.idle_secs = 30.0;
        let (_, text, stored) = run_within(Duration::from_secs(20), s, &stub).await;
        assert_eq!(stored.state, ReplyState::Failed, "{kind}");
        let reason = stored.reason.unwrap();
        assert!(reason.contains("invalid UTF-8"), "{kind}: {reason}");
        assert_eq!(text, "Before the bad byte. ");
        assert_eq!(stored.text, "Before the bad byte. ");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_data_line_that_never_ends_is_refused_at_the_event_limit() {
    for kind in WIRES {
        let stub = Stub::start().await.unwrap();
        stub.push(Script::text("So far, so good. ").ending(Ending::GiantEvent));
        let (_, _, stored) =
            run_within(Duration::from_secs(20), settings(kind, &stub), &stub).await;
        assert_eq!(stored.state, ReplyState::Failed, "{kind}");
        let reason = stored.reason.unwrap();
        assert!(
            reason.contains("an event larger than 1024 KiB"),
            "{kind}: {reason}"
        );
        assert_eq!(stored.text, "So far, so good. ");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endless_reply_ends_at_the_longest_allowed_and_keeps_that_much() {
    for kind in WIRES {
        let stub = Stub::start().await.unwrap();
        stub.push(Script::text("It begins: ").ending(Ending::Endless));
        let mut s = settings(kind, &stub);
        s.replies.max_chars = 5_000;
        let (_, _, stored) = run_within(Duration::from_secs(20), s, &stub).await;
        assert_eq!(stored.state, ReplyState::Failed, "{kind}");
        let reason = stored.reason.unwrap();
        assert!(
            reason.contains("5000 characters") && reason.contains("max_chars"),
            "{kind}: {reason}"
        );
        assert!(stored.text.starts_with("It begins: and on and on"));
        assert_eq!(stored.text.chars().count(), 5_000, "{kind}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_successful_answer_that_is_not_an_event_stream_is_named_as_such() {
    let stub = Stub::start().await.unwrap();
    // A server that ignores `"stream": true` and answers with the whole completion.
    let body = serde_json::json!({
        "object": "chat.completion",
        "choices": [{"message": {"role": "assistant", "content": "Hello there"}}],
    })
    .to_string();
    stub.push(Script::raw(
        200,
        &[("content-type", "application/json")],
        body,
    ));
    stub.push(Script::raw(
        200,
        &[("content-type", "text/html; charset=utf-8")],
        "<html><body>Please sign in to the proxy</body></html>",
    ));
    for shown in ["chat.completion", "Please sign in to the proxy"] {
        let (_, _, stored) = run_within(
            Duration::from_secs(20),
            settings(BackendKind::Openai, &stub),
            &stub,
        )
        .await;
        assert_eq!(stored.state, ReplyState::Failed);
        let reason = stored.reason.unwrap();
        assert!(
            reason.contains("not an event stream") && reason.contains(shown),
            "{reason}"
        );
    }
    assert_eq!(stub.received().len(), 2, "not retried");
}

/// Issue 30 item 5: an SSE `error` event's message is the server's text, of any length; it is
/// capped as an error response's body is before it is shown and stored as the reply's reason.
#[tokio::test(flavor = "multi_thread")]
async fn an_error_event_with_an_endless_message_is_capped_in_the_reason() {
    for kind in WIRES {
        let stub = Stub::start().await.unwrap();
        stub.push(Script::text("Partly").ending_after(
            1,
            Ending::ErrorEvent {
                error_type: "overloaded_error".into(),
                message: "Overloaded! ".repeat(50_000),
            },
        ));
        let (_, _, stored) = run_one(settings(kind, &stub), &stub).await;
        assert_eq!(stored.state, ReplyState::Failed, "{kind}");
        let reason = stored.reason.unwrap();
        assert!(
            reason.contains("Overloaded!") && reason.chars().count() < 1_000,
            "{kind}: a reason of {} characters",
            reason.chars().count()
        );
    }
}
