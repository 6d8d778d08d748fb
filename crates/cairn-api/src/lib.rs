//! `cairn-api`: the `cairn.v1` API as Rust, generated from `proto/` by the
//! repository's `build.rs` (protox, no system `protoc`).
//!
//! Servers and clients both use it: messages, `*_client` and `*_server`
//! modules, and the encoded descriptor set that reflection serves, and
//! [`shapes`]: the JSON every surface presents, built from these messages.
//! It owns no behaviour; of the other Cairn crates it imports only the pure
//! core (for its time format).

#![allow(clippy::pedantic, clippy::all, missing_docs)]

tonic::include_proto!("cairn.v1");

pub mod shapes;

/// The Agent2Agent protocol (`lf.a2a.v1`, A2A 1.0), from the vendored
/// `a2a.proto`: Cairn serves its `A2AService`.
pub mod a2a {
    tonic::include_proto!("lf.a2a.v1");
}

/// Encoded descriptor set of `cairn.v1` and `lf.a2a.v1`, served by
/// reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("cairn_descriptor");
