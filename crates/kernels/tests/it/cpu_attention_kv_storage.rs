//! How K/V rows are stored in the paged cache (`store_kv`'s f32 and q8 layouts: value rows per
//! slot, keys dimension-major per (block, kv head) tile; an unaligned f32 cache; a batch stored
//! over the pool) and how much a quantized cache moves the output in practice.

use kestrel_kernels::cpu::attention::{
    self, attention_with, store_kv, store_kv_many, KvDtype, KvWrite, PagedKvMut,
};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::attention_common::{build, params_of, seqs_of, Built, Case};

/// The f32 key of (physical block `pb`, kv head `h`, slot `slot`) read from its tile:
/// dimension `d` at float `(pb·n_kv + h)·bs·hd + d·bs + slot`.
fn tile_key(
    k: &[u8],
    (bs, n_kv, hd): (usize, usize, usize),
    pb: usize,
    h: usize,
    slot: usize,
) -> Vec<f32> {
    let tile = (pb * n_kv + h) * bs * hd;
    (0..hd)
        .map(|d| {
            let at = 4 * (tile + d * bs + slot);
            f32::from_ne_bytes(k[at..at + 4].try_into().expect("4 bytes"))
        })
        .collect()
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
    let geo = (bs, n_kv, hd);
    store_kv(&mut kv, &table, 5, &kr, &vr); // logical block 1 -> physical 0, slot 1
    assert_eq!(&kv.v[n_kv * rb..2 * n_kv * rb], &bytes(&vr)[..]);
    for h in 0..n_kv {
        assert_eq!(tile_key(kv.k, geo, 0, h, 1), &kr[h * hd..(h + 1) * hd]);
    }
    assert_eq!(
        kv.k.iter().filter(|x| **x != 0).count(),
        bytes(&kr).iter().filter(|x| **x != 0).count()
    );
    store_kv(&mut kv, &table, 2, &kr, &vr); // logical block 0 -> physical 2, slot 2
    let off = (2 * bs + 2) * n_kv * rb;
    assert_eq!(&kv.as_ref().v[off..off + n_kv * rb], &bytes(&vr)[..]);
    for h in 0..n_kv {
        assert_eq!(tile_key(kv.k, geo, 2, h, 2), &kr[h * hd..(h + 1) * hd]);
    }
}

/// A batch stored with `store_kv_many` over pools of 1 to 3 threads writes exactly the bytes
/// of `store_kv` token by token: three sequences whose blocks interleave, starting mid-block,
/// large enough (100 tokens) to be shared out.
#[test]
fn store_kv_many_writes_the_bytes_of_store_kv() {
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    let (bs, n_kv, hd, blocks) = (8, 3, 20, 24);
    let tables: [Vec<u32>; 3] = [
        vec![5, 0, 9, 14, 21],
        vec![1, 7, 12, 3, 18, 22],
        vec![2, 23, 6, 11, 19],
    ];
    // (table, first position, tokens): 100 tokens in all.
    let spans = [(0, 3, 35), (1, 10, 38), (2, 0, 27)];
    let row = n_kv * hd;
    let k_rows: Vec<f32> = (0..100 * row).map(|_| rng.gen_range(-2.0..2.0)).collect();
    let v_rows: Vec<f32> = (0..100 * row).map(|_| rng.gen_range(-2.0..2.0)).collect();
    for dtype in KvDtype::ALL {
        let bytes = blocks * bs * n_kv * dtype.row_bytes(hd);
        let (mut k0, mut v0) = (vec![0u8; bytes], vec![0u8; bytes]);
        {
            let mut kv = PagedKvMut {
                k: &mut k0,
                v: &mut v0,
                dtype,
                block_size: bs,
                n_kv_heads: n_kv,
                head_dim: hd,
            };
            let mut i = 0;
            for &(t, start, n) in &spans {
                for pos in start..start + n {
                    let r = i * row..(i + 1) * row;
                    store_kv(&mut kv, &tables[t], pos, &k_rows[r.clone()], &v_rows[r]);
                    i += 1;
                }
            }
        }
        let (want_k, want_v) = (k0, v0);
        for threads in 1..=3 {
            let pool = ThreadPool::new(threads);
            let (mut k, mut v) = (vec![0u8; bytes], vec![0u8; bytes]);
            let mut kv = PagedKvMut {
                k: &mut k,
                v: &mut v,
                dtype,
                block_size: bs,
                n_kv_heads: n_kv,
                head_dim: hd,
            };
            let writes = spans.iter().map(|&(t, start_pos, n)| KvWrite {
                block_table: &tables[t],
                start_pos,
                n,
            });
            store_kv_many(&pool, &mut kv, writes, &k_rows, &v_rows);
            assert!(k == want_k, "{dtype} keys, {threads} threads");
            assert!(v == want_v, "{dtype} values, {threads} threads");
        }
    }
}

/// q8 rows: the f32 scale (max|x| / 127), then `head_dim` int8 values; a value row is stored
/// as such, a key row's scale goes to its tile's header and its values to dimension rows.
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
    let head0 = &kv.v[off..off + rb];
    let scale = f32::from_ne_bytes(head0[..4].try_into().expect("4 bytes"));
    assert!((scale - 0.01).abs() < 1e-7, "scale {scale}");
    assert_eq!(
        head0[4..].iter().map(|&b| b as i8).collect::<Vec<_>>(),
        [127, -60, 0, 30]
    );
    let head1 = &kv.v[off + rb..off + 2 * rb];
    assert_eq!(
        head1[4..].iter().map(|&b| b as i8).collect::<Vec<_>>(),
        [127, 1, -127, 50]
    );
    // Key tile of (block 1, head h): scales of slots 0, 1, then dimension-major int8 values.
    let key = |h: usize| {
        let tile = &kv.k[(n_kv + h) * bs * rb..][..bs * rb];
        let scale = f32::from_ne_bytes(tile[4..8].try_into().expect("4 bytes"));
        let q: Vec<i8> = (0..hd).map(|d| tile[4 * bs + d * bs + 1] as i8).collect();
        (scale, q)
    };
    assert_eq!(key(0), (scale, vec![127, -60, 0, 30]));
    assert_eq!(key(1).1, [127, 1, -127, 50]);
    let (mut kd, mut vd) = (vec![0.0; hd], vec![0.0; hd]);
    kv.as_ref().read_row(&[1, 0], 1, 1, &mut kd, &mut vd);
    assert!((kd[3] - 1.0).abs() < 1e-6 && kd == vd, "{kd:?} {vd:?}");
    // `read_keys` over positions 0..2 of head 1: slot 0 of block 1 was never written (zeros),
    // position 1 is the row above.
    let mut keys = vec![9.0; 2 * hd];
    kv.as_ref().read_keys(&[1, 0], 0..2, 1, &mut keys);
    assert!(keys[..hd].iter().all(|&x| x == 0.0), "{keys:?}");
    assert_eq!(keys[hd..], kd[..]);
    let first_tile = n_kv * bs * rb;
    assert_eq!(
        kv.k[..first_tile]
            .iter()
            .chain(&kv.v[..off])
            .filter(|b| **b != 0)
            .count(),
        0,
        "nothing else written"
    );
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
