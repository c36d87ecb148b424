//! Compiles oxetcd's `.proto` files with `protox` (no system `protoc`) and
//! generates prost messages into `OUT_DIR`, plus the tonic servers and
//! clients the crate's features ask for (`server`, `client`, `transport`).

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
    let fds_bytes = fds.encode_to_vec();
    fs::write(out_dir.join("file_descriptor_set.bin"), &fds_bytes)?;

    // Services need tonic; a crate that only handles messages asks for
    // none and links none of it. Transport helpers (`XClient::connect`)
    // need tonic's channel, which pulls in tokio networking.
    let feature = |name: &str| env::var_os(format!("CARGO_FEATURE_{name}")).is_some();
    tonic_prost_build::configure()
        .build_server(feature("SERVER"))
        .build_client(feature("CLIENT"))
        .build_transport(feature("TRANSPORT"))
        .codec_path("crate::codec::ProtoCodec")
        .emit_rerun_if_changed(false)
        .compile_fds(fds)?;

    // The JSON gateway's mapping is grpc-gateway v1's with etcd's
    // marshaler (`JSONPb{OrigName: true}`, defaults omitted) and its
    // decoder (`AllowUnknownFields: true`). Only the client API gets it.
    if feature("JSON") {
        pbjson_build::Builder::new()
            .register_descriptors(&fds_bytes)?
            .out_dir(&out_dir)
            .preserve_proto_field_names()
            .ignore_unknown_fields()
            .build(&[
                ".mvccpb",
                ".authpb",
                ".etcdserverpb",
                ".v3electionpb",
                ".v3lockpb",
            ])?;
    }
    Ok(())
}
