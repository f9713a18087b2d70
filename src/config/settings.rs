//! What the settings file holds: each section with its defaults, and the enums shared by the
//! layers above (the backend, how the orb listens, how a question was asked).

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Which backend answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// Anthropic's Messages API.
    Anthropic,
    /// OpenAI or any OpenAI-compatible server.
    Openai,
    /// A GGUF model run on this machine's CPU by the `jarvis-llm` server that Jarvis starts.
    #[default]
    Local,
}

impl BackendKind {
    /// The settings and CLI name.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Anthropic => "anthropic",
            BackendKind::Openai => "openai",
            BackendKind::Local => "local",
        }
    }

    /// The variable (in the environment, or as the OS keyring's user) holding this backend's API
    /// key; none for the local model. The one place the names are spelled.
    pub fn key_var(self) -> Option<&'static str> {
        match self {
            BackendKind::Anthropic => Some("ANTHROPIC_API_KEY"),
            BackendKind::Openai => Some("OPENAI_API_KEY"),
            BackendKind::Local => None,
        }
    }

    /// [`Self::key_var`] of a backend that has one.
    pub(crate) fn key_var_of(self) -> &'static str {
        self.key_var().unwrap_or_default()
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The Anthropic section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AnthropicSettings {
    /// Base URL; requests go to `{base_url}/v1/messages`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// The `anthropic-version` header.
    pub version: String,
    /// Maximum tokens of a reply.
    pub max_tokens: u32,
    /// Allows a plain `http://` base URL off this machine (the key would cross the network
    /// unencrypted).
    pub allow_insecure: bool,
}

impl Default for AnthropicSettings {
    fn default() -> Self {
        AnthropicSettings {
            base_url: "https://api.anthropic.com".into(),
            model: "claude-sonnet-4-5".into(),
            version: "2023-06-01".into(),
            max_tokens: 4096,
            allow_insecure: false,
        }
    }
}

/// The `[openai]` section: OpenAI or any OpenAI-compatible server (Ollama, llama.cpp, LM Studio, vLLM).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiSettings {
    /// Base URL including the version path; requests go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// Maximum tokens of a reply.
    pub max_tokens: u32,
    /// Whether the server needs `OPENAI_API_KEY` (Ollama and llama.cpp do not).
    pub requires_key: bool,
    /// Sampling temperature; the server's default when unset.
    pub temperature: Option<f32>,
    /// Nucleus sampling; the server's default when unset.
    pub top_p: Option<f32>,
    /// A fixed seed, for servers that honour one.
    pub seed: Option<u32>,
    /// Allows a plain `http://` base URL off this machine (the key and the conversation would
    /// cross the network unencrypted).
    pub allow_insecure: bool,
    /// The server is Jarvis's own `jarvis-llm`, which is told which calls are housekeeping.
    #[serde(skip)]
    pub jarvis_server: bool,
}

impl OpenAiSettings {
    fn openai() -> Self {
        OpenAiSettings {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            max_tokens: 4096,
            requires_key: true,
            temperature: None,
            top_p: None,
            seed: None,
            allow_insecure: false,
            jarvis_server: false,
        }
    }
}

impl Default for OpenAiSettings {
    fn default() -> Self {
        Self::openai()
    }
}

/// The `[local]` section: the model on this machine and how it samples.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LocalSettings {
    /// A GGUF file: a path, or a file name in the model folder (`<data dir>/models`).
    pub model: String,
    /// The context window in tokens (at most the model's own); longer prompts lose their oldest turns.
    pub context: u32,
    /// CPU threads; 0 uses every core up to 8.
    pub threads: u32,
    /// Sampling temperature; 0 always picks the likeliest token. 0.2, as SmolLM2's own examples
    /// use: the 135M model strays into other languages and invented facts more often at 0.7.
    pub temperature: f32,
    /// Nucleus sampling.
    pub top_p: f32,
    /// A fixed seed makes answers repeatable; unset, each answer draws anew.
    pub seed: Option<u32>,
    /// Maximum tokens of a reply.
    pub max_tokens: u32,
    /// Whether the model is offered Jarvis's tools (remember and forget).
    pub tools: LocalTools,
}

/// Whether the local model is offered Jarvis's tools. Only a model whose own chat template
/// offers tools in the Hermes way (`<tool_call>`, as Qwen2.5's) can be; `auto` also leaves out
/// models under a billion parameters: Qwen2.5-Coder-0.5B writes the first call right but then
/// repeats it instead of answering.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LocalTools {
    /// When the template offers tools and the model has at least a billion parameters.
    #[default]
    Auto,
    /// Whenever the template offers tools.
    On,
    /// Never.
    Off,
}

impl LocalTools {
    /// The word the settings file and `jarvis-llm --tools` use.
    pub fn as_str(self) -> &'static str {
        match self {
            LocalTools::Auto => "auto",
            LocalTools::On => "on",
            LocalTools::Off => "off",
        }
    }
}

/// The default model's file name, installed by `scripts/models`.
pub const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

impl Default for LocalSettings {
    fn default() -> Self {
        LocalSettings {
            model: DEFAULT_MODEL.into(),
            context: 4096,
            threads: 0,
            temperature: 0.2,
            top_p: 0.9,
            seed: None,
            max_tokens: 512,
            tools: LocalTools::Auto,
        }
    }
}

/// How long to wait for the network, in seconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// To open the connection.
    pub connect_secs: f64,
    /// From sending the request to the first token of the reply.
    pub first_token_secs: f64,
    /// Between two pieces of the stream once it flows.
    pub idle_secs: f64,
    /// Once the answer began, how long it may go without a word (or a tool call's piece):
    /// keep-alives do not count, so a server that only pings cannot hold a reply forever.
    pub stall_secs: f64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_secs: 10.0,
            first_token_secs: 120.0,
            idle_secs: 60.0,
            stall_secs: 120.0,
        }
    }
}

impl Timeouts {
    /// The connect timeout.
    pub fn connect(&self) -> Duration {
        secs(self.connect_secs)
    }
    /// The first-token timeout.
    pub fn first_token(&self) -> Duration {
        secs(self.first_token_secs)
    }
    /// The between-events timeout.
    pub fn idle(&self) -> Duration {
        secs(self.idle_secs)
    }
    /// The between-words timeout once the answer began.
    pub fn stall(&self) -> Duration {
        secs(self.stall_secs)
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::from_secs(60))
}

/// Retries before the first token.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RetrySettings {
    /// How many times a 429, 529 / overloaded or 5xx is retried.
    pub max_retries: u32,
    /// The first backoff; it doubles each time.
    pub initial_backoff_ms: u64,
    /// A `retry-after` longer than this fails the reply at once instead of waiting.
    pub max_wait_secs: u64,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_retries: 3,
            initial_backoff_ms: 1000,
            max_wait_secs: 60,
        }
    }
}

/// Replies and their storage.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ReplySettings {
    /// How many replies a remote backend writes at once (the local one: always one).
    pub max_concurrent: usize,
    /// Progress is stored at each sentence end or after this many milliseconds (200: a crash
    /// loses at most a quarter second of a reply, the kill soak's bound, with room for the write).
    pub progress_ms: u64,
    /// How long a locked database is waited for.
    pub busy_timeout_ms: u64,
    /// The model's context in tokens, for compacting long chats; 0: what the backend says
    /// (the local model's `context`; 200,000 for Anthropic; 128,000 for OpenAI-compatible).
    pub context_tokens: usize,
    /// The longest reply kept, in characters: a backend that writes on past it (a runaway or
    /// endless stream) is stopped there, the text so far kept and the reply failed with a reason.
    pub max_chars: usize,
}

impl Default for ReplySettings {
    fn default() -> Self {
        ReplySettings {
            max_concurrent: 4,
            progress_ms: 200,
            busy_timeout_ms: 5000,
            context_tokens: 0,
            max_chars: 200_000,
        }
    }
}

/// Who the user is, for the profile the model sees.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ProfileSettings {
    /// The user's name; the profile block is headed "About {name}" ("About the user" when empty).
    pub name: String,
    /// A Markdown file whose text replaces the built-in rules the model is given; empty: the
    /// built-in rules (`assets/rules.md`).
    pub rules: String,
}

/// How the orb listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum ListenMode {
    /// The shortcut opens the microphone while it is held.
    #[default]
    PushToTalk,
    /// The voice activity detector decides.
    HandsFree,
    /// "Hey Jarvis" opens a conversation.
    Wake,
}

/// How a question was asked: typed, or spoken in one of the ways the orb listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Typed in a window or terminal.
    Typed,
    /// Spoken with the push-to-talk shortcut.
    PushToTalk,
    /// Spoken hands-free.
    HandsFree,
    /// Spoken after the wake word.
    Wake,
}

impl Mode {
    /// As the store keeps it with a question (`None`: typed).
    pub fn stored(self) -> Option<&'static str> {
        match self {
            Mode::Typed => None,
            Mode::PushToTalk => Some("push_to_talk"),
            Mode::HandsFree => Some("hands_free"),
            Mode::Wake => Some("wake"),
        }
    }

    /// From what the store kept ([`Mode::stored`]); anything else is typed.
    pub fn from_stored(stored: Option<&str>) -> Mode {
        match stored {
            Some("push_to_talk") => Mode::PushToTalk,
            Some("hands_free") => Mode::HandsFree,
            Some("wake") => Mode::Wake,
            _ => Mode::Typed,
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Mode::Typed => "typed",
            Mode::PushToTalk => "spoken, push to talk",
            Mode::HandsFree => "spoken, hands-free",
            Mode::Wake => "spoken, after the wake word",
        }
    }
}

impl From<ListenMode> for Mode {
    fn from(mode: ListenMode) -> Mode {
        match mode {
            ListenMode::PushToTalk => Mode::PushToTalk,
            ListenMode::HandsFree => Mode::HandsFree,
            ListenMode::Wake => Mode::Wake,
        }
    }
}

/// The voice conversation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct VoiceSettings {
    /// How the orb listens: `push_to_talk`, `hands_free` or `wake`.
    pub mode: ListenMode,
    /// Whether the voice conversation is also saved as a chat.
    pub save_conversations: bool,
    /// In wake mode, whether "Hey Jarvis" is still listened for while the orb is hidden (the tray
    /// icon then shows the microphone on). Off: hiding the orb closes the microphone.
    pub wake_while_hidden: bool,
    /// The speech-to-text model: `tiny_en` (fast, English) or `base` (multilingual).
    pub speech_model: SpeechModel,
    /// How sure the wake word detector must be (0–1) that it heard "Hey Jarvis".
    pub wake_threshold: f32,
    /// The voice Jarvis speaks with: `piper` (neural, the default) or `espeak` (espeak-ng's
    /// formant voice, also the fallback where Piper's voice is not installed).
    pub tts: TtsEngine,
    /// The Piper voice: a voice's `.onnx` (its `.onnx.json` beside it), a path or one in the
    /// model folder; empty is the one `scripts/models voice` installs (en_US-joe-medium). It
    /// speaks where its language is the settings' (its `.onnx.json` says which).
    pub piper_voice: String,
    /// The espeak-ng voice Jarvis speaks with when it speaks with espeak-ng.
    pub tts_voice: String,
    /// How fast it speaks, in words per minute (for Piper, its length scale: 175 is the voice as
    /// trained).
    pub tts_speed: u32,
    /// The microphone by name; empty is the system's default.
    pub input_device: String,
    /// Threads for speech-to-text.
    pub threads: usize,
}

impl Default for VoiceSettings {
    fn default() -> Self {
        VoiceSettings {
            mode: ListenMode::PushToTalk,
            save_conversations: true,
            wake_while_hidden: false,
            speech_model: SpeechModel::TinyEn,
            wake_threshold: 0.5,
            tts: TtsEngine::Piper,
            piper_voice: String::new(),
            tts_voice: "en-us".into(),
            tts_speed: 175,
            input_device: String::new(),
            threads: 2,
        }
    }
}

/// Who speaks Jarvis's replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum TtsEngine {
    /// Piper's neural voice (en_US-joe-medium), on ONNX Runtime.
    #[default]
    Piper,
    /// espeak-ng's formant voice.
    Espeak,
}

/// The speech-to-text model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum SpeechModel {
    /// Whisper tiny.en: English only, the fastest.
    #[default]
    TinyEn,
    /// Whisper base: multilingual, about twice as slow.
    Base,
}

impl SpeechModel {
    /// Its file in the model folder, as `scripts/models voice` installs it (tiny.en's weights
    /// in 8 bits: 44 MB held instead of 78, faster on the median, the benchmarks' verdicts
    /// unchanged).
    pub fn file_name(self) -> &'static str {
        match self {
            SpeechModel::TinyEn => "ggml-tiny.en-q8_0.bin",
            SpeechModel::Base => "ggml-base.bin",
        }
    }

    /// The file an earlier `scripts/models voice` installed instead, still used where it is the
    /// only one there.
    pub fn earlier_file_name(self) -> Option<&'static str> {
        match self {
            SpeechModel::TinyEn => Some("ggml-tiny.en.bin"),
            SpeechModel::Base => None,
        }
    }

    /// Whisper's name for it ("tiny.en", "base").
    pub fn whisper_name(self) -> &'static str {
        match self {
            SpeechModel::TinyEn => "tiny.en",
            SpeechModel::Base => "base",
        }
    }

    /// The command that installs it.
    pub fn installed_by(self) -> &'static str {
        match self {
            SpeechModel::TinyEn => "scripts/models voice",
            SpeechModel::Base => "scripts/models base",
        }
    }
}

/// The look of the windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Theme {
    /// Follows the desktop.
    #[default]
    System,
    /// Light.
    Light,
    /// Dark.
    Dark,
}

/// The desktop app.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DesktopSettings {
    /// The global push-to-talk shortcut, e.g. `Ctrl+Alt+Space`.
    pub shortcut: String,
    /// `system`, `light` or `dark`.
    pub theme: Theme,
    /// Whether the chat window offers a better model while only a small one is installed
    /// (off once the user says "Not now").
    pub model_offer: bool,
    /// Whether Jarvis starts, hidden in the tray, when the user logs in (an XDG autostart
    /// entry, written and removed with this setting).
    pub start_at_login: bool,
}

impl Default for DesktopSettings {
    fn default() -> Self {
        DesktopSettings {
            shortcut: "Ctrl+Alt+Space".into(),
            theme: Theme::System,
            model_offer: true,
            start_at_login: false,
        }
    }
}

/// What Jarvis remembers besides the facts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MemorySettings {
    /// "Use earlier conversations": each chat is summarised after its answers, and the summaries
    /// of related chats are recalled into a new one. Off: no summary is written or sent.
    pub earlier_conversations: bool,
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            earlier_conversations: true,
        }
    }
}

/// Tools the user plugs in through the Model Context Protocol: `[mcp]` and its
/// `[[mcp.servers]]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct McpSettings {
    /// The servers, each started when first needed.
    pub servers: Vec<McpServerSettings>,
    /// How long one tool call may take, in seconds.
    pub call_timeout_secs: f64,
    /// How long a server may take to start and say its tools, in seconds (a launcher such as
    /// `npx -y` may download it first).
    pub start_timeout_secs: f64,
}

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            servers: Vec::new(),
            call_timeout_secs: 30.0,
            start_timeout_secs: 60.0,
        }
    }
}

/// One MCP server: a program Jarvis runs and speaks to over its stdin and stdout, or a server
/// already running that Jarvis speaks to over streamable HTTP at `url`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerSettings {
    /// What the user and the model know it by; its tools are offered as `name__tool`.
    pub name: String,
    /// The program (found on `PATH` where it has no `/`).
    pub command: String,
    /// Where a server that runs by itself answers MCP's streamable HTTP (`http://…` or
    /// `https://…`), in place of a command.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to its environment (Jarvis's own API keys are never passed on).
    pub env: std::collections::BTreeMap<String, String>,
    /// Whether a call to one of its tools waits for the user's yes.
    pub approve: Approve,
}

/// Whether a server's tool call waits for the user.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Approve {
    /// Each call waits for the user (Allow once, Always allow this tool, Deny).
    #[default]
    Ask,
    /// Every call runs without asking.
    Always,
    /// No call runs: the model is told it was refused.
    Never,
}

/// `[general]`: what the whole product follows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct GeneralSettings {
    /// The user's language: the request's envelopes, and what the voice hears and says.
    pub language: Language,
}

/// The user's language.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    /// The environment's locale (`LC_ALL`, `LC_MESSAGES`, `LANG`): German or Chinese where it
    /// says so, English otherwise.
    #[default]
    Auto,
    /// English.
    En,
    /// German.
    De,
    /// Chinese, written in simplified characters (the mainland's and Singapore's).
    Zh,
    /// Chinese, written in traditional characters (Taiwan's, Hong Kong's and Macau's): what it
    /// hears is written, and what it writes around the user's words reads, as they write.
    #[serde(
        rename = "zh-hant",
        alias = "zh-Hant",
        alias = "zh-tw",
        alias = "zh-TW",
        alias = "zh_TW",
        alias = "zh-hk",
        alias = "zh-HK",
        alias = "zh_HK"
    )]
    ZhHant,
}

impl McpServerSettings {
    /// Whether it is a server that runs by itself at a `url` (not a program Jarvis runs).
    pub fn at_url(&self) -> bool {
        !self.url.trim().is_empty()
    }

    /// Whether `other` runs the same server: everything but whether a call waits for the user.
    pub fn runs_alike(&self, other: &McpServerSettings) -> bool {
        let program = |s: &McpServerSettings| McpServerSettings {
            approve: Approve::default(),
            ..s.clone()
        };
        program(self) == program(other)
    }
}

impl Language {
    /// The settings file's word for it (`auto`, `en`, `de`, `zh`, `zh-hant`).
    pub fn key(self) -> &'static str {
        match self {
            Language::Auto => "auto",
            Language::En => "en",
            Language::De => "de",
            Language::Zh => "zh",
            Language::ZhHant => "zh-hant",
        }
    }

    /// The language in force: `auto` resolved from `LC_ALL`, `LC_MESSAGES` or `LANG` (the first
    /// set) — German or Chinese where it says so, English otherwise.
    pub fn resolved(self) -> Language {
        if self != Language::Auto {
            return self;
        }
        let tag = ["LC_ALL", "LC_MESSAGES", "LANG"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
            .unwrap_or_default();
        Language::of_tag(&tag).unwrap_or(Language::En)
    }

    /// The language a locale or language tag names (`de`, `de_AT.UTF-8`, `zh-Hans`, `zh_TW`),
    /// if it is one of Jarvis's. Chinese is traditional where the tag names that script
    /// (`zh-Hant`) or a place that writes it (Taiwan, Hong Kong, Macau) and not the other script
    /// (`zh-Hans-HK`), simplified otherwise.
    pub fn of_tag(tag: &str) -> Option<Language> {
        let tag = tag.trim().to_ascii_lowercase();
        let mut parts = tag
            .split(['.', '@'])
            .next()
            .unwrap_or_default()
            .split(['_', '-']);
        match parts.next().unwrap_or_default() {
            "en" => Some(Language::En),
            "de" => Some(Language::De),
            "zh" => {
                let rest: Vec<&str> = parts.collect();
                let traditional = !rest.contains(&"hans")
                    && rest
                        .iter()
                        .any(|p| matches!(*p, "hant" | "tw" | "hk" | "mo"));
                Some(if traditional {
                    Language::ZhHant
                } else {
                    Language::Zh
                })
            }
            _ => None,
        }
    }

    /// Its name, in English (for messages).
    pub fn name(self) -> &'static str {
        match self.resolved() {
            Language::De => "German",
            Language::Zh => "Chinese",
            Language::ZhHant => "Chinese (traditional characters)",
            _ => "English",
        }
    }

    /// Whisper's code for it (`en`, `de`, `zh`), the language every utterance is transcribed in
    /// (never guessed per utterance: a short clip flips).
    pub fn whisper_code(self) -> &'static str {
        match self.resolved() {
            Language::De => "de",
            Language::Zh | Language::ZhHant => "zh",
            _ => "en",
        }
    }

    /// espeak-ng's voice for it (`en-us`, `de`, `cmn-latn-pinyin`). Mandarin is the voice
    /// that reads its dictionary's pinyin as pinyin: espeak-ng's plain `cmn` turns the
    /// characters into pinyin and then reads that as English ("ming2 tian1" as "mink two tee
    /// one"), which no Chinese listener (or whisper) understands.
    pub fn espeak_voice(self) -> &'static str {
        match self.resolved() {
            Language::De => "de",
            Language::Zh | Language::ZhHant => "cmn-latn-pinyin",
            _ => "en-us",
        }
    }
}

/// Everything the settings file holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// The backend that answers.
    pub backend: BackendKind,
    /// `[general]`.
    pub general: GeneralSettings,
    /// `[anthropic]`.
    pub anthropic: AnthropicSettings,
    /// `[openai]`.
    pub openai: OpenAiSettings,
    /// `[local]`.
    pub local: LocalSettings,
    /// `[timeouts]`.
    pub timeouts: Timeouts,
    /// `[retry]`.
    pub retry: RetrySettings,
    /// `[replies]`.
    pub replies: ReplySettings,
    /// `[profile]`.
    pub profile: ProfileSettings,
    /// `[memory]`.
    pub memory: MemorySettings,
    /// `[voice]`.
    pub voice: VoiceSettings,
    /// `[desktop]`.
    pub desktop: DesktopSettings,
    /// `[mcp]`.
    pub mcp: McpSettings,
}

impl Settings {
    /// Parses a settings file's text; `path` names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Settings, ConfigError> {
        let malformed = |message: String| ConfigError::Malformed {
            path: path.to_path_buf(),
            message,
        };
        let settings: Settings = toml::from_str(text)
            .map_err(|err| malformed(err.to_string().trim_end().to_string()))?;
        let t = &settings.timeouts;
        for (key, secs) in [
            ("connect_secs", t.connect_secs),
            ("first_token_secs", t.first_token_secs),
            ("idle_secs", t.idle_secs),
            ("stall_secs", t.stall_secs),
        ] {
            if !(secs.is_finite() && secs > 0.0) {
                return Err(malformed(format!(
                    "[timeouts] {key} = {secs}: a timeout is a number of seconds above 0"
                )));
            }
        }
        let mcp = &settings.mcp;
        for (key, secs) in [
            ("call_timeout_secs", mcp.call_timeout_secs),
            ("start_timeout_secs", mcp.start_timeout_secs),
        ] {
            if !(secs.is_finite() && secs > 0.0 && secs <= 3600.0) {
                return Err(malformed(format!(
                    "[mcp] {key} = {secs}: a timeout is a number of seconds above 0, at most 3600"
                )));
            }
        }
        let mut names = std::collections::HashSet::new();
        for (i, server) in mcp.servers.iter().enumerate() {
            let name = server.name.trim();
            let which = format!("[[mcp.servers]] number {}", i + 1);
            // Its tools are offered as `name__tool`: the name is what the backends take in a
            // tool's name, and short enough to leave room for the tool's.
            let fits = !name.is_empty()
                && name.len() <= 32
                && !name.contains("__")
                && !name.starts_with('_')
                && !name.ends_with('_')
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !fits {
                return Err(malformed(format!(
                    "{which}: name = {name:?}: a server's name is 1 to 32 letters, digits, '-' \
                     or '_' (not '__', not at either end), e.g. \"files\""
                )));
            }
            if !names.insert(name.to_string()) {
                return Err(malformed(format!(
                    "{which}: the name {name:?} is taken by another server"
                )));
            }
            match (
                server.command.trim().is_empty(),
                server.url.trim().is_empty(),
            ) {
                (true, true) => {
                    return Err(malformed(format!(
                        "{which} ({name}): command is missing: the program that runs the server \
                         (or url = \"http://…\" for one that runs by itself)"
                    )))
                }
                (false, false) => {
                    return Err(malformed(format!(
                        "{which} ({name}): command and url are both given: a server is either a \
                         program Jarvis runs or a url it speaks to, not both"
                    )))
                }
                (true, false) => {
                    let url = server.url.trim();
                    let web = reqwest::Url::parse(url)
                        .ok()
                        .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
                    let Some(web) = web else {
                        return Err(malformed(format!(
                            "{which} ({name}): url = {url:?} is not an http:// or https:// address, \
                             e.g. \"http://127.0.0.1:8931/mcp\""
                        )));
                    };
                    if !web.username().is_empty() || web.password().is_some() {
                        return Err(malformed(format!(
                            "{which} ({name}): the url holds a user name or password, which would \
                             be shown and kept wherever the server is named: give the server its \
                             credentials another way"
                        )));
                    }
                    if !server.args.is_empty() || !server.env.is_empty() {
                        return Err(malformed(format!(
                            "{which} ({name}): args and env are for a program Jarvis runs; a \
                             server at a url runs by itself"
                        )));
                    }
                }
                (false, true) => {}
            }
        }
        Ok(settings)
    }

    /// The model of the selected backend.
    pub fn model(&self) -> &str {
        match self.backend {
            BackendKind::Anthropic => &self.anthropic.model,
            BackendKind::Openai => &self.openai.model,
            BackendKind::Local => &self.local.model,
        }
    }
}
