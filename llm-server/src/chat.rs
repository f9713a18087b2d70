//! The conversation as the model reads it, and tool calls read back out of what it writes.
//!
//! A model whose own chat template offers tools the Hermes way (Qwen2.5 and its kin: a `# Tools`
//! section in system, calls written as `<tool_call>{"name": …, "arguments": …}</tool_call>`,
//! results sent back inside `<tool_response>`) gets its prompt rendered from that template by
//! minijinja, exactly as the model was trained to read it. Any other model is rendered by
//! llama.cpp's built-in templates and is never offered tools: a model that was not taught the
//! format only writes a worse answer for the extra prompt.

use std::fmt::Write as _;

use minijinja::{Environment, Value as JinjaValue};
use serde_json::{json, Value};

/// One chat message.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Its text.
    pub content: String,
    /// The calls an assistant message made.
    pub tool_calls: Vec<ToolCall>,
}

impl Turn {
    /// A plain text message.
    pub fn text(role: &str, content: impl Into<String>) -> Turn {
        Turn {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
        }
    }
}

/// A call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments, a JSON object.
    pub arguments: Value,
}

/// The opening and closing tags of a call in Hermes-style templates.
const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// Whether a token's text is one of the tags a call is written between.
pub fn is_tool_tag(piece: &[u8]) -> bool {
    piece == OPEN.as_bytes() || piece == CLOSE.as_bytes()
}

/// A chat template that can offer tools: the model's own, when it writes calls as `<tool_call>`.
pub struct ToolTemplate {
    env: Environment<'static>,
}

impl ToolTemplate {
    /// The template if `source` (a model's `tokenizer.chat_template`) offers tools in the Hermes
    /// format and minijinja can compile it; `None` otherwise.
    pub fn new(source: &str) -> Option<ToolTemplate> {
        if !(source.contains(OPEN) && source.contains("tools")) {
            return None;
        }
        let mut env = Environment::new();
        // As transformers renders chat templates.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", python_json);
        env.add_function("raise_exception", |msg: String| -> Result<String, _> {
            Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                msg,
            ))
        });
        match env.add_template_owned("chat", source.to_string()) {
            Ok(()) => Some(ToolTemplate { env }),
            Err(err) => {
                tracing::warn!("the model's chat template cannot be read ({err}); no tools");
                None
            }
        }
    }

    /// The prompt for `turns` with `tools` (OpenAI-style function specs) offered, ending where
    /// the assistant's answer begins.
    pub fn render(&self, turns: &[Turn], tools: &[Value]) -> Result<String, minijinja::Error> {
        let messages: Vec<Value> = turns
            .iter()
            .map(|t| {
                let mut m = json!({"role": t.role, "content": t.content});
                if !t.tool_calls.is_empty() {
                    m["tool_calls"] = t
                        .tool_calls
                        .iter()
                        .map(|c| json!({"type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                        .collect();
                }
                m
            })
            .collect();
        let tools = (!tools.is_empty()).then_some(tools);
        self.env.get_template("chat")?.render(minijinja::context! {
            messages => JinjaValue::from_serialize(&messages),
            tools => JinjaValue::from_serialize(tools),
            add_generation_prompt => true,
            bos_token => "",
            eos_token => "<|im_end|>",
        })
    }
}

/// `tojson` as Python's `json.dumps` writes it (the templates were written against it): `", "`
/// and `": "` between items, non-ASCII kept.
fn python_json(value: JinjaValue) -> Result<JinjaValue, minijinja::Error> {
    let value: Value = serde_json::to_value(&value).map_err(|e| {
        minijinja::Error::new(minijinja::ErrorKind::BadSerialization, e.to_string())
    })?;
    let mut out = String::new();
    write_python_json(&value, &mut out);
    Ok(JinjaValue::from_safe_string(out))
}

fn write_python_json(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_python_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{}: ", Value::from(key.as_str()));
                write_python_json(item, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The conversation for a model without tools: calls and results become plain text, so a
/// conversation that used tools elsewhere still reads sensibly.
pub fn without_tools(turns: &[Turn]) -> Vec<Turn> {
    let mut out: Vec<Turn> = Vec::new();
    for t in turns {
        let (role, content) = match t.role.as_str() {
            "tool" => ("user", format!("[Tool result] {}", t.content)),
            role => {
                let mut content = t.content.clone();
                for call in &t.tool_calls {
                    if !content.is_empty() {
                        content.push('\n');
                    }
                    let _ = write!(content, "[Called {} with {}]", call.name, call.arguments);
                }
                (role, content)
            }
        };
        match out.last_mut() {
            Some(last) if last.role == role && role != "system" => {
                last.content.push_str("\n\n");
                last.content.push_str(&content);
            }
            _ => out.push(Turn::text(role, content)),
        }
    }
    out
}

/// Reads a streamed answer, passing its text on and holding back tool calls: text is released
/// as soon as it cannot be the start of a `<tool_call>` tag. Small models often drop the tags
/// and answer with the bare call — `{"name": "remember_fact", "arguments": {…}}`, sometimes in a
/// ```` ```json ```` block — so an answer that begins like that is held to its end and taken as
/// calls when it is nothing else and names only offered tools (llama.cpp's own Hermes parser
/// accepts the same).
#[derive(Debug)]
pub struct CallReader {
    /// Text not yet released: newlines and a possible tag start at its end, or a call still
    /// being written.
    held: String,
    /// Inside a call.
    in_call: bool,
    calls: Vec<ToolCall>,
    /// The offered tools' names.
    names: Vec<String>,
    /// Nothing is released yet and the answer so far could be a bare call.
    maybe_bare: bool,
}

impl CallReader {
    /// A reader for an answer to a request that offered `tools` (OpenAI function specs).
    pub fn new(tools: &[Value]) -> CallReader {
        CallReader {
            held: String::new(),
            in_call: false,
            calls: Vec::new(),
            names: tools
                .iter()
                .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
                .map(str::to_string)
                .collect(),
            maybe_bare: true,
        }
    }

    /// Takes the next piece of the answer; returns the text that can be shown now.
    pub fn push(&mut self, piece: &str) -> String {
        self.held.push_str(piece);
        if self.maybe_bare {
            if could_be_bare_call(&self.held) {
                return String::new();
            }
            self.maybe_bare = false;
        }
        let mut shown = String::new();
        loop {
            if self.in_call {
                let Some(end) = self.held.find(CLOSE) else {
                    return shown;
                };
                let body = self.held[..end].to_string();
                self.held.drain(..end + CLOSE.len());
                self.in_call = false;
                match parse_call(&body) {
                    Some(call) => self.calls.push(call),
                    // Not a call after all: the words are the model's, so they are kept.
                    None => {
                        tracing::debug!("a <tool_call> that is not a call was kept as text");
                        let _ = write!(shown, "{OPEN}{body}{CLOSE}");
                    }
                }
                // Newlines after a call are the template's.
                self.held = self.held.trim_start_matches('\n').to_string();
                continue;
            }
            if let Some(start) = self.held.find(OPEN) {
                shown.push_str(self.held[..start].trim_end_matches('\n'));
                self.held.drain(..start + OPEN.len());
                self.in_call = true;
                continue;
            }
            // Keep back the longest ending that could still grow into the tag.
            let keep = (1..OPEN.len().min(self.held.len() + 1))
                .rev()
                .find(|&n| {
                    self.held.is_char_boundary(self.held.len() - n)
                        && OPEN.starts_with(&self.held[self.held.len() - n..])
                })
                .unwrap_or(0);
            // And the newlines before it: a call's are the template's, not the answer's.
            let cut = self.held[..self.held.len() - keep]
                .trim_end_matches('\n')
                .len();
            shown.push_str(&self.held[..cut]);
            self.held.drain(..cut);
            return shown;
        }
    }

    /// The answer has ended: what text is left, and the calls it made. A call cut off before
    /// its closing tag is parsed if it is whole JSON, and kept as text if not.
    pub fn finish(mut self) -> (String, Vec<ToolCall>) {
        if self.maybe_bare {
            if let Some(calls) = bare_calls(&self.held, &self.names) {
                return (String::new(), calls);
            }
            self.maybe_bare = false;
            let mut rest = self.push("");
            let (more, calls) = self.finish();
            rest.push_str(&more);
            return (rest, calls);
        }
        let mut rest = String::new();
        if self.in_call {
            match parse_call(&self.held) {
                Some(call) => self.calls.push(call),
                None => {
                    rest.push_str(OPEN);
                    rest.push_str(&self.held);
                }
            }
        } else {
            rest = self.held;
        }
        if !self.calls.is_empty() {
            rest = rest.trim_matches('\n').to_string();
        }
        (rest, self.calls)
    }
}

/// Whether `text`, the whole answer so far, could still be calls written without tags: optional
/// blank space and a ```` ``` ```` or ```` ```json ```` line, then `{`, then `"name"`.
fn could_be_bare_call(text: &str) -> bool {
    let mut t = text.trim_start();
    if t.is_empty() || "```".starts_with(t) {
        return true;
    }
    if let Some(fenced) = t.strip_prefix("```") {
        let Some((lang, body)) = fenced.split_once('\n') else {
            return "json".starts_with(fenced.trim());
        };
        if !matches!(lang.trim(), "" | "json") {
            return false;
        }
        t = body.trim_start();
    }
    let Some(inner) = t.strip_prefix('{') else {
        return t.is_empty();
    };
    let inner = inner.trim_start();
    inner.starts_with("\"name\"") || "\"name\"".starts_with(inner)
}

/// The calls in an answer that is nothing but bare calls to offered tools.
fn bare_calls(text: &str, names: &[String]) -> Option<Vec<ToolCall>> {
    let mut t = text.trim();
    if let Some(fenced) = t.strip_prefix("```") {
        let (_, body) = fenced.split_once('\n')?;
        t = body.trim_end().strip_suffix("```")?;
    }
    let mut calls = Vec::new();
    for value in serde_json::Deserializer::from_str(t).into_iter::<Value>() {
        let call = call_of(value.ok()?)?;
        if !names.contains(&call.name) {
            return None;
        }
        calls.push(call);
    }
    (!calls.is_empty()).then_some(calls)
}

/// The call written between the tags.
fn parse_call(body: &str) -> Option<ToolCall> {
    call_of(serde_json::from_str(body.trim()).ok()?)
}

/// `{"name": …, "arguments": {…}}` (arguments may also come as a JSON string).
fn call_of(value: Value) -> Option<ToolCall> {
    let name = value.get("name")?.as_str()?.to_string();
    let arguments = match value.get("arguments").or_else(|| value.get("parameters")) {
        None | Some(Value::Null) => json!({}),
        Some(Value::String(s)) => serde_json::from_str(s).ok()?,
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return None,
    };
    Some(ToolCall { name, arguments })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen2.5-Instruct's chat template, as its GGUF files carry it (Apache-2.0).
    const QWEN: &str = include_str!("../tests/qwen2.5-chat-template.jinja");

    fn tools() -> Vec<Value> {
        let forget =
            json!({"type": "function", "function": {"name": "forget_fact", "parameters": {}}});
        vec![remember(), forget]
    }

    fn remember() -> Value {
        json!({"type": "function", "function": {"name": "remember_fact",
            "description": "Store a fact about the user.",
            "parameters": {"type": "object", "properties": {"fact": {"type": "string"}}, "required": ["fact"]}}})
    }

    #[test]
    fn a_template_without_tool_calls_offers_no_tools() {
        let chatml = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";
        assert!(ToolTemplate::new(chatml).is_none());
        assert!(ToolTemplate::new(QWEN).is_some());
    }

    /// The assistant's turn that makes one call and says nothing.
    fn calling(name: &str, arguments: serde_json::Value) -> Turn {
        Turn {
            role: "assistant".into(),
            content: String::new(),
            tool_calls: vec![ToolCall {
                name: name.into(),
                arguments,
            }],
        }
    }

    #[test]
    fn the_qwen_template_renders_tools_calls_and_results_as_the_model_was_trained() {
        let template = ToolTemplate::new(QWEN).unwrap();
        let turns = vec![
            Turn::text("system", "You are Jarvis."),
            Turn::text("user", "Remember that my dog is called Bruno."),
            calling(
                "remember_fact",
                json!({"fact": "The user's dog is called Bruno — a boxer."}),
            ),
            Turn::text("tool", "Remembered."),
        ];
        let prompt = template.render(&turns, &[remember()]).unwrap();
        // What Python's jinja2 renders from the same template and messages (checked once with
        // transformers' settings: tojson as json.dumps, ensure_ascii off; keys in the order they
        // arrive, here sorted as serde_json keeps them).
        let expected = "<|im_start|>system\nYou are Jarvis.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"function\": {\"description\": \"Store a fact about the user.\", \"name\": \"remember_fact\", \"parameters\": {\"properties\": {\"fact\": {\"type\": \"string\"}}, \"required\": [\"fact\"], \"type\": \"object\"}}, \"type\": \"function\"}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nRemember that my dog is called Bruno.<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"remember_fact\", \"arguments\": {\"fact\": \"The user's dog is called Bruno — a boxer.\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nRemembered.\n</tool_response><|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(prompt, expected);

        // Without tools the same template is plain ChatML.
        let plain = template.render(&turns[..2], &[]).unwrap();
        assert_eq!(plain, "<|im_start|>system\nYou are Jarvis.<|im_end|>\n<|im_start|>user\nRemember that my dog is called Bruno.<|im_end|>\n<|im_start|>assistant\n");
    }

    #[test]
    fn calls_are_read_out_of_a_streamed_answer_and_the_text_around_them_is_kept() {
        let answer = "Sure.\n<tool_call>\n{\"name\": \"remember_fact\", \"arguments\": {\"fact\": \"Dog: Bruno\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"forget_fact\", \"arguments\": \"{\\\"query\\\": \\\"cat\\\"}\"}\n</tool_call>";
        // Fed a few characters at a time, the tag split across pieces.
        for size in [1, 3, 7, 200] {
            let mut reader = CallReader::new(&tools());
            let mut shown = String::new();
            let chars: Vec<char> = answer.chars().collect();
            for piece in chars.chunks(size) {
                shown.push_str(&reader.push(&piece.iter().collect::<String>()));
                assert!(!shown.contains('<'), "no tag shown: {shown:?}");
            }
            let (rest, calls) = reader.finish();
            shown.push_str(&rest);
            assert_eq!(shown, "Sure.", "size {size}");
            assert_eq!(
                calls,
                vec![
                    ToolCall {
                        name: "remember_fact".into(),
                        arguments: json!({"fact": "Dog: Bruno"})
                    },
                    ToolCall {
                        name: "forget_fact".into(),
                        arguments: json!({"query": "cat"})
                    },
                ]
            );
        }
    }

    #[test]
    fn text_that_only_looks_like_a_call_is_shown_as_written() {
        let mut reader = CallReader::new(&tools());
        let mut shown = reader.push("Use a < b and <tool_call>not json</tool_call> then <tool");
        let (rest, calls) = reader.finish();
        shown.push_str(&rest);
        assert!(calls.is_empty());
        assert_eq!(
            shown,
            "Use a < b and <tool_call>not json</tool_call> then <tool"
        );

        // A call cut off by the length limit: whole JSON is still a call, broken JSON is text.
        let mut reader = CallReader::new(&tools());
        reader.push("<tool_call>\n{\"name\": \"remember_fact\", \"arguments\": {}}");
        assert_eq!(reader.finish().1.len(), 1);
        let mut reader = CallReader::new(&tools());
        reader.push("<tool_call>\n{\"name\": \"remem");
        let (rest, calls) = reader.finish();
        assert!(calls.is_empty());
        assert_eq!(rest, "<tool_call>\n{\"name\": \"remem");
    }

    #[test]
    fn a_call_written_without_its_tags_is_still_a_call_when_it_names_an_offered_tool() {
        let read = |answer: &str| {
            let mut reader = CallReader::new(&tools());
            let mut shown = String::new();
            for c in answer.chars() {
                shown.push_str(&reader.push(&c.to_string()));
            }
            let (rest, calls) = reader.finish();
            (shown + &rest, calls)
        };
        let bruno = ToolCall {
            name: "remember_fact".into(),
            arguments: json!({"fact": "Their dog is called Bruno."}),
        };
        let bare =
            r#"{"name": "remember_fact", "arguments": {"fact": "Their dog is called Bruno."}}"#;
        assert_eq!(read(bare), (String::new(), vec![bruno.clone()]));
        assert_eq!(
            read(&format!("```json\n{bare}\n```")),
            (String::new(), vec![bruno])
        );
        // JSON the user asked for is an answer, not a call: shown whole once it ends.
        let asked = r#"{"name": "Bruno", "breed": "boxer"}"#;
        assert_eq!(read(asked), (asked.to_string(), vec![]));
        let fenced = "```json\n{\"name\": \"remember_fact\"} and more\n```";
        assert_eq!(read(fenced), (fenced.to_string(), vec![]));
        // Anything else streams at once.
        let mut reader = CallReader::new(&tools());
        assert_eq!(reader.push("{\"id\": 1}"), "{\"id\": 1}");
        let mut reader = CallReader::new(&tools());
        assert_eq!(reader.push("```rust\nfn"), "```rust\nfn");
        let mut reader = CallReader::new(&tools());
        assert_eq!(reader.push("Paris"), "Paris");
    }

    #[test]
    fn a_model_without_tools_reads_calls_and_results_as_text() {
        let turns = vec![
            Turn::text("user", "Remember Bruno."),
            calling("remember_fact", json!({"fact": "Bruno"})),
            Turn::text("tool", "Remembered."),
            Turn::text("user", "Thanks"),
        ];
        let flat = without_tools(&turns);
        assert_eq!(
            flat,
            vec![
                Turn::text("user", "Remember Bruno."),
                Turn::text(
                    "assistant",
                    "[Called remember_fact with {\"fact\":\"Bruno\"}]"
                ),
                Turn::text("user", "[Tool result] Remembered.\n\nThanks"),
            ]
        );
    }
}
