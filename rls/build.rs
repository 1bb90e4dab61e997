//! The descriptor set of envoy's rate limit service (the `.proto` files in
//! `rls/proto/`, compiled by protox: no `protoc`), served through gRPC server
//! reflection so that clients such as `grpcurl` need no `.proto` files.

use prost::Message;

fn main() {
    println!("cargo:rerun-if-changed=proto");
    let set = match protox::compile(["envoy/service/ratelimit/v3/rls.proto"], ["proto"]) {
        Ok(set) => set,
        Err(e) => panic!("rls/proto does not compile: {e:?}"),
    };
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default())
        .join("rls_descriptor_set.bin");
    if let Err(e) = std::fs::write(&out, set.encode_to_vec()) {
        panic!("cannot write {}: {e}", out.display());
    }
}
