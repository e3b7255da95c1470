//! A small GGUF reader and writer (format v3), used to make test fixtures: the tokenizer keys of
//! a real vocabulary file, a chosen chat template and random weights.
//!
//! The native side reads GGUF headers with llama.cpp's own gguf API (see shim); this module is
//! for writing, and for reading the vocabulary files the fixtures copy from.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

pub const ALIGNMENT: u64 = 32;

/// Value types of the format.
pub mod ty {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// Any fixed-size scalar, kept as its raw little-endian bytes with its type.
    Scalar(u32, Vec<u8>),
    Str(Vec<u8>),
    /// Element type and elements.
    Array(u32, Vec<GgufValue>),
}

impl GgufValue {
    pub fn u32(v: u32) -> Self {
        GgufValue::Scalar(ty::U32, v.to_le_bytes().to_vec())
    }
    pub fn f32(v: f32) -> Self {
        GgufValue::Scalar(ty::F32, v.to_le_bytes().to_vec())
    }
    pub fn bool(v: bool) -> Self {
        GgufValue::Scalar(ty::BOOL, vec![v as u8])
    }
    pub fn str(s: &str) -> Self {
        GgufValue::Str(s.as_bytes().to_vec())
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::Str(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }
    pub fn array_len(&self) -> Option<usize> {
        match self {
            GgufValue::Array(_, v) => Some(v.len()),
            _ => None,
        }
    }
}

fn scalar_size(t: u32) -> Option<usize> {
    Some(match t {
        ty::U8 | ty::I8 | ty::BOOL => 1,
        ty::U16 | ty::I16 => 2,
        ty::U32 | ty::I32 | ty::F32 => 4,
        ty::U64 | ty::I64 | ty::F64 => 8,
        _ => return None,
    })
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or_else(|| bad("truncated GGUF"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn string(&mut self) -> io::Result<Vec<u8>> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| bad("string length overflows"))?;
        Ok(self.take(n)?.to_vec())
    }
    fn value(&mut self, t: u32, depth: u32) -> io::Result<GgufValue> {
        if let Some(n) = scalar_size(t) {
            return Ok(GgufValue::Scalar(t, self.take(n)?.to_vec()));
        }
        match t {
            ty::STRING => Ok(GgufValue::Str(self.string()?)),
            ty::ARRAY if depth == 0 => {
                let et = self.u32()?;
                let n = self.u64()?;
                // Each element takes at least one byte: a count larger than the rest is corrupt.
                if n > (self.buf.len() - self.pos) as u64 {
                    return Err(bad("array length exceeds the file"));
                }
                let mut v = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    v.push(self.value(et, depth + 1)?);
                }
                Ok(GgufValue::Array(et, v))
            }
            _ => Err(bad(format!("unsupported GGUF value type {t}"))),
        }
    }
}

/// The key/value metadata of a GGUF file (tensor infos are not needed by the fixtures).
pub fn read_metadata(path: &Path) -> io::Result<Vec<(String, GgufValue)>> {
    let mut buf = Vec::new();
    File::open(path)?.read_to_end(&mut buf)?;
    let mut r = Reader { buf: &buf, pos: 0 };
    if r.take(4)? != b"GGUF" {
        return Err(bad("not a GGUF file"));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(bad(format!("unsupported GGUF version {version}")));
    }
    let _n_tensors = r.u64()?;
    let n_kv = r.u64()?;
    let mut kvs = Vec::new();
    for _ in 0..n_kv {
        let key = String::from_utf8(r.string()?).map_err(|_| bad("key is not UTF-8"))?;
        let t = r.u32()?;
        kvs.push((key, r.value(t, 0)?));
    }
    Ok(kvs)
}

/// Tensor element types the fixtures use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorType {
    F32 = 0,
    F16 = 1,
    Q8_0 = 8,
}

impl TensorType {
    /// Bytes for `n` elements (n a multiple of the block size).
    pub fn bytes(self, n: u64) -> u64 {
        match self {
            TensorType::F32 => 4 * n,
            TensorType::F16 => 2 * n,
            TensorType::Q8_0 => n / 32 * 34,
        }
    }
}

/// How a tensor's data is made when written.
#[derive(Debug, Clone, Copy)]
pub enum Fill {
    /// All elements equal (F32 only), e.g. norm weights of 1.0.
    Const(f32),
    /// Small random values from a seeded generator.
    Random,
}

#[derive(Debug, Clone)]
pub struct TensorSpec {
    pub name: String,
    /// ggml order: dims[0] is the contiguous (row) dimension.
    pub dims: Vec<u64>,
    pub ty: TensorType,
    pub fill: Fill,
}

impl TensorSpec {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
    pub fn n_bytes(&self) -> u64 {
        self.ty.bytes(self.n_elements())
    }
}

/// xorshift64*: fast, seeded, good enough for random weights.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545F4914F6CDD1D)
    }
}

/// A random f16 bit pattern with magnitude in [2^-7, 2^-3): random sign and mantissa.
fn random_f16(r: u64) -> u16 {
    let exp = 8 + ((r >> 10) & 3) as u16; // biased exponents 8..11
    ((r as u16) & 0x83FF) | (exp << 10)
}

fn write_value<W: Write>(w: &mut W, v: &GgufValue) -> io::Result<()> {
    match v {
        GgufValue::Scalar(_, b) => w.write_all(b),
        GgufValue::Str(s) => {
            w.write_all(&(s.len() as u64).to_le_bytes())?;
            w.write_all(s)
        }
        GgufValue::Array(et, items) => {
            w.write_all(&et.to_le_bytes())?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            items.iter().try_for_each(|i| write_value(w, i))
        }
    }
}

fn value_type(v: &GgufValue) -> u32 {
    match v {
        GgufValue::Scalar(t, _) => *t,
        GgufValue::Str(_) => ty::STRING,
        GgufValue::Array(..) => ty::ARRAY,
    }
}

fn pad<W: Write>(w: &mut W, written: u64) -> io::Result<u64> {
    let p = (ALIGNMENT - written % ALIGNMENT) % ALIGNMENT;
    w.write_all(&vec![0u8; p as usize])?;
    Ok(p)
}

/// Writes the tensor's data: generated on the fly, so 1 GB fixtures need no 1 GB buffer.
fn write_data<W: Write>(w: &mut W, t: &TensorSpec, rng: &mut Rng) -> io::Result<()> {
    const CHUNK: usize = 1 << 16;
    let n = t.n_elements();
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK * 4 + 64);
    match (t.ty, t.fill) {
        (TensorType::F32, fill) => {
            for _ in 0..n {
                let v = match fill {
                    Fill::Const(c) => c,
                    Fill::Random => ((rng.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1,
                };
                buf.extend_from_slice(&v.to_le_bytes());
                if buf.len() >= CHUNK * 4 {
                    w.write_all(&buf)?;
                    buf.clear();
                }
            }
        }
        (TensorType::F16, _) => {
            let mut left = n;
            while left > 0 {
                let r = rng.next();
                for k in 0..left.min(4) {
                    buf.extend_from_slice(&random_f16(r >> (16 * k)).to_le_bytes());
                }
                left -= left.min(4);
                if buf.len() >= CHUNK * 2 {
                    w.write_all(&buf)?;
                    buf.clear();
                }
            }
        }
        (TensorType::Q8_0, _) => {
            const D: u16 = 0x211F; // ~0.01 as f16
            for _ in 0..n / 32 {
                buf.extend_from_slice(&D.to_le_bytes());
                for _ in 0..4 {
                    let r = rng.next().to_le_bytes();
                    buf.extend(r.iter().map(|b| if *b == 0x80 { 0x81 } else { *b }));
                }
                if buf.len() >= CHUNK * 2 {
                    w.write_all(&buf)?;
                    buf.clear();
                }
            }
        }
    }
    w.write_all(&buf)
}

/// Writes a GGUF v3 file: metadata, tensor infos, aligned tensor data.
pub fn write(path: &Path, kvs: &[(String, GgufValue)], tensors: &[TensorSpec], seed: u64) -> io::Result<()> {
    let tmp = path.with_extension("gguf.partial");
    {
        let mut w = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
        let mut head: Vec<u8> = Vec::new();
        head.extend_from_slice(b"GGUF");
        head.extend_from_slice(&3u32.to_le_bytes());
        head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
        for (k, v) in kvs {
            write_value(&mut head, &GgufValue::str(k))?;
            head.extend_from_slice(&value_type(v).to_le_bytes());
            write_value(&mut head, v)?;
        }
        let mut offset = 0u64;
        for t in tensors {
            write_value(&mut head, &GgufValue::str(&t.name))?;
            head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                head.extend_from_slice(&d.to_le_bytes());
            }
            head.extend_from_slice(&(t.ty as u32).to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            offset += t.n_bytes();
            offset += (ALIGNMENT - offset % ALIGNMENT) % ALIGNMENT;
        }
        w.write_all(&head)?;
        if !tensors.is_empty() {
            pad(&mut w, head.len() as u64)?;
        }
        let mut rng = Rng::new(seed);
        for t in tensors {
            write_data(&mut w, t, &mut rng)?;
            pad(&mut w, t.n_bytes())?;
        }
        w.flush()?;
    }
    std::fs::rename(&tmp, path)
}
