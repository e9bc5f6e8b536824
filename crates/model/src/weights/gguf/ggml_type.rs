//! Names of the ggml tensor types, so that a file holding a type Kestrel does not read is
//! rejected with the type's name rather than a bare id.

/// The ggml name of tensor type `id` (`"IQ2_XXS"`), or `None` for ids ggml does not define.
pub(super) fn ggml_type_name(id: u32) -> Option<&'static str> {
    const NAMES: [(u32, &str); 35] = [
        (0, "F32"),
        (1, "F16"),
        (2, "Q4_0"),
        (3, "Q4_1"),
        (6, "Q5_0"),
        (7, "Q5_1"),
        (8, "Q8_0"),
        (9, "Q8_1"),
        (10, "Q2_K"),
        (11, "Q3_K"),
        (12, "Q4_K"),
        (13, "Q5_K"),
        (14, "Q6_K"),
        (15, "Q8_K"),
        (16, "IQ2_XXS"),
        (17, "IQ2_XS"),
        (18, "IQ3_XXS"),
        (19, "IQ1_S"),
        (20, "IQ4_NL"),
        (21, "IQ3_S"),
        (22, "IQ2_S"),
        (23, "IQ4_XS"),
        (24, "I8"),
        (25, "I16"),
        (26, "I32"),
        (27, "I64"),
        (28, "F64"),
        (29, "IQ1_M"),
        (30, "BF16"),
        (34, "TQ1_0"),
        (35, "TQ2_0"),
        (39, "MXFP4"),
        (40, "NVFP4"),
        (41, "Q1_0"),
        (42, "Q2_0"),
    ];
    NAMES.iter().find(|(i, _)| *i == id).map(|(_, n)| *n)
}

/// `"IQ2_XXS (ggml type 16)"`, or `"unknown type id 99"`.
pub(super) fn describe(id: u32) -> String {
    match ggml_type_name(id) {
        Some(name) => format!("{name} (ggml type {id})"),
        None => format!("unknown type id {id}"),
    }
}
