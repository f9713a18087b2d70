//! The pages' types (`ui/src/types.ts`) are generated from the Rust types the commands send and
//! take (ts-rs reads their serde attributes and doc comments). This test fails when the file is
//! stale; `JARVIS_WRITE_TYPES=1 cargo test --test page_types` writes it anew.

use jarvis::config::{BackendKind, Language, ListenMode, SpeechModel, Theme, TtsEngine};
use jarvis::service::{
    Activity, VoiceNotice, VoiceStatus, VoiceTicket, VoiceUpdate, WaitingQuestion,
};
use jarvis::session::{
    AppInfo, Asked, Endpoint, ModelEntry, ModelState, ModelsView, PullStatus, ServedModel,
    ServerModels, SettingsForm, SettingsView, StartupProblem,
};
use jarvis::store::{Chat, Fact, FactOrigin, Record, RecordId, Role, Summary};
use jarvis::voice::device::Microphones;
use jarvis::voice::pipeline::Levels;
use jarvis::{ChatId, Event, ReplyId, ReplyState};
use ts_rs::{Config, TS};

const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/ui/src/types.ts");

fn declare<T: TS + 'static>(cfg: &Config, out: &mut String) {
    let docs = T::docs().unwrap_or_default();
    out.push('\n');
    out.push_str(&pretty(&format!("{docs}export {}", T::decl(cfg))));
}

/// Lays a declaration out as a person would: one field per line, indented within its braces,
/// each doc comment on the line above its field (on one line when it is one line).
fn pretty(decl: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    let mut depth = 0usize;
    let mut angle = 0usize;
    let flush = |line: &mut String, out: &mut String, depth: usize| {
        let text = line.trim();
        if !text.is_empty() {
            out.push_str(&"  ".repeat(depth));
            out.push_str(text);
            out.push('\n');
        }
        line.clear();
    };
    let mut rest = decl;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("/**") {
            let end = after.find("*/").expect("a doc comment ends");
            let lines: Vec<&str> = after[..end]
                .lines()
                .map(|l| l.trim().trim_start_matches('*').trim())
                .filter(|l| !l.is_empty())
                .collect();
            flush(&mut line, &mut out, depth);
            let indent = "  ".repeat(depth);
            if lines.len() == 1 {
                out.push_str(&format!("{indent}/** {} */\n", lines[0]));
            } else {
                out.push_str(&format!("{indent}/**\n"));
                for l in lines {
                    out.push_str(&format!("{indent} * {l}\n"));
                }
                out.push_str(&format!("{indent} */\n"));
            }
            rest = &after[end + 2..];
            continue;
        }
        match c {
            '{' => {
                line.push('{');
                flush(&mut line, &mut out, depth);
                depth += 1;
            }
            '}' => {
                flush(&mut line, &mut out, depth);
                depth -= 1;
                line.push('}');
            }
            '<' => {
                angle += 1;
                line.push(c);
            }
            '>' => {
                angle -= 1;
                line.push(c);
            }
            ',' if angle == 0 && depth > 0 => {
                line.push(',');
                flush(&mut line, &mut out, depth);
            }
            c if c.is_whitespace() => {
                if !line.is_empty() && !line.ends_with(' ') {
                    line.push(' ');
                }
            }
            c => line.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    flush(&mut line, &mut out, depth);
    out
}

/// Every type a page reads or sends, in the order a reader meets them.
fn generated() -> String {
    // Ids and times are JavaScript numbers (safe up to 2^53: row ids and milliseconds).
    let cfg = Config::new().with_large_int("number");
    let mut out = String::from(
        "// The shapes the Rust side sends and takes: generated from the core's types by\n\
         // tests/page_types.rs (ts-rs). Do not edit; after changing a Rust type run\n\
         // `JARVIS_WRITE_TYPES=1 cargo test --test page_types`.\n",
    );
    let out = &mut out;
    declare::<ChatId>(&cfg, out);
    declare::<ReplyId>(&cfg, out);
    declare::<RecordId>(&cfg, out);
    declare::<ReplyState>(&cfg, out);
    declare::<Role>(&cfg, out);
    declare::<Chat>(&cfg, out);
    declare::<Record>(&cfg, out);
    declare::<Event>(&cfg, out);
    declare::<jarvis::Consent>(&cfg, out);
    declare::<Asked>(&cfg, out);
    declare::<Activity>(&cfg, out);
    declare::<ListenMode>(&cfg, out);
    declare::<WaitingQuestion>(&cfg, out);
    declare::<VoiceStatus>(&cfg, out);
    declare::<Levels>(&cfg, out);
    declare::<VoiceNotice>(&cfg, out);
    declare::<VoiceUpdate>(&cfg, out);
    declare::<VoiceTicket>(&cfg, out);
    declare::<BackendKind>(&cfg, out);
    declare::<Theme>(&cfg, out);
    declare::<SpeechModel>(&cfg, out);
    declare::<Language>(&cfg, out);
    declare::<TtsEngine>(&cfg, out);
    declare::<StartupProblem>(&cfg, out);
    declare::<AppInfo>(&cfg, out);
    declare::<Endpoint>(&cfg, out);
    declare::<SettingsView>(&cfg, out);
    declare::<SettingsForm>(&cfg, out);
    declare::<Microphones>(&cfg, out);
    declare::<FactOrigin>(&cfg, out);
    declare::<Fact>(&cfg, out);
    declare::<Summary>(&cfg, out);
    declare::<ModelState>(&cfg, out);
    declare::<ModelEntry>(&cfg, out);
    declare::<ServedModel>(&cfg, out);
    declare::<ServerModels>(&cfg, out);
    declare::<PullStatus>(&cfg, out);
    declare::<ModelsView>(&cfg, out);
    declare::<jarvis::config::Approve>(&cfg, out);
    declare::<jarvis::mcp::ServerState>(&cfg, out);
    declare::<jarvis::session::tools::ToolView>(&cfg, out);
    declare::<jarvis::session::tools::ServerView>(&cfg, out);
    declare::<jarvis::session::tools::ToolsView>(&cfg, out);
    declare::<jarvis::session::tools::ServerForm>(&cfg, out);
    out.clone()
}

#[test]
fn the_pages_types_are_those_generated_from_the_rust_types() {
    let want = generated();
    if std::env::var_os("JARVIS_WRITE_TYPES").is_some() {
        std::fs::write(FILE, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(FILE).unwrap_or_default();
    if have != want {
        let first = have
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(have.lines().count().min(want.lines().count()));
        panic!(
            "ui/src/types.ts is stale (first difference at line {}: {:?} should be {:?}); \
             run `JARVIS_WRITE_TYPES=1 cargo test --test page_types`",
            first + 1,
            have.lines().nth(first).unwrap_or(""),
            want.lines().nth(first).unwrap_or(""),
        );
    }
}
