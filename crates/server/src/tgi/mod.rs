//! The Text Generation Inference API family: `POST /generate`, `POST /generate_stream`,
//! `POST /` (compat generate), `GET /info` and `POST /tokenize`.
//!
//! Like every API family folder (see [`crate::openai`]), it holds only what is particular to
//! the family: [`wire`] (its bodies, data only), [`routes`] (its handlers, which validate
//! through [`crate::validation`] and run through
//! [`crate::submitted_choices::SubmittedChoices`]) and [`stream`] (its response details and SSE
//! encoder).

pub mod routes;
pub mod stream;
pub mod wire;
