//! `jarvis-stub`: the stub LLM server as a small binary for manual and end-to-end runs.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use jarvis_stub::{Script, Stub};

/// A stub LLM server speaking the Anthropic and OpenAI streaming formats on loopback.
#[derive(Parser)]
#[command(name = "jarvis-stub")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8089")]
    listen: SocketAddr,
    /// A JSON file holding an array of scripts, served in order before the default.
    #[arg(long)]
    script: Option<PathBuf>,
    /// Stream this fixed text instead of echoing the question.
    #[arg(long)]
    text: Option<String>,
    /// Characters per delta.
    #[arg(long, default_value_t = 4)]
    delta_chars: usize,
    /// Pause before each delta, in milliseconds.
    #[arg(long, default_value_t = 30)]
    pace_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let stub = Stub::start_on(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let pace = std::time::Duration::from_millis(args.pace_ms);
    let default = match args.text {
        Some(text) => Script::text(text),
        None => Script::Echo {
            delta_chars: 4,
            pace_ms: 0,
        },
    };
    stub.set_default(default.deltas_of(args.delta_chars).paced(pace));
    if let Some(path) = args.script {
        let raw = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let scripts: Vec<Script> = serde_json::from_str(&raw)
            .with_context(|| format!("{} is not a JSON array of scripts", path.display()))?;
        for script in scripts {
            stub.push(script);
        }
    }
    println!("jarvis-stub listening on http://{}", stub.addr());
    println!("  OPENAI_BASE_URL=http://{}/v1", stub.addr());
    println!("  ANTHROPIC_BASE_URL=http://{}", stub.addr());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
