//! What the sampling parameters mean, checked on chosen logits: greedy picks the argmax (the first of
//! ties), temperature reshapes the distribution (frequencies over many seeded draws match
//! softmax(logits / T) within 5 standard deviations), top-k, top-p and min-p restrict it to the
//! tokens they name and renormalise, the repeat penalty divides positive and multiplies negative logits of tokens
//! in the last `repeat_last_n`, and a seed reproduces a sequence.
mod common;

use kiln::{Device, Tensor};
use kiln_llm::{Sampler, SamplingParams};

fn logits(v: &[f32], dev: &Device) -> Tensor {
    Tensor::from_vec(v.to_vec(), (1, v.len()), dev).unwrap()
}

fn params(temperature: f64, top_k: Option<usize>, top_p: Option<f64>) -> SamplingParams {
    SamplingParams { temperature, top_k, top_p, ..Default::default() }
}

/// Frequencies of each token over `n` draws.
fn frequencies(p: SamplingParams, l: &[f32], n: usize, seed: u64) -> Vec<f64> {
    let dev = Device::cpu();
    let t = logits(l, &dev);
    let mut s = Sampler::new(p, seed).unwrap();
    let mut counts = vec![0usize; l.len()];
    for _ in 0..n {
        counts[s.sample(&t, &[]).unwrap() as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / n as f64).collect()
}

/// `softmax(l / t)` over the tokens in `keep` (zero elsewhere), in f64.
fn expected(l: &[f32], t: f64, keep: &[usize]) -> Vec<f64> {
    let max = keep.iter().map(|&i| l[i] as f64).fold(f64::NEG_INFINITY, f64::max);
    let mut p = vec![0.0; l.len()];
    for &i in keep {
        p[i] = ((l[i] as f64 - max) / t).exp();
    }
    let s: f64 = p.iter().sum();
    p.iter().map(|x| x / s).collect()
}

/// Each frequency within 5 binomial standard deviations of its probability (and exactly 0 where
/// the probability is 0).
fn assert_matches(freq: &[f64], want: &[f64], n: usize, ctx: &str) {
    for (i, (&f, &p)) in freq.iter().zip(want).enumerate() {
        if p == 0.0 {
            assert_eq!(f, 0.0, "{ctx}: token {i} must never be drawn, got frequency {f}");
        } else {
            let sd = (p * (1.0 - p) / n as f64).sqrt();
            assert!((f - p).abs() <= 5.0 * sd + 1e-12, "{ctx}: token {i} frequency {f}, expected {p} (sd {sd:.4})");
        }
    }
}

const L: [f32; 5] = [0.0, std::f32::consts::LN_2, 1.098_612_3, 2.0 * std::f32::consts::LN_2, -1.0]; // ln 1, ln 2, ln 3, ln 4, -1
const N: usize = 20_000;

#[test]
fn greedy_is_the_argmax_on_every_device() {
    for dev in common::devices() {
        let mut s = Sampler::new(SamplingParams::default(), 0).unwrap();
        assert_eq!(s.sample(&logits(&L, &dev), &[]).unwrap(), 3, "{dev}");
        // Ties: the first index, like argmax.
        assert_eq!(s.sample(&logits(&[1.0, 5.0, 5.0, -2.0], &dev), &[]).unwrap(), 1, "{dev}");
        assert_eq!(s.sample(&logits(&[-3.0, -2.0, -2.5], &dev), &[]).unwrap(), 1, "{dev}");
    }
}

#[test]
fn temperature_reshapes_the_distribution() {
    let all = [0, 1, 2, 3, 4];
    for t in [1.0, 0.5, 2.0] {
        let f = frequencies(params(t, None, None), &L, N, 7);
        assert_matches(&f, &expected(&L, t, &all), N, &format!("temperature {t}"));
    }
    // A tiny temperature is (almost surely) the argmax.
    let f = frequencies(params(1e-3, None, None), &L, 2000, 8);
    assert_eq!(f[3], 1.0, "temperature 1e-3: {f:?}");
}

#[test]
fn top_k_keeps_the_k_most_likely() {
    for (k, keep) in
        [(1, vec![3]), (2, vec![3, 2]), (3, vec![3, 2, 1]), (0, vec![0, 1, 2, 3, 4]), (9, vec![0, 1, 2, 3, 4])]
    {
        let f = frequencies(params(1.0, Some(k), None), &L, N, 9);
        assert_matches(&f, &expected(&L, 1.0, &keep), N, &format!("top_k {k}"));
    }
}

#[test]
fn top_p_keeps_the_smallest_set_reaching_p() {
    // Probabilities at T = 1: token 3: 0.386, 2: 0.289, 1: 0.193, 0: 0.096, 4: 0.035; cumulative
    // 0.386, 0.675, 0.868, 0.965, 1.
    let cases =
        [(0.3, vec![3]), (0.5, vec![3, 2]), (0.8, vec![3, 2, 1]), (0.9, vec![3, 2, 1, 0]), (1.0, vec![0, 1, 2, 3, 4])];
    for (top_p, keep) in cases {
        let f = frequencies(params(1.0, None, Some(top_p)), &L, N, 10);
        assert_matches(&f, &expected(&L, 1.0, &keep), N, &format!("top_p {top_p}"));
    }
    // top-k first, then top-p over the renormalised k.
    let f = frequencies(params(1.0, Some(2), Some(0.5)), &L, N, 11);
    assert_matches(&f, &expected(&L, 1.0, &[3]), N, "top_k 2 then top_p 0.5 (3 has 0.57 of the two)");
}

#[test]
fn min_p_keeps_the_tokens_within_a_share_of_the_most_likely() {
    let min_p = |t: f64, m: f64, top_p: Option<f64>| SamplingParams { min_p: Some(m), ..params(t, None, top_p) };
    // At T = 1 the weights of tokens 0-4 are 1, 2, 3, 4 and e^-1 = 0.37: a token stays when its
    // weight is at least m * 4. Each bound sits just above or below a weight.
    let cases = [
        (0.76, vec![3]),             // 3 < 3.04
        (0.26, vec![3, 2, 1]),       // 2 >= 1.04 > 1
        (0.24, vec![3, 2, 1, 0]),    // 1 >= 0.96 > 0.37
        (0.09, vec![0, 1, 2, 3, 4]), // 0.37 >= 0.36
        (0.0, vec![0, 1, 2, 3, 4]),  // off
        (1.0, vec![3]),              // the most likely only
    ];
    for (m, keep) in cases {
        let f = frequencies(min_p(1.0, m, None), &L, N, 13);
        assert_matches(&f, &expected(&L, 1.0, &keep), N, &format!("min_p {m}"));
    }
    // On the tempered probabilities: at T = 0.5 the weights are squared (1, 4, 9, 16), and 0.24
    // (a floor of 3.84) keeps tokens 3, 2 and 1, where at T = 1 it kept token 0 too.
    let f = frequencies(min_p(0.5, 0.24, None), &L, N, 15);
    assert_matches(&f, &expected(&L, 0.5, &[3, 2, 1]), N, "min_p 0.24 at T 0.5");
    // After top-p: top_p 0.9 keeps 3, 2, 1, 0; min_p 0.3 then drops 0 (1 < 1.2).
    let f = frequencies(min_p(1.0, 0.3, Some(0.9)), &L, N, 16);
    assert_matches(&f, &expected(&L, 1.0, &[3, 2, 1]), N, "top_p 0.9 then min_p 0.3");
}

#[test]
fn repeat_penalty_divides_positive_and_multiplies_negative_logits() {
    for dev in common::devices() {
        let pen = |penalty: f32, last_n: usize| SamplingParams {
            repeat_penalty: penalty,
            repeat_last_n: last_n,
            ..Default::default()
        };
        // Greedy with a penalty: 2.0 / 2 = 1.0 falls below 1.9.
        let mut s = Sampler::new(pen(2.0, 64), 0).unwrap();
        assert_eq!(s.sample(&logits(&[2.0, 1.9, -1.0], &dev), &[0]).unwrap(), 1, "{dev}");
        // Negative logits are multiplied: -1 * 2 = -2 falls below -1.5.
        assert_eq!(s.sample(&logits(&[-1.0, -1.5, -3.0], &dev), &[0]).unwrap(), 1, "{dev}");
        // Only the last `repeat_last_n` tokens count: token 0 is outside a window of 2.
        let mut s = Sampler::new(pen(2.0, 2), 0).unwrap();
        assert_eq!(s.sample(&logits(&[2.0, 1.9, -1.0], &dev), &[0, 2, 2]).unwrap(), 0, "{dev}");
        // A penalty below 1 favours repeats.
        let mut s = Sampler::new(pen(0.5, 64), 0).unwrap();
        assert_eq!(s.sample(&logits(&[2.0, 1.9, -1.0], &dev), &[1]).unwrap(), 1, "{dev}");
    }
    // With sampling, the penalised distribution: logits [ln 1, ln 2, ln 3, ln 4] with tokens 3 and 0
    // seen, penalty 2: ln 4 / 2 = ln 2 and 0 stays 0.
    let p = SamplingParams { temperature: 1.0, repeat_penalty: 2.0, ..Default::default() };
    let l = &L[..4];
    let t = logits(l, &Device::cpu());
    let mut s = Sampler::new(p, 12).unwrap();
    let mut counts = [0usize; 4];
    for _ in 0..N {
        counts[s.sample(&t, &[3, 0, 3]).unwrap() as usize] += 1;
    }
    let f: Vec<f64> = counts.iter().map(|&c| c as f64 / N as f64).collect();
    let pl = [0.0, l[1], l[2], l[3] / 2.0];
    assert_matches(&f, &expected(&pl, 1.0, &[0, 1, 2, 3]), N, "penalised sampling");
}

#[test]
fn a_seed_reproduces_its_sequence() {
    let t = logits(&L, &Device::cpu());
    let draw = |seed| {
        let mut s = Sampler::new(params(1.0, None, None), seed).unwrap();
        (0..64).map(|_| s.sample(&t, &[]).unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(draw(5), draw(5));
    assert_ne!(draw(5), draw(6));
}

#[test]
fn bad_parameters_are_errors_naming_the_flag() {
    let bad = [
        (SamplingParams { temperature: -1.0, ..Default::default() }, "--temperature"),
        (SamplingParams { temperature: f64::NAN, ..Default::default() }, "--temperature"),
        (SamplingParams { top_p: Some(0.0), ..Default::default() }, "--top-p"),
        (SamplingParams { top_p: Some(1.5), ..Default::default() }, "--top-p"),
        (SamplingParams { min_p: Some(-0.1), ..Default::default() }, "--min-p"),
        (SamplingParams { min_p: Some(f64::NAN), ..Default::default() }, "--min-p"),
        (SamplingParams { repeat_penalty: 0.0, ..Default::default() }, "--repeat-penalty"),
        (SamplingParams { repeat_penalty: f32::INFINITY, ..Default::default() }, "--repeat-penalty"),
    ];
    for (p, flag) in bad {
        let e = Sampler::new(p.clone(), 0).err().unwrap_or_else(|| panic!("{p:?} should be refused")).to_string();
        assert!(e.contains(flag), "{e:?} should name {flag}");
    }
}
