//! Bytes a client sends to `serve`, answered by the same connection handler as a live exporter,
//! over an in-memory stream that closes after them.
#![no_main]

use std::{sync::Arc, time::Duration};

use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use topdown_user::serve::http::{Latest, serve_alone};

fuzz_target!(|data: &[u8]| {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let latest = Latest::fixed(Arc::new("topdown_info 1\n# EOF\n".to_owned()));
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let peer = std::net::IpAddr::from([127, 0, 0, 1]);
        let served = tokio::spawn(serve_alone(server, latest, None, peer));
        let _ = client.write_all(data).await;
        let _ = client.shutdown().await;
        let mut response = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut response)).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), served).await;
    });
});
