//! Decode attention through a block table (`Tensor::sdpa_paged`) against a plain f64 reference:
//! several sequences of odd lengths (not multiples of the block size, one position, long enough for
//! split-K with empty splits for the short ones) in one pool through shuffled tables; GQA ratios 1,
//! 3, 4 and 7; head sizes 32..256 with `dv != d`; a strided query view; pools whose every unused slot
//! is NaN (a kernel reading a position past a sequence's length, or another sequence's block,
//! fails); GPU outputs poisoned. Also equal to `sdpa` over the gathered keys, NaN keys poison only
//! their rows, and bad input (block ids past the pool, zero or uncovered lengths, shapes, dtypes,
//! block sizes) gives errors naming the problem. `KvBlockPool::write_last` (the batched append)
//! stores each sequence's newest position exactly and touches nothing else. `sdpa_paged_with` (a soft
//! cap and a window) against `ref_sdpa_with_bounded` (attention.rs) over each sequence's window,
//! with every position before a window NaN in the pools.
//!
//! Tolerance per output element (`ref_paged`): each score's dot product error
//! `(d + 2) u sum|q k| |scale|`, exp's `(3 + 2|s - max|) u`, one rounding per key and per tile in the
//! sums, carried through the normalised weighted sum of `|v|` (twice the first-order terms), u of
//! f32 (every dtype accumulates in f32), then the rounding to the output dtype.

use crate::attention::ref_sdpa_with_bounded;
use crate::backend_tests;
use crate::bounds::*;
use crate::common::*;
use kiln::{BlockTable, DType, Device, Error, KvBlockPool, SdpaOptions, Tensor};
use rand::RngExt;

backend_tests!(
    paged_matches_reference,
    paged_options_match_reference,
    paged_equals_gathered_sdpa,
    paged_nan_keys_poison_their_rows,
    paged_refuses_bad_input,
    write_last_stores_each_newest_position
);

#[derive(Clone)]
struct Case {
    hq: usize,
    hkv: usize,
    d: usize,
    dv: usize,
    bs: usize,
    lens: Vec<usize>,
}

/// A pool of `blocks` with random values in the slots the sequences use and NaN everywhere else;
/// the tables hand out the blocks shuffled. Returns (k, v, tables, k data, v data).
#[allow(clippy::type_complexity)]
fn pool(c: &Case, dtype: DType, seed: u64, dev: &Device) -> (Tensor, Tensor, Vec<Vec<u32>>, Vec<f64>, Vec<f64>) {
    let need: usize = c.lens.iter().map(|n| n.div_ceil(c.bs) + 1).sum(); // one spare block each
    let blocks = need + 3; // and some never used
    let mut ids: Vec<u32> = (0..blocks as u32).collect();
    let mut r = rng(seed);
    for i in (1..ids.len()).rev() {
        let j = r.random_range(0..=i);
        ids.swap(i, j);
    }
    let mut tables = Vec::new();
    let mut next = 0;
    for n in &c.lens {
        let k = n.div_ceil(c.bs) + 1;
        tables.push(ids[next..next + k].to_vec());
        next += k;
    }
    let fill = |e: usize, seed: u64| {
        let vals = random_values(blocks * c.hkv * c.bs * e, dtype, seed);
        let mut data = vec![f64::NAN; vals.len()];
        for (t, &n) in tables.iter().zip(&c.lens) {
            for j in 0..n {
                for h in 0..c.hkv {
                    let at = ((t[j / c.bs] as usize * c.hkv + h) * c.bs + j % c.bs) * e;
                    data[at..at + e].copy_from_slice(&vals[at..at + e]);
                }
            }
        }
        // Values as the dtype stores them.
        let t = tensor(&data, &[blocks, c.hkv, c.bs, e], dtype, dev);
        let data = t.to_f64_vec().unwrap();
        (t, data)
    };
    let (k, kd) = fill(c.d, seed + 1);
    let (v, vd) = fill(c.dv, seed + 2);
    (k, v, tables, kd, vd)
}

/// The f64 reference `(b, hq, dv)` and its bound (module docs) for queries `q` `(b, hq, d)`.
fn ref_paged(c: &Case, q: &[f64], kd: &[f64], vd: &[f64], tables: &[Vec<u32>], dtype: DType) -> (Vec<f64>, Vec<f64>) {
    let u = acc_roundoff(dtype);
    let scale = 1.0 / (c.d as f64).sqrt();
    let (mut out, mut bound) = (Vec::new(), Vec::new());
    for (b, (t, &n)) in tables.iter().zip(&c.lens).enumerate() {
        for h in 0..c.hq {
            let hk = h / (c.hq / c.hkv);
            let row = |j: usize, e: usize| ((t[j / c.bs] as usize * c.hkv + hk) * c.bs + j % c.bs) * e;
            let qr = &q[(b * c.hq + h) * c.d..][..c.d];
            let mut s = Vec::new();
            let mut es = Vec::new();
            for j in 0..n {
                let kr = &kd[row(j, c.d)..][..c.d];
                s.push(qr.iter().zip(kr).map(|(a, b)| a * b).sum::<f64>() * scale);
                let abs = qr.iter().zip(kr).map(|(a, b)| (a * b).abs()).sum::<f64>() * scale;
                es.push((c.d as f64 + 2.0) * u * abs + flush_floor(dtype));
            }
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let sum: f64 = w.iter().sum();
            let dmax = es.iter().copied().fold(0.0, f64::max);
            let chain = (n as f64 + 4.0 * n.div_ceil(16) as f64 + 4.0) * u;
            for col in 0..c.dv {
                let (mut o, mut err) = (0.0, 0.0);
                for j in 0..n {
                    let x = vd[row(j, c.dv) + col];
                    o += w[j] * x;
                    let rel = es[j] + dmax + (3.0 + 2.0 * (s[j] - m).abs()) * u + chain;
                    err += 2.0 * w[j] / sum * x.abs() * rel;
                }
                out.push(o / sum);
                bound.push(stored_bound(dtype, o / sum, 2.0 * err + flush_floor(dtype)));
            }
        }
    }
    (out, bound)
}

fn cases() -> Vec<Case> {
    vec![
        Case { hq: 4, hkv: 4, d: 64, dv: 64, bs: 16, lens: vec![1, 17, 40] },
        Case { hq: 8, hkv: 2, d: 128, dv: 128, bs: 16, lens: vec![33, 700, 5, 64] },
        Case { hq: 6, hkv: 2, d: 80, dv: 80, bs: 5, lens: vec![23, 2, 301] },
        Case { hq: 7, hkv: 1, d: 32, dv: 48, bs: 3, lens: vec![10, 129] },
        Case { hq: 2, hkv: 1, d: 256, dv: 256, bs: 8, lens: vec![1, 9] },
        Case { hq: 4, hkv: 2, d: 6, dv: 5, bs: 4, lens: vec![7, 3] },
    ]
}

fn paged_matches_reference(dev: &Device) {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (ci, c) in cases().iter().enumerate() {
            let seed = 100 * ci as u64;
            let (k, v, tables, kd, vd) = pool(c, dtype, seed, dev);
            let b = c.lens.len();
            // Queries as a strided view: stored (hq, b, d), viewed (b, hq, 1, d).
            let qv = random_values(b * c.hq * c.d, dtype, seed + 3);
            let q = tensor(&qv, &[c.hq, b, 1, c.d], dtype, dev).permute(&[1, 0, 2, 3]).unwrap();
            let qd = q.contiguous().unwrap().to_f64_vec().unwrap();
            let refs: Vec<&[u32]> = tables.iter().map(|t| t.as_slice()).collect();
            let table = BlockTable::new(&refs, &c.lens, c.bs, dev).unwrap();
            let out = q.sdpa_paged(&k, &v, &table, None).unwrap();
            assert_eq!(out.dims(), &[b, c.hq, 1, c.dv]);
            assert_eq!(out.dtype(), dtype);
            let (want, bound) = ref_paged(c, &qd, &kd, &vd, &tables, dtype);
            if c.lens.iter().any(|&n| n > c.bs) {
                // The bound catches a kernel that skipped the last block of each table (a dropped
                // block), zeros and a shifted result.
                let short =
                    Case { lens: c.lens.iter().map(|&n| if n > c.bs { n - c.bs } else { n }).collect(), ..c.clone() };
                let (dropped, _) = ref_paged(&short, &qd, &kd, &vd, &tables, dtype);
                assert_catches_wrong(&want, &bound, &dropped, &format!("{dtype} case {ci} control"));
            }
            let got = out.to_f64_vec().unwrap();
            if let Err(e) = check_bounded(&got, &want, &bound) {
                panic!(
                    "{dev} {dtype} case {ci} (hq {} hkv {} d {} dv {} bs {} lens {:?}): {e}",
                    c.hq, c.hkv, c.d, c.dv, c.bs, c.lens
                );
            }
        }
    }
}

/// A soft cap and a window of 20 (`sdpa_paged_with`) against the f64 reference over each sequence's
/// gathered keys: positions before a sequence's window hold NaN in the pools, so a kernel that reads
/// one (a window ignored, or off by one) gives a NaN row; the plain result fails the bound too.
fn paged_options_match_reference(dev: &Device) {
    let opts = SdpaOptions { causal: true, scale: None, softcap: Some(2.0), window: Some(20) };
    let w = 20;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (ci, c) in cases().iter().enumerate() {
            let seed = 100 * ci as u64 + 50;
            let (_, _, tables, mut kd, mut vd) = pool(c, dtype, seed, dev);
            let at =
                |t: &[u32], j: usize, h: usize, e: usize| ((t[j / c.bs] as usize * c.hkv + h) * c.bs + j % c.bs) * e;
            for (t, &n) in tables.iter().zip(&c.lens) {
                for j in 0..n.saturating_sub(w) {
                    for h in 0..c.hkv {
                        kd[at(t, j, h, c.d)..][..c.d].fill(f64::NAN);
                        vd[at(t, j, h, c.dv)..][..c.dv].fill(f64::NAN);
                    }
                }
            }
            let blocks = kd.len() / (c.hkv * c.bs * c.d);
            let k = tensor(&kd, &[blocks, c.hkv, c.bs, c.d], dtype, dev);
            let v = tensor(&vd, &[blocks, c.hkv, c.bs, c.dv], dtype, dev);
            let b = c.lens.len();
            let q = tensor(&random_values(b * c.hq * c.d, dtype, seed + 3), &[b, c.hq, 1, c.d], dtype, dev);
            let qd = q.to_f64_vec().unwrap();
            let refs: Vec<&[u32]> = tables.iter().map(|t| t.as_slice()).collect();
            let table = BlockTable::new(&refs, &c.lens, c.bs, dev).unwrap();
            let (mut want, mut bound) = (Vec::new(), Vec::new());
            for (s, (t, &n)) in tables.iter().zip(&c.lens).enumerate() {
                let rows = |data: &[f64], e: usize| {
                    let flat = (0..c.hkv).flat_map(|h| (0..n).flat_map(move |j| (0..e).map(move |x| (h, j, x))));
                    RefArray::new(vec![1, c.hkv, n, e], flat.map(|(h, j, x)| data[at(t, j, h, e) + x]).collect())
                };
                let qs = RefArray::new(vec![1, c.hq, 1, c.d], qd[s * c.hq * c.d..(s + 1) * c.hq * c.d].to_vec());
                let (wv, bv) = ref_sdpa_with_bounded(&qs, &rows(&kd, c.d), &rows(&vd, c.dv), opts, dtype);
                want.extend(wv.data);
                bound.extend(bv.data);
            }
            let ctx = format!("{dev} {dtype} case {ci} (lens {:?}) softcap 2 window {w}", c.lens);
            let got = q.sdpa_paged_with(&k, &v, &table, opts).unwrap().to_f64_vec().unwrap();
            check_bounded(&got, &want, &bound).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let plain = q.sdpa_paged(&k, &v, &table, None).unwrap().to_f64_vec().unwrap();
            assert!(check_bounded(&plain, &want, &bound).is_err(), "{ctx}: the plain result passes");
        }
    }
}

/// The same answer as `sdpa` over `KvBlockPool::gather`'s contiguous copy (the path it replaces).
fn paged_equals_gathered_sdpa(dev: &Device) {
    let (hkv, hq, d, bs) = (2, 8, 64, 16);
    let pool = KvBlockPool::new(12, hkv, bs, d, d, DType::F32, dev).unwrap();
    let tables = [vec![3u32, 9, 0], vec![11, 1, 6, 4]];
    let lens = [37usize, 50];
    for (s, t) in tables.iter().enumerate() {
        let k = rand_tensor(&[1, hkv, lens[s], d], DType::F32, 10 + s as u64, dev);
        let v = rand_tensor(&[1, hkv, lens[s], d], DType::F32, 20 + s as u64, dev);
        pool.write(t, 0, &k, &v).unwrap();
    }
    let q = rand_tensor(&[2, hq, 1, d], DType::F32, 30, dev);
    let table = BlockTable::new(&[&tables[0], &tables[1]], &lens, bs, dev).unwrap();
    let (kp, vp) = pool.tensors();
    let got = q.sdpa_paged(kp, vp, &table, None).unwrap().to_f64_vec().unwrap();
    for s in 0..2 {
        let (k, v) = pool.gather(&tables[s], lens[s]).unwrap();
        let want = q.narrow(0, s, 1).unwrap().sdpa(&k, &v, true, None).unwrap().to_f64_vec().unwrap();
        let part = &got[s * hq * d..(s + 1) * hq * d];
        let worst = part.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(worst < 1e-5, "{dev}: sequence {s} differs from gathered sdpa by {worst}");
    }
}

/// A NaN in one used key makes the rows of the query heads reading it NaN, and nothing else.
fn paged_nan_keys_poison_their_rows(dev: &Device) {
    let c = Case { hq: 4, hkv: 2, d: 64, dv: 64, bs: 8, lens: vec![20, 300] };
    let (_, v, tables, mut kd, _) = pool(&c, DType::F32, 7, dev);
    let hit = ((tables[1][250 / c.bs] as usize * c.hkv + 1) * c.bs + 250 % c.bs) * c.d + 3;
    kd[hit] = f64::NAN;
    let k = tensor(&kd, &[kd.len() / (c.hkv * c.bs * c.d), c.hkv, c.bs, c.d], DType::F32, dev);
    let q = rand_tensor(&[2, c.hq, 1, c.d], DType::F32, 8, dev);
    let table = BlockTable::new(&[&tables[0], &tables[1]], &c.lens, c.bs, dev).unwrap();
    let got = q.sdpa_paged(&k, &v, &table, None).unwrap().to_f64_vec().unwrap();
    for (r, row) in got.chunks(c.dv).enumerate() {
        // Sequence 1, heads 2 and 3 (kv head 1) read the NaN key.
        let poisoned = r == c.hq + 2 || r == c.hq + 3;
        assert_eq!(row.iter().all(|x| x.is_nan()), poisoned, "{dev} row {r}: {:?}", &row[..4]);
        assert!(poisoned || row.iter().all(|x| x.is_finite()), "{dev} row {r}");
    }
}

fn paged_refuses_bad_input(dev: &Device) {
    let (hkv, bs, d) = (2, 4, 8);
    let k = Tensor::zeros((6, hkv, bs, d), DType::F32, dev).unwrap();
    let v = Tensor::zeros((6, hkv, bs, d), DType::F32, dev).unwrap();
    let q = Tensor::zeros((2, 4, 1, d), DType::F32, dev).unwrap();
    let ok = BlockTable::new(&[&[0, 1], &[2]], &[5, 3], bs, dev).unwrap();
    assert!(q.sdpa_paged(&k, &v, &ok, None).is_ok());
    let msg = |r: kiln::Result<Tensor>| r.err().map(|e| e.to_string()).unwrap_or_default();
    // Block ids past the pool: an error, not a read out of bounds.
    let far = BlockTable::new(&[&[0, 6], &[2]], &[5, 3], bs, dev).unwrap();
    let e = q.sdpa_paged(&k, &v, &far, None).unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }) && e.to_string().contains("block 6"), "{e}");
    // Lengths: zero, or more than the table's blocks hold.
    assert!(BlockTable::new(&[&[0], &[2]], &[0, 3], bs, dev).unwrap_err().to_string().contains("length 0"));
    assert!(BlockTable::new(&[&[0], &[2]], &[5, 3], bs, dev).unwrap_err().to_string().contains("5 positions"));
    assert!(BlockTable::new(&[&[0]], &[1, 1], bs, dev).is_err());
    assert!(BlockTable::new(&[], &[], bs, dev).is_err());
    assert!(BlockTable::new(&[&[0]], &[1], 0, dev).is_err());
    // A table of another block size or batch.
    let other = BlockTable::new(&[&[0, 1], &[2]], &[5, 3], 8, dev).unwrap();
    assert!(msg(q.sdpa_paged(&k, &v, &other, None)).contains("blocks of 4"));
    let one = BlockTable::new(&[&[0, 1]], &[5], bs, dev).unwrap();
    assert!(msg(q.sdpa_paged(&k, &v, &one, None)).contains("2 queries"));
    // Shapes: two queries per sequence, GQA ratio, head sizes, pools that differ.
    let q2 = Tensor::zeros((2, 4, 2, d), DType::F32, dev).unwrap();
    assert!(msg(q2.sdpa_paged(&k, &v, &ok, None)).contains("(b, hq, 1, d)"));
    let q3 = Tensor::zeros((2, 3, 1, d), DType::F32, dev).unwrap();
    assert!(msg(q3.sdpa_paged(&k, &v, &ok, None)).contains("multiple"));
    let q4 = Tensor::zeros((2, 4, 1, d + 1), DType::F32, dev).unwrap();
    assert!(msg(q4.sdpa_paged(&k, &v, &ok, None)).contains("head size"));
    let v5 = Tensor::zeros((5, hkv, bs, d), DType::F32, dev).unwrap();
    assert!(msg(q.sdpa_paged(&k, &v5, &ok, None)).contains("differ"));
    // Dtypes: mixed, or not a float.
    let qh = Tensor::zeros((2, 4, 1, d), DType::F16, dev).unwrap();
    assert!(q.sdpa_paged(&k, &v, &ok, None).is_ok() && qh.sdpa_paged(&k, &v, &ok, None).is_err());
    let qi = Tensor::zeros((2, 4, 1, d), DType::I32, dev).unwrap();
    assert!(msg(qi.sdpa_paged(&k, &v, &ok, None)).contains("f32, f16 or bf16"));
    // A pool view that is not contiguous, and a bad scale.
    let kt = Tensor::zeros((6, hkv, d, bs), DType::F32, dev).unwrap().transpose(2, 3).unwrap();
    assert!(msg(q.sdpa_paged(&kt, &v, &ok, None)).contains("contiguous"));
    assert!(msg(q.sdpa_paged(&k, &v, &ok, Some(f64::NAN))).contains("scale"));
}

/// Each sequence's row lands in the slot of its last position (through its table) and every other
/// element of the pool keeps its value; rows of odd length in 16-bit dtypes take the per-sequence
/// copies. Bad input is refused before anything is written.
fn write_last_stores_each_newest_position(dev: &Device) {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (h, d, dv, bs) in [(2, 8, 6, 4), (3, 5, 7, 3)] {
            let blocks = 9;
            let pool = KvBlockPool::new(blocks, h, bs, d, dv, dtype, dev).unwrap();
            let (kp, vp) = pool.tensors();
            // Known contents everywhere first.
            let k0 = random_values(blocks * h * bs * d, dtype, 1);
            let v0 = random_values(blocks * h * bs * dv, dtype, 2);
            let kt = tensor(&k0, &[blocks, h, bs, d], dtype, dev);
            let vt = tensor(&v0, &[blocks, h, bs, dv], dtype, dev);
            for s in 0..blocks {
                let t = [s as u32];
                let k = kt.narrow(0, s, 1).unwrap();
                let v = vt.narrow(0, s, 1).unwrap();
                pool.write(&t, 0, &k, &v).unwrap();
            }
            let (k0, v0) = (kp.to_f64_vec().unwrap(), vp.to_f64_vec().unwrap());
            let tables: [&[u32]; 3] = [&[4, 1], &[7], &[0, 8, 2]];
            let lens = [6usize.min(2 * bs), 1, 2 * bs + 1];
            let table = BlockTable::new(&tables, &lens, bs, dev).unwrap();
            // Rows as strided views: stored (h, b, 1, e).
            let kn = random_values(3 * h * d, dtype, 3);
            let vn = random_values(3 * h * dv, dtype, 4);
            let k = tensor(&kn, &[h, 3, 1, d], dtype, dev).permute(&[1, 0, 2, 3]).unwrap();
            let v = tensor(&vn, &[h, 3, 1, dv], dtype, dev).permute(&[1, 0, 2, 3]).unwrap();
            pool.write_last(&table, &k, &v).unwrap();
            let (mut kw, mut vw) = (k0.clone(), v0.clone());
            let (kq, vq) =
                (k.contiguous().unwrap().to_f64_vec().unwrap(), v.contiguous().unwrap().to_f64_vec().unwrap());
            for (b, (t, &n)) in tables.iter().zip(&lens).enumerate() {
                let j = n - 1;
                for hh in 0..h {
                    let slot = (t[j / bs] as usize * h + hh) * bs + j % bs;
                    kw[slot * d..(slot + 1) * d].copy_from_slice(&kq[(b * h + hh) * d..][..d]);
                    vw[slot * dv..(slot + 1) * dv].copy_from_slice(&vq[(b * h + hh) * dv..][..dv]);
                }
            }
            assert_eq!(kp.to_f64_vec().unwrap(), kw, "{dev} {dtype} h {h} d {d}: keys");
            assert_eq!(vp.to_f64_vec().unwrap(), vw, "{dev} {dtype} h {h} dv {dv}: values");
            // Refused: a table of another block size or past the pool, rows of other shapes or dtype.
            let other = BlockTable::new(&tables, &lens, bs + 1, dev).unwrap();
            assert!(pool.write_last(&other, &k, &v).unwrap_err().to_string().contains("blocks of"));
            let far = BlockTable::new(&[&[9], &[7], &[0]], &[1, 1, 1], bs, dev).unwrap();
            assert!(pool.write_last(&far, &k, &v).unwrap_err().to_string().contains("block 9"));
            let two = k.narrow(0, 0, 2).unwrap();
            assert!(pool.write_last(&table, &two, &v).unwrap_err().to_string().contains("(b, h, 1, d)"));
            let wrong = if dtype == DType::F32 { DType::F16 } else { DType::F32 };
            assert!(pool.write_last(&table, &k.to_dtype(wrong).unwrap(), &v).is_err());
            assert_eq!(kp.to_f64_vec().unwrap(), kw, "{dev} {dtype}: a refused write changed the pool");
        }
    }
}
