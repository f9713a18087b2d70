//! Reading a CTranslate2 `model.bin`: a version, the spec's name and revision, the variables
//! (name, shape, dtype, raw bytes) and aliases.

use std::path::Path;

use anyhow::{bail, Context, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F32,
    I8,
    I16,
    I32,
    F16,
    Bf16,
}

impl Dtype {
    fn from_code(code: u8) -> Result<Dtype> {
        Ok(match code {
            0 => Dtype::F32,
            1 => Dtype::I8,
            2 => Dtype::I16,
            3 => Dtype::I32,
            4 => Dtype::F16,
            5 => Dtype::Bf16,
            other => bail!("unknown dtype code {other}"),
        })
    }

    fn size(self) -> usize {
        match self {
            Dtype::I8 => 1,
            Dtype::I16 | Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 | Dtype::I32 => 4,
        }
    }
}

pub struct Variable {
    pub name: String,
    pub dims: Vec<usize>,
    pub dtype: Dtype,
    pub data: Vec<u8>,
}

impl Variable {
    /// The values as f32 (from f32, f16 or bf16).
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let chunks = self.data.chunks_exact(self.dtype.size());
        Ok(match self.dtype {
            Dtype::F32 => chunks
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Dtype::F16 => chunks
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Dtype::Bf16 => chunks
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            other => bail!("{}: {other:?} weights are not supported", self.name),
        })
    }
}

pub struct Model {
    pub spec: String,
    pub revision: u32,
    pub variables: Vec<Variable>,
    pub aliases: Vec<(String, String)>,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.at.checked_add(n).context("length overflow")?;
        if end > self.bytes.len() {
            bail!("the file ends early at byte {} (wanted {n} more)", self.at);
        }
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn string(&mut self) -> Result<String> {
        let len = self.u16()? as usize;
        let raw = self.take(len)?;
        let raw = raw.strip_suffix(&[0]).unwrap_or(raw);
        Ok(String::from_utf8(raw.to_vec())?)
    }
}

impl Model {
    pub fn read(path: &Path) -> Result<Model> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let mut r = Reader {
            bytes: &bytes,
            at: 0,
        };
        let version = r.u32()?;
        if version < 5 {
            bail!(
                "{}: CTranslate2 format version {version} is too old (need 5 or later)",
                path.display()
            );
        }
        let spec = r.string()?;
        let revision = r.u32()?;
        let count = r.u32()? as usize;
        let mut variables = Vec::with_capacity(count);
        for _ in 0..count {
            let name = r.string()?;
            let rank = r.u8()? as usize;
            let mut dims = Vec::with_capacity(rank);
            for _ in 0..rank {
                dims.push(r.u32()? as usize);
            }
            let dtype = Dtype::from_code(r.u8()?)?;
            let len = r.u32()? as usize;
            let expected: usize = dims.iter().product::<usize>() * dtype.size();
            if len != expected {
                bail!("{name}: {len} bytes for shape {dims:?} of {dtype:?}");
            }
            let data = r.take(len)?.to_vec();
            variables.push(Variable {
                name,
                dims,
                dtype,
                data,
            });
        }
        let mut aliases = Vec::new();
        if r.at < bytes.len() {
            let n = r.u32()?;
            for _ in 0..n {
                aliases.push((r.string()?, r.string()?));
            }
        }
        Ok(Model {
            spec,
            revision,
            variables,
            aliases,
        })
    }

    pub fn get(&self, name: &str) -> Option<&Variable> {
        let target = self
            .aliases
            .iter()
            .find(|(alias, _)| alias == name)
            .map_or(name, |(_, target)| target.as_str());
        self.variables.iter().find(|v| v.name == target)
    }
}
