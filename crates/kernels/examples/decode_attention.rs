//! Times batched decode attention as a server step meets it: every layer of a model in turn,
//! each with its own paged cache in huge pages (as the engine allocates it), so a layer's keys
//! and values come from memory (the caches of all layers together exceed the last-level
//! cache, as in serving). `cargo run --release -p kestrel-kernels --example decode_attention`.
//!
//! Env (defaults: SmolLM2-135M at 16 streams): `LAYERS=30`, `SEQS=16`, `CTX=192` (keys each
//! query sees), `HEADS=9`, `KV_HEADS=3`, `HEAD_DIM=64`, `BS=16`, `DTYPE=f16`, `THREADS=2`,
//! `ISA=avx512|avx2|scalar`, `REPS=10`. Prints the best of 5 batches per step and the cache
//! bytes read per second.

use kestrel_kernels::cpu::attention::{
    attention_with, store_kv, AttnParams, AttnSeq, KvDtype, PagedKv, PagedKvMut,
};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use kestrel_kernels::huge_buffer::HugeBuffer;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| v.parse().expect("a number"))
}

fn main() {
    let (layers, n_seqs, ctx) = (env("LAYERS", 30), env("SEQS", 16), env("CTX", 192));
    let (n_heads, n_kv, hd, bs) = (
        env("HEADS", 9),
        env("KV_HEADS", 3),
        env("HEAD_DIM", 64),
        env("BS", 16),
    );
    let dtype: KvDtype = std::env::var("DTYPE").map_or(KvDtype::F16, |d| d.parse().unwrap());
    let isa = match std::env::var("ISA").as_deref() {
        Ok("scalar") => Isa::Scalar,
        Ok("avx2") => Isa::Avx2,
        _ => Isa::Avx512Vnni,
    };
    let pool = ThreadPool::new(env("THREADS", 2));
    let blocks = ctx.div_ceil(bs);
    // Blocks of the sequences interleaved, as a shared cache hands them out.
    let tables: Vec<Vec<u32>> = (0..n_seqs)
        .map(|s| (0..blocks).map(|b| (b * n_seqs + s) as u32).collect())
        .collect();
    let bytes = n_seqs * blocks * bs * n_kv * dtype.row_bytes(hd);
    let mut seed = 0x9e37_79b9_u32;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        (seed as f32 / u32::MAX as f32) * 2.0 - 1.0
    };
    let caches: Vec<(HugeBuffer, HugeBuffer)> = (0..layers)
        .map(|_| {
            let (mut k, mut v) = (HugeBuffer::zeroed(bytes), HugeBuffer::zeroed(bytes));
            let mut kv = PagedKvMut {
                k: &mut k,
                v: &mut v,
                dtype,
                block_size: bs,
                n_kv_heads: n_kv,
                head_dim: hd,
            };
            for t in &tables {
                for pos in 0..ctx {
                    let kr: Vec<f32> = (0..n_kv * hd).map(|_| rand()).collect();
                    let vr: Vec<f32> = (0..n_kv * hd).map(|_| rand()).collect();
                    store_kv(&mut kv, t, pos, &kr, &vr);
                }
            }
            (k, v)
        })
        .collect();
    let qs: Vec<Vec<f32>> = (0..n_seqs)
        .map(|_| (0..n_heads * hd).map(|_| rand()).collect())
        .collect();
    let seqs: Vec<AttnSeq<'_>> = tables
        .iter()
        .zip(&qs)
        .map(|(t, q)| AttnSeq {
            q,
            n_q: 1,
            q_start_pos: ctx - 1,
            block_table: t,
        })
        .collect();
    let params = AttnParams {
        n_heads,
        scale: (hd as f32).powf(-0.5),
        window: None,
        softcap: None,
        alibi: None,
        sinks: None,
    };
    let mut out = vec![0.0; n_seqs * n_heads * hd];
    let mut step = || {
        for (k, v) in &caches {
            let kv = PagedKv {
                k,
                v,
                dtype,
                block_size: bs,
                n_kv_heads: n_kv,
                head_dim: hd,
            };
            attention_with(isa, &pool, &kv, &seqs, params, &mut out);
        }
    };
    step();
    let reps = env("REPS", 10);
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        for _ in 0..reps {
            step();
        }
        best = best.min(t.elapsed().as_secs_f64() / reps as f64);
    }
    let read = 2.0 * bytes as f64 * layers as f64;
    println!(
        "{layers} layers x {n_seqs} seqs x ctx {ctx} ({n_heads}/{n_kv} heads, hd {hd}, bs {bs}, \
         {dtype}, {isa:?}): {:.3} ms per step, {:.1} MB of cache, {:.1} GB/s",
        best * 1e3,
        read / 1e6,
        read / best / 1e9
    );
}
