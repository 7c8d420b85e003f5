//! GPT on Azure OpenAI by Microsoft Entra token, for the SDK tests
//! (`integration/python/test_azure_sdks.py`, `switchyard-demo --azure`): a mock IMDS issuing the
//! proxy's managed identity tokens, one mock Azure OpenAI resource that takes only those tokens
//! (no `api-key`), and Envoy with the filter serving `openai/gpt-4.1` from that resource alone,
//! so every SDK call that succeeds went through the token, Azure's paths and Azure's stream.

use serde_json::{json, Value};

use crate::envoy::{ClusterSpec, Envoy, StackConfig};
use crate::mock::gcp_metadata::MetadataServer;
use crate::mock::{azure_imds, Behavior, MockProvider};

/// The Azure provider's slug (and mock name: `x-mock-behavior: azure-openai=tool`).
pub const PROVIDER: &str = "azure-openai";
/// The one model, served by the Azure deployment `gpt-4.1` only.
pub const MODEL: &str = "openai/gpt-4.1";

/// The catalog: the resource authenticates by the system-assigned managed identity's token.
pub fn catalog() -> Value {
    json!({
        "providers": {
            PROVIDER: {"cluster": "provider_azure", "authority": "switchyard-eastus2.openai.azure.com", "kind": "azure",
                       "credential": {"azure_managed_identity": {"cluster": "azure_imds"}},
                       "data_policy": {"retains_data": true, "trains_on_data": false, "zdr": false}}
        },
        "models": {MODEL: {"endpoints": [
            {"provider": PROVIDER, "upstream_model": "gpt-4.1", "region": "eastus2",
             "pricing": {"prompt": 2, "completion": 8}, "context_length": 1047576,
             "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice", "stream_options"]}
        ]}},
        "routing": {"default_policy": "price_weighted"}
    })
}

pub struct AzureStack {
    pub envoy: Envoy,
    pub imds: MetadataServer,
    pub azure: MockProvider,
}

/// Starts IMDS, the Azure resource and Envoy on `listener_port` / `admin_port` (0: any free
/// port). Must run inside a tokio runtime.
pub async fn start(listener_port: u16, admin_port: u16) -> Result<AzureStack, String> {
    let imds = azure_imds::start(std::time::Duration::from_secs(3_600)).await.map_err(|e| format!("imds: {e}"))?;
    let behavior = Behavior {
        azure: true,
        azure_tokens: Some(std::sync::Arc::clone(&imds.issuer)),
        ttft: std::time::Duration::from_millis(20),
        chunk_interval: std::time::Duration::from_millis(10),
        chunks: 5,
        ..Behavior::default()
    };
    let azure = MockProvider::start(PROVIDER, 0, behavior).await.map_err(|e| format!("mock {PROVIDER}: {e}"))?;
    let clusters = vec![ClusterSpec { name: "provider_azure".into(), port: azure.addr.port() }];
    let mut cfg = StackConfig::new(catalog(), clusters, None);
    cfg.listener_port = listener_port;
    cfg.admin_port = admin_port;
    cfg.metadata_server = Some(("127.0.0.1".into(), imds.addr.port()));
    let envoy = Envoy::start(&cfg, "azure-sdk")?;
    // The first token is fetched on a tick after start: wait for it, so the first call is served.
    let t0 = std::time::Instant::now();
    while imds.issuer.fetches() == 0 {
        if t0.elapsed() > std::time::Duration::from_secs(20) {
            return Err("no token was fetched from the mock IMDS".into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    Ok(AzureStack { envoy, imds, azure })
}
