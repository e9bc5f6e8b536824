//! Real tensors of the SmolLM2 GGUF, read through Kestrel's GGUF reader and dequantized by
//! Kestrel's kernels, against the `gguf` Python package's dequantization of the same rows
//! (fixtures from scripts/goldens/dequant_fixtures.py). Tolerance: 2 ulp.

use crate::common;

use common::{default_model_path, fixtures};
use kestrel_kernels::quant::dequantize_row;
use kestrel_model::weights::gguf::GgufFile;

fn read_f32(path: &std::path::Path) -> Vec<f32> {
    std::fs::read(path)
        .expect("fixture")
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

#[test]
fn real_tensor_rows_match_gguf_py() {
    let file = GgufFile::open(&default_model_path()).expect("default model opens");
    let dir = fixtures().join("dequant");
    for case in ["real_q8_0", "real_q4_1", "real_f32"] {
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{case}.json"))).unwrap(),
        )
        .unwrap();
        let name = meta["tensor_name"].as_str().unwrap();
        let info = file
            .tensor_info(name)
            .unwrap_or_else(|| panic!("{name} in file"));
        let want = read_f32(&dir.join(meta["values_file"].as_str().unwrap()));
        let n = want.len();
        let bytes = file.tensor_data(info).expect("tensor data");
        let row_bytes = info.dtype.row_bytes(n).expect("whole blocks");
        let fixture_bytes = std::fs::read(dir.join(meta["bytes_file"].as_str().unwrap())).unwrap();
        assert_eq!(
            &bytes[..row_bytes],
            &fixture_bytes[..],
            "{case}: our reader returns the same raw bytes"
        );
        let mut got = vec![0.0f32; n];
        dequantize_row(info.dtype, &bytes[..row_bytes], &mut got);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let tol = 2.0 * f32::EPSILON * w.abs().max(f32::MIN_POSITIVE);
            assert!(
                (g - w).abs() <= tol,
                "{case} element {i}: {g} vs gguf-py {w}"
            );
        }
    }
}
