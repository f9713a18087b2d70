//! SSE decoding yields the same events however the bytes are split on the wire.

use bytes::Bytes;
use futures::StreamExt;
use jarvis::llm::anthropic::MessagesDecoder;
use jarvis::llm::openai::ChunkDecoder;
use jarvis::llm::sse::{self, Decoder};
use jarvis::llm::{LlmError, LlmEvent, StopReason};
use proptest::prelude::*;
use serde_json::json;

fn openai_wire(texts: &[String], args: &[String]) -> String {
    let mut out = String::from(": keep-alive comment\n\n");
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    out += &chunk(json!({"role": "assistant", "content": ""}), None);
    for t in texts {
        out += &chunk(json!({"content": t}), None);
    }
    if !args.is_empty() {
        out += &chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "remember_fact", "arguments": ""}}]}),
            None,
        );
        for a in args {
            out += &chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}),
                None,
            );
        }
    }
    out += &chunk(
        json!({}),
        Some(if args.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }),
    );
    out += &format!(
        "data: {}\n\n",
        json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}})
    );
    out += "data: [DONE]\n\n";
    out
}

fn anthropic_wire(texts: &[String], args: &[String]) -> String {
    let ev = |v: serde_json::Value| {
        format!(
            "event: {}\r\ndata: {}\r\n\r\n",
            v["type"].as_str().unwrap(),
            v
        )
    };
    let mut out = ev(json!({"type": "message_start", "message": {"usage": {"input_tokens": 7}}}));
    out += &ev(
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    );
    out += &ev(json!({"type": "ping"}));
    for t in texts {
        out += &ev(
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}),
        );
    }
    out += &ev(json!({"type": "content_block_stop", "index": 0}));
    if !args.is_empty() {
        out += &ev(
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "remember_fact", "input": {}}}),
        );
        for a in args {
            out += &ev(
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": a}}),
            );
        }
        out += &ev(json!({"type": "content_block_stop", "index": 1}));
    }
    out += &ev(
        json!({"type": "message_delta", "delta": {"stop_reason": if args.is_empty() { "end_turn" } else { "tool_use" }}, "usage": {"output_tokens": 9}}),
    );
    out += &ev(json!({"type": "message_stop"}));
    out
}

fn decode<D: Decoder>(chunks: Vec<Vec<u8>>, decoder: D) -> Vec<Result<LlmEvent, LlmError>> {
    let bytes = futures::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, LlmError>(Bytes::from(c))),
    );
    futures::executor::block_on(sse::decode(sse::events(bytes), decoder).collect())
}

fn split(wire: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
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

fn text(events: &[Result<LlmEvent, LlmError>]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Ok(LlmEvent::TextDelta { text }) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn args_of(events: &[Result<LlmEvent, LlmError>]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Ok(LlmEvent::ToolCallArgs { fragment, .. }) => Some(fragment.as_str()),
            _ => None,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn openai_events_do_not_depend_on_how_bytes_arrive(
        texts in prop::collection::vec("\\PC{1,12}", 1..8),
        args in prop::collection::vec("[a-z\":{} ]{1,6}", 0..4),
        cuts in prop::collection::vec(any::<usize>(), 0..40),
    ) {
        let wire = openai_wire(&texts, &args).into_bytes();
        let whole = decode(vec![wire.clone()], ChunkDecoder::default());
        prop_assert_eq!(&decode(split(&wire, &cuts), ChunkDecoder::default()), &whole);
        prop_assert_eq!(text(&whole), texts.concat());
        prop_assert_eq!(args_of(&whole), args.concat());
        prop_assert!(whole.iter().all(Result::is_ok));
    }

    #[test]
    fn anthropic_events_do_not_depend_on_how_bytes_arrive(
        texts in prop::collection::vec("\\PC{1,12}", 1..8),
        args in prop::collection::vec("[a-z\":{} ]{1,6}", 0..4),
        cuts in prop::collection::vec(any::<usize>(), 0..40),
    ) {
        let wire = anthropic_wire(&texts, &args).into_bytes();
        let whole = decode(vec![wire.clone()], MessagesDecoder::default());
        prop_assert_eq!(&decode(split(&wire, &cuts), MessagesDecoder::default()), &whole);
        prop_assert_eq!(text(&whole), texts.concat());
        prop_assert_eq!(args_of(&whole), args.concat());
    }
}

#[test]
fn one_byte_at_a_time_gives_the_same_events_as_whole() {
    let texts: Vec<String> = ["Héllo", " wörld ", "— 🎉", "\nnext line"]
        .map(String::from)
        .to_vec();
    let args: Vec<String> = ["{\"fa", "ct\": \"", "likes tea\"}"]
        .map(String::from)
        .to_vec();
    for (wire, openai) in [
        (openai_wire(&texts, &args), true),
        (anthropic_wire(&texts, &args), false),
    ] {
        let bytes = wire.into_bytes();
        let single: Vec<Vec<u8>> = bytes.iter().map(|b| vec![*b]).collect();
        let (whole, one) = if openai {
            (
                decode(vec![bytes.clone()], ChunkDecoder::default()),
                decode(single, ChunkDecoder::default()),
            )
        } else {
            (
                decode(vec![bytes.clone()], MessagesDecoder::default()),
                decode(single, MessagesDecoder::default()),
            )
        };
        assert_eq!(one, whole);
        assert_eq!(text(&whole), texts.concat());
        // The tool call: start, fragments, end, then the stop reason.
        let calls: Vec<_> = whole
            .iter()
            .filter_map(|e| match e {
                Ok(LlmEvent::ToolCallStart { index, id, name }) => {
                    Some(format!("start {index} {id} {name}"))
                }
                Ok(LlmEvent::ToolCallEnd { index }) => Some(format!("end {index}")),
                Ok(LlmEvent::Stop { reason }) => Some(format!("stop {reason:?}")),
                _ => None,
            })
            .collect();
        let id = if openai { "call_1" } else { "toolu_1" };
        assert_eq!(
            calls,
            [
                format!("start 0 {id} remember_fact"),
                "end 0".into(),
                format!("stop {:?}", StopReason::ToolUse)
            ]
        );
        assert_eq!(args_of(&whole), "{\"fact\": \"likes tea\"}");
    }
}

#[test]
fn a_body_that_ends_without_its_end_marker_is_truncated() {
    let wire = openai_wire(&["half".into()], &[]);
    let cut = wire.find("data: [DONE]").unwrap();
    let events = decode(
        vec![wire.as_bytes()[..cut].to_vec()],
        ChunkDecoder::default(),
    );
    assert_eq!(events.last(), Some(&Err(LlmError::Truncated)));
}
