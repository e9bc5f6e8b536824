//! Paged flash attention, every ISA variant and every KV dtype, against the naive masked
//! reference; and each quantized dtype's reference against the f32 reference on the same
//! (unquantized) data, within an error bound derived from the format.
//!
//! Quantization bound. With per-element storage errors `|k'−k| ≤ ek`, `|v'−v| ≤ ev`, every
//! visible score moves by at most `ε = scale · max_j Σ_d |q_d|·ek_jd`, so each softmax weight
//! moves by a factor in `[e^−2ε, e^2ε]` and, per output element,
//! `|o'−o| ≤ (e^2ε − 1)·max_j |v_jd| + max_j ev_jd`. Per element: f16 `ek = |x|·2^−11`
//! (plus half the smallest subnormal), q8 `ek = scale/2` with `scale = max|row| / 127`.

use kestrel_kernels::cpu::attention::{
    self, attention_with, reference, store_kv, Alibi, AttnParams, AttnSeq, KvDtype, PagedKv,
    PagedKvMut,
};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Sequence spec: (prior context = q_start_pos, n_q).
type SeqSpec = (usize, usize);

#[derive(Clone)]
struct Case {
    block_size: usize,
    n_kv: usize,
    group: usize,
    head_dim: usize,
    window: Option<usize>,
    seqs: Vec<SeqSpec>,
}

/// One layer's K/V bytes in `dtype`, starting `skew` bytes into the buffers (to test
/// unaligned storage).
struct Cache {
    k: Vec<u8>,
    v: Vec<u8>,
    skew: usize,
    dtype: KvDtype,
    block_size: usize,
    n_kv: usize,
    head_dim: usize,
}

impl Cache {
    fn new(c: &Case, dtype: KvDtype, num_blocks: usize, skew: usize) -> Cache {
        let len = skew + num_blocks * c.block_size * c.n_kv * dtype.row_bytes(c.head_dim);
        Cache {
            k: vec![0xff; len],
            v: vec![0xff; len],
            skew,
            dtype,
            block_size: c.block_size,
            n_kv: c.n_kv,
            head_dim: c.head_dim,
        }
    }

    fn view(&self) -> PagedKv<'_> {
        PagedKv {
            k: &self.k[self.skew..],
            v: &self.v[self.skew..],
            dtype: self.dtype,
            block_size: self.block_size,
            n_kv_heads: self.n_kv,
            head_dim: self.head_dim,
        }
    }

    fn view_mut(&mut self) -> PagedKvMut<'_> {
        PagedKvMut {
            k: &mut self.k[self.skew..],
            v: &mut self.v[self.skew..],
            dtype: self.dtype,
            block_size: self.block_size,
            n_kv_heads: self.n_kv,
            head_dim: self.head_dim,
        }
    }
}

/// The cache under test and an f32 copy of the same tokens; `orig[s][pos]` holds the
/// unquantized (k, v) rows of sequence `s`.
struct Built {
    cache: Cache,
    exact: Cache,
    orig: Vec<Vec<(Vec<f32>, Vec<f32>)>>,
    tables: Vec<Vec<u32>>,
    qs: Vec<Vec<f32>>,
}

/// A cache with blocks handed out in random order, every token stored through `store_kv`.
fn build(c: &Case, dtype: KvDtype, skew: usize, rng: &mut ChaCha8Rng) -> Built {
    let row = c.n_kv * c.head_dim;
    let needs: Vec<usize> = c
        .seqs
        .iter()
        .map(|&(p, n)| (p + n).div_ceil(c.block_size))
        .collect();
    let num_blocks = needs.iter().sum::<usize>() + 3;
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    ids.shuffle(rng);
    let mut cache = Cache::new(c, dtype, num_blocks, skew);
    let mut exact = Cache::new(c, KvDtype::F32, num_blocks, 0);
    let (mut tables, mut orig) = (Vec::new(), Vec::new());
    let mut ids = ids.into_iter();
    for (&(p, n), &need) in c.seqs.iter().zip(&needs) {
        let table: Vec<u32> = ids.by_ref().take(need).collect();
        let mut rows = Vec::new();
        for pos in 0..p + n {
            let kr: Vec<f32> = (0..row).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let vr: Vec<f32> = (0..row).map(|_| rng.gen_range(-1.0..1.0)).collect();
            store_kv(&mut cache.view_mut(), &table, pos, &kr, &vr);
            store_kv(&mut exact.view_mut(), &table, pos, &kr, &vr);
            rows.push((kr, vr));
        }
        tables.push(table);
        orig.push(rows);
    }
    let n_heads = c.n_kv * c.group;
    let qs = c
        .seqs
        .iter()
        .map(|&(_, n)| {
            (0..n * n_heads * c.head_dim)
                .map(|_| rng.gen_range(-2.0..2.0))
                .collect()
        })
        .collect();
    Built {
        cache,
        exact,
        orig,
        tables,
        qs,
    }
}

fn seqs_of<'a>(c: &Case, b: &'a Built) -> Vec<AttnSeq<'a>> {
    c.seqs
        .iter()
        .enumerate()
        .map(|(i, &(p, n))| AttnSeq {
            q: &b.qs[i],
            n_q: n,
            q_start_pos: p,
            block_table: &b.tables[i],
        })
        .collect()
}

fn params_of(c: &Case) -> AttnParams {
    AttnParams {
        n_heads: c.n_kv * c.group,
        scale: 1.0 / (c.head_dim as f32).sqrt(),
        window: c.window,
        alibi: None,
        softcap: None,
    }
}

/// Bound on `|decoded − x|` for each element of one stored head row.
fn elem_err(dtype: KvDtype, row: &[f32]) -> Vec<f32> {
    match dtype {
        KvDtype::F32 => vec![0.0; row.len()],
        KvDtype::F16 => row
            .iter()
            .map(|x| x.abs() * 2f32.powi(-11) + 2f32.powi(-25))
            .collect(),
        KvDtype::Q8 => {
            let amax = row.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            let half_step = amax / 127.0 / 2.0;
            row.iter()
                .map(|x| half_step * (1.0 + 1e-5) + x.abs() * 1e-6)
                .collect()
        }
    }
}

/// The module-doc bound on `|o_dtype − o_f32|` for every output element of `c`.
fn quant_bound(c: &Case, dtype: KvDtype, b: &Built) -> Vec<f32> {
    let (hd, p) = (c.head_dim, params_of(c));
    let mut bound = Vec::new();
    for (s, &(start, n)) in c.seqs.iter().enumerate() {
        for i in 0..n {
            let pos = start + i;
            let first = c.window.map_or(0, |w| (pos + 1).saturating_sub(w));
            for head in 0..p.n_heads {
                let kvh = head / c.group;
                let q = &b.qs[s][(i * p.n_heads + head) * hd..][..hd];
                let rows = &b.orig[s][first..=pos];
                let mut eps = 0.0f32;
                let (mut vmax, mut evmax) = (vec![0.0f32; hd], vec![0.0f32; hd]);
                for (kr, vr) in rows {
                    let (k, v) = (&kr[kvh * hd..][..hd], &vr[kvh * hd..][..hd]);
                    let ek = elem_err(dtype, k);
                    let dot: f32 = q.iter().zip(&ek).map(|(a, e)| a.abs() * e).sum();
                    eps = eps.max(dot * p.scale);
                    for (d, e) in elem_err(dtype, v).into_iter().enumerate() {
                        vmax[d] = vmax[d].max(v[d].abs());
                        evmax[d] = evmax[d].max(e);
                    }
                }
                let grow = (2.0 * eps as f64).exp_m1() as f32;
                bound.extend((0..hd).map(|d| grow * vmax[d] + evmax[d] + 1e-5));
            }
        }
    }
    bound
}

fn run_case(c: &Case, dtype: KvDtype, pool: &ThreadPool, rng: &mut ChaCha8Rng) {
    run_case_with(c, dtype, pool, rng, params_of(c));
}

/// [`run_case`] with `params` (ALiBi biases shift scores equally on every dtype, so the
/// quantization bound holds unchanged).
fn run_case_with(
    c: &Case,
    dtype: KvDtype,
    pool: &ThreadPool,
    rng: &mut ChaCha8Rng,
    params: AttnParams,
) {
    let b = build(c, dtype, 0, rng);
    let seqs = seqs_of(c, &b);
    let total: usize = b.qs.iter().map(Vec::len).sum();
    let mut want = vec![0.0; total];
    reference(&b.cache.view(), &seqs, params, &mut want);
    for isa in Isa::available() {
        let mut got = vec![f32::NAN; total];
        attention_with(isa, pool, &b.cache.view(), &seqs, params, &mut got);
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 2e-5 + 1e-4 * w.abs(),
                "{dtype} {isa:?} bs={} n_kv={} group={} window={:?} alibi={:?} seqs={:?}: out[{i}] = {g}, reference {w}",
                c.block_size, c.n_kv, c.group, c.window, params.alibi, c.seqs
            );
        }
    }
    if dtype == KvDtype::F32 {
        return;
    }
    let mut exact = vec![0.0; total];
    reference(&b.exact.view(), &seqs, params, &mut exact);
    let bound = quant_bound(c, dtype, &b);
    for (i, ((&w, &e), &bd)) in want.iter().zip(&exact).zip(&bound).enumerate() {
        assert!(
            (w - e).abs() <= bd,
            "{dtype} bs={} group={} window={:?} seqs={:?}: out[{i}] = {w}, f32 KV {e}, bound {bd}",
            c.block_size,
            c.group,
            c.window,
            c.seqs
        );
    }
}

#[test]
fn decode_and_prefill_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let pool = ThreadPool::new(3);
    let seq_sets: [Vec<SeqSpec>; 4] = [
        vec![(0, 1)],                             // first token
        vec![(37, 1), (0, 1), (100, 1), (5, 1)],  // decode batch
        vec![(0, 40)],                            // prefill from scratch
        vec![(23, 19), (0, 5), (64, 1), (3, 33)], // mixed: chunks with prior context + decode
    ];
    for dtype in KvDtype::ALL {
        for block_size in [1, 4, 16, 32] {
            for group in [1, 3, 4] {
                for window in [None, Some(1), Some(7), Some(50)] {
                    for seqs in &seq_sets {
                        let c = Case {
                            block_size,
                            n_kv: 2,
                            group,
                            head_dim: 16,
                            window,
                            seqs: seqs.clone(),
                        };
                        run_case(&c, dtype, &pool, &mut rng);
                    }
                }
            }
        }
    }
}

/// Soft-capped scores (Gemma 2): every variant and dtype against the reference, on both the
/// per-row and the tiled paths (decode, prefill, windows), with a score scale that makes the
/// cap bite (|scores| up to ~30 against caps of 5 and 50); the capped output differs from the
/// uncapped one.
#[test]
fn softcapped_scores_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(18);
    let pool = ThreadPool::new(2);
    for dtype in KvDtype::ALL {
        for (block_size, group, window, cap) in [
            (4, 1, None, 5.0),
            (16, 3, Some(7), 50.0),
            (16, 4, None, 5.0),
        ] {
            let c = Case {
                block_size,
                n_kv: 2,
                group,
                head_dim: 32,
                window,
                seqs: vec![(0, 1), (37, 1), (0, 40), (23, 19)],
            };
            let b = build(&c, dtype, 0, &mut rng);
            let seqs = seqs_of(&c, &b);
            let params = AttnParams {
                scale: 1.5,
                softcap: Some(cap),
                ..params_of(&c)
            };
            let total: usize = b.qs.iter().map(Vec::len).sum();
            let (mut want, mut uncapped) = (vec![0.0; total], vec![0.0; total]);
            reference(&b.cache.view(), &seqs, params, &mut want);
            let plain = AttnParams {
                softcap: None,
                ..params
            };
            reference(&b.cache.view(), &seqs, plain, &mut uncapped);
            let moved = want
                .iter()
                .zip(&uncapped)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(moved > 1e-2, "cap {cap}: capping changed nothing ({moved})");
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; total];
                attention_with(isa, &pool, &b.cache.view(), &seqs, params, &mut got);
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= 5e-5 + 1e-4 * w.abs(),
                        "{dtype} {isa:?} cap {cap} bs={block_size} group={group}: out[{i}] = {g}, reference {w}"
                    );
                }
            }
        }
    }
}

/// ALiBi biases on every variant and dtype: 2 kv heads × groups 1, 3, 4 (2, 6 and 8 query
/// heads: 6 is not a power of two, so both branches of the slope rule run), with and without
/// a window, decode, prefill and prefill chunks with prior context (the bias needs absolute
/// positions), block sizes around the tile sizes; head_dim 24 leaves column tails.
#[test]
fn alibi_matches_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let pool = ThreadPool::new(3);
    let seq_sets: [Vec<SeqSpec>; 3] = [
        vec![(37, 1), (0, 1), (100, 1), (5, 1)],
        vec![(0, 40)],
        vec![(23, 19), (0, 5), (64, 1), (3, 33)],
    ];
    for dtype in KvDtype::ALL {
        for block_size in [1, 4, 16] {
            for group in [1, 3, 4] {
                for window in [None, Some(7), Some(50)] {
                    for seqs in &seq_sets {
                        let c = Case {
                            block_size,
                            n_kv: 2,
                            group,
                            head_dim: 24,
                            window,
                            seqs: seqs.clone(),
                        };
                        let params = AttnParams {
                            alibi: Some(Alibi::STANDARD),
                            ..params_of(&c)
                        };
                        run_case_with(&c, dtype, &pool, &mut rng, params);
                    }
                }
            }
        }
    }
}

/// The slopes of transformers' `build_alibi_tensor` and llama.cpp (max_bias 8): powers of
/// 2^(−8/n) for a power-of-two n; otherwise those of the largest power of two p below n, then
/// the odd powers of 2^(−4/p).
#[test]
fn alibi_slopes_follow_the_rule() {
    let a = Alibi::STANDARD;
    let pow2 = |e: f32| 2f32.powf(e);
    assert_eq!(a.slopes(1), [pow2(-8.0)]);
    assert_eq!(
        a.slopes(8),
        (1..=8).map(|i| pow2(-(i as f32))).collect::<Vec<_>>()
    );
    assert_eq!(
        a.slopes(6),
        [
            1.0 / 4.0,
            1.0 / 16.0,
            1.0 / 64.0,
            1.0 / 256.0,
            1.0 / 2.0,
            1.0 / 8.0
        ]
    );
    let twelve = a.slopes(12);
    let want: Vec<f32> = (1..=8)
        .map(|i| pow2(-(i as f32)))
        .chain([0.5, 1.5, 2.5, 3.5].map(|e| pow2(-e)))
        .collect();
    for (g, w) in twelve.iter().zip(&want) {
        assert!(
            (g - w).abs() <= 1e-7 * w,
            "12 heads: {twelve:?} vs {want:?}"
        );
    }
    // BLOOM-176B has 112 heads: p = 64, m0 = 2^(-1/8), m1 = 2^(-1/16).
    let s = a.slopes(112);
    assert!((s[0] - pow2(-0.125)).abs() < 1e-7 && (s[63] - pow2(-8.0)).abs() < 1e-9);
    assert!((s[64] - pow2(-1.0 / 16.0)).abs() < 1e-7);
    assert!((s[111] - pow2(-95.0 / 16.0)).abs() < 1e-7);
}

/// The spec by hand: one head, q = 0 (every score 0), so the weights are
/// `e^{slope·(j − pos)}` normalized; values `v_j = j` give their mean position.
#[test]
fn alibi_reference_by_hand() {
    let c = Case {
        block_size: 4,
        n_kv: 1,
        group: 1,
        head_dim: 1,
        window: None,
        seqs: vec![(0, 6)],
    };
    let mut cache = Cache::new(&c, KvDtype::F32, 2, 0);
    let table = [1u32, 0];
    for j in 0..6 {
        store_kv(&mut cache.view_mut(), &table, j, &[1.0], &[j as f32]);
    }
    let q = vec![0.0f32; 6];
    let seqs = [AttnSeq {
        q: &q,
        n_q: 6,
        q_start_pos: 0,
        block_table: &table,
    }];
    // One head: p = 1, slope = 2^(−max_bias) = 1/2.
    let params = AttnParams {
        alibi: Some(Alibi { max_bias: 1.0 }),
        ..params_of(&c)
    };
    let mut out = vec![0.0; 6];
    reference(&cache.view(), &seqs, params, &mut out);
    let slope = 0.5f64;
    for (pos, &o) in out.iter().enumerate() {
        let w: Vec<f64> = (0..=pos)
            .map(|j| (slope * (j as f64 - pos as f64)).exp())
            .collect();
        let want =
            w.iter().enumerate().map(|(j, w)| w * j as f64).sum::<f64>() / w.iter().sum::<f64>();
        assert!((o as f64 - want).abs() < 1e-6, "pos {pos}: {o} vs {want}");
        if pos > 0 {
            assert!(
                o > pos as f32 / 2.0 + 0.1,
                "pos {pos}: the bias favours recent keys"
            );
        }
    }
}

/// Head dims that are and are not multiples of the SIMD widths (the loaders' tails).
#[test]
fn realistic_head_dims() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let pool = ThreadPool::new(2);
    for dtype in KvDtype::ALL {
        for (n_kv, group, head_dim) in [(3, 3, 64), (1, 4, 128), (2, 1, 80), (1, 2, 36)] {
            let seqs = vec![(300, 1), (130, 20), (0, 17)];
            let c = Case {
                block_size: 16,
                n_kv,
                group,
                head_dim,
                window: None,
                seqs,
            };
            run_case(&c, dtype, &pool, &mut rng);
        }
    }
}

/// Tile shapes of the tiled path: GQA groups whose query rows fill several registers with
/// remainders (group 8 × 16 queries = 128 rows), partial last tiles, key counts that are not
/// a multiple of the key tile (windows, block sizes 5 and 16), and head dims with column
/// tails (100 = 64 + 32 + 4).
#[test]
fn tiled_path_shapes() {
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let pool = ThreadPool::new(2);
    for dtype in KvDtype::ALL {
        for (block_size, group, head_dim, window) in [
            (16, 8, 64, None),
            (16, 2, 100, Some(37)),
            (5, 5, 24, Some(9)),
            (16, 1, 64, Some(16)),
        ] {
            let c = Case {
                block_size,
                n_kv: 2,
                group,
                head_dim,
                window,
                seqs: vec![(90, 45), (0, 70), (33, 1), (7, 3)],
            };
            run_case(&c, dtype, &pool, &mut rng);
        }
    }
}

/// A quantized cache's error stays far inside the worst-case bound in practice: on random
/// data, the f16 output is within 1e-3 relative (to the largest output) of f32 KV and the
/// q8 output within 2e-2.
#[test]
fn quantized_kv_error_is_small_in_practice() {
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    let pool = ThreadPool::new(2);
    let c = Case {
        block_size: 16,
        n_kv: 3,
        group: 3,
        head_dim: 64,
        window: None,
        seqs: vec![(200, 1), (0, 48)],
    };
    for (dtype, tol) in [(KvDtype::F16, 1e-3), (KvDtype::Q8, 2e-2)] {
        let b = build(&c, dtype, 0, &mut rng);
        let seqs = seqs_of(&c, &b);
        let total: usize = b.qs.iter().map(Vec::len).sum();
        let (mut got, mut exact) = (vec![0.0; total], vec![0.0; total]);
        attention::attention(&pool, &b.cache.view(), &seqs, 9, 0.125, None, &mut got);
        attention::attention(&pool, &b.exact.view(), &seqs, 9, 0.125, None, &mut exact);
        let scale = exact.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let err = got
            .iter()
            .zip(&exact)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        eprintln!("{dtype}: max |Δ| = {err:.2e} (max |out| {scale:.3})");
        assert!(
            err <= tol * scale,
            "{dtype}: max |Δ| {err} over {tol}·{scale}"
        );
        assert!(err > 0.0, "{dtype}: the cache really is quantized");
    }
}

/// An f32 cache at an address that is not 4-byte aligned is decoded instead of read in place;
/// the result is bit-identical.
#[test]
fn unaligned_f32_cache_gives_identical_results() {
    let c = Case {
        block_size: 8,
        n_kv: 2,
        group: 2,
        head_dim: 32,
        window: Some(20),
        seqs: vec![(40, 9), (3, 1)],
    };
    let aligned = build(&c, KvDtype::F32, 0, &mut ChaCha8Rng::seed_from_u64(16));
    let skewed = build(&c, KvDtype::F32, 1, &mut ChaCha8Rng::seed_from_u64(16));
    let total: usize = aligned.qs.iter().map(Vec::len).sum();
    let pool = ThreadPool::new(2);
    for isa in Isa::available() {
        let run = |b: &Built| {
            let mut out = vec![0.0; total];
            attention_with(
                isa,
                &pool,
                &b.cache.view(),
                &seqs_of(&c, b),
                params_of(&c),
                &mut out,
            );
            out
        };
        assert_eq!(run(&aligned), run(&skewed), "{isa:?}");
    }
}

#[test]
fn result_is_independent_of_thread_count() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let c = Case {
        block_size: 8,
        n_kv: 3,
        group: 3,
        head_dim: 32,
        window: None,
        seqs: vec![(50, 30), (10, 1)],
    };
    for dtype in KvDtype::ALL {
        let b = build(&c, dtype, 0, &mut rng);
        let seqs = seqs_of(&c, &b);
        let total: usize = b.qs.iter().map(Vec::len).sum();
        let run = |threads| {
            let mut out = vec![0.0; total];
            let pool = ThreadPool::new(threads);
            attention::attention(&pool, &b.cache.view(), &seqs, 9, 0.2, None, &mut out);
            out
        };
        assert_eq!(run(1), run(4), "{dtype}");
    }
}

#[test]
fn store_kv_writes_the_documented_slot() {
    let (bs, n_kv, hd) = (4, 2, 3);
    let row = n_kv * hd;
    let rb = 4 * hd;
    let (mut k, mut v) = (vec![0u8; 3 * bs * row * 4], vec![0u8; 3 * bs * row * 4]);
    let mut kv = PagedKvMut {
        k: &mut k,
        v: &mut v,
        dtype: KvDtype::F32,
        block_size: bs,
        n_kv_heads: n_kv,
        head_dim: hd,
    };
    let table = [2u32, 0];
    let kr: Vec<f32> = (1..=row).map(|i| i as f32).collect();
    let vr: Vec<f32> = kr.iter().map(|x| -x).collect();
    let bytes = |x: &[f32]| x.iter().flat_map(|f| f.to_ne_bytes()).collect::<Vec<u8>>();
    store_kv(&mut kv, &table, 5, &kr, &vr); // logical block 1 -> physical 0, slot 1
    assert_eq!(&kv.k[n_kv * rb..2 * n_kv * rb], &bytes(&kr)[..]);
    assert_eq!(&kv.v[n_kv * rb..2 * n_kv * rb], &bytes(&vr)[..]);
    assert_eq!(
        kv.k.iter().filter(|x| **x != 0).count(),
        bytes(&kr).iter().filter(|x| **x != 0).count()
    );
    store_kv(&mut kv, &table, 2, &kr, &vr); // logical block 0 -> physical 2, slot 2
    let off = (2 * bs + 2) * n_kv * rb;
    assert_eq!(&kv.k[off..off + n_kv * rb], &bytes(&kr)[..]);
    assert_eq!(&kv.as_ref().v[off..off + n_kv * rb], &bytes(&vr)[..]);
}

/// q8 slots: per kv head, the f32 scale (max|x| / 127) and then `head_dim` int8 values.
#[test]
fn store_kv_q8_layout() {
    let (bs, n_kv, hd) = (2, 2, 4);
    let rb = 4 + hd;
    let (mut k, mut v) = (vec![0u8; 2 * bs * n_kv * rb], vec![0u8; 2 * bs * n_kv * rb]);
    let mut kv = PagedKvMut {
        k: &mut k,
        v: &mut v,
        dtype: KvDtype::Q8,
        block_size: bs,
        n_kv_heads: n_kv,
        head_dim: hd,
    };
    let kr = [1.27, -0.6, 0.0, 0.3, 2.54, 0.02, -2.54, 1.0];
    store_kv(&mut kv, &[1, 0], 1, &kr, &kr); // physical block 1, slot 1
    let off = (bs + 1) * n_kv * rb;
    let head0 = &kv.k[off..off + rb];
    let scale = f32::from_ne_bytes(head0[..4].try_into().expect("4 bytes"));
    assert!((scale - 0.01).abs() < 1e-7, "scale {scale}");
    assert_eq!(
        head0[4..].iter().map(|&b| b as i8).collect::<Vec<_>>(),
        [127, -60, 0, 30]
    );
    let head1 = &kv.k[off + rb..off + 2 * rb];
    assert_eq!(
        head1[4..].iter().map(|&b| b as i8).collect::<Vec<_>>(),
        [127, 1, -127, 50]
    );
    let (mut kd, mut vd) = (vec![0.0; hd], vec![0.0; hd]);
    kv.as_ref().read_row(&[1, 0], 1, 1, &mut kd, &mut vd);
    assert!((kd[3] - 1.0).abs() < 1e-6 && kd == vd, "{kd:?} {vd:?}");
    assert_eq!(
        kv.k[..off].iter().filter(|b| **b != 0).count(),
        0,
        "nothing else written"
    );
}

#[test]
#[should_panic(expected = "block table too short")]
fn rejects_short_block_table() {
    let k = vec![0u8; 4 * 2 * 8 * 2];
    let kv = PagedKv {
        k: &k,
        v: &k,
        dtype: KvDtype::F16,
        block_size: 4,
        n_kv_heads: 2,
        head_dim: 8,
    };
    let q = vec![0.0f32; 2 * 8];
    let seqs = [AttnSeq {
        q: &q,
        n_q: 1,
        q_start_pos: 4,
        block_table: &[0],
    }];
    let mut out = vec![0.0; q.len()];
    attention::attention(&ThreadPool::new(1), &kv, &seqs, 2, 1.0, None, &mut out);
}

#[test]
#[should_panic(expected = "attention: cache size")]
fn rejects_cache_not_a_whole_number_of_q8_blocks() {
    let k = vec![0u8; 4 * 2 * 8 * 4]; // f32-sized, not a multiple of q8 blocks (4·2·12 bytes)
    let kv = PagedKv {
        k: &k,
        v: &k,
        dtype: KvDtype::Q8,
        block_size: 4,
        n_kv_heads: 2,
        head_dim: 8,
    };
    let q = vec![0.0f32; 2 * 8];
    let seqs = [AttnSeq {
        q: &q,
        n_q: 1,
        q_start_pos: 0,
        block_table: &[0],
    }];
    let mut out = vec![0.0; q.len()];
    attention::attention(&ThreadPool::new(1), &kv, &seqs, 2, 1.0, None, &mut out);
}

/// Single-sequence decode at SmolLM2-135M geometry (3 kv heads, 9 query heads) has fewer
/// (sequence, kv head) units than 2 threads x 2, so the portable path splits units per query
/// head; the result must match the reference and be bit-identical to the unsplit
/// single-thread run.
#[test]
fn single_sequence_decode_split_per_query_head() {
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let c = Case {
        block_size: 16,
        n_kv: 3,
        group: 3,
        head_dim: 64,
        window: None,
        seqs: vec![(511, 1)],
    };
    for dtype in KvDtype::ALL {
        run_case(&c, dtype, &ThreadPool::new(2), &mut rng);
        let b = build(&c, dtype, 0, &mut rng);
        let seqs = seqs_of(&c, &b);
        let run = |threads| {
            let mut out = vec![0.0; b.qs[0].len()];
            let pool = ThreadPool::new(threads);
            attention::attention(&pool, &b.cache.view(), &seqs, 9, 0.125, None, &mut out);
            out
        };
        assert_eq!(run(1), run(2), "{dtype}");
    }
}

/// A released block's placeholder in a block table (any out-of-range id).
const HOLE: u32 = u32::MAX;

/// Entries wholly before the first query's window are never read: replacing them with an
/// out-of-range id changes nothing, for every ISA, dtype and the reference.
#[test]
fn blocks_before_the_window_are_never_read() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let pool = ThreadPool::new(2);
    for dtype in KvDtype::ALL {
        for (block_size, window) in [(4, 7), (4, 8), (16, 20), (1, 3), (5, 9)] {
            let c = Case {
                block_size,
                n_kv: 2,
                group: 2,
                head_dim: 16,
                window: Some(window),
                seqs: vec![(37, 1), (64, 1), (23, 19), (3, 5), (80, 16)],
            };
            let b = build(&c, dtype, 0, &mut rng);
            let seqs = seqs_of(&c, &b);
            let holed: Vec<Vec<u32>> = c
                .seqs
                .iter()
                .zip(&b.tables)
                .map(|(&(p, _), t)| {
                    let dead = (p + 1).saturating_sub(window) / block_size;
                    let mut t = t.clone();
                    t[..dead].fill(HOLE);
                    t
                })
                .collect();
            assert!(holed.iter().any(|t| t.contains(&HOLE)));
            let holed_seqs: Vec<AttnSeq<'_>> = seqs
                .iter()
                .zip(&holed)
                .map(|(s, t)| AttnSeq {
                    block_table: t,
                    ..*s
                })
                .collect();
            let params = params_of(&c);
            let total: usize = b.qs.iter().map(Vec::len).sum();
            let (mut want, mut got_ref) = (vec![0.0; total], vec![0.0; total]);
            reference(&b.cache.view(), &seqs, params, &mut want);
            reference(&b.cache.view(), &holed_seqs, params, &mut got_ref);
            assert_eq!(
                want, got_ref,
                "{dtype} bs={block_size} w={window}: reference"
            );
            for isa in Isa::available() {
                let (mut full, mut got) = (vec![0.0; total], vec![0.0; total]);
                attention_with(isa, &pool, &b.cache.view(), &seqs, params, &mut full);
                attention_with(isa, &pool, &b.cache.view(), &holed_seqs, params, &mut got);
                assert_eq!(full, got, "{dtype} {isa:?} bs={block_size} w={window}");
            }
        }
    }
}

#[test]
#[should_panic(expected = "block table entry out of range")]
fn rejects_a_released_block_inside_the_window() {
    let k = vec![0u8; 4 * 4 * 2 * 8 * 2];
    let kv = PagedKv {
        k: &k,
        v: &k,
        dtype: KvDtype::F16,
        block_size: 4,
        n_kv_heads: 2,
        head_dim: 8,
    };
    let q = vec![0.0f32; 2 * 8];
    // The query at 9 with a window of 7 sees 3..=9: block 0 (positions 0..4) is still read.
    let seqs = [AttnSeq {
        q: &q,
        n_q: 1,
        q_start_pos: 9,
        block_table: &[HOLE, 1, 2],
    }];
    let mut out = vec![0.0; q.len()];
    attention::attention(&ThreadPool::new(1), &kv, &seqs, 2, 1.0, Some(7), &mut out);
}
