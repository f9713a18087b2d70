//! `jarvis`: the command-line shell over the conversation service. Glue only: every decision is
//! the service's.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use jarvis::config::{self, Config};
use jarvis::llm::{self, Backend};
use jarvis::store::{Record, ReplyState, Role, Store};
use jarvis::voice;
use jarvis::{AskError, ChatId, Event, ReplyId, Service, ServiceOptions};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Exit status of a reply that was stopped.
const EXIT_STOPPED: u8 = 4;
/// Exit status of a question refused because the chat is replying.
const EXIT_BUSY: u8 = 3;
/// Exit status of a reply that failed or was interrupted, and of any other error.
const EXIT_FAILED: u8 = 1;

/// Jarvis, a desktop AI assistant, from the terminal.
#[derive(Parser)]
#[command(name = "jarvis", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Talk interactively: type a question, the reply streams in; Ctrl-C stops a reply.
    Chat {
        /// Continue this chat instead of starting a new one.
        #[arg(long)]
        chat: Option<i64>,
    },
    /// Ask one question and stream the reply to stdout (the chat id goes to stderr first).
    Ask {
        /// The chat to ask in.
        #[arg(long, conflicts_with = "new")]
        chat: Option<i64>,
        /// Start a new chat (the default when --chat is not given).
        #[arg(long)]
        new: bool,
        /// The question; `-` reads it from stdin.
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
    },
    /// Try a chat's failed or interrupted last reply again.
    Retry {
        /// The chat.
        chat: i64,
    },
    /// List chats, newest first: ID, state of the last reply, title.
    Chats,
    /// Print a chat's records in order.
    Show {
        /// The chat.
        chat: i64,
    },
    /// Rename a chat.
    Rename {
        /// The chat.
        chat: i64,
        /// Its new title.
        #[arg(required = true, num_args = 1..)]
        title: Vec<String>,
    },
    /// Start afresh in a chat: it keeps everything, but the model sees only what is said from
    /// now on (refused while it is replying).
    Afresh {
        /// The chat.
        chat: i64,
    },
    /// Delete a chat and everything in it (refused while it is replying).
    Rm {
        /// The chat.
        chat: i64,
    },
    /// Check the settings, the data directory, the backend and its key.
    Doctor,
    /// Print the exact request the model would get for TEXT (JSON, keys redacted), sending nothing.
    Request {
        /// The chat whose history goes with it (default: a new chat).
        #[arg(long)]
        chat: Option<i64>,
        /// The question.
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
    },
    /// The facts Jarvis remembers about you (the profile the model sees): list, add, edit, rm.
    Facts {
        #[command(subcommand)]
        action: Option<FactAction>,
    },
    /// Listen to a WAV file as the microphone: one JSON line per utterance, with what it was heard
    /// as (question, noise, filler, echo, stop, goodbye, wake), its text, and where it lies.
    Listen {
        /// The WAV file (any rate and channel count).
        #[arg(long)]
        wav: PathBuf,
        /// How to listen: push_to_talk (the whole file is one press), hands_free or wake.
        #[arg(long, value_enum, default_value = "hands-free")]
        mode: ModeArg,
        /// What the speakers played meanwhile, on the same time line (sample 0 of both at the
        /// same instant): its echo is taken out of the microphone's sound first, as the voice
        /// loop does, and the canceller's figures are printed to stderr at the end.
        #[arg(long)]
        playback: Option<PathBuf>,
    },
    /// Write what Jarvis would say for TEXT to a WAV file.
    Say {
        /// What to say.
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
        /// The WAV file to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Store or remove an API key in the OS keyring.
    Key {
        #[command(subcommand)]
        action: KeyAction,
    },
    /// Local models: the catalog and what is installed (`list`), downloads (`pull`), `rm`, `use`.
    Models {
        #[command(subcommand)]
        action: Option<ModelAction>,
    },
    /// MCP servers (`[[mcp.servers]]` in the settings): their state (`list`), a server's
    /// `tools`, one `call`.
    Mcp {
        #[command(subcommand)]
        action: Option<McpAction>,
    },
}

#[derive(Subcommand)]
enum McpAction {
    /// One line per server: NAME<TAB>STATE (the default; each server is started to be seen).
    List,
    /// One line per tool of a server: NAME<TAB>WHAT IT DOES<TAB>ITS ARGUMENTS (* required).
    Tools {
        /// The server's name.
        server: String,
    },
    /// Calls a tool and prints what it gave back (exit status 1 when the tool says it failed).
    Call {
        /// The server's name.
        server: String,
        /// The tool's name on its server.
        tool: String,
        /// Its arguments, a JSON object.
        #[arg(default_value = "{}")]
        arguments: String,
    },
}

#[derive(Subcommand)]
enum ModelAction {
    /// One line per model: NAME<TAB>SIZE<TAB>STATE<TAB>WHAT (the default), the catalog's, the
    /// model folder's, and those of an Ollama or LM Studio server running here.
    List,
    /// Download a catalog model by name, or a GGUF file by URL: resumed where a stopped pull
    /// left off, checked (size, GGUF header, sha256), then put in the model folder.
    Pull {
        /// A catalog name (`jarvis models list`) or an http(s) URL.
        what: String,
        /// The sha256 a URL's file must have.
        #[arg(long)]
        sha256: Option<String>,
    },
    /// Remove a model file (not the one in use).
    Rm {
        /// A catalog name or a file name in the model folder.
        name: String,
    },
    /// Answer with this installed model (the local backend), or with a model of a server
    /// running here (`ollama:NAME`, `lmstudio:NAME`: the OpenAI-compatible backend).
    Use {
        /// A catalog name, a file name in the model folder, or SERVER:MODEL.
        name: String,
    },
}

#[derive(Subcommand)]
enum FactAction {
    /// One line per fact: ID<TAB>TEXT (the default).
    List,
    /// Remember a fact.
    Add {
        /// The fact, e.g. "My dog is called Bruno".
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
    },
    /// Rewrite a fact.
    Edit {
        /// The fact's id.
        id: i64,
        /// Its new text.
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
    },
    /// Forget a fact for good.
    Rm {
        /// The fact's id.
        id: i64,
    },
    /// The summaries of earlier conversations Jarvis may recall into other chats, one line
    /// each: CHAT<TAB>DATE<TAB>TITLE<TAB>SUMMARY.
    Summaries,
    /// Forget a chat's summary (the chat stays; its next answer starts a new one).
    RmSummary {
        /// The chat's id.
        chat: i64,
    },
}

#[derive(Subcommand)]
enum KeyAction {
    /// Store a key, read from the terminal without echo (or from stdin when piped).
    Set {
        /// ANTHROPIC_API_KEY or OPENAI_API_KEY.
        var: String,
    },
    /// Remove a stored key.
    Delete {
        /// ANTHROPIC_API_KEY or OPENAI_API_KEY.
        var: String,
    },
}

/// A listening mode on the command line.
#[derive(Clone, Copy, clap::ValueEnum)]
enum ModeArg {
    #[value(alias = "push_to_talk")]
    PushToTalk,
    #[value(alias = "hands_free")]
    HandsFree,
    Wake,
}

impl From<ModeArg> for jarvis::service::ListenMode {
    fn from(mode: ModeArg) -> Self {
        match mode {
            ModeArg::PushToTalk => jarvis::service::ListenMode::PushToTalk,
            ModeArg::HandsFree => jarvis::service::ListenMode::HandsFree,
            ModeArg::Wake => jarvis::service::ListenMode::Wake,
        }
    }
}

/// Prints a line to stdout, with any escape sequence or control character a model, a server or
/// a pasted page put in it taken out ([`jarvis::terminal`]); a reader that went away (`jarvis …
/// | head`) is an error the caller passes up, and `main` ends quietly on it.
macro_rules! say {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout(), "{}", jarvis::terminal::scrub(&format!($($arg)*)))?
    };
}

/// Whether an error is stdout's reader having gone away.
fn reader_gone(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    // One thread: the CLI only relays I/O (store calls go to the blocking pool), and a single
    // thread avoids cross-thread hand-offs per delta (see BENCHMARKS.md).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("jarvis: cannot start the async runtime: {err}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        // As `head` expects: its reader gone, the command ends quietly.
        Err(err) if reader_gone(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("jarvis: {err:#}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// Logs go to stderr, filtered by `JARVIS_LOG` (default: warnings, less the audio noise of
/// [`voice::QUIET_LOGS`]).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("JARVIS_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("warn,{}", voice::QUIET_LOGS))
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only on a terminal: a log piped to a file or a collector is plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn open_store(config: &Config) -> Result<Store> {
    Ok(Store::open(
        &config.database_path(),
        Duration::from_millis(config.settings.replies.busy_timeout_ms),
    )?)
}

/// Loads everything a conversation needs; a remote backend without its key refuses here.
fn start_service(config: &Config) -> Result<Service> {
    let backend: Arc<dyn Backend> = llm::from_config(config, &env)?;
    let store = open_store(config)?;
    let options = ServiceOptions::from_settings(&config.settings)
        .with_recall(&store, &config.model_dir())
        .with_mcp(jarvis::mcp::Servers::of(&config.settings.mcp));
    Ok(Service::start(store, backend, options))
}

/// `jarvis listen`: the WAV file through the same listener the voice loop uses (behind the same
/// echo canceller, when what the speakers played is given).
fn listen(
    config: &Config,
    wav: &std::path::Path,
    playback: Option<&std::path::Path>,
    mode: jarvis::service::ListenMode,
) -> Result<()> {
    let models = config.model_dir();
    let settings = &config.settings.voice;
    let source = voice::Clip::from_wav_file(wav)?.resampled(voice::SAMPLE_RATE)?;
    let played = playback
        .map(|path| voice::Clip::from_wav_file(path)?.resampled(voice::SAMPLE_RATE))
        .transpose()?;
    let whisper = voice::models::whisper_for(&models, settings, config.settings.general.language)?;
    let (transcriber, ungated) = voice::models::speech_gate(&models, Arc::new(whisper));
    if let Some(err) = ungated {
        eprintln!("warning: {err}; noise is judged by whisper alone");
    }
    let (turn, words_only) = voice::models::turn_judge(&models);
    if let Some(err) = words_only {
        eprintln!("warning: {err}; pauses are judged by their words alone");
    }
    let wake = match mode {
        jarvis::service::ListenMode::Wake => Some(voice::models::wake_factory(&models)?()?),
        _ => None,
    };
    let shared = voice::listen::Shared::default();
    let mut listener = voice::Listener::new(
        mode,
        transcriber,
        wake,
        settings.wake_threshold,
        shared.clone(),
    )
    .with_turn(turn)
    .with_language(config.settings.general.language);
    let heard = source.to_i16();
    let mut echo = played
        .as_ref()
        .map(|played| voice::echo::OfflineEcho::knowing(&played.samples, &heard));
    let mut out = std::io::stdout().lock();
    let mut print = |events: Vec<voice::listen::ListenEvent>| -> Result<()> {
        for event in events {
            if let voice::listen::ListenEvent::Heard(report) = event {
                writeln!(out, "{}", serde_json::to_string(&report)?)?;
            }
        }
        Ok(())
    };
    for frame in voice::audio::frames_of(&heard) {
        print(voice::echo::OfflineEcho::listen(
            echo.as_mut(),
            &mut listener,
            &shared,
            &frame,
        )?)?;
    }
    print(listener.finish()?)?;
    if let Some(echo) = echo {
        let stats = echo.stats();
        eprintln!(
            "echo canceller: {} of echo removed (AEC3's estimate), delay {}",
            stats
                .erle_db
                .map_or("unknown".into(), |db| format!("{db:.1} dB")),
            stats
                .delay_ms
                .map_or("not found".into(), |ms| format!("{ms} ms")),
        );
    }
    Ok(())
}

async fn run(command: Command) -> Result<ExitCode> {
    let config = Config::load()?;
    match command {
        Command::Chat { chat } => {
            let service = start_service(&config)?;
            interactive(&service, chat.map(ChatId)).await
        }
        Command::Ask { chat, new: _, text } => {
            let service = start_service(&config)?;
            let text = if text.len() == 1 && text[0] == "-" {
                let mut buf = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf)
                    .context("cannot read the question from stdin")?;
                buf
            } else {
                text.join(" ")
            };
            let chat = match chat {
                Some(id) => ChatId(id),
                None => service.new_chat(None).await?.id,
            };
            eprintln!("chat {chat}");
            let state = ask_and_stream(&service, chat, Some(text)).await?;
            Ok(exit_for(state))
        }
        Command::Retry { chat } => {
            let service = start_service(&config)?;
            let state = ask_and_stream(&service, ChatId(chat), None).await?;
            Ok(exit_for(state))
        }
        Command::Chats => {
            let store = open_store(&config)?;
            for chat in store.chats()? {
                let state = chat.last_reply.map(|s| s.as_str()).unwrap_or("new");
                say!("{}\t{}\t{}", chat.id, state, chat.title);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { chat } => {
            let store = open_store(&config)?;
            show(&store, ChatId(chat))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Doctor => doctor(&config).await,
        Command::Listen {
            wav,
            mode,
            playback,
        } => {
            let config = config.clone();
            tokio::task::spawn_blocking(move || {
                listen(&config, &wav, playback.as_deref(), mode.into())
            })
            .await
            .context("listening stopped")??;
            Ok(ExitCode::SUCCESS)
        }
        Command::Say { text, out } => {
            let voice = &config.settings.voice;
            let (synthesizer, fallback) = voice::models::synthesizer_in(
                &config.model_dir(),
                voice,
                config.settings.general.language,
            );
            if let Some(err) = fallback {
                eprintln!("Piper's voice is not used ({err}); espeak-ng speaks instead");
            }
            let clip = synthesizer.synthesize(&text.join(" "))?;
            std::fs::write(&out, clip.to_wav_bytes())
                .with_context(|| format!("cannot write {}", out.display()))?;
            eprintln!(
                "wrote {} ({:.2} s)",
                out.display(),
                clip.duration().as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Rename { chat, title } => {
            open_store(&config)?.rename_chat(ChatId(chat), title.join(" ").trim())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Afresh { chat } => match open_store(&config)?.start_afresh(ChatId(chat))? {
            Some(_) => {
                say!("chat {chat}: the model sees only what is said from now on");
                Ok(ExitCode::SUCCESS)
            }
            None => {
                eprintln!("jarvis: chat {chat} is replying in another Jarvis; stop it first");
                Ok(ExitCode::from(EXIT_BUSY))
            }
        },
        Command::Rm { chat } => {
            if open_store(&config)?.delete_chat(ChatId(chat))? {
                say!("chat {chat} deleted");
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("jarvis: chat {chat} is replying in another Jarvis; stop it first");
                Ok(ExitCode::from(EXIT_BUSY))
            }
        }
        Command::Key { action } => key(action),
        Command::Request { chat, text } => {
            let store = open_store(&config)?;
            // The user's MCP servers are started to say their tools, as a reply would.
            let servers = jarvis::mcp::Servers::of(&config.settings.mcp);
            if let Some(servers) = &servers {
                servers.offered().await;
            }
            let options = ServiceOptions::from_settings(&config.settings)
                .with_recall(&store, &config.model_dir())
                .with_mcp(servers.clone());
            let request = jarvis::prompt::preview(
                &config,
                &store,
                &options,
                chat.map(ChatId),
                &text.join(" "),
                &env,
            )?;
            say!("{}", serde_json::to_string_pretty(&request)?);
            if let Some(servers) = servers {
                servers.stop_all().await;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Facts { action } => facts(&config, action.unwrap_or(FactAction::List)),
        Command::Models { action } => models(&config, action.unwrap_or(ModelAction::List)).await,
        Command::Mcp { action } => mcp(&config, action.unwrap_or(McpAction::List)).await,
    }
}

/// After `jarvis models use`: says so where the environment overrides what the file now says.
fn warn_if_overridden(in_force: bool, now: &config::Settings) {
    if in_force {
        return;
    }
    let answering = match now.backend {
        config::BackendKind::Local => now.local.model.clone(),
        config::BackendKind::Openai => format!("{} at {}", now.openai.model, now.openai.base_url),
        config::BackendKind::Anthropic => now.anthropic.model.clone(),
    };
    eprintln!(
        "warning: the settings file says so, but the environment overrides it (JARVIS_BACKEND, \
         JARVIS_MODEL or OPENAI_BASE_URL is set): Jarvis answers with {answering} ({}) while it is",
        now.backend.as_str()
    );
}

/// `jarvis mcp`: the MCP servers of the settings, a server's tools, one call; every server it
/// started is stopped before it returns.
async fn mcp(config: &Config, action: McpAction) -> Result<ExitCode> {
    use jarvis::mcp::{self, McpError, Servers};
    let servers = Servers::new(&config.settings.mcp);
    let done = async {
        match action {
            McpAction::List if servers.names().is_empty() => {
                eprintln!(
                    "no MCP servers: add [[mcp.servers]] to {}",
                    config.path.display()
                );
            }
            McpAction::List => {
                for line in servers.list_lines().await {
                    say!("{line}");
                }
            }
            McpAction::Tools { server } => {
                for tool in servers.tools(&server).await? {
                    say!("{}", mcp::tool_line(&tool));
                }
            }
            McpAction::Call {
                server,
                tool,
                arguments,
            } => {
                let arguments = serde_json::from_str(&arguments)
                    .map_err(|e| McpError::Arguments(e.to_string()))?;
                let outcome = servers.call(&server, &tool, arguments).await?;
                say!("{}", outcome.text);
                if outcome.is_error {
                    eprintln!("the tool {tool} failed");
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
        Ok::<_, anyhow::Error>(ExitCode::SUCCESS)
    }
    .await;
    servers.stop_all().await;
    done
}

/// `jarvis models`: the catalog, downloads, and which model answers.
async fn models(config: &Config, action: ModelAction) -> Result<ExitCode> {
    use jarvis::models::{self, Catalog, ModelsError, Progress};
    let catalog = Catalog::from_env(&env)?;
    let dir = config.model_dir();
    let servers = models::model_servers(env("JARVIS_MODEL_SERVERS").as_deref());
    match action {
        ModelAction::List => {
            let memory = models::machine_memory_gb();
            for line in models::listing(&catalog, &dir, &config.local_model_path(), memory)? {
                say!("{line}");
            }
            let found = models::running(&servers).await;
            for line in models::server_lines(&found, &config.settings) {
                say!("{line}");
            }
        }
        ModelAction::Pull { what, sha256 } => {
            let source = models::source_for(&catalog, &what, sha256)?;
            if dir.join(&source.file).is_file() {
                eprintln!("{} is installed already", source.file);
                return Ok(ExitCode::SUCCESS);
            }
            let bar =
                indicatif::ProgressBar::new(0).with_style(indicatif::ProgressStyle::with_template(
                    "{bytes}/{total_bytes} {wide_bar} {bytes_per_sec}, {eta} left {msg}",
                )?);
            let cancel = tokio_util::sync::CancellationToken::new();
            let on_ctrl_c = cancel.clone();
            tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    on_ctrl_c.cancel();
                }
                // A second Ctrl-C does not wait for the part to be written out.
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            });
            eprintln!("downloading {} from {}", source.file, source.url);
            let mut started = false;
            let mut shown = |progress: Progress| match progress {
                Progress::Downloading { done, total, .. } => {
                    bar.set_length(total.unwrap_or(done));
                    bar.set_position(done);
                    if !std::mem::replace(&mut started, true) {
                        // What an earlier pull brought is not this one's speed.
                        bar.reset_eta();
                    }
                }
                Progress::Checking => bar.set_message("checking"),
            };
            let pulled = models::pull(
                &source,
                &dir,
                &models::PullOptions::default(),
                &mut shown,
                &cancel,
            )
            .await;
            bar.finish_and_clear();
            match pulled {
                Ok(path) => {
                    say!("installed {}", path.display());
                    let name = catalog.find(&what).map_or(&source.file, |m| &m.name);
                    eprintln!("`jarvis models use {name}` makes it the model Jarvis answers with");
                }
                Err(err @ ModelsError::Cancelled { .. }) => {
                    eprintln!("jarvis: {err}");
                    return Ok(ExitCode::from(EXIT_STOPPED));
                }
                Err(err) => return Err(err.into()),
            }
        }
        ModelAction::Rm { name } => {
            let file = models::file_for(&catalog, &name)?;
            if config.local_model_path() == dir.join(&file) {
                bail!("{file} is the model Jarvis answers with; `jarvis models use` another first");
            }
            if models::remove(&dir, &file)? {
                say!("removed {file}");
            } else {
                bail!("{file} is not installed");
            }
        }
        ModelAction::Use { name } => {
            if let Some((server, model)) = models::split_served(&servers, &name) {
                let offered = models::offered(server).await.with_context(|| {
                    format!("{} does not answer at {}", server.title, server.base_url)
                })?;
                if !offered.contains(&model) {
                    bail!(
                        "{} does not offer `{model}`; it offers: {}",
                        server.title,
                        offered.join(", ")
                    );
                }
                config::write_settings(&config.path, &models::settings_for(server, &model))?;
                say!(
                    "Jarvis answers with {model} on {} ({})",
                    server.title,
                    server.base_url
                );
                let now = Config::load()?.settings;
                warn_if_overridden(server.answers_with(&now, &model), &now);
                return Ok(ExitCode::SUCCESS);
            }
            let file = models::file_for(&catalog, &name)?;
            if !dir.join(&file).is_file() {
                bail!("{file} is not installed; `jarvis models pull {name}` downloads it");
            }
            config::write_settings(
                &config.path,
                &[
                    (
                        &["backend"],
                        Some(config::SettingValue::Text("local".into())),
                    ),
                    (
                        &["local", "model"],
                        Some(config::SettingValue::Text(file.clone())),
                    ),
                ],
            )?;
            say!("Jarvis answers with {file} (the local backend)");
            let now = Config::load()?;
            warn_if_overridden(
                now.settings.backend == config::BackendKind::Local
                    && now.local_model_path() == dir.join(&file),
                &now.settings,
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `jarvis facts`: the facts Jarvis remembers and the summaries it may recall.
fn facts(config: &Config, action: FactAction) -> Result<ExitCode> {
    let store = open_store(config)?;
    match action {
        FactAction::List => {
            // Each with where it came from, as the Memory panel says it.
            for fact in store.facts()? {
                let title = fact
                    .chat
                    .and_then(|chat| store.chat(chat).ok())
                    .map(|c| c.title);
                say!(
                    "{}\t{}\t{}",
                    fact.id,
                    fact.text,
                    fact.origin.describe(title.as_deref())
                );
            }
        }
        FactAction::Add { text } => {
            let fact = store.add_fact(&text.join(" "), None)?;
            say!("{}\t{}", fact.id, fact.text);
        }
        FactAction::Edit { id, text } => {
            let fact = store.edit_fact(id, &text.join(" "))?;
            say!("{}\t{}", fact.id, fact.text);
        }
        FactAction::Rm { id } => {
            store.remove_fact(id)?;
            say!("fact {id} forgotten");
        }
        FactAction::Summaries => {
            for s in store.summaries()? {
                let day = chrono::DateTime::from_timestamp_millis(s.updated_at)
                    .map(|t| {
                        t.with_timezone(&chrono::Local)
                            .format("%Y-%m-%d")
                            .to_string()
                    })
                    .unwrap_or_default();
                say!(
                    "{}\t{day}\t{}\t{}",
                    s.chat,
                    s.title,
                    s.text.replace('\n', " ")
                );
            }
            if !config.settings.memory.earlier_conversations {
                eprintln!(
                    "(earlier conversations are off in the settings: none of these is recalled)"
                );
            }
        }
        FactAction::RmSummary { chat } => {
            if store.delete_summary(ChatId(chat))? {
                say!("the summary of chat {chat} is forgotten; the chat is kept");
            } else {
                anyhow::bail!("chat {chat} has no summary");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn key(action: KeyAction) -> Result<ExitCode> {
    match action {
        KeyAction::Set { var } => {
            let key = if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                rpassword::prompt_password(format!("{var}: "))?
            } else {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line)?;
                line
            };
            config::store_key(&var, &secrecy::SecretString::from(key))?;
            say!("{var} stored in the OS keyring");
        }
        KeyAction::Delete { var } => {
            if config::delete_key(&var)? {
                say!("{var} removed from the OS keyring");
            } else {
                say!("{var} was not in the OS keyring");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How a question ended, for the exit status.
enum Ended {
    Reply(ReplyState, Option<String>),
    Busy,
}

fn exit_for(ended: Ended) -> ExitCode {
    match ended {
        Ended::Reply(ReplyState::Done, _) => ExitCode::SUCCESS,
        Ended::Reply(state, reason) => {
            eprintln!(
                "jarvis: the reply {state}{}",
                reason
                    .map(|r| format!(": {}", jarvis::terminal::scrub(&r)))
                    .unwrap_or_default()
            );
            ExitCode::from(if state == ReplyState::Stopped {
                EXIT_STOPPED
            } else {
                EXIT_FAILED
            })
        }
        Ended::Busy => ExitCode::from(EXIT_BUSY),
    }
}

/// Asks (or, with `None`, tries the last reply again) and streams the reply to stdout. Ctrl-C
/// stops the reply: an explicit stop.
async fn ask_and_stream(service: &Service, chat: ChatId, text: Option<String>) -> Result<Ended> {
    let asked = match text {
        Some(text) => service.ask(chat, text).await,
        None => service.retry(chat).await,
    };
    let reply = match asked {
        Ok(reply) => reply,
        Err(AskError::Busy(_)) => {
            eprintln!("jarvis: chat {chat} is still replying; wait for it to end or stop it");
            return Ok(Ended::Busy);
        }
        Err(err) => return Err(err.into()),
    };
    let mut attachment = service.attach(chat).await?;
    stream_reply(service, chat, reply, &mut attachment).await
}

async fn stream_reply(
    service: &Service,
    chat: ChatId,
    reply: ReplyId,
    attachment: &mut jarvis::Attachment,
) -> Result<Ended> {
    let mut stdout = std::io::stdout();
    let mut stop_asked = false;
    let mut gone: Option<std::io::Error> = None;
    // The answer reaches a terminal without the escape sequences it may carry.
    let mut scrub = jarvis::terminal::Scrub::default();
    // A tool call waiting for the user's answer on the terminal: its id and the answer to come.
    #[allow(clippy::type_complexity)]
    let mut asking: Option<(
        String,
        std::pin::Pin<Box<dyn std::future::Future<Output = jarvis::Consent> + Send>>,
    )> = None;
    loop {
        let event = tokio::select! {
            event = attachment.next_of(reply) => event,
            _ = tokio::signal::ctrl_c(), if !stop_asked => {
                stop_asked = true;
                // (A question on the terminal is no longer asked.)
                asking = None;
                service.stop(chat).await?;
                continue;
            }
            answer = async {
                match asking.as_mut() {
                    Some((_, answer)) => answer.await,
                    None => std::future::pending().await,
                }
            }, if asking.is_some() => {
                if let Some((call, _)) = asking.take() {
                    service.consent(reply, &call, answer);
                }
                continue;
            }
        };
        match event {
            None => bail!("the conversation service stopped before the reply ended"),
            Some(Event::Delta { text, .. }) if gone.is_none() => {
                if let Err(err) = stdout
                    .write_all(scrub.push(&text).as_bytes())
                    .and_then(|()| stdout.flush())
                {
                    // Nobody reads the answer any more: it is stopped (its text so far is kept)
                    // and the command ends once it has.
                    gone = Some(err);
                    if !stop_asked {
                        stop_asked = true;
                        service.stop(chat).await?;
                    }
                }
            }
            Some(Event::Delta { .. }) => {}
            Some(Event::Waiting { message, .. }) => {
                eprintln!("{}", jarvis::terminal::scrub(&message))
            }
            // What Jarvis is doing ("Remembering…") goes to stderr, beside the answer.
            Some(Event::Action { label, .. }) => eprintln!("({})", jarvis::terminal::scrub(&label)),
            // A fact stored, as the chat window shows it (`jarvis facts rm ID` undoes it).
            Some(Event::Remembered { fact, text, .. }) => eprintln!(
                "(Remembered: {} — fact {fact})",
                jarvis::terminal::scrub(&text)
            ),
            Some(Event::Retrying {
                attempt,
                wait_ms,
                reason,
                ..
            }) => eprintln!(
                "({}; trying again in {:.1} s, attempt {attempt})",
                jarvis::terminal::scrub(&reason),
                wait_ms as f64 / 1000.0
            ),
            Some(Event::ReplyEnded { state, reason, .. }) => {
                if let Some(err) = gone {
                    return Err(err.into());
                }
                writeln!(stdout)?;
                return Ok(Ended::Reply(state, reason));
            }
            // A call to one of the user's tools waits for their yes: asked on the terminal.
            Some(Event::Consent {
                call,
                server,
                tool,
                arguments,
                ..
            }) if !stop_asked => {
                asking = Some((call, consent_on_terminal(&server, &tool, &arguments)));
            }
            Some(Event::Consent { .. }) => {}
            Some(Event::Consented { call, .. }) => {
                // Answered elsewhere (a window), or the reply stopped: the terminal asks no more.
                if asking.as_ref().is_some_and(|(asked, _)| *asked == call) {
                    asking = None;
                    eprintln!("(answered elsewhere)");
                }
            }
            Some(Event::ToolCalled { .. }) => {}
            Some(Event::ReplyStarted { .. } | Event::Running { .. }) => {}
        }
    }
}

/// Asks on the terminal (`/dev/tty`, whatever stdin is) whether a tool call may run. The read
/// is non-blocking under tokio, so dropping the future (Ctrl-C, the call answered in a window)
/// ends it, and no later line typed is taken for an answer. With no terminal to ask, it is
/// denied and the user told why.
fn consent_on_terminal(
    server: &str,
    tool: &str,
    arguments: &str,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = jarvis::Consent> + Send>> {
    use jarvis::terminal::scrub;
    eprintln!(
        "Jarvis wants to use {} · {} with:\n{}",
        scrub(server),
        scrub(tool),
        scrub(arguments)
    );
    Box::pin(async {
        match tty_line("Allow it? [o]nce, [a]lways for this tool, [N]o: ").await {
            Ok(line) => match line.trim().to_lowercase().as_str() {
                "o" | "once" | "y" | "yes" => jarvis::Consent::Once,
                "a" | "always" => jarvis::Consent::Always,
                _ => jarvis::Consent::Deny,
            },
            Err(_) => {
                eprintln!("(denied: there is no terminal to ask; set approve = \"always\" for the server to run its tools unasked)");
                jarvis::Consent::Deny
            }
        }
    })
}

/// Writes `prompt` to the terminal and reads one line from it, without blocking a thread.
async fn tty_line(prompt: &str) -> std::io::Result<String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/tty")?;
    (&tty).write_all(prompt.as_bytes())?;
    // SAFETY: the file is the AsyncFd's own: its descriptor stays open, and the same, until the
    // AsyncFd (and the file with it) is dropped.
    let tty = unsafe { tokio::io::unix::AsyncFd::register(tty) }?;
    let mut line = Vec::new();
    loop {
        let mut ready = tty.readable().await?;
        let mut buf = [0u8; 256];
        match ready.try_io(|fd| fd.get_ref().read(&mut buf)) {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => {
                line.extend_from_slice(&buf[..n]);
                if line.contains(&b'\n') {
                    break;
                }
            }
            Ok(Err(err)) => return Err(err),
            Err(_would_block) => continue,
        }
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

async fn interactive(service: &Service, chat: Option<ChatId>) -> Result<ExitCode> {
    // A new chat is made by its first question, so leaving at once leaves no empty chat behind.
    let mut chat = match chat {
        Some(id) => Some(service.store().chat(id)?.id),
        None => None,
    };
    match chat {
        Some(id) => println!("Jarvis — chat {id}."),
        None => println!("Jarvis — a new chat."),
    }
    println!(
        "Type a question; /new, /chats, /open ID, /retry, /afresh, /quit. Ctrl-C stops a reply."
    );
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        print!("> ");
        std::io::stdout().flush()?;
        let line = tokio::select! {
            line = lines.next_line() => line?,
            _ = tokio::signal::ctrl_c() => {
                println!("\n(no reply to stop; /quit or Ctrl-D leaves)");
                continue;
            }
        };
        let Some(line) = line else {
            println!();
            return Ok(ExitCode::SUCCESS);
        };
        let line = line.trim();
        match line
            .split_once(' ')
            .map_or((line, ""), |(a, b)| (a, b.trim()))
        {
            ("", _) => {}
            ("/quit" | "/exit", _) => return Ok(ExitCode::SUCCESS),
            ("/new", _) => {
                chat = None;
                println!("(a new chat begins with your next question)");
            }
            ("/chats", _) => {
                for c in service.chats().await? {
                    let mark = if Some(c.id) == chat { "*" } else { " " };
                    let state = c.last_reply.map(|s| s.as_str()).unwrap_or("new");
                    say!("{mark}{}\t{state}\t{}", c.id, c.title);
                }
            }
            ("/open", id) => match id.parse::<i64>().map(ChatId) {
                Ok(id) => match service.store().chat(id) {
                    Ok(found) => {
                        chat = Some(found.id);
                        say!("# {} (chat {})", found.title, found.id);
                        let records = service.records(found.id).await?;
                        for r in &records {
                            afresh_line(found.history_since, Some(r.seq))?;
                            say!("{}: {}", r.role.as_str(), r.text);
                        }
                        afresh_line(found.history_since, after(&records))?;
                    }
                    Err(err) => println!("{err}"),
                },
                Err(_) => println!("usage: /open ID"),
            },
            ("/afresh", _) => match chat {
                Some(id) => match service.start_afresh(id).await {
                    Ok(_) => println!("(the model sees only what is said from now on)"),
                    Err(err) => println!("{err}"),
                },
                None => println!("a new chat is fresh already"),
            },
            ("/retry", _) => match chat {
                Some(id) => report(ask_and_stream(service, id, None).await),
                None => println!("nothing to try again in a new chat"),
            },
            (cmd, _) if cmd.starts_with('/') => {
                println!(
                    "unknown command {cmd}; try /new, /chats, /open ID, /retry, /afresh, /quit"
                )
            }
            _ => {
                let id = match chat {
                    Some(id) => id,
                    None => {
                        let id = service.new_chat(None).await?.id;
                        chat = Some(id);
                        id
                    }
                };
                report(ask_and_stream(service, id, Some(line.to_string())).await)
            }
        }
    }
}

fn report(ended: Result<Ended>) {
    match ended {
        Ok(Ended::Reply(ReplyState::Done, _)) | Ok(Ended::Busy) => {}
        Ok(Ended::Reply(state, reason)) => println!(
            "[reply {state}{}]",
            reason
                .map(|r| format!(": {}", jarvis::terminal::scrub(&r)))
                .unwrap_or_default()
        ),
        Err(err) => println!("[{err:#}]"),
    }
}

fn show(store: &Store, chat: ChatId) -> Result<()> {
    let info = store.chat(chat)?;
    let replies = store.replies(chat)?;
    say!("# {} (chat {})", info.title, info.id);
    let records = store.records(chat)?;
    for record in &records {
        afresh_line(info.history_since, Some(record.seq))?;
        match record.role {
            Role::User | Role::Tool => {
                say!("{}: {}", record.role.as_str(), record.text);
                // Replies with no record yet: still being written, or ended with no text.
                for reply in replies
                    .iter()
                    .filter(|r| r.question == record.id && (r.state.is_live() || r.text.is_empty()))
                {
                    let mark = match reply.state {
                        ReplyState::Running => "replying…".to_string(),
                        ReplyState::Waiting => "waiting…".to_string(),
                        state => mark(state, reply.reason.as_deref()),
                    };
                    say!("assistant ({mark}): {}", reply.text);
                }
            }
            Role::Assistant => {
                let reply = replies.iter().find(|r| Some(r.id) == record.reply);
                match reply {
                    Some(r) if r.state != ReplyState::Done => say!(
                        "assistant ({}): {}",
                        mark(r.state, r.reason.as_deref()),
                        record.text
                    ),
                    _ => say!("assistant: {}", record.text),
                }
            }
        }
    }
    afresh_line(info.history_since, after(&records))
}

/// The seq a record added next would get.
fn after(records: &[Record]) -> Option<i64> {
    records.last().map(|r| r.seq + 1)
}

/// Marks where the user started afresh, before the record at `seq`.
fn afresh_line(since: Option<i64>, seq: Option<i64>) -> Result<()> {
    if since.is_some() && since == seq {
        say!("--- started afresh: the model does not see what is above ---");
    }
    Ok(())
}

fn mark(state: ReplyState, reason: Option<&str>) -> String {
    match reason {
        Some(reason) if state == ReplyState::Failed => format!("failed: {reason}"),
        _ => state.as_str().to_string(),
    }
}

async fn doctor(config: &Config) -> Result<ExitCode> {
    let report = jarvis::session::doctor::diagnose(config, &env).await;
    for finding in &report.findings {
        say!("{}: {}", finding.topic, finding.text);
    }
    if report.to_do.is_empty() {
        say!("all good");
        Ok(ExitCode::SUCCESS)
    } else {
        say!("to do:");
        for p in &report.to_do {
            say!("- {p}");
        }
        Ok(ExitCode::from(EXIT_FAILED))
    }
}
