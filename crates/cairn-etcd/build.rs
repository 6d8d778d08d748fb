//! Generates the etcd v3 client (no server) from etcd's own definitions in
//! `proto/vendor/etcd`, with protox: no system `protoc`.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let vendor = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto/vendor");
    println!("cargo:rerun-if-changed={}", vendor.display());
    let fds = protox::compile(["etcd/etcdserver/etcdserverpb/rpc.proto"], [&vendor])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
