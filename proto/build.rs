//! Compiles oxetcd's `.proto` files with `protox` (no system `protoc`) and
//! generates prost messages plus tonic servers and clients into `OUT_DIR`.

use std::{env, fs, path::PathBuf};

use prost::Message;

/// Proto files compiled, relative to `proto/`. Imports resolve from there too.
const PROTOS: &[&str] = &[
    "mvccpb/kv.proto",
    "authpb/auth.proto",
    "etcdserverpb/rpc.proto",
    "oxetcdpb/internal.proto",
    "v3electionpb/v3election.proto",
    "v3lockpb/v3lock.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("proto");
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed={}", root.display());
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={}", root.join(proto).display());
    }

    let fds = protox::compile(PROTOS, [&root])?;
    fs::write(out_dir.join("file_descriptor_set.bin"), fds.encode_to_vec())?;

    // Transport helpers (`XClient::connect`) need tonic's channel, which pulls
    // in tokio networking; only the `client` feature asks for them.
    let transport = env::var_os("CARGO_FEATURE_CLIENT").is_some();
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .build_transport(transport)
        .emit_rerun_if_changed(false)
        .compile_fds(fds)?;
    Ok(())
}
