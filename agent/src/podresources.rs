//! kubelet's pod-resources API (`v1.PodResourcesLister/List`): which container holds which device, read over
//! the kubelet's Unix socket (`/var/lib/kubelet/pod-resources/kubelet.sock`). gRPC is HTTP/2 with 5-byte framed
//! protobuf messages; the few messages needed are encoded and decoded here, so no code generator is needed.

use std::path::Path;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use gpuledger_core::wire::{DeviceAssignment, Fact, FactBody, event_id};
use time::OffsetDateTime;

/// The kubelet's default socket.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// How long one step of a call (connecting, or the whole request) may take: a kubelet that accepts and never
/// answers must not stall the node agent's sampling loop, and a healthy one answers in milliseconds.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the pod-resources API could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    /// Connecting or talking HTTP/2 failed.
    #[error("kubelet pod-resources socket {path}: {reason}")]
    Transport {
        /// The socket.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The kubelet did not finish a step in time.
    #[error("kubelet pod-resources socket {path}: no answer to {step} within {after:?}")]
    Timeout {
        /// The socket.
        path: String,
        /// What was waited for (`connect` or `List`).
        step: &'static str,
        /// The limit.
        after: Duration,
    },
    /// The kubelet answered with a gRPC error.
    #[error("kubelet pod-resources: gRPC status {status}: {message}")]
    Status {
        /// gRPC status code.
        status: String,
        /// Its message.
        message: String,
    },
    /// The answer is not a valid `ListPodResourcesResponse`.
    #[error("kubelet pod-resources: malformed response: {0}")]
    Malformed(&'static str),
}

/// One container's devices of one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerDevices {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
    /// Resource name, e.g. `nvidia.com/gpu`.
    pub resource: String,
    /// Device IDs (GPU or MIG UUIDs).
    pub device_ids: Vec<String>,
}

fn read_varint(buf: &mut &[u8]) -> Result<u64, PodResourcesError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        if !buf.has_remaining() {
            return Err(PodResourcesError::Malformed("truncated varint"));
        }
        let b = buf.get_u8();
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(PodResourcesError::Malformed("varint too long"))
}

/// Iterates the fields of one protobuf message: (field number, length-delimited payload); other wire types are
/// skipped.
fn fields(mut buf: &[u8]) -> Result<Vec<(u64, &[u8])>, PodResourcesError> {
    let mut out = Vec::new();
    while buf.has_remaining() {
        let key = read_varint(&mut buf)?;
        match key & 7 {
            0 => {
                read_varint(&mut buf)?;
            }
            1 => buf.advance(8.min(buf.remaining())),
            5 => buf.advance(4.min(buf.remaining())),
            2 => {
                let len =
                    usize::try_from(read_varint(&mut buf)?).map_err(|_| PodResourcesError::Malformed("length"))?;
                if len > buf.remaining() {
                    return Err(PodResourcesError::Malformed("field longer than message"));
                }
                out.push((key >> 3, &buf[..len]));
                buf.advance(len);
            }
            _ => return Err(PodResourcesError::Malformed("unsupported wire type")),
        }
    }
    Ok(out)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Decodes a `ListPodResourcesResponse` (pod_resources = 1 → PodResources{name = 1, namespace = 2, containers = 3
/// → ContainerResources{name = 1, devices = 2 → ContainerDevices{resource_name = 1, device_ids = 2}}}).
pub fn decode_list_response(message: &[u8]) -> Result<Vec<ContainerDevices>, PodResourcesError> {
    let mut out = Vec::new();
    for (field, pod) in fields(message)? {
        if field != 1 {
            continue;
        }
        let (mut name, mut namespace, mut containers) = (String::new(), String::new(), Vec::new());
        for (f, v) in fields(pod)? {
            match f {
                1 => name = text(v),
                2 => namespace = text(v),
                3 => containers.push(v),
                _ => {}
            }
        }
        for c in containers {
            let mut container = String::new();
            let mut devices = Vec::new();
            for (f, v) in fields(c)? {
                match f {
                    1 => container = text(v),
                    2 => devices.push(v),
                    _ => {}
                }
            }
            for d in devices {
                let mut resource = String::new();
                let mut ids = Vec::new();
                for (f, v) in fields(d)? {
                    match f {
                        1 => resource = text(v),
                        2 => ids.push(text(v)),
                        _ => {}
                    }
                }
                out.push(ContainerDevices {
                    namespace: namespace.clone(),
                    pod: name.clone(),
                    container: container.clone(),
                    resource,
                    device_ids: ids,
                });
            }
        }
    }
    Ok(out)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_varint(out, (field << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Encodes a `ListPodResourcesResponse` (what a kubelet sends; used by tests and the fake kubelet).
pub fn encode_list_response(items: &[ContainerDevices]) -> Vec<u8> {
    let mut out = Vec::new();
    for item in items {
        let mut device = Vec::new();
        put_bytes(&mut device, 1, item.resource.as_bytes());
        for id in &item.device_ids {
            put_bytes(&mut device, 2, id.as_bytes());
        }
        let mut container = Vec::new();
        put_bytes(&mut container, 1, item.container.as_bytes());
        put_bytes(&mut container, 2, &device);
        let mut pod = Vec::new();
        put_bytes(&mut pod, 1, item.pod.as_bytes());
        put_bytes(&mut pod, 2, item.namespace.as_bytes());
        put_bytes(&mut pod, 3, &container);
        put_bytes(&mut out, 1, &pod);
    }
    out
}

/// Wraps a protobuf message in gRPC's 5-byte frame.
pub fn grpc_frame(message: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(message.len() + 5);
    b.extend_from_slice(&[0]);
    b.extend_from_slice(&(message.len() as u32).to_be_bytes());
    b.extend_from_slice(message);
    b.freeze()
}

/// Calls `List` on the kubelet at `socket`, each step limited to [`CALL_TIMEOUT`].
pub async fn list(socket: &Path) -> Result<Vec<ContainerDevices>, PodResourcesError> {
    list_within(socket, CALL_TIMEOUT).await
}

/// Calls `List` on the kubelet at `socket`; connecting and the request each get `limit`.
pub async fn list_within(socket: &Path, limit: Duration) -> Result<Vec<ContainerDevices>, PodResourcesError> {
    let timeout = |step| PodResourcesError::Timeout { path: socket.display().to_string(), step, after: limit };
    let io = tokio::time::timeout(limit, tokio::net::UnixStream::connect(socket))
        .await
        .map_err(|_| timeout("connect"))?
        .map_err(|e| transport_error(socket, e))?;
    tokio::time::timeout(limit, call(socket, io)).await.map_err(|_| timeout("List"))?
}

fn transport_error(socket: &Path, e: impl std::fmt::Display) -> PodResourcesError {
    PodResourcesError::Transport { path: socket.display().to_string(), reason: e.to_string() }
}

/// Ends the HTTP/2 connection task however the call ends (answer, error or timeout), so none is left behind.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The HTTP/2 exchange of one `List` call on a connected socket.
async fn call(socket: &Path, io: tokio::net::UnixStream) -> Result<Vec<ContainerDevices>, PodResourcesError> {
    let transport = |e: h2::Error| transport_error(socket, e);
    let (client, connection) = h2::client::handshake(io).await.map_err(transport)?;
    let _driver = AbortOnDrop(tokio::spawn(async move {
        let _ = connection.await;
    }));
    let mut client = client.ready().await.map_err(transport)?;
    let request = http::Request::post("http://localhost/v1.PodResourcesLister/List")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .map_err(|e| transport_error(socket, e))?;
    let (response, mut send) = client.send_request(request, false).map_err(transport)?;
    send.send_data(grpc_frame(&[]), true).map_err(transport)?;
    let response = response.await.map_err(transport)?;
    let mut body = response.into_body();
    let mut data = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(transport)?;
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.map_err(transport)?.unwrap_or_default();
    let status = trailers.get("grpc-status").and_then(|v| v.to_str().ok()).unwrap_or("0");
    if status != "0" {
        let message = trailers.get("grpc-message").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        return Err(PodResourcesError::Status { status: status.to_string(), message });
    }
    let mut frame = &data[..];
    if frame.len() < 5 {
        return Err(PodResourcesError::Malformed("no message"));
    }
    frame.advance(1);
    let len = frame.get_u32() as usize;
    if len > frame.remaining() {
        return Err(PodResourcesError::Malformed("message shorter than its frame"));
    }
    decode_list_response(&frame[..len])
}

/// GPU assignments as `device_assigned` facts (NVIDIA resources only), each sent once per content.
pub fn assignment_facts(
    node: &str,
    items: &[ContainerDevices],
    seen: &mut std::collections::HashSet<String>,
    at: OffsetDateTime,
) -> Vec<Fact> {
    let mut out = Vec::new();
    for item in items.iter().filter(|i| i.resource.starts_with("nvidia.com/") && !i.device_ids.is_empty()) {
        let id = event_id(
            "device-assigned",
            &[node, &item.namespace, &item.pod, &item.container, &item.resource, &item.device_ids.join(",")],
        );
        if !seen.insert(id.clone()) {
            continue;
        }
        out.push(Fact {
            event_id: id,
            observed_at: at,
            body: FactBody::DeviceAssigned(DeviceAssignment {
                node: node.to_string(),
                pod_uid: None,
                pod_namespace: Some(item.namespace.clone()),
                pod_name: Some(item.pod.clone()),
                container: item.container.clone(),
                resource: item.resource.clone(),
                device_ids: item.device_ids.clone(),
                observed_at: at,
            }),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn sample() -> Vec<ContainerDevices> {
        vec![
            ContainerDevices {
                namespace: "ml".into(),
                pod: "train-0".into(),
                container: "main".into(),
                resource: "nvidia.com/gpu".into(),
                device_ids: vec!["GPU-aaaa".into(), "GPU-bbbb".into()],
            },
            ContainerDevices {
                namespace: "ml".into(),
                pod: "train-0".into(),
                container: "sidecar".into(),
                resource: "example.com/nic".into(),
                device_ids: vec!["eth1".into()],
            },
        ]
    }

    #[test]
    fn the_response_round_trips_and_unknown_fields_are_skipped() {
        let mut bytes = encode_list_response(&sample());
        // A newer kubelet adds fields (e.g. cpu_ids = 3 as packed varints, topology): they must be skipped.
        bytes.extend_from_slice(&[0x10, 0x05]);
        assert_eq!(decode_list_response(&bytes).unwrap(), sample());
        assert!(decode_list_response(&[0x0a, 0x10, 0x01]).is_err(), "a field longer than the message");
    }

    /// A fake kubelet: a real HTTP/2 gRPC server on a Unix socket, as the kubelet serves it.
    #[tokio::test]
    async fn list_reads_a_kubelet_over_its_unix_socket() {
        let dir = std::env::temp_dir().join(format!("gl-podres-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("kubelet.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let message = encode_list_response(&sample());
        let server = tokio::spawn(async move {
            let (io, _) = listener.accept().await.unwrap();
            let mut conn = h2::server::handshake(io).await.unwrap();
            while let Some(request) = conn.accept().await {
                let (request, mut respond) = request.unwrap();
                assert_eq!(request.uri().path(), "/v1.PodResourcesLister/List");
                let response = http::Response::builder().header("content-type", "application/grpc").body(()).unwrap();
                let mut send = respond.send_response(response, false).unwrap();
                send.send_data(grpc_frame(&message), false).unwrap();
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", "0".parse().unwrap());
                send.send_trailers(trailers).unwrap();
            }
        });
        let items = list(&socket).await.unwrap();
        assert_eq!(items, sample());
        let mut seen = std::collections::HashSet::new();
        let at = time::macros::datetime!(2026-10-01 10:00 UTC);
        let facts = assignment_facts("n1", &items, &mut seen, at);
        assert_eq!(facts.len(), 1, "only NVIDIA resources");
        assert!(matches!(&facts[0].body, FactBody::DeviceAssigned(a)
            if a.pod_name.as_deref() == Some("train-0") && a.device_ids == ["GPU-aaaa", "GPU-bbbb"]));
        assert!(assignment_facts("n1", &items, &mut seen, at).is_empty(), "unchanged: not sent again");
        server.abort();
        let missing = list(&dir.join("nope.sock")).await.unwrap_err();
        assert!(missing.to_string().contains("nope.sock"), "{missing}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A hung kubelet: the socket accepts but never speaks HTTP/2. `list` must give up within its limit so the
    /// sampling loop goes on.
    #[tokio::test]
    async fn a_kubelet_that_never_answers_times_out() {
        let dir = std::env::temp_dir().join(format!("gl-podres-hung-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("kubelet.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((io, _)) = listener.accept().await {
                held.push(io); // keep it open, say nothing
            }
        });
        let limit = Duration::from_millis(300);
        let started = std::time::Instant::now();
        let err = list_within(&socket, limit).await.unwrap_err();
        let took = started.elapsed();
        assert!(matches!(err, PodResourcesError::Timeout { step: "List", .. }), "{err}");
        assert!(took >= limit && took < limit * 4, "gave up after {took:?}");
        server.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
