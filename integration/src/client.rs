//! A small HTTP/1.1 client for tests and load tools: one connection per request, records when
//! each body chunk arrived so streaming tests can check chunks are not buffered.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// A header map as (name, value) pairs, values decoded lossily: what tests assert on.
pub fn header_pairs(headers: &hyper::HeaderMap) -> Vec<(String, String)> {
    headers.iter().map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned())).collect()
}

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// (time since the request was sent, chunk)
    pub chunks: Vec<(Duration, Bytes)>,
    /// The body broke off with a transport error after the response headers (e.g. the stream
    /// was reset); `body` holds what arrived before.
    pub body_error: Option<String>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Reply, String> {
    let exchange = async {
        let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        exchange(stream, method, path, headers, body).await
    };
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .map_err(|_| format!("{method} {path}: no answer within 30s"))?
}

/// A client identity for mutual TLS: its certificate and PKCS#8 key (DER) and the CA (DER) it
/// trusts for the server.
pub struct TlsClient {
    pub ca_der: Vec<u8>,
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
}

/// POST a JSON body over TLS, presenting `client`'s certificate (an mTLS caller). The server's
/// certificate must be valid for `server_name` under `client.ca_der`.
pub async fn post_json_tls(
    addr: SocketAddr,
    server_name: &str,
    client: &TlsClient,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Result<Reply, String> {
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use tokio_rustls::rustls::{ClientConfig, RootCertStore};
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(client.ca_der.clone())).map_err(|e| e.to_string())?;
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from(client.cert_der.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(client.key_der.clone())),
        )
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
    let body = body.to_string();
    let mut h: Vec<(&str, &str)> = vec![("content-type", "application/json")];
    h.extend_from_slice(headers);
    let run = async {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        exchange(tls, "POST", path, &h, body.as_bytes()).await
    };
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .map_err(|_| format!("POST {path}: no answer within 30s"))?
}

/// One HTTP/1.1 request on an established connection; records when each body chunk arrived.
/// A `host` header in `headers` replaces the default one.
async fn exchange<S>(
    stream: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Reply, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    {
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let mut b = Request::builder().method(method).uri(path);
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            b = b.header("host", "switchyard.local");
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b.body(Full::new(Bytes::copy_from_slice(body))).map_err(|e| e.to_string())?;
        let start = Instant::now();
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let headers = header_pairs(resp.headers());
        let mut body = resp.into_body();
        let mut chunks = Vec::new();
        let mut all = Vec::new();
        let mut body_error = None;
        while let Some(frame) = body.frame().await {
            let frame = match frame {
                Ok(f) => f,
                Err(e) => {
                    body_error = Some(e.to_string());
                    break;
                }
            };
            if let Ok(data) = frame.into_data() {
                all.extend_from_slice(&data);
                chunks.push((start.elapsed(), data));
            }
        }
        Ok(Reply { status, headers, body: Bytes::from(all), chunks, body_error })
    }
}

/// POST a JSON body to `path`.
pub async fn post_json(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &Value) -> Result<Reply, String> {
    let mut h: Vec<(&str, &str)> = vec![("content-type", "application/json")];
    h.extend_from_slice(headers);
    send(addr, "POST", path, &h, body.to_string().as_bytes()).await
}

/// Sends `requests` (method, path, headers, body) one after another on ONE connection and
/// returns each reply; fails if the server closed the connection in between.
pub async fn send_on_one_connection(
    addr: SocketAddr,
    requests: &[(&str, &str, Vec<(&str, &str)>, Vec<u8>)],
) -> Result<Vec<Reply>, String> {
    let exchange = async {
        let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let mut replies = Vec::new();
        for (i, (method, path, headers, body)) in requests.iter().enumerate() {
            sender.ready().await.map_err(|e| format!("request {i}: connection not reusable: {e}"))?;
            let mut b = Request::builder().method(*method).uri(*path).header("host", "switchyard.local");
            for (k, v) in headers {
                b = b.header(*k, *v);
            }
            let req = b.body(Full::new(Bytes::copy_from_slice(body))).map_err(|e| e.to_string())?;
            let resp = sender.send_request(req).await.map_err(|e| format!("request {i}: {e}"))?;
            let status = resp.status().as_u16();
            let headers = header_pairs(resp.headers());
            let body = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
            replies.push(Reply { status, headers, body, chunks: Vec::new(), body_error: None });
        }
        Ok(replies)
    };
    tokio::time::timeout(Duration::from_secs(30), exchange).await.map_err(|_| "no answer within 30s".to_string())?
}
