//! Writing whisper.cpp's ggml model file from a CTranslate2 Whisper model, the mel filters and
//! the tokenizer's vocabulary (the layout whisper.cpp's own `convert-pt-to-ggml.py` writes).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use base64::Engine;

use crate::ct2::{Model, Variable};

const MAGIC: i32 = 0x6767_6d6c;

/// How the weight matrices are stored: whisper.cpp's file types, each with the tensor type of its
/// weight matrices (ggml's numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    /// Half precision, as the CTranslate2 model ships: what the file always held.
    F16,
    /// 8 bits in blocks of 32 with one half-precision scale (`Q8_0`): 1.06 bytes a weight.
    Q8_0,
    /// 5 bits in blocks of 32 with a half-precision scale and minimum (`Q5_1`): 0.75 bytes.
    Q5_1,
}

/// ggml counts quantization formats: a quantized file's type is `version × 1000 + type`.
const QUANTIZATION_VERSION: i32 = 2;
/// Values in one quantized block.
const BLOCK: usize = 32;

impl Weights {
    /// From the converter's `--weights` flag.
    pub fn parse(name: &str) -> Result<Weights> {
        Ok(match name {
            "f16" => Weights::F16,
            "q8_0" => Weights::Q8_0,
            "q5_1" => Weights::Q5_1,
            other => bail!("unknown weight type {other} (f16, q8_0 or q5_1)"),
        })
    }

    /// The file type written in the header (`ggml_ftype`, with the quantization version).
    fn file_type(self) -> i32 {
        match self {
            Weights::F16 => 1,
            Weights::Q8_0 => QUANTIZATION_VERSION * 1000 + 7,
            Weights::Q5_1 => QUANTIZATION_VERSION * 1000 + 9,
        }
    }

    /// The tensor type of a weight matrix (`ggml_type`).
    fn tensor_type(self) -> i32 {
        match self {
            Weights::F16 => 1,
            Weights::Q8_0 => 8,
            Weights::Q5_1 => 7,
        }
    }

    /// `values` (a whole number of rows of a multiple of 32) in this format, as ggml's reference
    /// quantizers write them.
    fn encode(self, values: &[f32], out: &mut impl Write) -> Result<()> {
        ensure!(
            self == Weights::F16 || values.iter().all(|v| v.is_finite()),
            "a weight that is not a finite number cannot be quantized"
        );
        match self {
            Weights::F16 => {
                for v in values {
                    out.write_all(&half::f16::from_f32(*v).to_le_bytes())?;
                }
            }
            Weights::Q8_0 => {
                for block in values.chunks_exact(BLOCK) {
                    let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                    let d = amax / 127.0;
                    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                    out.write_all(&half::f16::from_f32(d).to_le_bytes())?;
                    let qs: Vec<u8> = block.iter().map(|v| (v * id).round() as i8 as u8).collect();
                    out.write_all(&qs)?;
                }
            }
            Weights::Q5_1 => {
                for block in values.chunks_exact(BLOCK) {
                    let min = block.iter().copied().fold(f32::INFINITY, f32::min);
                    let max = block.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let d = (max - min) / 31.0;
                    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                    out.write_all(&half::f16::from_f32(d).to_le_bytes())?;
                    out.write_all(&half::f16::from_f32(min).to_le_bytes())?;
                    let level = |v: f32| ((v - min) * id + 0.5) as u8;
                    let mut high = 0u32;
                    let mut qs = [0u8; BLOCK / 2];
                    for j in 0..BLOCK / 2 {
                        let (a, b) = (level(block[j]), level(block[j + BLOCK / 2]));
                        qs[j] = (a & 0x0f) | ((b & 0x0f) << 4);
                        high |= u32::from((a & 0x10) >> 4) << j;
                        high |= u32::from((b & 0x10) >> 4) << (j + BLOCK / 2);
                    }
                    out.write_all(&high.to_le_bytes())?;
                    out.write_all(&qs)?;
                }
            }
        }
        Ok(())
    }
}

/// A tensor to write: its whisper.cpp name, shape (PyTorch order) and values.
struct Tensor {
    name: String,
    dims: Vec<usize>,
    values: Vec<f32>,
}

impl Tensor {
    fn new(name: impl Into<String>, dims: Vec<usize>, values: Vec<f32>) -> Result<Tensor> {
        let name = name.into();
        ensure!(
            dims.iter().product::<usize>() == values.len(),
            "{name}: {} values for shape {dims:?}",
            values.len()
        );
        Ok(Tensor { name, dims, values })
    }
}

fn var<'m>(model: &'m Model, name: &str) -> Result<&'m Variable> {
    model
        .get(name)
        .with_context(|| format!("the model has no variable {name}: is it a Whisper model?"))
}

/// A variable as one tensor.
fn whole(model: &Model, from: &str, to: &str) -> Result<Tensor> {
    let v = var(model, from)?;
    Tensor::new(to, v.dims.clone(), v.to_f32()?)
}

/// Rows `[start, end)` of a 1-D or 2-D variable.
fn rows(model: &Model, from: &str, to: &str, start: usize, end: usize) -> Result<Tensor> {
    let v = var(model, from)?;
    let values = v.to_f32()?;
    let width: usize = v.dims.iter().skip(1).product();
    ensure!(
        end <= v.dims[0],
        "{from}: rows {start}..{end} of {}",
        v.dims[0]
    );
    let mut dims = v.dims.clone();
    dims[0] = end - start;
    Tensor::new(to, dims, values[start * width..end * width].to_vec())
}

/// A linear layer's weight and bias.
fn linear(model: &Model, from: &str, to: &str, out: &mut Vec<Tensor>) -> Result<()> {
    out.push(whole(
        model,
        &format!("{from}/weight"),
        &format!("{to}.weight"),
    )?);
    out.push(whole(
        model,
        &format!("{from}/bias"),
        &format!("{to}.bias"),
    )?);
    Ok(())
}

fn layer_norm(model: &Model, from: &str, to: &str, out: &mut Vec<Tensor>) -> Result<()> {
    out.push(whole(
        model,
        &format!("{from}/gamma"),
        &format!("{to}.weight"),
    )?);
    out.push(whole(
        model,
        &format!("{from}/beta"),
        &format!("{to}.bias"),
    )?);
    Ok(())
}

/// A fused projection split into parts of `d` rows; `None` parts have no bias (Whisper's key).
fn fused(
    model: &Model,
    from: &str,
    parts: &[(&str, bool)],
    d: usize,
    out: &mut Vec<Tensor>,
) -> Result<()> {
    for (i, (to, bias)) in parts.iter().enumerate() {
        let (start, end) = (i * d, (i + 1) * d);
        out.push(rows(
            model,
            &format!("{from}/weight"),
            &format!("{to}.weight"),
            start,
            end,
        )?);
        if *bias {
            out.push(rows(
                model,
                &format!("{from}/bias"),
                &format!("{to}.bias"),
                start,
                end,
            )?);
        }
    }
    Ok(())
}

fn layer_count(model: &Model, side: &str) -> usize {
    let prefix = format!("{side}/layer_");
    model
        .variables
        .iter()
        .filter_map(|v| {
            v.name
                .strip_prefix(&prefix)?
                .split('/')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .max()
        .map_or(0, |n| n + 1)
}

/// Reads a little-endian f32 `.npy` array: its shape and values.
fn read_npy(path: &Path) -> Result<(Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(
        bytes.starts_with(b"\x93NUMPY"),
        "{} is not a .npy file",
        path.display()
    );
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => bail!("{}: .npy version {v} is not supported", path.display()),
    };
    let header = std::str::from_utf8(&bytes[start..start + header_len])?;
    ensure!(
        header.contains("'<f4'"),
        "{}: not little-endian f32 ({header})",
        path.display()
    );
    ensure!(
        header.contains("'fortran_order': False"),
        "{}: Fortran order",
        path.display()
    );
    let shape_text = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .context("no shape in the .npy header")?;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let values: Vec<f32> = bytes[start + header_len..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    ensure!(
        values.len() == shape.iter().product::<usize>(),
        "{}: size mismatch",
        path.display()
    );
    Ok((shape, values))
}

/// The tokens of a `.tiktoken` file (`base64 rank` per line), in rank order.
fn read_tiktoken(path: &Path) -> Result<Vec<Vec<u8>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut tokens = Vec::new();
    for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let (b64, rank) = line
            .split_once(' ')
            .context("a vocabulary line without a rank")?;
        let rank: usize = rank.trim().parse()?;
        ensure!(
            rank == i,
            "vocabulary ranks are not in order at line {}",
            i + 1
        );
        // Python's lenient decoder reads "=" (a line of multilingual.tiktoken) as no bytes.
        let b64 = b64.trim_end_matches('=');
        let lenient = base64::engine::GeneralPurpose::new(
            &base64::alphabet::STANDARD,
            base64::engine::GeneralPurposeConfig::new()
                .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone),
        );
        tokens.push(lenient.decode(b64)?);
    }
    Ok(tokens)
}

fn i32s(out: &mut impl Write, values: &[usize]) -> Result<()> {
    for &v in values {
        out.write_all(&i32::try_from(v)?.to_le_bytes())?;
    }
    Ok(())
}

/// Converts and writes; returns a one-line summary.
pub fn write_whisper(
    model: &Model,
    mel: &Path,
    vocab: &Path,
    weights: Weights,
    out_path: &Path,
) -> Result<String> {
    ensure!(
        model.spec == "WhisperSpec",
        "the model is a {}, not Whisper",
        model.spec
    );
    let token_embedding = var(model, "decoder/embeddings/weight")?;
    let (n_vocab, n_text_state) = (token_embedding.dims[0], token_embedding.dims[1]);
    let audio_pos = var(model, "encoder/position_encodings/encodings")?;
    let (n_audio_ctx, n_audio_state) = (audio_pos.dims[0], audio_pos.dims[1]);
    let n_text_ctx = var(model, "decoder/position_encodings/encodings")?.dims[0];
    let n_mels = var(model, "encoder/conv1/weight")?.dims[1];
    let (n_audio_layer, n_text_layer) =
        (layer_count(model, "encoder"), layer_count(model, "decoder"));
    let (n_audio_head, n_text_head) = (n_audio_state / 64, n_text_state / 64);

    let (mel_shape, mel_values) = read_npy(mel)?;
    ensure!(
        mel_shape.len() == 2 && mel_shape[0] == n_mels,
        "the mel filters are {mel_shape:?}, the model wants {n_mels} mels"
    );
    let tokens = read_tiktoken(vocab)?;

    let mut tensors = Vec::new();
    tensors.push(whole(
        model,
        "encoder/position_encodings/encodings",
        "encoder.positional_embedding",
    )?);
    for conv in ["conv1", "conv2"] {
        tensors.push(whole(
            model,
            &format!("encoder/{conv}/weight"),
            &format!("encoder.{conv}.weight"),
        )?);
        let bias = var(model, &format!("encoder/{conv}/bias"))?;
        // whisper.cpp adds the conv bias as an [n, 1] tensor.
        tensors.push(Tensor::new(
            format!("encoder.{conv}.bias"),
            vec![bias.dims[0], 1],
            bias.to_f32()?,
        )?);
    }
    for i in 0..n_audio_layer {
        let (from, to) = (format!("encoder/layer_{i}"), format!("encoder.blocks.{i}"));
        block(model, &from, &to, n_audio_state, false, &mut tensors)?;
    }
    layer_norm(model, "encoder/layer_norm", "encoder.ln_post", &mut tensors)?;

    tensors.push(whole(
        model,
        "decoder/position_encodings/encodings",
        "decoder.positional_embedding",
    )?);
    tensors.push(whole(
        model,
        "decoder/embeddings/weight",
        "decoder.token_embedding.weight",
    )?);
    for i in 0..n_text_layer {
        let (from, to) = (format!("decoder/layer_{i}"), format!("decoder.blocks.{i}"));
        block(model, &from, &to, n_text_state, true, &mut tensors)?;
    }
    layer_norm(model, "decoder/layer_norm", "decoder.ln", &mut tensors)?;

    let partial = out_path.with_extension("partial");
    let mut out = BufWriter::new(
        File::create(&partial).with_context(|| format!("creating {}", partial.display()))?,
    );
    out.write_all(&MAGIC.to_le_bytes())?;
    i32s(
        &mut out,
        &[
            n_vocab,
            n_audio_ctx,
            n_audio_state,
            n_audio_head,
            n_audio_layer,
            n_text_ctx,
            n_text_state,
            n_text_head,
            n_text_layer,
            n_mels,
        ],
    )?;
    out.write_all(&weights.file_type().to_le_bytes())?;
    i32s(&mut out, &mel_shape)?;
    for v in &mel_values {
        out.write_all(&v.to_le_bytes())?;
    }
    i32s(&mut out, &[tokens.len()])?;
    for token in &tokens {
        i32s(&mut out, &[token.len()])?;
        out.write_all(token)?;
    }
    for t in &tensors {
        let keep_f32 = t.dims.len() < 2
            || t.name.ends_with("conv1.bias")
            || t.name.ends_with("conv2.bias")
            || t.name.ends_with("positional_embedding");
        // What whisper.cpp makes of the file's type: its weight matrices (every 2-D weight left,
        // the token embedding among them) in that type, the convolutions (3-D) in half precision.
        let matrix = !keep_f32 && t.dims.len() == 2;
        let stored = if matrix { weights } else { Weights::F16 };
        ensure!(
            keep_f32 || stored == Weights::F16 || t.dims[1] % BLOCK == 0,
            "{}: rows of {} cannot be quantized in blocks of {BLOCK}",
            t.name,
            t.dims[1]
        );
        let ttype = if keep_f32 { 0 } else { stored.tensor_type() };
        i32s(&mut out, &[t.dims.len(), t.name.len()])?;
        out.write_all(&ttype.to_le_bytes())?;
        let reversed: Vec<usize> = t.dims.iter().rev().copied().collect();
        i32s(&mut out, &reversed)?;
        out.write_all(t.name.as_bytes())?;
        if keep_f32 {
            for v in &t.values {
                out.write_all(&v.to_le_bytes())?;
            }
        } else {
            stored.encode(&t.values, &mut out)?;
        }
    }
    out.flush()?;
    drop(out);
    std::fs::rename(&partial, out_path)?;
    Ok(format!(
        "wrote {}: {} tensors, vocabulary {n_vocab} ({} tokens), {n_audio_layer}+{n_text_layer} layers, state {n_audio_state}, {n_mels} mels, weights {weights:?}",
        out_path.display(),
        tensors.len(),
        tokens.len()
    ))
}

/// One transformer block: self-attention, cross-attention (decoder) and the MLP.
fn block(
    model: &Model,
    from: &str,
    to: &str,
    d: usize,
    cross: bool,
    out: &mut Vec<Tensor>,
) -> Result<()> {
    layer_norm(
        model,
        &format!("{from}/self_attention/layer_norm"),
        &format!("{to}.attn_ln"),
        out,
    )?;
    fused(
        model,
        &format!("{from}/self_attention/linear_0"),
        &[
            (&format!("{to}.attn.query"), true),
            (&format!("{to}.attn.key"), false),
            (&format!("{to}.attn.value"), true),
        ],
        d,
        out,
    )?;
    linear(
        model,
        &format!("{from}/self_attention/linear_1"),
        &format!("{to}.attn.out"),
        out,
    )?;
    if cross {
        layer_norm(
            model,
            &format!("{from}/attention/layer_norm"),
            &format!("{to}.cross_attn_ln"),
            out,
        )?;
        linear(
            model,
            &format!("{from}/attention/linear_0"),
            &format!("{to}.cross_attn.query"),
            out,
        )?;
        fused(
            model,
            &format!("{from}/attention/linear_1"),
            &[
                (&format!("{to}.cross_attn.key"), false),
                (&format!("{to}.cross_attn.value"), true),
            ],
            d,
            out,
        )?;
        linear(
            model,
            &format!("{from}/attention/linear_2"),
            &format!("{to}.cross_attn.out"),
            out,
        )?;
    }
    layer_norm(
        model,
        &format!("{from}/ffn/layer_norm"),
        &format!("{to}.mlp_ln"),
        out,
    )?;
    linear(
        model,
        &format!("{from}/ffn/linear_0"),
        &format!("{to}.mlp.0"),
        out,
    )?;
    linear(
        model,
        &format!("{from}/ffn/linear_1"),
        &format!("{to}.mlp.2"),
        out,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ggml's dequantizers, for the round trip.
    fn decode(weights: Weights, bytes: &[u8]) -> Vec<f32> {
        let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        match weights {
            Weights::F16 => bytes.chunks_exact(2).map(f16).collect(),
            Weights::Q8_0 => bytes
                .chunks_exact(34)
                .flat_map(|b| {
                    let d = f16(b);
                    b[2..].iter().map(move |q| f32::from(*q as i8) * d)
                })
                .collect(),
            Weights::Q5_1 => bytes
                .chunks_exact(24)
                .flat_map(|b| {
                    let (d, m) = (f16(b), f16(&b[2..]));
                    let high = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
                    let qs = &b[8..];
                    let mut out = [0.0f32; BLOCK];
                    for j in 0..BLOCK / 2 {
                        let low = u32::from(qs[j] & 0x0f) | (((high >> j) & 1) << 4);
                        let up = u32::from(qs[j] >> 4) | (((high >> (j + 16)) & 1) << 4);
                        out[j] = low as f32 * d + m;
                        out[j + BLOCK / 2] = up as f32 * d + m;
                    }
                    out
                })
                .collect(),
        }
    }

    #[test]
    fn quantized_weights_come_back_within_half_a_step_in_ggmls_block_sizes() {
        let values: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 400.0 * if i < 128 { 1.0 } else { 0.01 })
            .collect();
        for (weights, bytes_per_block) in [(Weights::Q8_0, 34), (Weights::Q5_1, 24)] {
            let mut bytes = Vec::new();
            weights.encode(&values, &mut bytes).unwrap();
            assert_eq!(
                bytes.len(),
                values.len() / BLOCK * bytes_per_block,
                "{weights:?}"
            );
            let back = decode(weights, &bytes);
            for (block, got) in values.chunks(BLOCK).zip(back.chunks(BLOCK)) {
                let (min, max) = block
                    .iter()
                    .fold((f32::MAX, f32::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
                let step = match weights {
                    Weights::Q8_0 => max.abs().max(min.abs()) / 127.0,
                    _ => (max - min) / 31.0,
                };
                for (v, g) in block.iter().zip(got) {
                    // Half a step, and the scale's own rounding to half precision.
                    assert!(
                        (v - g).abs() <= step * 0.52 + 1e-7,
                        "{weights:?}: {v} came back {g}"
                    );
                }
            }
        }
        assert!(Weights::parse("q4_0").is_err());
        let mut bytes = Vec::new();
        assert!(Weights::Q8_0
            .encode(&[f32::NAN; BLOCK], &mut bytes)
            .is_err());
    }

    #[test]
    fn blocks_are_laid_out_byte_for_byte_as_ggml_writes_them() {
        let half = |v: f32| half::f16::from_f32(v).to_le_bytes();
        // Nothing but zeros: a zero scale and zero quanta.
        let mut bytes = Vec::new();
        Weights::Q8_0.encode(&[0.0; BLOCK], &mut bytes).unwrap();
        assert_eq!(bytes, vec![0u8; 34]);
        // Scale 127 / 127 = 1; halves round away from zero, as C's roundf does.
        let mut block = [0.0f32; BLOCK];
        block[..4].copy_from_slice(&[127.0, -63.5, 2.4, -2.6]);
        let mut bytes = Vec::new();
        Weights::Q8_0.encode(&block, &mut bytes).unwrap();
        let mut expected = half(1.0).to_vec();
        expected.extend([127u8, (-64i8) as u8, 2, (-3i8) as u8]);
        expected.resize(34, 0);
        assert_eq!(bytes, expected);
        // Q5_1: scale, minimum, the fifth bits (value j at bit j, value j + 16 at bit j + 16),
        // then value j in the low nibble of byte j and value j + 16 in its high nibble.
        let mut block = [0.0f32; BLOCK];
        block[16] = 31.0; // level 31: nibble 15, fifth bit 16
        block[1] = 17.0; // level 17: nibble 1, fifth bit 1
        block[17] = 2.4; // level 2 (rounded as ggml does: + 0.5, truncated)
        let mut bytes = Vec::new();
        Weights::Q5_1.encode(&block, &mut bytes).unwrap();
        let mut expected = half(1.0).to_vec();
        expected.extend(half(0.0));
        expected.extend(((1u32 << 16) | (1 << 1)).to_le_bytes());
        expected.extend([0xf0u8, 0x21]);
        expected.resize(24, 0);
        assert_eq!(bytes, expected);
    }
}
