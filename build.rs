//! The build script of `crates/cairn-api` (its manifest points here, so the
//! protos and how they are built stay at the top of the repository).
//!
//! Compiles `proto/cairn/v1/*.proto`, and the A2A protocol's
//! `proto/vendor/a2a/a2a.proto` (`lf.a2a.v1`, see its README), with protox
//! (pure Rust, no system `protoc`) and writes the descriptor set that
//! server reflection serves.

use std::path::PathBuf;

use prost::Message;

const PROTOS: &[&str] = &[
    "cairn/v1/admin.proto",
    "cairn/v1/auth.proto",
    "cairn/v1/session.proto",
    "cairn/v1/plan.proto",
    "cairn/v1/todo.proto",
    "cairn/v1/watch.proto",
    "a2a/a2a.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let fds = protox::compile(PROTOS, [proto.clone(), proto.join("vendor")])?;

    // `file_descriptor_set_path` is ignored by `compile_fds`, so reflection's
    // descriptor set is written here from the same compiled set.
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("cairn_descriptor.bin"), fds.encode_to_vec())?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
