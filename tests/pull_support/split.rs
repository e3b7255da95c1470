//! Splits a GGUF the way llama.cpp's `llama-gguf-split` does, so the split tests pull shards
//! llama.cpp really loads: the first shard keeps every key/value, every shard gets `split.no`
//! (u16), `split.count` (u16) and `split.tensors.count` (i32), and the tensors are dealt out in
//! order with their data re-based per shard.
#![allow(dead_code)]

use std::path::Path;

struct Rd<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Rd<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn skip_str(&mut self) {
        let n = self.u64() as usize;
        self.take(n);
    }
    fn skip_value(&mut self, t: u32) {
        match t {
            0 | 1 | 7 => drop(self.take(1)),
            2 | 3 => drop(self.take(2)),
            4..=6 => drop(self.take(4)),
            10..=12 => drop(self.take(8)),
            8 => self.skip_str(),
            9 => {
                let et = self.u32();
                let n = self.u64();
                for _ in 0..n {
                    self.skip_value(et);
                }
            }
            _ => panic!("GGUF value type {t}"),
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

fn pad(out: &mut Vec<u8>, align: usize) {
    while !out.len().is_multiple_of(align) {
        out.push(0);
    }
}

/// Splits `src` into `n` shards named `{prefix}-0000i-of-0000n.gguf`; returns (name, bytes).
// Over 60 lines: reads and writes the GGUF layout field by field, in file order.
pub fn split_gguf(src: &Path, n: usize, prefix: &str) -> Vec<(String, Vec<u8>)> {
    const ALIGN: usize = 32; // general.alignment of llb's fixtures
    let b = std::fs::read(src).unwrap();
    let mut r = Rd { b: &b, pos: 0 };
    assert_eq!(r.take(4), b"GGUF");
    let version = r.u32();
    let n_tensors = r.u64() as usize;
    let n_kv = r.u64();
    let kv_start = r.pos;
    for _ in 0..n_kv {
        r.skip_str();
        let t = r.u32();
        r.skip_value(t);
    }
    let kvs = b[kv_start..r.pos].to_vec();
    struct T {
        info: Vec<u8>, // name, n_dims, dims, type (offset excluded)
        offset: u64,
    }
    let mut ts = Vec::new();
    for _ in 0..n_tensors {
        let start = r.pos;
        r.skip_str();
        let nd = r.u32() as usize;
        r.take(8 * nd + 4);
        let info = b[start..r.pos].to_vec();
        ts.push(T { info, offset: r.u64() });
    }
    let data_start = r.pos.div_ceil(ALIGN) * ALIGN;
    let data_len = (b.len() - data_start) as u64;
    let mut ends: Vec<u64> = ts.iter().map(|t| t.offset).skip(1).collect();
    ends.push(data_len);
    let per = n_tensors.div_ceil(n);
    let mut out = Vec::new();
    for i in 0..n {
        let range = (i * per).min(n_tensors)..((i + 1) * per).min(n_tensors);
        let mut h = Vec::new();
        h.extend_from_slice(b"GGUF");
        h.extend_from_slice(&version.to_le_bytes());
        h.extend_from_slice(&(range.len() as u64).to_le_bytes());
        h.extend_from_slice(&(if i == 0 { n_kv + 3 } else { 3 }).to_le_bytes());
        if i == 0 {
            h.extend_from_slice(&kvs);
        }
        put_str(&mut h, b"split.no");
        h.extend_from_slice(&2u32.to_le_bytes());
        h.extend_from_slice(&(i as u16).to_le_bytes());
        put_str(&mut h, b"split.count");
        h.extend_from_slice(&2u32.to_le_bytes());
        h.extend_from_slice(&(n as u16).to_le_bytes());
        put_str(&mut h, b"split.tensors.count");
        h.extend_from_slice(&5u32.to_le_bytes());
        h.extend_from_slice(&(n_tensors as i32).to_le_bytes());
        let mut off = 0u64;
        for j in range.clone() {
            h.extend_from_slice(&ts[j].info);
            h.extend_from_slice(&off.to_le_bytes());
            off += ends[j] - ts[j].offset; // data plus its padding: keeps every offset aligned
        }
        pad(&mut h, ALIGN);
        for j in range {
            let (a, e) = (data_start + ts[j].offset as usize, data_start + ends[j] as usize);
            h.extend_from_slice(&b[a..e]);
        }
        out.push((format!("{prefix}-{:05}-of-{:05}.gguf", i + 1, n), h));
    }
    out
}
