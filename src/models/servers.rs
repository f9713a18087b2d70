//! Model servers the user already runs on this machine — Ollama, LM Studio — found through their
//! OpenAI-compatible `GET /v1/models`, and the settings that make Jarvis answer with one of their
//! models (the OpenAI-compatible backend, no key).

use std::time::Duration;

use crate::config::{BackendKind, SettingValue, Settings};

use super::ModelsError;

/// A server that may be running here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelServer {
    /// What a model's name starts with: `ollama:qwen2.5:3b`.
    pub name: String,
    /// What the user reads.
    pub title: String,
    /// Its OpenAI-compatible base URL (`…/v1`).
    pub base_url: String,
}

impl ModelServer {
    /// Whether `settings` make Jarvis answer with `model` on this server.
    pub fn answers_with(&self, settings: &Settings, model: &str) -> bool {
        settings.backend == BackendKind::Openai
            && settings.openai.base_url.trim_end_matches('/') == self.base_url
            && settings.openai.model == model
    }
}

/// The servers looked for: Ollama on 127.0.0.1:11434 and LM Studio on 127.0.0.1:1234, or those
/// `spec` names (`ollama=URL,lmstudio=URL`: a server on another port; the tests' own).
pub fn model_servers(spec: Option<&str>) -> Vec<ModelServer> {
    let title = |name: &str| match name {
        "ollama" => "Ollama".to_string(),
        "lmstudio" => "LM Studio".to_string(),
        other => other.to_string(),
    };
    match spec {
        Some(spec) => spec
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(name, url)| ModelServer {
                name: name.trim().to_string(),
                title: title(name.trim()),
                base_url: url.trim().trim_end_matches('/').to_string(),
            })
            .collect(),
        None => vec![
            ModelServer {
                name: "ollama".into(),
                title: title("ollama"),
                base_url: "http://127.0.0.1:11434/v1".into(),
            },
            ModelServer {
                name: "lmstudio".into(),
                title: title("lmstudio"),
                base_url: "http://127.0.0.1:1234/v1".into(),
            },
        ],
    }
}

/// The models `server` offers, if it answers.
pub async fn offered(server: &ModelServer) -> Result<Vec<String>, ModelsError> {
    let url = format!("{}/models", server.base_url);
    let failed = |reason: String| ModelsError::Http {
        url: url.clone(),
        reason,
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let response = client
        .get(&url)
        .send()
        .await
        .map_err(|e| failed(e.to_string()))?;
    if !response.status().is_success() {
        return Err(ModelsError::Status {
            url: url.clone(),
            status: response.status().as_u16(),
        });
    }
    let body: serde_json::Value = response.json().await.map_err(|e| failed(e.to_string()))?;
    let names = body["data"]
        .as_array()
        .ok_or_else(|| failed("the answer lists no models (no `data`)".into()))?
        .iter()
        .filter_map(|m| m["id"].as_str().map(str::to_string))
        .collect();
    Ok(names)
}

/// Each of `servers` that answers, with its models.
pub async fn running(servers: &[ModelServer]) -> Vec<(ModelServer, Vec<String>)> {
    let asked = servers.iter().map(|server| async move {
        offered(server)
            .await
            .ok()
            .map(|names| (server.clone(), names))
    });
    futures::future::join_all(asked)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// `jarvis models list`'s lines for the servers' models: NAME (`server:model`), `-`, STATE (`in
/// use`, `served`) and where, tab-separated.
pub fn server_lines(found: &[(ModelServer, Vec<String>)], settings: &Settings) -> Vec<String> {
    let mut lines = Vec::new();
    for (server, names) in found {
        for name in names {
            let state = if server.answers_with(settings, name) {
                "in use"
            } else {
                "served"
            };
            lines.push(format!(
                "{}:{name}\t-\t{state}\ton {} ({})",
                server.name, server.title, server.base_url
            ));
        }
    }
    lines
}

/// The server a `server:model` name is on, and the model, where it names one of `servers`.
pub fn split_served<'a>(
    servers: &'a [ModelServer],
    name: &str,
) -> Option<(&'a ModelServer, String)> {
    let (server, model) = name.split_once(':')?;
    let server = servers.iter().find(|s| s.name == server)?;
    Some((server, model.to_string()))
}

/// The settings that answer with `model` on `server` (as [`crate::config::write_settings`] takes
/// them): the OpenAI-compatible backend at its URL, no key.
pub fn settings_for(
    server: &ModelServer,
    model: &str,
) -> Vec<(&'static [&'static str], Option<SettingValue>)> {
    let text = |value: &str| Some(SettingValue::Text(value.to_string()));
    vec![
        (&["backend"], text("openai")),
        (&["openai", "base_url"], text(&server.base_url)),
        (&["openai", "model"], text(model)),
        (&["openai", "requires_key"], Some(SettingValue::Bool(false))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_served_name_is_its_server_and_the_model_with_its_own_colons() {
        let servers = model_servers(None);
        let (server, model) = split_served(&servers, "ollama:qwen2.5:3b").unwrap();
        assert_eq!(server.base_url, "http://127.0.0.1:11434/v1");
        assert_eq!(model, "qwen2.5:3b");
        assert!(split_served(&servers, "qwen2.5-1.5b").is_none());
        assert!(split_served(&servers, "elsewhere:model").is_none());
        let custom = model_servers(Some("ollama=http://127.0.0.1:9/v1/"));
        assert_eq!(custom[0].base_url, "http://127.0.0.1:9/v1");
        assert_eq!(custom[0].title, "Ollama");
    }
}
