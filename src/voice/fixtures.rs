//! Sounds for tests and benchmarks, made in memory: speech by espeak-ng at the listening rate,
//! and noises a microphone meets — a cough, a knock on a door, a quiet room, silence.

use std::time::Duration;

use super::{Clip, Espeak, Synthesizer, VoiceError, SAMPLE_RATE};

/// `text` spoken by espeak-ng, at 16 kHz.
pub fn speech(text: &str) -> Result<Clip, VoiceError> {
    Espeak::default().synthesize(text)?.resampled(SAMPLE_RATE)
}

/// Silence.
pub fn silence(ms: u64) -> Clip {
    Clip::silence(Duration::from_millis(ms), SAMPLE_RATE)
}

/// A cough-like burst: 200 ms of loud noise that dies away.
pub fn cough() -> Clip {
    let mut seed: u32 = 7;
    let n = SAMPLE_RATE as usize / 5;
    let samples = (0..n)
        .map(|i| {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let noise = (seed >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0;
            noise * 0.6 * (1.0 - i as f32 / n as f32).powi(2)
        })
        .collect();
    Clip {
        samples,
        rate: SAMPLE_RATE,
    }
}

/// Three knocks on a door: short low thumps 180 ms apart.
pub fn knock() -> Clip {
    let mut samples = Vec::new();
    for _ in 0..3 {
        for i in 0..480 {
            let t = i as f32 / SAMPLE_RATE as f32;
            samples.push((t * 2.0 * std::f32::consts::PI * 90.0).sin() * 0.8 * (-t * 60.0).exp());
        }
        samples.extend(std::iter::repeat_n(0.0, 2400));
    }
    Clip {
        samples,
        rate: SAMPLE_RATE,
    }
}

/// A quiet room: faint white noise (about −50 dBFS).
pub fn quiet_room(seconds: u32) -> Vec<i16> {
    let mut seed: u32 = 1;
    (0..seconds * SAMPLE_RATE)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed % 200) as i16 - 100
        })
        .collect()
}
