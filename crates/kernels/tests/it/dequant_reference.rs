//! Dequantization of every supported type against an independent implementation: the `gguf`
//! Python package's numpy dequantizer (fixtures made by scripts/goldens/dequant_fixtures.py).
//! Every ISA variant must reproduce its values to within 2 ulp (the reference computes without
//! FMA; our SIMD variants may fuse the scale and offset).

use std::path::PathBuf;

use kestrel_kernels::cpu::Isa;
use kestrel_kernels::quant::TypeKernels;
use kestrel_kernels::DType;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/dequant")
}

struct Case {
    name: String,
    dtype: DType,
    bytes: Vec<u8>,
    values: Vec<f32>,
}

fn field<'a>(v: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    v.get(key)
        .unwrap_or_else(|| panic!("fixture field {key} missing"))
}

fn cases() -> Vec<Case> {
    let dir = fixture_dir();
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("manifest.json")).expect("manifest readable"),
    )
    .expect("manifest parses");
    let list = field(&manifest, "cases")
        .as_array()
        .expect("cases is an array");
    list.iter()
        .map(|c| {
            let id = field(c, "ggml_type_id").as_u64().expect("type id") as u32;
            let read = |k: &str| {
                std::fs::read(dir.join(field(c, k).as_str().expect("file name")))
                    .expect("fixture file")
            };
            let values = read("values_file")
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            Case {
                name: field(c, "name").as_str().unwrap().to_string(),
                dtype: DType::from_ggml_id(id)
                    .unwrap_or_else(|| panic!("type id {id} unsupported")),
                bytes: read("bytes_file"),
                values,
            }
        })
        .collect()
}

fn ulp_distance(a: f32, b: f32) -> u32 {
    if a == b || (a.is_nan() && b.is_nan()) {
        return 0;
    }
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        if i < 0 {
            i32::MIN - i
        } else {
            i
        }
    };
    key(a).abs_diff(key(b))
}

#[test]
fn every_type_and_isa_matches_gguf_py() {
    let cases = cases();
    let types: std::collections::HashSet<_> = cases.iter().map(|c| c.dtype).collect();
    let ggml_types = DType::ALL.iter().filter(|t| !t.is_kestrel_only()).count();
    assert_eq!(
        types.len(),
        ggml_types,
        "fixtures cover every supported GGUF type"
    );
    for case in &cases {
        assert_eq!(
            case.dtype.row_bytes(case.values.len()),
            Some(case.bytes.len()),
            "{}: sizes agree",
            case.name
        );
        for isa in Isa::available() {
            let k = TypeKernels::for_isa(case.dtype, isa);
            let mut out = vec![f32::NAN; case.values.len()];
            (k.dequantize)(&case.bytes, &mut out);
            for (i, (got, want)) in out.iter().zip(&case.values).enumerate() {
                let d = ulp_distance(*got, *want);
                assert!(
                    d <= 2,
                    "{} on {}: element {i}: got {got}, gguf-py {want} ({d} ulp)",
                    case.name,
                    isa.name()
                );
            }
        }
    }
}
