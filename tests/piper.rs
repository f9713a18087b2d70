//! Piper, the neural voice: what it says is what whisper hears back; where its voice is missing
//! or damaged, espeak-ng speaks and `jarvis doctor` says why.

mod support;

use std::time::Duration;

use jarvis::voice::{Clip, Synthesizer, SAMPLE_RATE};
use support::*;

const SLOW: Duration = Duration::from_secs(120);

/// Words in a transcript, lower case, without punctuation, small numbers spelt out (whisper
/// writes "ten" as "10").
fn words(text: &str) -> Vec<String> {
    const NUMBERS: [&str; 13] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve",
    ];
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .map(|w| match w.parse::<usize>() {
            Ok(n) if n < NUMBERS.len() => NUMBERS[n].to_string(),
            _ => w.to_string(),
        })
        .collect()
}

/// Whether `word` was heard: as it is, or as the stem of a heard word ("brother" in "brothers",
/// which is how "brother is" often comes back).
fn heard(word: &str, back: &[String]) -> bool {
    back.iter()
        .any(|b| b == word || (word.len() >= 4 && b.starts_with(word)))
}

/// `jarvis say TEXT` into a WAV, with the models of `data_dir`.
async fn say(dir: &Dir, data_dir: &std::path::Path, text: &str) -> (Clip, String) {
    let out = dir.path().join("said.wav");
    let mut cmd = jarvis(dir);
    cmd.env("JARVIS_DATA_DIR", data_dir);
    cmd.args(["say", text, "--out", out.to_str().unwrap()]);
    let (code, _, err) = output_within(SLOW, &mut cmd).await;
    assert_eq!(code, 0, "{err}");
    (Clip::from_wav_file(&out).unwrap(), err)
}

fn heard_back(clip: &Clip) -> Vec<String> {
    let clip = clip.resampled(SAMPLE_RATE).unwrap();
    words(&whisper().transcribe(&clip.samples).unwrap().text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_jarvis_says_with_piper_is_heard_back_as_the_text() {
    let dir = Dir::new();
    let data_dir = model_dir().parent().unwrap().to_path_buf();
    let (mut said, mut lost) = (0, Vec::new());
    for text in [
        "The meeting with your brother is moved to Thursday afternoon.",
        "Well, it will rain tomorrow, so take an umbrella.",
        "Would you like me to set a timer for ten minutes?",
        "Paris is the capital of France, and it lies on the Seine.",
        "I have added milk, eggs and bread to your shopping list.",
    ] {
        let (clip, err) = say(&dir, &data_dir, text).await;
        assert!(!err.contains("espeak-ng speaks instead"), "{err}");
        let back = heard_back(&clip);
        let want = words(text);
        said += want.len();
        let missing: Vec<String> = want.into_iter().filter(|w| !heard(w, &back)).collect();
        eprintln!("{text} → {back:?}");
        // No sentence lost as a whole.
        assert!(missing.len() * 2 < words(text).len(), "{text} → {back:?}");
        lost.extend(missing);
    }
    // whisper tiny.en hears nine words in ten of it, give or take: Piper's voice varies from one
    // run to the next (its noise is random), and tiny.en mishears a name now and then ("the
    // Seine" as "the same"; seen in CI: 5 of 53 lost, counted this way). Nearly a word in six lost
    // would be a voice that is hard to follow.
    assert!(
        lost.len() * 100 <= said * 15,
        "{} of {said} words lost: {lost:?}",
        lost.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_piper_voice_espeak_speaks_and_the_doctor_says_why() {
    let dir = Dir::new();
    // ONNX Runtime is there, the voice is not; then a voice file that is not ONNX.
    let data_dir = dir.path().join("data");
    let models = data_dir.join("models");
    std::fs::create_dir_all(models.join("piper")).unwrap();
    let library = jarvis::onnx::library_path(&model_dir());
    std::fs::create_dir_all(models.join("onnxruntime")).unwrap();
    std::os::unix::fs::symlink(&library, models.join("onnxruntime/libonnxruntime.so")).unwrap();

    let text = "The answer is forty two.";
    let (clip, err) = say(&dir, &data_dir, text).await;
    assert!(
        err.contains("espeak-ng speaks instead") && err.contains("en_US-joe-medium.onnx"),
        "{err}"
    );
    let back = heard_back(&clip);
    assert!(back.contains(&"answer".to_string()), "{back:?}");

    let mut doctor = jarvis(&dir);
    doctor.env("JARVIS_DATA_DIR", &data_dir);
    let (_, out, _) = output_within(SLOW, doctor.arg("doctor")).await;
    let line = out
        .lines()
        .find(|l| l.contains("speaking voice"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains("espeak-ng, because Piper's voice is not available")
            && line.contains("scripts/models voice"),
        "{line}"
    );

    // A damaged voice: named, with the reason, and espeak-ng speaks.
    let voice = models.join("piper/en_US-joe-medium.onnx");
    std::fs::write(&voice, b"not an onnx model").unwrap();
    std::fs::copy(
        model_dir().join("piper/en_US-joe-medium.onnx.json"),
        models.join("piper/en_US-joe-medium.onnx.json"),
    )
    .unwrap();
    let (clip, err) = say(&dir, &data_dir, text).await;
    assert!(
        err.contains("espeak-ng speaks instead")
            && err.contains("Piper voice could not be loaded from")
            && err.contains("en_US-joe-medium.onnx"),
        "{err}"
    );
    assert!(!clip.samples.is_empty());
}

#[test]
fn a_long_sentence_with_clauses_is_spoken_whole_and_in_time() {
    let piper =
        jarvis::voice::models::load_piper(&model_dir(), 175).unwrap_or_else(|e| panic!("{e}"));
    let phonemes = piper
        .phonemes("Well, first we go north; then, at the lake, we turn left.")
        .unwrap();
    // Each clause ends with its mark, so the voice pauses where the text does.
    assert_eq!(phonemes.matches(',').count(), 3, "{phonemes}");
    assert!(
        phonemes.contains(';') && phonemes.ends_with('.'),
        "{phonemes}"
    );
    let clip = piper
        .synthesize("Well, first we go north; then, at the lake, we turn left.")
        .unwrap();
    let seconds = clip.duration().as_secs_f64();
    assert!((2.0..8.0).contains(&seconds), "{seconds} s");
    assert!(clip.samples.iter().all(|s| s.abs() <= 1.0));
    // Nothing to say is silence, not an error.
    assert!(piper.synthesize(" … ").unwrap().samples.is_empty());
}

#[test]
fn the_steady_voice_says_a_text_the_same_way_every_time_and_the_natural_one_varies() {
    let load = || jarvis::voice::models::load_piper(&model_dir(), 175).unwrap();
    let text = "Stop it, please.";
    let steady = load().steady();
    assert_eq!(
        steady.synthesize(text).unwrap().samples,
        steady.synthesize(text).unwrap().samples
    );
    let natural = load();
    assert_ne!(
        natural.synthesize(text).unwrap().samples,
        natural.synthesize(text).unwrap().samples,
        "Piper's voice varies as it was trained to"
    );
}

#[test]
fn once_the_voice_is_quiet_piper_lets_go_of_its_sentences_memory_and_still_speaks_the_same() {
    let piper = jarvis::voice::models::load_piper(&model_dir(), 175)
        .unwrap()
        .steady();
    let text = "The weather tomorrow will be sunny with a light breeze from the west, and warm.";
    let before = piper.synthesize(text).unwrap().samples;
    let speaking = held_kib();
    piper.release();
    jarvis::voice::trim_heap();
    let quiet = held_kib();
    // The arena held the sentence's tensors (~88 MB for this one); what is left is the voice.
    assert!(
        quiet + 40 * 1024 < speaking,
        "held {speaking} KiB while speaking, {quiet} KiB once released"
    );
    assert_eq!(piper.synthesize(text).unwrap().samples, before);
}

/// Issue 29 item 5: `[voice] piper_voice` takes any Piper voice (its `.onnx` with the
/// `.onnx.json` beside it). One of the settings' language speaks; one of another language does
/// not, and espeak-ng's voice of the language speaks instead, with why; a configuration that
/// does not parse is named and espeak-ng speaks. (The voice here is the installed English model
/// under a configuration that says German, as a German voice's does: no German voice can be
/// installed on these machines.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piper_voice_of_the_users_language_speaks_it_and_one_of_another_does_not() {
    let dir = Dir::new();
    let data_dir = model_dir().parent().unwrap().to_path_buf();
    let voices = dir.path().join("voices");
    std::fs::create_dir_all(&voices).unwrap();
    let german = voices.join("de_DE-probe-medium.onnx");
    std::os::unix::fs::symlink(model_dir().join("piper/en_US-joe-medium.onnx"), &german).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(model_dir().join("piper/en_US-joe-medium.onnx.json")).unwrap(),
    )
    .unwrap();
    config["language"] = serde_json::json!({"code": "de_DE", "family": "de"});
    config["espeak"]["voice"] = "de".into();
    std::fs::write(
        voices.join("de_DE-probe-medium.onnx.json"),
        config.to_string(),
    )
    .unwrap();
    let settings = |language: &str, voice: &std::path::Path| {
        std::fs::write(
            dir.path().join("settings.toml"),
            format!(
                "[general]\nlanguage = \"{language}\"\n\n[voice]\npiper_voice = \"{}\"\n",
                voice.display()
            ),
        )
        .unwrap();
    };
    let doctor = || async {
        let mut doctor = jarvis(&dir);
        doctor.env("JARVIS_DATA_DIR", &data_dir);
        let (_, out, _) = output_within(SLOW, doctor.arg("doctor")).await;
        out.lines()
            .find(|l| l.starts_with("language:"))
            .unwrap_or_else(|| panic!("{out}"))
            .to_string()
    };

    // German, a German voice: Piper speaks.
    settings("de", &german);
    let (clip, err) = say(&dir, &data_dir, "Guten Morgen, wie geht es dir?").await;
    assert!(!err.contains("espeak-ng speaks"), "{err}");
    assert!(clip.duration() > Duration::from_millis(800), "{err}");
    let line = doctor().await;
    assert!(
        line.contains("spoken by Piper's voice de_DE-probe-medium;"),
        "{line}"
    );

    // Chinese, the same voice: espeak-ng's Mandarin speaks, and why is said.
    settings("zh", &german);
    let (_, err) = say(&dir, &data_dir, "早上好。").await;
    assert!(
        err.contains("Piper's voice speaks German, not Chinese")
            && err.contains("espeak-ng speaks Chinese"),
        "{err}"
    );
    let line = doctor().await;
    assert!(
        line.contains(
            "spoken by espeak-ng's cmn-latn-pinyin voice (Piper's voice de_DE-probe-medium speaks German)"
        ),
        "{line}"
    );

    // German, the voice's configuration broken: named, and espeak-ng speaks.
    std::fs::write(voices.join("de_DE-probe-medium.onnx.json"), "{ not json").unwrap();
    settings("de", &german);
    let (clip, err) = say(&dir, &data_dir, "Guten Morgen.").await;
    assert!(
        err.contains("not a Piper voice configuration") && err.contains("espeak-ng speaks instead"),
        "{err}"
    );
    assert!(!clip.samples.is_empty());
    let line = doctor().await;
    assert!(
        line.contains(
            "spoken by espeak-ng's de voice (Piper's voice de_DE-probe-medium has no readable"
        ),
        "{line}"
    );
}
