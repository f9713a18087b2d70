//! What `jarvis request` prints and the desktop's "What the model sees" shows.

/// What `jarvis request` prints: the backend, URL, headers (keys redacted) and body that a question
/// would be sent with, built by the same code as a real reply's request, with the same options
/// (the rules, recall) the service uses.
pub fn preview(
    config: &crate::config::Config,
    store: &crate::store::Store,
    options: &crate::ServiceOptions,
    chat: Option<crate::store::ChatId>,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<serde_json::Value, crate::store::StoreError> {
    use crate::config::{self, BackendKind};
    use crate::llm;
    let s = &config.settings;
    let (history, previous) = crate::prompt::next_question(store, chat, text)?;
    // The key's place holds what it would be: redacted, or missing.
    let placeholder = |kind: BackendKind| {
        let var = kind.key_var_of();
        secrecy::SecretString::from(match config::find_key(var, env) {
            Some(_) => "<redacted>".to_string(),
            None => format!("<missing: set {var}>"),
        })
    };
    // The backend's own headers, as a request would carry them.
    let shown = |headers: Result<reqwest::header::HeaderMap, llm::BackendError>| match headers {
        Ok(headers) => serde_json::Value::Object(
            headers
                .iter()
                .map(|(name, value)| {
                    let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                    (name.to_string(), serde_json::Value::String(value))
                })
                .collect(),
        ),
        Err(err) => serde_json::json!({ "error": err.to_string() }),
    };
    let build = |model: &str, max_tokens: u32| {
        crate::prompt::assemble(
            store,
            crate::prompt::Assembly {
                chat,
                history: &history,
                previous: previous.clone(),
                mode: crate::prompt::Mode::Typed,
                user_name: &options.user_name,
                rules: &options.rules,
                recall: options.recalling().map(|r| r.as_ref()),
                model,
                max_tokens,
                // (What runs belongs to the service answering, which a preview does not ask.)
                running_actions: 0,
                locale: options.locale,
            },
        )
        .map(|mut request| {
            // The user's tools, from the servers running now.
            if let Some(servers) = &options.mcp {
                request.tools.extend(
                    crate::tools::plugged_now(servers)
                        .into_iter()
                        .map(|tool| tool.spec),
                );
            }
            request
        })
    };
    let (url, headers, body) = match s.backend {
        BackendKind::Anthropic => (
            llm::anthropic::url(&s.anthropic.base_url),
            shown(llm::anthropic::headers(
                &s.anthropic,
                &placeholder(BackendKind::Anthropic),
            )),
            llm::anthropic::body(&build(&s.anthropic.model, s.anthropic.max_tokens)?),
        ),
        BackendKind::Openai => (
            llm::openai::url(&s.openai.base_url),
            shown(llm::openai::headers(
                s.openai
                    .requires_key
                    .then(|| placeholder(BackendKind::Openai))
                    .as_ref(),
            )),
            llm::openai::body(&build(&s.openai.model, s.openai.max_tokens)?, &s.openai),
        ),
        BackendKind::Local => {
            let model = config.local_model_path();
            let wire =
                llm::local::wire_settings(&s.local, &model, "http://127.0.0.1:<port>/v1".into());
            (
                llm::openai::url(&wire.base_url),
                shown(llm::openai::headers(None)),
                llm::openai::body(&build(&wire.model, wire.max_tokens)?, &wire),
            )
        }
    };
    Ok(serde_json::json!({"backend": s.backend, "url": url, "headers": headers, "body": body}))
}
