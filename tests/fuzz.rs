//! Fuzz targets, run for a bounded time: the SSE parser and both providers' decoders fed
//! arbitrary bytes in arbitrary pieces, `strip_envelopes`, the heard classifier, the words after
//! the wake word, and the settings file's parsing and writing.
//!
//! These are proptest runs rather than `cargo fuzz` targets: cargo-fuzz needs a nightly compiler
//! and libFuzzer, which this project's machines and CI do not have. In the test suite each target
//! runs a fixed set of cases from fixed seeds (deterministic: the gate fails only on a bug);
//! `scripts/fuzz` explores with random seeds for a given time. A failing case is shrunk and its
//! seed kept in `tests/fuzz.proptest-regressions`, which every later run replays first: commit that
//! file with the fix.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use jarvis::llm::anthropic::MessagesDecoder;
use jarvis::llm::openai::ChunkDecoder;
use jarvis::llm::sse::parser::{Event, ParseError, Parser};
use jarvis::llm::sse::{self, Decoder};
use jarvis::llm::LlmError;
use proptest::prelude::*;
use proptest::test_runner::{
    FileFailurePersistence, RngAlgorithm, TestCaseError, TestRng, TestRunner,
};

/// Runs `check` on cases of `strategy`: in the test suite a fixed set of cases from fixed seeds
/// (`JARVIS_FUZZ_ROUNDS` rounds of 128, 8 by default), so the gate passes or fails the same way
/// every time; with `JARVIS_FUZZ_SECS` set (`scripts/fuzz`), random seeds until that time is up.
/// Either way the committed regressions are replayed first.
fn fuzz<S>(name: &str, strategy: S, check: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: Debug,
{
    let explore: Option<f64> = std::env::var("JARVIS_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok());
    let rounds: u64 = std::env::var("JARVIS_FUZZ_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let started = Instant::now();
    let mut cases = 0u64;
    for round in 0u64.. {
        let config = ProptestConfig {
            cases: 128,
            source_file: Some(file!()),
            failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
                "proptest-regressions",
            ))),
            ..ProptestConfig::default()
        };
        let mut runner = match explore {
            Some(_) => TestRunner::new(config),
            None => {
                let mut seed = [0u8; 32];
                seed[..8].copy_from_slice(&round.to_le_bytes());
                TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed))
            }
        };
        if let Err(err) = runner.run(&strategy, &check) {
            panic!("{name}: {err}");
        }
        cases += 128;
        let done = match explore {
            Some(secs) => started.elapsed() >= Duration::from_secs_f64(secs),
            None => round + 1 >= rounds,
        };
        if done {
            break;
        }
    }
    eprintln!(
        "{name}: {cases} cases in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Bytes that look like an event stream often enough to reach deep: field names, line ends,
/// JSON of both providers, characters of every width, bytes that cannot be UTF-8.
fn wire_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"data: ".to_vec()),
        Just(b"data:".to_vec()),
        Just(b"event: ".to_vec()),
        Just(b"id: 7".to_vec()),
        Just(b"retry: 10".to_vec()),
        Just(b": ping".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\n\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"[DONE]".to_vec()),
        Just(br#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#.to_vec()),
        Just(br#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{"}}]}}]}"#.to_vec()),
        Just(br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}"#.to_vec()),
        Just(br#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"f"}}"#.to_vec()),
        Just(br#"{"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#.to_vec()),
        Just(br#"{"type":"message_stop"}"#.to_vec()),
        Just(br#"{"type":"error","error":{"type":"overloaded_error","message":"x"}}"#.to_vec()),
        Just("é🎉\u{feff}".as_bytes().to_vec()),
        Just(vec![0xFF]),
        Just(vec![0xE2, 0x82]),
        Just(vec![0]),
        prop::collection::vec(any::<u8>(), 0..8),
        "\\PC{0,6}".prop_map(String::into_bytes),
    ];
    prop::collection::vec(token, 0..40).prop_map(|t| t.concat())
}

/// `wire` split at `cuts`.
fn pieces(wire: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut last = 0;
    for c in cuts.into_iter().chain([wire.len()]) {
        out.push(wire[last..c].to_vec());
        last = c;
    }
    out
}

fn parse(pieces: &[Vec<u8>], limit: usize) -> (Vec<Event>, Option<ParseError>) {
    let mut parser = Parser::new(limit);
    let mut out = Vec::new();
    for piece in pieces {
        if let Err(err) = parser.feed(piece, &mut out) {
            return (out, Some(err));
        }
    }
    (out, None)
}

/// What `eventsource-stream` (the crate the app used before) reads from the same text.
fn reference(text: &str) -> Vec<(String, String, String)> {
    use eventsource_stream::Eventsource;
    let bytes = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(text.to_string()))]);
    futures::executor::block_on(bytes.eventsource().collect::<Vec<_>>())
        .into_iter()
        .map_while(Result::ok)
        .map(|e| (e.event, e.data, e.id))
        .collect()
}

#[test]
fn the_sse_parser_reads_any_bytes_in_any_pieces_alike() {
    fuzz(
        "sse parser",
        (wire_bytes(), prop::collection::vec(any::<usize>(), 0..12)),
        |(wire, cuts)| {
            let whole = parse(std::slice::from_ref(&wire), 256);
            let split = parse(&pieces(&wire, &cuts), 256);
            // A limit error may come a piece earlier or later; events and bad bytes may not.
            prop_assert_eq!(&split.0, &whole.0);
            prop_assert_eq!(&split.1, &whole.1);
            if let Some(ParseError::Utf8 { at }) = whole.1 {
                prop_assert!(std::str::from_utf8(&wire).is_err());
                prop_assert!((at as usize) < wire.len());
                prop_assert!(std::str::from_utf8(&wire[..at as usize]).is_ok());
            }
            // (`eventsource-stream` waits after a final CR for an LF that never comes and so
            // drops the event a lone CR ends; the format says a CR alone ends a line.)
            if let (Ok(text), None, false) =
                (std::str::from_utf8(&wire), &whole.1, wire.ends_with(b"\r"))
            {
                let ours: Vec<_> = whole
                    .0
                    .iter()
                    .map(|e| (e.event.clone(), e.data.clone(), e.id.clone()))
                    .collect();
                prop_assert_eq!(ours, reference(text));
            }
            Ok(())
        },
    );
}

fn decoded<D: Decoder>(
    pieces: Vec<Vec<u8>>,
    decoder: D,
) -> Vec<Result<jarvis::llm::LlmEvent, LlmError>> {
    let bytes = futures::stream::iter(
        pieces
            .into_iter()
            .map(|c| Ok::<_, LlmError>(Bytes::from(c))),
    );
    futures::executor::block_on(sse::decode(sse::events(bytes), decoder).collect())
}

#[test]
fn both_decoders_end_any_stream_in_events_and_at_most_one_named_failure() {
    fuzz(
        "decoders",
        (wire_bytes(), prop::collection::vec(any::<usize>(), 0..12)),
        |(wire, cuts)| {
            for out in [
                decoded(pieces(&wire, &cuts), ChunkDecoder::default()),
                decoded(pieces(&wire, &cuts), MessagesDecoder::default()),
            ] {
                let failures = out.iter().filter(|e| e.is_err()).count();
                prop_assert!(failures <= 1, "{:?}", out);
                if failures == 1 {
                    prop_assert!(out.last().is_some_and(Result::is_err), "a failure ends it");
                }
            }
            Ok(())
        },
    );
}

#[test]
fn strip_envelopes_takes_off_only_envelopes_and_is_stable() {
    use jarvis::envelope::{strip_envelopes, STATE_CLOSE, STATE_OPEN};
    let part = prop_oneof![
        Just(STATE_OPEN.to_string()),
        Just(STATE_CLOSE.to_string()),
        Just("[Thu 24 Sep] ".to_string()),
        Just("[9月24日 周四] ".to_string()),
        Just("[10:04] assistant: ".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just(" ".to_string()),
        Just("\n".to_string()),
        "\\PC{0,10}",
    ];
    fuzz(
        "strip_envelopes",
        prop::collection::vec(part, 0..12).prop_map(|p| p.concat()),
        |text| {
            let once = strip_envelopes(&text);
            prop_assert!(!once.contains(STATE_OPEN), "{once:?}");
            prop_assert!(once.len() <= text.len());
            if !text.contains('[') {
                prop_assert_eq!(&once, &text, "text without envelopes is untouched");
            }
            Ok(())
        },
    );
}

#[test]
fn the_classifier_and_the_wake_word_take_any_transcript() {
    use jarvis::voice::heard::{classify, Heard, HeardContext};
    use jarvis::voice::listen::after_wake_word;
    let word = prop_oneof![
        Just("stop".to_string()),
        Just("Stop.".to_string()),
        Just("um".to_string()),
        Just("jarvis".to_string()),
        Just("Hey".to_string()),
        Just("İ".to_string()),
        Just("[Music]".to_string()),
        Just("(coughs)".to_string()),
        Just("goodbye".to_string()),
        "\\PC{0,8}",
    ];
    let transcript = prop::collection::vec(word, 0..10).prop_map(|w| w.join(" "));
    let answers = prop::collection::vec("[a-z ]{0,40}", 0..3);
    fuzz(
        "heard",
        (transcript, answers, any::<bool>(), any::<bool>()),
        |(text, answers, speaking, wake)| {
            let context = HeardContext {
                began_while_speaking: speaking,
                recent_answers: &answers,
                wake_conversation: wake,
            };
            let heard = classify(&text, &context);
            prop_assert_eq!(heard, classify(&text, &context));
            if text
                .split_whitespace()
                .all(|w| w.eq_ignore_ascii_case("stop.") || w.eq_ignore_ascii_case("stop"))
                && !text.trim().is_empty()
            {
                prop_assert_eq!(heard, Heard::Stop, "{:?}", text);
            }
            let rest = after_wake_word(&text);
            let words: Vec<&str> = text.split_whitespace().collect();
            prop_assert!(
                text.ends_with(rest.as_str())
                    || rest == words.get(2..).map(|w| w.join(" ")).unwrap_or_default(),
                "{:?} -> {:?}",
                text,
                rest
            );
            Ok(())
        },
    );
}

#[test]
fn a_settings_file_of_any_text_is_read_or_refused_and_a_write_never_breaks_it() {
    use jarvis::config::{write_settings, SettingValue, Settings};
    let line = prop_oneof![
        Just("[openai]".to_string()),
        Just("[anthropic]".to_string()),
        Just("[voice]".to_string()),
        Just("[timeouts]".to_string()),
        Just("[replies]".to_string()),
        Just("backend = \"openai\"".to_string()),
        Just("backend = \"nonsense\"".to_string()),
        Just("model = \"m\"".to_string()),
        Just("base_url = \"http://127.0.0.1:1\"".to_string()),
        Just("idle_secs = nan".to_string()),
        Just("idle_secs = -1e400".to_string()),
        Just("max_chars = 18446744073709551616".to_string()),
        Just("wake_threshold = 0.5".to_string()),
        Just("mode = \"wake_word\"".to_string()),
        Just("# a comment".to_string()),
        "[a-z_]{1,12} = [0-9\"a-z.]{0,8}",
        "\\PC{0,20}",
    ];
    let file = prop::collection::vec(line, 0..10).prop_map(|l| l.join("\n"));
    let change = prop_oneof![
        Just((
            vec!["backend"],
            Some(SettingValue::Text("anthropic".into()))
        )),
        Just((vec!["backend"], Some(SettingValue::Text("bogus".into())))),
        Just((
            vec!["openai", "model"],
            Some(SettingValue::Text("gpt".into()))
        )),
        Just((vec!["replies", "max_chars"], Some(SettingValue::Int(-5)))),
        Just((
            vec!["voice", "wake_threshold"],
            Some(SettingValue::Float(0.7))
        )),
        Just((vec!["openai"], None)),
        Just((vec!["openai", "model"], None)),
    ];
    fuzz(
        "settings",
        (file, change),
        |(text, (key, value)): (String, (Vec<&str>, Option<SettingValue>))| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("settings.toml");
            match Settings::parse(&text, &path) {
                Ok(settings) => {
                    // What is read is written and read back alike.
                    let again = toml::to_string(&settings).unwrap();
                    let back = Settings::parse(&again, &path).unwrap();
                    prop_assert_eq!(toml::to_string(&back).unwrap(), again);
                }
                Err(err) => prop_assert!(err.to_string().contains("settings.toml"), "{}", err),
            }
            std::fs::write(&path, &text).unwrap();
            let changes: Vec<(&[&str], Option<SettingValue>)> = vec![(&key, value)];
            match write_settings(&path, &changes) {
                Ok(written) => {
                    let now = std::fs::read_to_string(&path).unwrap();
                    prop_assert_eq!(Settings::parse(&now, &path).unwrap(), written);
                }
                Err(_) => prop_assert_eq!(std::fs::read_to_string(&path).unwrap(), text),
            }
            Ok(())
        },
    );
}
