//! Criterion benches for the CPU execution kernels: thread-pool broadcast, matmul (Q4_1,
//! Q8_0, F32 and the toolkit types INT8, INT4_G128, NF4 at SmolLM2-135M shapes), packed
//! panels against the GGUF layout, the 4 × 4
//! tile kernels against per-row dot products, and paged attention (prefill and decode, and
//! batched decode at a 1B model's GQA geometry). Threads: `KESTREL_THREADS`, else
//! all cores.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kestrel_kernels::cpu::attention::{attention, store_kv, AttnSeq, KvDtype, PagedKv, PagedKvMut};
use kestrel_kernels::cpu::gemm::{matmul, MatRef, Scratch};
use kestrel_kernels::cpu::packed::{matmul_packed, PackedMatrix};
use kestrel_kernels::cpu::ThreadPool;
use kestrel_kernels::quant::{int4, int8, nf4};
use kestrel_kernels::DType;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Random blocks with small, finite f16 scales at the given byte offsets of each block; the
/// toolkit types (whose rows carry headers or f32 scales) quantize random values instead.
fn weights(dtype: DType, rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    if dtype.is_kestrel_only() {
        return toolkit_weights(dtype, rows, cols, rng);
    }
    let mut data = vec![0u8; rows * dtype.row_bytes(cols).expect("whole blocks")];
    if dtype == DType::F32 {
        for c in data.chunks_exact_mut(4) {
            c.copy_from_slice(&rng.gen_range(-1.0f32..1.0).to_le_bytes());
        }
        return data;
    }
    rng.fill(&mut data[..]);
    // Offsets of each block's f16 scales (random bytes elsewhere).
    let scales: &[usize] = match dtype {
        DType::Q4_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q6_K => &[208],
        _ => &[0],
    };
    for blk in data.chunks_exact_mut(dtype.block_bytes()) {
        for &off in scales {
            let d = half::f16::from_f32(rng.gen_range(0.001f32..0.02));
            blk[off..off + 2].copy_from_slice(&d.to_le_bytes());
        }
    }
    data
}

fn toolkit_weights(dtype: DType, rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let row_bytes = dtype.row_bytes(cols).expect("whole blocks");
    let mut data = vec![0u8; rows * row_bytes];
    for out in data.chunks_exact_mut(row_bytes) {
        let x: Vec<f32> = (0..cols).map(|_| rng.gen_range(-0.05f32..0.05)).collect();
        match dtype {
            DType::INT8 => int8::quantize_row_ref(&x, out),
            DType::NF4 => out.copy_from_slice(bytemuck::cast_slice(&nf4::quantize_ref(&x))),
            DType::NF4_DQ => nf4::quantize_row_ref(&x, out),
            _ => out.copy_from_slice(&int4::quantize_row_rtn(dtype.block_size(), &x)),
        }
    }
    data
}

fn bench_broadcast(c: &mut Criterion) {
    let pool = ThreadPool::global();
    c.bench_function(&format!("broadcast_empty/{}t", pool.n_threads()), |b| {
        b.iter(|| pool.broadcast(&|_, _| {}))
    });
}

fn bench_matmul(c: &mut Criterion) {
    let pool = ThreadPool::global();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut group = c.benchmark_group("matmul");
    let dtypes = [
        DType::Q4_1,
        DType::Q8_0,
        DType::F32,
        DType::INT8,
        DType::INT4_G128,
        DType::NF4,
    ];
    for dtype in dtypes {
        // (576, 1536) is the down projection, the one shape every group size divides.
        let shapes = [(576, 576), (1536, 576), (576, 1536)];
        for (rows, cols) in shapes.into_iter().filter(|s| s.1 % dtype.block_size() == 0) {
            let data = weights(dtype, rows, cols, &mut rng);
            let w = MatRef {
                dtype,
                rows,
                cols,
                data: &data,
            };
            for m in [1, 64] {
                let x: Vec<f32> = (0..m * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let mut y = vec![0.0; m * rows];
                let mut scratch = Scratch::default();
                group.throughput(Throughput::Elements((2 * m * rows * cols) as u64));
                let id = BenchmarkId::new(format!("{dtype}/{rows}x{cols}"), format!("m{m}"));
                group.bench_function(id, |b| {
                    b.iter(|| matmul(pool, w, &x, m, &mut y, &mut scratch))
                });
            }
        }
    }
    group.finish();
}

/// Block tables of `n_seqs` sequences of `blocks` blocks each, their blocks interleaved as a
/// shared cache hands them out.
fn interleaved_tables(n_seqs: usize, blocks: usize) -> Vec<Vec<u32>> {
    (0..n_seqs)
        .map(|s| (0..blocks).map(|b| (b * n_seqs + s) as u32).collect())
        .collect()
}

/// SmolLM2-135M geometry: 9 query heads, 3 kv heads, head_dim 64; block size 16.
fn bench_attention(c: &mut Criterion) {
    let pool = ThreadPool::global();
    let (n_heads, n_kv, hd, bs): (usize, usize, usize, usize) = (9, 3, 64, 16);
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let mut group = c.benchmark_group("attention");
    // (label, number of sequences, context before the queries, queries per sequence)
    for (label, n_seqs, ctx, n_q) in [
        ("decode_ctx512", 1usize, 511usize, 1usize),
        ("decode_ctx2048", 1, 2047, 1),
        ("decode_8seqs_ctx512", 8, 511, 1),
        ("prefill_128", 1, 0, 128),
        ("prefill_chunk_64_after_448", 1, 448, 64),
    ] {
        let blocks_per_seq = (ctx + n_q).div_ceil(bs);
        let len = n_seqs * blocks_per_seq * bs * n_kv * hd;
        let k: Vec<f32> = (0..len).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let v: Vec<f32> = (0..len).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let kv = PagedKv {
            k: bytemuck::cast_slice(&k),
            v: bytemuck::cast_slice(&v),
            dtype: KvDtype::F32,
            block_size: bs,
            n_kv_heads: n_kv,
            head_dim: hd,
        };
        let tables = interleaved_tables(n_seqs, blocks_per_seq);
        let q: Vec<f32> = (0..n_q * n_heads * hd)
            .map(|_| rng.gen_range(-1.0..1.0))
            .collect();
        let seqs: Vec<AttnSeq<'_>> = tables
            .iter()
            .map(|t| AttnSeq {
                q: &q,
                n_q,
                q_start_pos: ctx,
                block_table: t,
            })
            .collect();
        let mut out = vec![0.0; n_seqs * q.len()];
        group.bench_function(label, |b| {
            b.iter(|| attention(pool, &kv, &seqs, n_heads, 0.125, None, &mut out))
        });
    }
    group.finish();
}

/// Batched decode as a server runs it on a 1B model: TinyLlama-1.1B geometry (32 query heads
/// sharing 4 kv heads, head_dim 64), an f16 cache in blocks of 16, 16 sequences of one query
/// each at 511 tokens of context.
fn bench_attention_batched_decode(c: &mut Criterion) {
    let pool = ThreadPool::global();
    let (n_heads, n_kv, hd, bs, n_seqs, ctx) = (32, 4, 64, 16, 16, 511);
    let dtype = KvDtype::F16;
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let blocks_per_seq = (ctx + 1usize).div_ceil(bs);
    let bytes = n_seqs * blocks_per_seq * bs * n_kv * dtype.row_bytes(hd);
    let (mut k, mut v) = (vec![0u8; bytes], vec![0u8; bytes]);
    let mut kv = PagedKvMut {
        k: &mut k,
        v: &mut v,
        dtype,
        block_size: bs,
        n_kv_heads: n_kv,
        head_dim: hd,
    };
    let tables = interleaved_tables(n_seqs, blocks_per_seq);
    for table in &tables {
        for pos in 0..=ctx {
            let row = |rng: &mut ChaCha8Rng| -> Vec<f32> {
                (0..n_kv * hd).map(|_| rng.gen_range(-1.0..1.0)).collect()
            };
            let (kr, vr) = (row(&mut rng), row(&mut rng));
            store_kv(&mut kv, table, pos, &kr, &vr);
        }
    }
    let kv = kv.as_ref();
    let qs: Vec<Vec<f32>> = (0..n_seqs)
        .map(|_| {
            (0..n_heads * hd)
                .map(|_| rng.gen_range(-1.0..1.0))
                .collect()
        })
        .collect();
    let seqs: Vec<AttnSeq<'_>> = tables
        .iter()
        .zip(&qs)
        .map(|(t, q)| AttnSeq {
            q,
            n_q: 1,
            q_start_pos: ctx,
            block_table: t,
        })
        .collect();
    let mut out = vec![0.0; n_seqs * n_heads * hd];
    let mut group = c.benchmark_group("attention");
    group.bench_function("decode_16seqs_ctx512_gqa8_f16", |b| {
        b.iter(|| attention(pool, &kv, &seqs, n_heads, 0.125, None, &mut out))
    });
    group.finish();
}

/// The packed panel product beside the GGUF-layout product of the same matrix (SmolLM2-135M
/// FFN shapes and its Q8_0 output head), for decode (m = 1), batched decode (16) and prefill.
fn bench_packed(c: &mut Criterion) {
    let pool = ThreadPool::global();
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let mut group = c.benchmark_group("packed");
    let cases = [
        (DType::Q4_0, 1536, 576),
        (DType::Q4_1, 1536, 576),
        (DType::Q4_1, 576, 1536),
        (DType::Q8_0, 1536, 576),
        (DType::Q8_0, 49152, 576),
        (DType::Q4_K, 1536, 1536),
        (DType::Q6_K, 1536, 1536),
    ];
    for (dtype, rows, cols) in cases {
        let data = weights(dtype, rows, cols, &mut rng);
        let w = MatRef {
            dtype,
            rows,
            cols,
            data: &data,
        };
        let packed = PackedMatrix::pack(dtype, rows, cols, &data).expect("whole panels");
        for m in [1, 16, 64] {
            let x: Vec<f32> = (0..m * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let mut y = vec![0.0; m * rows];
            let mut scratch = Scratch::default();
            group.throughput(Throughput::Elements((2 * m * rows * cols) as u64));
            let name = format!("{dtype}/{rows}x{cols}/m{m}");
            group.bench_function(BenchmarkId::new(name.clone(), "gguf"), |b| {
                b.iter(|| matmul(pool, w, &x, m, &mut y, &mut scratch))
            });
            group.bench_function(BenchmarkId::new(name, "packed"), |b| {
                b.iter(|| matmul_packed(pool, &packed, &x, m, &mut y, &mut scratch))
            });
        }
    }
    group.finish();
}

/// One 4 × 4 tile kernel call against the 16 `vec_dot` calls it replaces (one thread).
fn bench_tile(c: &mut Criterion) {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut group = c.benchmark_group("vec_dot_tile");
    for dtype in [
        DType::Q4_0,
        DType::Q5_0,
        DType::Q4_1,
        DType::Q8_0,
        DType::INT8,
        DType::INT4_G128,
    ] {
        let k = *kestrel_kernels::quant::kernels(dtype);
        let Some(tile) = k.vec_dot_tile else { continue };
        let cols = if 576 % dtype.block_size() == 0 {
            576
        } else {
            640
        };
        let w = weights(dtype, 4, cols, &mut rng);
        let a_row = k.act.row_bytes(cols);
        let mut a = vec![0u8; 4 * a_row];
        for dst in a.chunks_exact_mut(a_row) {
            let x: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
            k.act.quantize(&x, dst);
        }
        let wr: [&[u8]; 4] = std::array::from_fn(|r| &w[r * w.len() / 4..(r + 1) * w.len() / 4]);
        let ar: [&[u8]; 4] = std::array::from_fn(|j| &a[j * a_row..(j + 1) * a_row]);
        group.throughput(Throughput::Elements((2 * 16 * cols) as u64));
        group.bench_function(format!("{dtype}/per_row_16x"), |b| {
            b.iter(|| {
                let mut s = 0.0;
                for a in ar {
                    for w in wr {
                        s += (k.vec_dot)(cols, w, a);
                    }
                }
                s
            })
        });
        group.bench_function(format!("{dtype}/tile_4x4"), |b| {
            b.iter(|| tile(cols, wr, ar))
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    bench_broadcast,
    bench_matmul,
    bench_packed,
    bench_tile,
    bench_attention,
    bench_attention_batched_decode
);
criterion_main!(benches);
