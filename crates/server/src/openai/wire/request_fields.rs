//! `openai_request!`: declares an OpenAI request struct with the field groups both request
//! types share appended — the structured-output fields (listed once in
//! [`crate::wire::structured`]) and the sampling fields (listed once in `sampling.rs`) — and the
//! methods that move each group out for validation (`structured_fields()`,
//! `sampling_fields()`).
//!
//! The groups become the struct's own fields rather than `#[serde(flatten)]`ed structs: flatten
//! makes serde read the struct as a map, which hides its field list from the unknown-field probe
//! ([`crate::unknown_fields::field_names`]), and makes utoipa publish an `allOf` schema instead
//! of one flat object.

/// Declares an OpenAI request struct with the shared field groups appended (after its own
/// fields: structured output, then sampling).
macro_rules! openai_request {
    ($($item:tt)*) => {
        $crate::wire::structured::structured_fields! {
            openai_request_with_structured_fields! { $($item)* }
        }
    };
}

/// `openai_request!`, given the structured-output fields: adds the sampling fields.
macro_rules! openai_request_with_structured_fields {
    ($($item:tt)*) => {
        sampling_fields! { openai_request_with_all_fields! { $($item)* } }
    };
}

/// `openai_request!`'s expansion, given both field lists.
macro_rules! openai_request_with_all_fields {
    (
        $(#[$meta:meta])* pub struct $name:ident { $($body:tt)* } ;
        $( $(#[$structured_meta:meta])* $structured:ident : $structured_ty:ty, )* ;
        $( $(#[$sampling_meta:meta])* $sampling:ident : $sampling_ty:ty, )*
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($body)*
            $( $(#[$structured_meta])* pub $structured: $structured_ty, )*
            $( $(#[$sampling_meta])* pub $sampling: $sampling_ty, )*
        }

        impl $name {
            /// Moves the structured-output fields out of the request.
            pub fn structured_fields(&mut self) -> $crate::wire::structured::StructuredFields {
                $crate::wire::structured::StructuredFields {
                    $( $structured: self.$structured.take(), )*
                }
            }

            /// Moves the shared sampling fields out of the request.
            pub fn sampling_fields(&mut self) -> $crate::openai::wire::SamplingFields {
                $crate::openai::wire::SamplingFields {
                    $( $sampling: self.$sampling.take(), )*
                }
            }
        }
    };
}
