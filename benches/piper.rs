//! Piper's voice against the reference `piper` (PyPI `piper-tts`, on its own ONNX Runtime), on the
//! same sentences and the same number of threads (2), in the same run: time to synthesize a
//! 9-word sentence (phonemes included) and the real-time factor (goal: ≤ 1.1× the reference).
//!
//! The reference is a Python with `piper-tts` installed: `JARVIS_PIPER_PYTHON` (default
//! `python3`); without it only Jarvis's figures are printed.
//!
//! Run: `cargo bench --bench piper`

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use jarvis::config::Config;
use jarvis::voice::{models, Synthesizer};

const SENTENCES: [&str; 3] = [
    "The train to Lyon leaves at half past nine tomorrow.",
    "Your meeting with the design team starts in ten minutes.",
    "It will be sunny and warm for most of the afternoon.",
];
const ROUNDS: usize = 5;

fn model_dir() -> PathBuf {
    match std::env::var("JARVIS_TEST_MODELS") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => {
            Config::installed_model_dir(&|k| std::env::var(k).ok()).expect("a home directory")
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

const REFERENCE: &str = r#"
import sys, time, wave, io
import onnxruntime
from piper import PiperVoice
model, rounds = sys.argv[1], int(sys.argv[2])
voice = PiperVoice.load(model)
options = onnxruntime.SessionOptions()
options.intra_op_num_threads = 2
voice.session = onnxruntime.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
for text in sys.stdin.read().splitlines():
    list(voice.synthesize(text))
    for _ in range(rounds):
        start = time.perf_counter()
        chunks = list(voice.synthesize(text))
        took = time.perf_counter() - start
        samples = sum(len(c.audio_float_array) for c in chunks)
        print(took, samples / chunks[0].sample_rate)
"#;

fn main() {
    let models = model_dir();
    let piper = models::load_piper(&models, 175).unwrap_or_else(|e| panic!("{e}"));
    let (mut took, mut rtf) = (Vec::new(), Vec::new());
    for text in SENTENCES {
        piper.synthesize(text).unwrap();
        for _ in 0..ROUNDS {
            let start = Instant::now();
            let clip = piper.synthesize(text).unwrap();
            let seconds = start.elapsed().as_secs_f64();
            took.push(seconds);
            rtf.push(seconds / clip.duration().as_secs_f64());
        }
    }
    let (ours, ours_rtf) = (median(took), median(rtf));
    println!(
        "jarvis Piper: 9-word sentence {:.0} ms (median of {}), RTF {:.3}",
        ours * 1e3,
        SENTENCES.len() * ROUNDS,
        ours_rtf
    );
    let python = std::env::var("JARVIS_PIPER_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut child = match Command::new(&python)
        .args(["-c", REFERENCE])
        .arg(models.join(jarvis::voice::piper::VOICE_FILE))
        .arg(ROUNDS.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            println!("reference piper: cannot run {python}: {e}");
            return;
        }
    };
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(SENTENCES.join("\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if !out.status.success() {
        println!(
            "reference piper: not available ({}): pip install piper-tts, JARVIS_PIPER_PYTHON=…",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
        return;
    }
    let (mut took, mut rtf) = (Vec::new(), Vec::new());
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Vec<f64> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
        if let [t, d] = v[..] {
            took.push(t);
            rtf.push(t / d);
        }
    }
    let (theirs, theirs_rtf) = (median(took), median(rtf));
    println!(
        "reference piper: 9-word sentence {:.0} ms, RTF {:.3}",
        theirs * 1e3,
        theirs_rtf
    );
    println!(
        "ratio (jarvis / reference): time {:.2}×, RTF {:.2}× (goal ≤ 1.1×)",
        ours / theirs,
        ours_rtf / theirs_rtf
    );
}
