//! Envoy's memory with the filter: what a request leaves in the Wasm VM. A VM's linear memory
//! only ever grows, so whatever the filter keeps per request in flight stays resident for the
//! life of the process, however briefly the peak lasted.

mod common;

use common::{join_all, launch, msg, test_catalog};
use serde_json::json;
use switchyard_integration::memory::wasm_memories;

const REQUESTS: usize = 48;
const BODY_BYTES: usize = 200 * 1024;

// 48 requests of 200 KB are in flight at once (the provider answers after a second). The filter
// must not keep a copy of each body while it waits: Envoy holds the body it was handed, and a
// copy per request would leave the VMs' memories at 9.6 MB or more for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn request_bodies_in_flight_are_not_kept_in_the_vm() {
    let mut catalog = test_catalog();
    catalog["routing"]["max_body_bytes"] = json!(512 * 1024);
    let s = Box::leak(Box::new(launch("memory", catalog, |_| {})));
    let (instances, before) = wasm_memories(s.pid);
    assert!(instances >= 3, "expected the base VM, the main thread's and one per worker, found {instances}");
    let tasks: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let s: &'static common::Stack = s;
            async move {
                let id = format!("memory-{i}");
                let content = "x".repeat(BODY_BYTES);
                let r = s
                    .chat_with(
                        &id,
                        &[("x-mock-behavior", "alpha=ttft1000")],
                        json!({"model": "test/nodata", "messages": msg(&content), "provider": {"order": ["alpha"]}}),
                    )
                    .await;
                (id, r)
            }
        })
        .collect();
    for (id, r) in join_all(tasks).await {
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("alpha"), "{id}");
    }
    let (_, after) = wasm_memories(s.pid);
    let grown_kib = after.saturating_sub(before);
    let copies_kib = (REQUESTS * BODY_BYTES / 1024) as u64;
    assert!(
        grown_kib < copies_kib / 2,
        "the VMs' memories grew by {grown_kib} KiB (from {before} KiB) for {REQUESTS} requests of {} KiB in flight \
         ({copies_kib} KiB if each body were kept)",
        BODY_BYTES / 1024
    );
}
