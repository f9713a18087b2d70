//! Development tasks run by the set-up scripts.
//!
//! `cargo run -p xtask -- whisper-ggml --ct2 model.bin --mel mel_80.npy --vocab gpt2.tiktoken --out ggml.bin`
//! converts a CTranslate2 Whisper model (faster-whisper's format, which PyPI ships) into the ggml
//! file whisper.cpp reads; `--weights q8_0` (or `q5_1`) stores its weight matrices quantized as
//! ggml's reference quantizers do (half precision, `f16`, where not given).
//! `cargo run -p xtask -- ct2-list model.bin` lists a model's variables.
//! `cargo run -p xtask -- package [--debug]` makes the `.deb` and `.rpm` of the release build, or
//! of the debug one (`scripts/package` builds it first).

mod ct2;
mod ggml;
mod package;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("whisper-ggml") => {
            let mut ct2 = None;
            let mut mel = None;
            let mut vocab = None;
            let mut out = None;
            let mut weights = None;
            while let Some(flag) = args.next() {
                let value = args
                    .next()
                    .with_context(|| format!("{flag} needs a value"))?;
                let slot = match flag.as_str() {
                    "--ct2" => &mut ct2,
                    "--mel" => &mut mel,
                    "--vocab" => &mut vocab,
                    "--out" => &mut out,
                    "--weights" => &mut weights,
                    other => bail!("unknown flag {other}"),
                };
                *slot = Some(PathBuf::from(value));
            }
            let (Some(ct2), Some(mel), Some(vocab), Some(out)) = (ct2, mel, vocab, out) else {
                bail!("usage: xtask whisper-ggml --ct2 model.bin --mel mel_N.npy --vocab X.tiktoken --out FILE [--weights f16|q8_0|q5_1]");
            };
            let model = ct2::Model::read(&ct2)?;
            let weights = match weights {
                Some(name) => ggml::Weights::parse(&name.to_string_lossy())?,
                None => ggml::Weights::F16,
            };
            let summary = ggml::write_whisper(&model, &mel, &vocab, weights, &out)?;
            println!("{summary}");
            Ok(())
        }
        Some("package") => {
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .context("the workspace")?
                .to_path_buf();
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("target"));
            // `--debug`: the debug build the tests ran (scripts/package --debug), else release.
            let profile = match args.next().as_deref() {
                None => "release",
                Some("--debug") => "debug",
                Some(other) => bail!("usage: xtask package [--debug] (not {other:?})"),
            };
            for path in package::run(&root, &target.join(profile))? {
                println!("{}", path.display());
            }
            Ok(())
        }
        Some("ct2-list") => {
            let path = PathBuf::from(args.next().context("usage: xtask ct2-list model.bin")?);
            let model = ct2::Model::read(&path)?;
            println!("{} revision {}", model.spec, model.revision);
            for var in &model.variables {
                println!("{} {:?} {:?}", var.name, var.dims, var.dtype);
            }
            for (alias, target) in &model.aliases {
                println!("{alias} -> {target}");
            }
            Ok(())
        }
        _ => bail!(
            "usage: xtask whisper-ggml … | xtask ct2-list model.bin | xtask package [--debug]"
        ),
    }
}
