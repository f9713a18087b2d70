//! Local model benchmark, for each default model on 2 threads, in one run:
//! - **llama.cpp itself** (the baseline), measured the way llama-bench does — a 512-token batch
//!   (pp512) and 128 single-token decodes (tg128) straight through the library, in a child
//!   process so its peak memory is its own;
//! - **Jarvis end to end**: its `local` backend starting `jarvis-llm`, a ~500-token prompt sent over
//!   loopback HTTP and streamed back as events: time to first token (prompt processing included),
//!   prompt tokens/s, decode tokens/s, and the server's peak memory. A first question is measured
//!   with only the system prompt in the server's cache; a follow-up turn with the conversation
//!   cached.
//!
//! Run: `cargo bench -p jarvis-llm --bench local` (models from `scripts/models all`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jarvis::config::{BackendKind, Config, Settings};
use jarvis::llm::{self, LlmEvent, Message, MessageRole, Request};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;

const THREADS: i32 = 2;
const ROUNDS: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Peak resident memory of a process, in MiB (VmHWM).
fn peak_mib(pid: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        })
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// A text of many plain sentences, for prompts of a chosen size.
fn filler(sentences: usize, round: usize) -> String {
    const SUBJECTS: [&str; 6] = [
        "The harbour",
        "A lighthouse",
        "The old market",
        "Every ferry",
        "The river",
        "Our library",
    ];
    const VERBS: [&str; 5] = [
        "opens early",
        "stays busy",
        "closes late",
        "looks calm",
        "fills with people",
    ];
    const WHEN: [&str; 4] = [
        "in spring",
        "on Sundays",
        "after the rain",
        "during the festival",
    ];
    (0..sentences)
        .map(|i| {
            let k = i + round * 7;
            format!(
                "{} {} {}. ",
                SUBJECTS[k % 6],
                VERBS[(k / 6) % 5],
                WHEN[(k / 30) % 4]
            )
        })
        .collect()
}

/// The baseline: llama.cpp's own pp512 and tg128, llama-bench style. Prints one JSON line.
fn raw(path: &Path) {
    let backend = LlamaBackend::init().expect("llama backend");
    let model =
        LlamaModel::load_from_file(&backend, path, &LlamaModelParams::default()).expect("model");
    let params = LlamaContextParams::default()
        .with_n_ctx(std::num::NonZeroU32::new(1024))
        .with_n_batch(512)
        .with_n_threads(THREADS)
        .with_n_threads_batch(THREADS);
    let mut ctx = model.new_context(&backend, params).expect("context");
    let mut tokens = model
        .vocab()
        .tokenize(filler(200, 0).as_bytes(), true, false);
    tokens.truncate(512);
    assert_eq!(tokens.len(), 512, "a 512-token prompt");
    let mut batch = LlamaBatch::new(512, 1);
    let mut pp = Vec::new();
    let mut tg = Vec::new();
    let mut tg_deep = Vec::new();
    for _ in 0..=ROUNDS {
        ctx.clear_kv_cache();
        batch.clear();
        for (i, t) in tokens.iter().enumerate() {
            batch
                .add(*t, i as i32, &[0], i == tokens.len() - 1)
                .expect("batch");
        }
        let started = Instant::now();
        ctx.decode(&mut batch).expect("decode");
        pp.push(512.0 / started.elapsed().as_secs_f64());

        // tg128 at depth 512: after the prompt, where a reply's tokens are written.
        let started = Instant::now();
        for (i, token) in tokens.iter().take(128).enumerate() {
            batch.clear();
            batch
                .add(*token, (512 + i) as i32, &[0], true)
                .expect("batch");
            ctx.decode(&mut batch).expect("decode");
        }
        tg_deep.push(128.0 / started.elapsed().as_secs_f64());

        // tg128 from an empty context, as llama-bench reports it.
        ctx.clear_kv_cache();
        let started = Instant::now();
        for i in 0..128 {
            batch.clear();
            batch
                .add(tokens[i % 512], i as i32, &[0], true)
                .expect("batch");
            ctx.decode(&mut batch).expect("decode");
        }
        tg.push(128.0 / started.elapsed().as_secs_f64());
    }
    // The first round warms caches and is left out.
    println!(
        "{{\"pp\": {}, \"tg\": {}, \"tg_deep\": {}, \"peak\": {}}}",
        median(pp[1..].to_vec()),
        median(tg[1..].to_vec()),
        median(tg_deep[1..].to_vec()),
        peak_mib("self")
    );
}

struct Figures {
    ttft_first: f64,
    pp_first: f64,
    prompt_tokens: u64,
    ttft_follow: f64,
    decode: f64,
    peak: f64,
}

/// The `jarvis-llm` child of this process, if running.
fn server_pid() -> Option<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name().to_string_lossy().into_owned();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (comm, rest) = stat.split_once(") ")?;
        let ppid = rest.split_whitespace().nth(1)?;
        (comm.ends_with("(jarvis-llm") && ppid == me).then_some(pid)
    })
}

/// The local backend's configuration for the model at `path`, its data in `dir`: 2 threads, a
/// 2,048-token context, greedy, `max_tokens` at most.
fn local_config(dir: &Path, path: &Path, max_tokens: u32) -> Config {
    let mut settings = Settings {
        backend: BackendKind::Local,
        ..Settings::default()
    };
    settings.local.model = path.display().to_string();
    settings.local.threads = THREADS as u32;
    settings.local.context = 2048;
    settings.local.temperature = 0.0;
    settings.local.max_tokens = max_tokens;
    Config {
        path: dir.join("settings.toml"),
        file_found: false,
        data_dir: dir.to_path_buf(),
        settings,
    }
}

async fn jarvis_path(path: &Path, server: &Path) -> Figures {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = local_config(dir.path(), path, 128);
    let server = server.display().to_string();
    let env = move |name: &str| (name == "JARVIS_LLM_SERVER").then(|| server.clone());
    let backend = llm::from_config(&config, &env).expect("backend");
    let system = jarvis::prompt::RULES.trim().to_string();
    let request = |messages: Vec<Message>| Request {
        system: system.clone(),
        messages,
        tools: vec![],
        model: backend.model().to_string(),
        max_tokens: 128,
        housekeeping: false,
        prefill: false,
    };
    let user = |text: String| Message::text(MessageRole::User, text);

    // Start the server and warm it up (this also caches the system prompt, as in real use).
    let (_, _, _, warm) = measure(backend.as_ref(), request(vec![user("Hello.".into())])).await;
    assert!(warm > 0, "the warm-up was answered");

    let mut ttft_first = Vec::new();
    let mut pp_first = Vec::new();
    let mut ttft_follow = Vec::new();
    let mut decode = Vec::new();
    let mut prompt_tokens = 0;
    for round in 0..ROUNDS {
        let question = format!(
            "Round {round}. Read these notes about the town.\n{}\nNow tell a long story about the town.",
            filler(50, round)
        );
        let (ttft, rate, answer, input) =
            measure(backend.as_ref(), request(vec![user(question.clone())])).await;
        ttft_first.push(ttft);
        pp_first.push(input as f64 / ttft);
        prompt_tokens = input;
        decode.push(rate);
        let follow = vec![
            user(question),
            Message::text(MessageRole::Assistant, answer),
            user("Which place in the story opens early?".into()),
        ];
        let (ttft, _, _, _) = measure(backend.as_ref(), request(follow)).await;
        ttft_follow.push(ttft);
    }
    let peak = server_pid().map(|pid| peak_mib(&pid)).unwrap_or(f64::NAN);
    Figures {
        ttft_first: median(ttft_first),
        pp_first: median(pp_first),
        prompt_tokens,
        ttft_follow: median(ttft_follow),
        decode: median(decode),
        peak,
    }
}

/// The first question of a new chat, as Jarvis sends it (the built-in rules, a profile, the
/// memory tools, the state block): its time to the first token on a server that has just
/// loaded the model, without and with the warm-up Jarvis sends as a chat window opens — each
/// round on a fresh server. Returns the medians (cold, warm) and the prompt's tokens.
async fn new_chat_first_token(path: &Path, server: &Path) -> (f64, f64, u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = jarvis::store::Store::open(&dir.path().join("j.db"), Duration::from_secs(5))
        .expect("store");
    store
        .add_fact("My dog is called Bruno.", None)
        .expect("a fact");
    let config = local_config(dir.path(), path, 16);
    let server = server.display().to_string();
    let env = move |name: &str| (name == "JARVIS_LLM_SERVER").then(|| server.clone());
    let rules = jarvis::prompt::RULES;
    let question = "How many minutes are in three hours?";
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    let mut tokens = 0;
    for round in 0..ROUNDS * 2 {
        let warmed = round % 2 == 1;
        let backend = llm::from_config(&config, &env).expect("backend");
        let (model, max_tokens) = (backend.model().to_string(), backend.max_tokens());
        // The server starts and loads the model on a prompt that shares nothing with Jarvis's.
        let load = Request {
            system: "x".into(),
            messages: vec![Message::text(MessageRole::User, "Hi")],
            tools: vec![],
            model: model.clone(),
            max_tokens: 1,
            housekeeping: false,
            prefill: false,
        };
        let mut events = backend.stream(load);
        while events.next().await.is_some() {}
        // The warm-up is the question's request up to the question.
        let up_to_the_question = || {
            jarvis::prompt::warm_request(
                &store,
                None,
                "Ada",
                rules,
                &model,
                max_tokens,
                jarvis::prompt::Locale::English,
            )
        };
        if warmed {
            let request = up_to_the_question().expect("the warm-up");
            let mut events = backend.stream(request);
            while events.next().await.is_some() {}
        }
        let mut asked = up_to_the_question().expect("the request");
        asked.prefill = false;
        let (history, _) =
            jarvis::prompt::next_question(&store, None, question).expect("the question");
        let state = jarvis::prompt::State::typed_now();
        let built = jarvis::prompt::build_request(
            &history,
            asked.system.clone(),
            &state,
            &model,
            max_tokens,
        );
        asked.messages = built.messages;
        let (ttft, _, _, input) = measure(backend.as_ref(), asked).await;
        tokens = input;
        if warmed {
            warm.push(ttft);
        } else {
            cold.push(ttft);
        }
    }
    (median(cold), median(warm), tokens)
}

/// Streams one request: (seconds to the first token, decode tokens/s after it, the text, prompt tokens).
async fn measure(backend: &dyn llm::Backend, request: Request) -> (f64, f64, String, u64) {
    let started = Instant::now();
    let mut first: Option<Instant> = None;
    let mut text = String::new();
    let mut output = 0u64;
    let mut input = 0u64;
    let mut events = backend.stream(request);
    while let Some(event) = events.next().await {
        match event.expect("the local model answered") {
            LlmEvent::TextDelta { text: t } => {
                first.get_or_insert_with(Instant::now);
                text.push_str(&t);
            }
            LlmEvent::Usage {
                input_tokens,
                output_tokens,
            } => {
                input = input_tokens.unwrap_or(input);
                output = output_tokens.unwrap_or(output);
            }
            _ => {}
        }
    }
    let end = Instant::now();
    let first = first.expect("some text");
    let ttft = (first - started).as_secs_f64();
    let rate =
        output.saturating_sub(1) as f64 / (end - first).max(Duration::from_micros(1)).as_secs_f64();
    (ttft, rate, text, input)
}

fn model_dir() -> PathBuf {
    std::env::var("JARVIS_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".local/share/jarvis")
        })
        .join("models")
}

fn main() {
    if let Ok(path) = std::env::var("JARVIS_BENCH_RAW") {
        raw(Path::new(&path));
        return;
    }
    let exe = std::env::current_exe().expect("bench executable");
    let target = exe.parent().and_then(Path::parent).expect("target dir");
    let server = std::env::var("JARVIS_LLM_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|_| target.join("jarvis-llm"));
    assert!(
        server.is_file(),
        "build the server first: cargo build --release -p jarvis-llm"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    println!("{THREADS} threads; medians of {ROUNDS} rounds; baseline and Jarvis measured in the same run");
    println!();
    println!(
        "| model | path | prompt tokens/s | time to first token | decode tokens/s | peak memory |"
    );
    println!("|---|---|---|---|---|---|");
    let mut verdicts = Vec::new();
    for (label, file) in [
        (
            "SmolLM2-135M-Instruct Q4_1",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
        (
            "Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        ),
    ] {
        let path = model_dir().join(file);
        if !path.is_file() {
            println!("| {label} | not installed: run `scripts/models all` | | | | |");
            continue;
        }
        let out = std::process::Command::new(&exe)
            .env("JARVIS_BENCH_RAW", &path)
            .output()
            .expect("baseline child");
        let line = String::from_utf8_lossy(&out.stdout);
        let base: serde_json::Value = serde_json::from_str(line.trim()).expect("baseline figures");
        let figure = |k: &str| base[k].as_f64().unwrap_or(f64::NAN);
        let (pp, tg, tg_deep, peak) = (
            figure("pp"),
            figure("tg"),
            figure("tg_deep"),
            figure("peak"),
        );
        println!("| {label} | llama.cpp: pp512; tg128 from empty | {pp:.0} | — | {tg:.1} | {peak:.0} MiB |");
        println!(
            "| {label} | llama.cpp: tg128 after the 512-token prompt | — | — | {tg_deep:.1} | — |"
        );
        let f = runtime.block_on(jarvis_path(&path, &server));
        println!(
            "| {label} | Jarvis, first question ({} prompt tokens) | {:.0} | {:.2} s | {:.1} | {:.0} MiB |",
            f.prompt_tokens, f.pp_first, f.ttft_first, f.decode, f.peak
        );
        println!(
            "| {label} | Jarvis, follow-up turn (conversation cached) | — | {:.2} s | — | — |",
            f.ttft_follow
        );
        let (cold, warm, tokens) = runtime.block_on(new_chat_first_token(&path, &server));
        println!(
            "| {label} | Jarvis, a new chat's first question ({tokens} prompt tokens), server just started | — | {cold:.2} s | — | — |"
        );
        println!(
            "| {label} | the same after the warm-up a chat window sends | — | {warm:.2} s | — | — |"
        );
        verdicts.push(format!(
            "{label}: a new chat's first token {cold:.2} s cold, {warm:.2} s warmed ({:.2} ×; goal ≤ 0.5 s: {})",
            warm / cold,
            if warm <= 0.5 { "met" } else { "NOT met" }
        ));
        verdicts.push(format!(
            "{label}: decode {:.2} × llama.cpp at the same depth ({:.2} × its tg128 from empty; goal ≥ 0.8: {}); first token {:.2} s cold, {:.2} s follow-up",
            f.decode / tg_deep,
            f.decode / tg,
            if f.decode / tg_deep >= 0.8 { "met" } else { "NOT met" },
            f.ttft_first,
            f.ttft_follow
        ));
    }
    println!();
    for v in verdicts {
        println!("{v}");
    }
}
