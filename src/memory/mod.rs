//! What Jarvis remembers: the facts the user asks it to keep, through two tools the model calls —
//! `remember_fact` stores at once (a stored fact is harmless and easy to remove), `forget_fact`
//! finds the fact and asks the user to confirm before anything is deleted.

pub mod embed;
pub mod recall;
pub mod summary;

use serde_json::{json, Value};

use crate::llm::{ToolCall, ToolResult, ToolSpec};
use crate::store::{ChatId, Fact, Store, StoreError};

/// The tool that stores a fact.
pub const REMEMBER: &str = "remember_fact";
/// The tool that forgets one (after the user confirms).
pub const FORGET: &str = "forget_fact";

/// The tools every backend is offered.
pub fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: REMEMBER.into(),
            description: "Store a fact about the user so it is remembered in every future chat. Use only when \
                          the user explicitly asks you to remember something. The fact is one short sentence \
                          in the third person, e.g. \"Their dog is called Bruno.\""
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {"fact": {"type": "string", "description": "The fact, one short sentence."}},
                "required": ["fact"],
            }),
        },
        ToolSpec {
            name: FORGET.into(),
            description: "Forget a stored fact about the user. Use only when the user explicitly asks you to \
                          forget something. Give words from the fact; if one fact matches, the app asks the user \
                          to confirm (ask them in your answer); if several match, you get the list to ask which."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {"query": {"type": "string", "description": "Words of the fact to forget."}},
                "required": ["query"],
            }),
        },
    ]
}

/// What the UI shows while a tool runs.
pub fn label(tool: &str) -> &'static str {
    match tool {
        REMEMBER => "Remembering…",
        FORGET => "Looking through what I remember…",
        _ => "Working…",
    }
}

fn normalise(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c.is_whitespace() {
                c
            } else {
                ' '
            }
        })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

const SMALL_WORDS: &[&str] = &[
    "a", "an", "the", "that", "my", "me", "i", "is", "are", "am", "was", "to", "of", "and",
    "called", "named", "about", "their", "they", "user", "users", "s", "fact",
];

/// The facts `query` points at: those containing it (or contained in it), case and punctuation
/// aside; failing that, those sharing most of its meaningful words.
pub fn matching<'f>(facts: &'f [Fact], query: &str) -> Vec<&'f Fact> {
    let q = normalise(query);
    if q.is_empty() {
        return Vec::new();
    }
    let direct: Vec<&Fact> = facts
        .iter()
        .filter(|f| {
            let t = normalise(&f.text);
            t.contains(&q) || (!t.is_empty() && q.contains(&t))
        })
        .collect();
    if !direct.is_empty() {
        return direct;
    }
    let words: Vec<&str> = q.split(' ').filter(|w| !SMALL_WORDS.contains(w)).collect();
    if words.is_empty() {
        return Vec::new();
    }
    facts
        .iter()
        .filter(|f| {
            let t = normalise(&f.text);
            let fact_words: Vec<&str> = t.split(' ').collect();
            let shared = words.iter().filter(|w| fact_words.contains(w)).count();
            shared * 3 >= words.len() * 2
        })
        .collect()
}

/// Runs one call of the model's for `chat`; its result goes back to the model.
pub fn run(store: &Store, chat: ChatId, call: &ToolCall) -> ToolResult {
    let result = |content: String, is_error: bool| ToolResult {
        id: call.id.clone(),
        content,
        is_error,
    };
    let arg = |name: &str| {
        call.arguments
            .get(name)
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or_default()
    };
    let outcome: Result<String, StoreError> = match call.name.as_str() {
        REMEMBER => {
            let fact = arg("fact");
            if fact.is_empty() {
                return result("remember_fact needs a non-empty \"fact\"".into(), true);
            }
            store
                .add_fact(fact)
                .map(|f| format!("Stored: \"{}\"", f.text))
        }
        FORGET => {
            let query = arg("query");
            store.facts().and_then(|facts| {
                let found = matching(&facts, query);
                match found.as_slice() {
                    [] => Ok(format!("No stored fact matches \"{query}\"; nothing was forgotten.")),
                    [one] => {
                        let question = format!("Forget \"{}\"?", one.text);
                        store.set_confirmation(chat, one.id, &question).map(|()| {
                            format!(
                                "One fact matches: \"{}\". It is NOT forgotten yet: ask the user to confirm; \
                                 their next message decides.",
                                one.text
                            )
                        })
                    }
                    several => {
                        let list: Vec<String> = several.iter().map(|f| format!("- {}", f.text)).collect();
                        Ok(format!(
                            "Several facts match; nothing was forgotten. Ask the user which one:\n{}",
                            list.join("\n")
                        ))
                    }
                }
            })
        }
        other => return result(format!("there is no tool called {other}"), true),
    };
    match outcome {
        Ok(text) => result(text, false),
        Err(err) => result(format!("the tool failed: {err}"), true),
    }
}

/// Whether the user's answer to a confirmation question says yes.
pub fn says_yes(answer: &str) -> bool {
    let text = normalise(answer);
    let words: Vec<&str> = text.split(' ').collect();
    let no = [
        "no", "nope", "don", "dont", "not", "keep", "cancel", "wait", "never",
    ];
    if words.iter().any(|w| no.contains(w)) {
        return false;
    }
    let yes = [
        "yes",
        "yeah",
        "yep",
        "yup",
        "sure",
        "ok",
        "okay",
        "confirm",
        "confirmed",
        "correct",
        "right",
        "please",
        "absolutely",
        "definitely",
        "forget",
        "delete",
        "go",
        "do",
    ];
    words.first().is_some_and(|w| yes.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(id: i64, text: &str) -> Fact {
        Fact {
            id,
            text: text.into(),
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn forget_finds_the_fact_by_its_words() {
        let facts = [
            fact(1, "My dog is called Bruno."),
            fact(2, "I live in Lyon."),
            fact(3, "My cat is called Tom."),
        ];
        let ids = |q: &str| matching(&facts, q).iter().map(|f| f.id).collect::<Vec<_>>();
        assert_eq!(ids("my dog is called Bruno"), [1]);
        assert_eq!(ids("Bruno"), [1]);
        assert_eq!(ids("dog Bruno"), [1], "words out of order");
        assert_eq!(ids("called"), [1, 3], "several");
        assert_eq!(ids("my parrot"), Vec::<i64>::new());
    }

    #[test]
    fn yes_and_no() {
        for yes in [
            "Yes",
            "yes please",
            "Yeah, go ahead.",
            "Sure!",
            "OK",
            "Do it.",
        ] {
            assert!(says_yes(yes), "{yes}");
        }
        for no in [
            "No",
            "No, keep it.",
            "Don't.",
            "Wait",
            "What do you mean?",
            "yes, but don't forget it",
        ] {
            assert!(!says_yes(no), "{no}");
        }
    }
}
