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
    pub fn next_u64(&mut self) -> u64 {
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
                    Fill::Random => ((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1,
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
                let r = rng.next_u64();
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
                    let r = rng.next_u64().to_le_bytes();
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

// ---- header inspection -----------------------------------------------------------------------

/// What `llb_model_info` needs from a GGUF header, read without materialising the token arrays.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader {
    pub version: u32,
    pub architecture: Option<String>,
    pub name: Option<String>,
    pub n_ctx_train: Option<i64>,
    pub n_params: u64,
    pub n_tensors: u64,
    pub chat_template: Option<String>,
    pub tool_use_template: Option<String>,
    pub bos_text: Option<String>,
    pub eos_text: Option<String>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub tokenizer_model: Option<String>,
    pub n_vocab: u64,
    /// Where tensor data starts and the bytes the tensors need after it.
    pub data_offset: u64,
    pub data_size: u64,
    /// Attention shape (`{arch}.block_count`, `.embedding_length`, `.attention.head_count`,
    /// `.attention.head_count_kv`, `.attention.key_length`, `.attention.value_length`), for the
    /// KV cache estimate; absent or per-layer arrays are None.
    pub attention: [Option<i64>; 6],
}

/// Why a header could not be read.
#[derive(Debug)]
pub enum HeaderError {
    Io(io::Error),
    /// Not a GGUF, or a malformed one; the message says what is wrong.
    Invalid(String),
}

enum Need {
    Io(io::Error),
    Bad(String),
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, Need> {
    Err(Need::Bad(msg.into()))
}

/// A bounds-checked, single-pass reader over the start of a file: it reads further on demand,
/// so only the header's bytes are ever read, and hands out offsets into its buffer.
struct Cursor<'f> {
    f: Option<&'f mut File>,
    buf: Vec<u8>,
    pos: usize,
    file_size: u64,
}

impl Cursor<'_> {
    fn ensure(&mut self, end: usize) -> Result<(), Need> {
        if end <= self.buf.len() {
            return Ok(());
        }
        if end as u64 > self.file_size {
            return Err(Need::Bad("truncated header".into()));
        }
        let f = self.f.as_mut().ok_or_else(|| Need::Bad("truncated header".into()))?;
        // Grow geometrically (at least 256 KiB) so a 6 MB header costs a handful of reads.
        let target = (end as u64).max(self.buf.len() as u64 * 2).max(1 << 18).min(self.file_size);
        let have = self.buf.len() as u64;
        f.take(target - have).read_to_end(&mut self.buf).map_err(Need::Io)?;
        if end > self.buf.len() {
            return Err(Need::Bad("truncated header".into()));
        }
        Ok(())
    }
    /// Advances over `n` bytes, returning where they start.
    fn take(&mut self, n: u64) -> Result<usize, Need> {
        let n = usize::try_from(n).map_err(|_| Need::Bad("length overflows".into()))?;
        let end = self.pos.checked_add(n).ok_or_else(|| Need::Bad("length overflows".into()))?;
        self.ensure(end)?;
        let at = self.pos;
        self.pos = end;
        Ok(at)
    }
    fn bytes(&mut self, n: u64) -> Result<&[u8], Need> {
        let at = self.take(n)?;
        Ok(&self.buf[at..self.pos])
    }
    fn u32(&mut self) -> Result<u32, Need> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, Need> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().unwrap()))
    }
    /// A length-prefixed string: (start, len).
    fn str(&mut self) -> Result<(usize, usize), Need> {
        let n = self.u64()?;
        let at = self.take(n)?;
        Ok((at, n as usize))
    }
}

/// Where a key's value sits, for the few keys read after the first pass.
#[derive(Clone, Copy)]
enum Loc {
    Scalar(u32, usize),
    Str(usize, usize),
    /// element type, count, offset of the first element
    Array(u32, u64, usize),
}

const GGML_MAX_DIMS: u32 = 4;

fn ggml_type_layout(t: u32) -> Option<(u64, u64)> {
    // SAFETY: ggml_type_size/ggml_blck_size read a static table; t is checked against the count.
    unsafe {
        if t >= crate::sys::GGML_TYPE_COUNT {
            return None;
        }
        let size = crate::sys::ggml_type_size(t) as u64;
        let blck = crate::sys::ggml_blck_size(t) as u64;
        (size > 0 && blck > 0).then_some((size, blck))
    }
}

/// The header, read in the file's own order (magic, counts, keys, tensor infos) and checked as it
/// goes.
// Over 60 lines: half is the GgufHeader literal, one field per line; the checks above it run in
// the file's order and share one cursor.
fn parse_header(f: &mut File, file_size: u64) -> Result<GgufHeader, Need> {
    let mut c = Cursor { f: Some(f), buf: Vec::new(), pos: 0, file_size };
    if c.bytes(4)? != b"GGUF" {
        return invalid("not a GGUF file (bad magic)");
    }
    let version = c.u32()?;
    if !(2..=3).contains(&version) {
        return invalid(format!("unsupported GGUF version {version}"));
    }
    let n_tensors = c.u64()?;
    let n_kv = c.u64()?;
    // Every KV takes at least 12 bytes and every tensor info at least 24: larger counts lie.
    if n_kv > file_size / 12 || n_tensors > file_size / 24 {
        return invalid(format!("implausible counts: {n_kv} keys, {n_tensors} tensors in {file_size} bytes"));
    }
    let keys = read_kvs(&mut c, n_kv)?;
    let alignment = match keys.get(b"general.alignment".as_slice()) {
        None => ALIGNMENT,
        Some(Loc::Scalar(ty::U32, at)) => {
            let a = u32::from_le_bytes(c.buf[*at..at + 4].try_into().unwrap()) as u64;
            if !a.is_power_of_two() {
                return invalid("general.alignment is not a power of two");
            }
            a
        }
        Some(_) => return invalid("general.alignment is not a u32"),
    };
    let (n_params, data_size) = read_tensor_infos(&mut c, n_tensors, alignment)?;
    let data_offset = (c.pos as u64).div_ceil(alignment) * alignment;
    if n_tensors > 0 && file_size < data_offset + data_size {
        return invalid(format!(
            "truncated: its tensors need {} bytes, the file has {file_size}",
            data_offset + data_size
        ));
    }

    let kv = Kvs { keys: &keys, b: &c.buf };
    // Tokenizer facts: special-token ids as llama_vocab::load sets them, their text as
    // common_token_to_piece(vocab, id, special=true) renders it.
    let model = kv.str("tokenizer.ggml.model").unwrap_or_default();
    let pre = kv.str("tokenizer.ggml.pre").unwrap_or_default();
    let n_vocab = kv.tokens().map_or(0, |t| t.0);
    let (mut bos, mut eos) = default_special_ids(&model, &pre);
    for (key, slot) in [("tokenizer.ggml.bos_token_id", &mut bos), ("tokenizer.ggml.eos_token_id", &mut eos)] {
        if let Some(v) = kv.int(key).filter(|v| *v >= 0 && (*v as u64) < n_vocab) {
            *slot = Some(v as u64);
        }
    }
    let architecture = kv.str("general.architecture");
    let arch_int = |k: &str| architecture.as_ref().and_then(|a| kv.int(&format!("{a}.{k}")));
    Ok(GgufHeader {
        version,
        n_ctx_train: arch_int("context_length"),
        architecture: architecture.clone(),
        name: kv.str("general.name"),
        n_params,
        n_tensors,
        chat_template: kv.str("tokenizer.chat_template"),
        tool_use_template: kv.str("tokenizer.chat_template.tool_use"),
        bos_text: kv.token_text(bos, &model),
        eos_text: kv.token_text(eos, &model),
        add_bos: kv.bool("tokenizer.ggml.add_bos_token").unwrap_or(model == "llama" || model == "bert"),
        add_eos: kv.bool("tokenizer.ggml.add_eos_token").unwrap_or(model == "t5"),
        tokenizer_model: (!model.is_empty()).then_some(model),
        n_vocab,
        data_offset,
        data_size,
        attention: [
            "block_count",
            "embedding_length",
            "attention.head_count",
            "attention.head_count_kv",
            "attention.key_length",
            "attention.value_length",
        ]
        .map(arch_int),
    })
}

/// The key/value section: where each key's value stands in the buffer (bounds-checked, not
/// decoded). Refuses what llama.cpp's reader would abort on.
fn read_kvs(c: &mut Cursor, n_kv: u64) -> Result<std::collections::HashMap<Vec<u8>, Loc>, Need> {
    let mut keys = std::collections::HashMap::new();
    for _ in 0..n_kv {
        let (ka, kn) = c.str()?;
        if kn == 0 {
            // llama.cpp's reader asserts on an empty key (GGML_ASSERT in gguf_kv): an abort.
            return invalid("empty key");
        }
        let key = c.buf[ka..ka + kn].to_vec();
        let t = c.u32()?;
        let loc = read_value(c, t)?;
        if keys.insert(key, loc).is_some() {
            return invalid(format!("duplicate key {}", String::from_utf8_lossy(&c.buf[ka..ka + kn])));
        }
    }
    Ok(keys)
}

/// Skips over one value of type `t`, returning where it stands.
fn read_value(c: &mut Cursor, t: u32) -> Result<Loc, Need> {
    if let Some(n) = scalar_size(t) {
        let at = c.pos;
        c.take(n as u64)?;
        return Ok(Loc::Scalar(t, at));
    }
    if t == ty::STRING {
        let (at, n) = c.str()?;
        return Ok(Loc::Str(at, n));
    }
    if t != ty::ARRAY {
        return invalid(format!("unknown value type {t}"));
    }
    let et = c.u32()?;
    let n = c.u64()?;
    let at = c.pos;
    if let Some(sz) = scalar_size(et) {
        c.take(n.checked_mul(sz as u64).ok_or_else(|| Need::Bad("array size overflows".into()))?)?;
    } else if et == ty::STRING {
        if n > c.file_size / 8 {
            return invalid("string array longer than the file");
        }
        for _ in 0..n {
            c.str()?;
        }
    } else {
        return invalid(format!("unsupported array element type {et}"));
    }
    Ok(Loc::Array(et, n, at))
}

/// The tensor infos, each checked as llama.cpp's reader needs (it divides by dimensions and
/// trusts the sizes): the parameter count and the size of the data section.
fn read_tensor_infos(c: &mut Cursor, n_tensors: u64, alignment: u64) -> Result<(u64, u64), Need> {
    let mut n_params = 0u64;
    let mut data_size = 0u64;
    let mut names = std::collections::HashSet::new();
    for _ in 0..n_tensors {
        let (na, nn) = c.str()?;
        if !names.insert(c.buf[na..na + nn].to_vec()) {
            return invalid(format!("duplicate tensor {}", String::from_utf8_lossy(&c.buf[na..na + nn])));
        }
        let n_dims = c.u32()?;
        if n_dims == 0 || n_dims > GGML_MAX_DIMS {
            return invalid(format!("tensor with {n_dims} dimensions"));
        }
        let mut ne = [1u64; 4];
        for d in ne.iter_mut().take(n_dims as usize) {
            *d = c.u64()?;
            if *d > i64::MAX as u64 {
                return invalid("negative tensor dimension");
            }
            if *d == 0 {
                // llama.cpp's reader divides by dimensions 1-3 in its overflow check: SIGFPE.
                return invalid(format!(
                    "tensor {} has a zero dimension",
                    String::from_utf8_lossy(&c.buf[na..na + nn])
                ));
            }
        }
        let t = c.u32()?;
        let offset = c.u64()?;
        let (tsize, blck) = ggml_type_layout(t).ok_or_else(|| Need::Bad(format!("invalid tensor type {t}")))?;
        if ne[0] % blck != 0 {
            return invalid("tensor row is not a whole number of blocks");
        }
        if offset % alignment != 0 {
            return invalid("tensor offset is not aligned");
        }
        let elems = ne
            .iter()
            .try_fold(1u64, |a, d| a.checked_mul(*d))
            .ok_or_else(|| Need::Bad("tensor size overflows".into()))?;
        let bytes = (elems / blck).checked_mul(tsize).ok_or_else(|| Need::Bad("tensor size overflows".into()))?;
        n_params = n_params.saturating_add(elems);
        let end = offset.checked_add(bytes).ok_or_else(|| Need::Bad("tensor offset overflows".into()))?;
        data_size = data_size.max(end);
    }
    Ok((n_params, data_size))
}

/// Typed reads of the located keys (`read_kvs`) out of the header buffer `b`.
struct Kvs<'a> {
    keys: &'a std::collections::HashMap<Vec<u8>, Loc>,
    b: &'a [u8],
}

impl Kvs<'_> {
    fn str(&self, k: &str) -> Option<String> {
        match self.keys.get(k.as_bytes()) {
            Some(Loc::Str(at, n)) => Some(String::from_utf8_lossy(&self.b[*at..at + n]).into_owned()),
            _ => None,
        }
    }

    /// Any integer type, as an i64.
    fn int(&self, k: &str) -> Option<i64> {
        let Some(Loc::Scalar(t, at)) = self.keys.get(k.as_bytes()) else { return None };
        let s = &self.b[*at..];
        Some(match *t {
            ty::U8 => s[0] as i64,
            ty::I8 => s[0] as i8 as i64,
            ty::U16 => u16::from_le_bytes([s[0], s[1]]) as i64,
            ty::I16 => i16::from_le_bytes([s[0], s[1]]) as i64,
            ty::U32 => u32::from_le_bytes(s[..4].try_into().unwrap()) as i64,
            ty::I32 => i32::from_le_bytes(s[..4].try_into().unwrap()) as i64,
            ty::U64 => u64::from_le_bytes(s[..8].try_into().unwrap()) as i64,
            ty::I64 => i64::from_le_bytes(s[..8].try_into().unwrap()),
            _ => return None,
        })
    }

    fn bool(&self, k: &str) -> Option<bool> {
        match self.keys.get(k.as_bytes()) {
            Some(Loc::Scalar(ty::BOOL, at)) => Some(self.b[*at] != 0),
            _ => None,
        }
    }

    /// `tokenizer.ggml.tokens`: (count, offset of the first string).
    fn tokens(&self) -> Option<(u64, usize)> {
        match self.keys.get(b"tokenizer.ggml.tokens".as_slice()) {
            Some(Loc::Array(ty::STRING, n, at)) => Some((*n, *at)),
            _ => None,
        }
    }

    /// Token `id`'s type (llama.cpp's default: normal).
    fn token_type(&self, id: u64) -> i32 {
        match self.keys.get(b"tokenizer.ggml.token_type".as_slice()) {
            Some(Loc::Array(ty::I32, n, at)) if id < *n => {
                let o = at + 4 * id as usize;
                i32::from_le_bytes(self.b[o..o + 4].try_into().unwrap())
            }
            _ => 1,
        }
    }

    /// Token `id`'s text as the tokenizer `model` renders it with specials shown.
    fn token_text(&self, id: Option<u64>, model: &str) -> Option<String> {
        let (n, at) = self.tokens()?;
        let id = id.filter(|i| *i < n)?;
        // The array was bounds-checked by read_value.
        let mut pos = at;
        let mut next = || {
            let n = u64::from_le_bytes(self.b[pos..pos + 8].try_into().unwrap()) as usize;
            let s = &self.b[pos + 8..pos + 8 + n];
            pos += 8 + n;
            s
        };
        for _ in 0..id {
            next();
        }
        Some(token_piece(next(), self.token_type(id), model))
    }
}

/// Default special-token ids per tokenizer model, as llama_vocab::load sets them before reading
/// `tokenizer.ggml.{bos,eos}_token_id`.
fn default_special_ids(model: &str, pre: &str) -> (Option<u64>, Option<u64>) {
    let (bos, eos) = match model {
        "llama" | "plamo2" => (Some(1), Some(2)),
        "bert" => (Some(101), None),
        "gpt2" | "hybriddna" | "whitespace" => (Some(11), Some(11)),
        "t5" => (None, Some(1)),
        _ => (None, None),
    };
    if pre == "glm4" || pre == "chatglm-bpe" {
        return (None, eos);
    }
    (bos, eos)
}

/// A token's text as llama.cpp's token_to_piece renders it with special=true.
fn token_piece(raw: &[u8], token_type: i32, model: &str) -> String {
    const NORMAL: i32 = 1;
    const BYTE: i32 = 6;
    let text = String::from_utf8_lossy(raw);
    match token_type {
        NORMAL if model == "gpt2" => byte_level_decode(&text),
        NORMAL => text.replace('\u{2581}', " "),
        BYTE if raw.len() == 6 && raw.starts_with(b"<0x") => u8::from_str_radix(&text[3..5], 16)
            .map(|b| String::from_utf8_lossy(&[b]).into_owned())
            .unwrap_or_else(|_| text.into_owned()),
        _ => text.into_owned(),
    }
}

/// GPT-2 byte-level BPE: printable code points stand for raw bytes (bytes_to_unicode).
fn byte_level_decode(text: &str) -> String {
    let mut cp_to_byte = [None::<u8>; 324];
    let mut n = 0;
    for b in 0..=255u8 {
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        if printable {
            cp_to_byte[b as usize] = Some(b);
        } else {
            cp_to_byte[256 + n] = Some(b);
            n += 1;
        }
    }
    let mut out = Vec::new();
    for ch in text.chars() {
        match cp_to_byte.get(ch as usize).copied().flatten() {
            Some(b) => out.push(b),
            None => out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads and checks a GGUF header, reading only as much of the file as the header spans.
pub fn read_header(path: &Path) -> Result<GgufHeader, HeaderError> {
    let mut f = File::open(path).map_err(HeaderError::Io)?;
    let file_size = f.metadata().map_err(HeaderError::Io)?.len();
    parse_header(&mut f, file_size).map_err(|e| match e {
        Need::Io(e) => HeaderError::Io(e),
        Need::Bad(m) => HeaderError::Invalid(m),
    })
}
