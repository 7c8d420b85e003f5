//! The part of Envoy's dynamic-module ABI Switchyard uses, declared from the facts of Envoy's C
//! header `source/extensions/dynamic_modules/abi/abi.h` (ABI `v0.1.0` in Envoy 1.39.3; 1.40.0
//! reports `v0.2.0`, still accepts `v0.1.0`, and exports every callback used here). Nothing here
//! is Switchyard's logic:
//! the types Envoy and the module exchange, the enum values, and the callbacks (`extern`) the
//! Envoy binary exports, resolved when Envoy `dlopen`s the library. Only callbacks present in
//! Envoy 1.39.3 are declared; the tests pin every layout and value to the header's.
//!
//! C enums cross the boundary as `u32` (their size and alignment on x86_64 Linux): a value Envoy
//! sends that this module does not know is then just a number, never undefined behaviour.

use std::os::raw::c_void;

/// `envoy_dynamic_module_type_envoy_buffer`: bytes owned by Envoy.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EnvoyBuffer {
    pub ptr: *const u8,
    pub length: usize,
}

/// `envoy_dynamic_module_type_module_buffer`: bytes owned by the module.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModuleBuffer {
    pub ptr: *const u8,
    pub length: usize,
}

/// `envoy_dynamic_module_type_module_http_header`: a header owned by the module.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModuleHttpHeader {
    pub key_ptr: *const u8,
    pub key_length: usize,
    pub value_ptr: *const u8,
    pub value_length: usize,
}

/// `envoy_dynamic_module_type_envoy_http_header`: a header in one of Envoy's header maps.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EnvoyHttpHeader {
    pub key_ptr: *const u8,
    pub key_length: usize,
    pub value_ptr: *const u8,
    pub value_length: usize,
}

impl EnvoyBuffer {
    pub const fn empty() -> EnvoyBuffer {
        EnvoyBuffer { ptr: std::ptr::null(), length: 0 }
    }
}

impl ModuleBuffer {
    pub fn of(bytes: &[u8]) -> ModuleBuffer {
        ModuleBuffer { ptr: bytes.as_ptr(), length: bytes.len() }
    }
    /// The null buffer (`set_header` with it removes the header).
    pub const fn null() -> ModuleBuffer {
        ModuleBuffer { ptr: std::ptr::null(), length: 0 }
    }
}

impl ModuleHttpHeader {
    pub fn of(key: &str, value: &str) -> ModuleHttpHeader {
        ModuleHttpHeader {
            key_ptr: key.as_ptr(),
            key_length: key.len(),
            value_ptr: value.as_ptr(),
            value_length: value.len(),
        }
    }
}

/// `envoy_dynamic_module_type_abi_version_module_ptr`'s value for the ABI this module is built
/// against (Envoy 1.39.3's; a mismatch only warns, and 1.40.0's v0.2.0 keeps v0.1 compatible).
pub const ABI_VERSION: &[u8] = b"v0.1.0\0";

/// `envoy_dynamic_module_type_http_header_type`.
pub type HeaderType = u32;
pub const REQUEST_HEADER: HeaderType = 0;
pub const REQUEST_TRAILER: HeaderType = 1;
pub const RESPONSE_HEADER: HeaderType = 2;
pub const RESPONSE_TRAILER: HeaderType = 3;

/// `envoy_dynamic_module_type_log_level`.
pub type LogLevel = u32;
pub const LOG_TRACE: LogLevel = 0;
pub const LOG_DEBUG: LogLevel = 1;
pub const LOG_INFO: LogLevel = 2;
pub const LOG_WARN: LogLevel = 3;
pub const LOG_ERROR: LogLevel = 4;
pub const LOG_CRITICAL: LogLevel = 5;

/// `envoy_dynamic_module_type_http_callout_init_result`.
pub type CalloutInit = u32;
pub const CALLOUT_INIT_SUCCESS: CalloutInit = 0;
pub const CALLOUT_INIT_MISSING_REQUIRED_HEADERS: CalloutInit = 1;
pub const CALLOUT_INIT_CLUSTER_NOT_FOUND: CalloutInit = 2;
pub const CALLOUT_INIT_DUPLICATE_CALLOUT_ID: CalloutInit = 3;
pub const CALLOUT_INIT_CANNOT_CREATE_REQUEST: CalloutInit = 4;

/// `envoy_dynamic_module_type_http_callout_result`.
pub type CalloutResult = u32;
pub const CALLOUT_SUCCESS: CalloutResult = 0;
pub const CALLOUT_RESET: CalloutResult = 1;
pub const CALLOUT_EXCEED_RESPONSE_BUFFER_LIMIT: CalloutResult = 2;

/// `envoy_dynamic_module_type_http_stream_reset_reason` (only passed through to unused hooks).
pub type StreamResetReason = u32;

/// `envoy_dynamic_module_type_metrics_result`.
pub type MetricsResult = u32;
pub const METRICS_SUCCESS: MetricsResult = 0;
pub const METRICS_NOT_FOUND: MetricsResult = 1;
pub const METRICS_INVALID_LABELS: MetricsResult = 2;
pub const METRICS_FROZEN: MetricsResult = 3;

/// `envoy_dynamic_module_type_metadata_source`.
pub type MetadataSource = u32;
pub const METADATA_DYNAMIC: MetadataSource = 0;
pub const METADATA_ROUTE: MetadataSource = 1;
pub const METADATA_CLUSTER: MetadataSource = 2;

/// `envoy_dynamic_module_type_attribute_id` (the ones Switchyard reads).
pub type AttributeId = u32;
pub const ATTRIBUTE_RESPONSE_FLAGS: AttributeId = 17;
pub const ATTRIBUTE_CONNECTION_URI_SAN_PEER_CERTIFICATE: AttributeId = 37;
pub const ATTRIBUTE_UPSTREAM_REQUEST_ATTEMPT_COUNT: AttributeId = 53;
pub const ATTRIBUTE_XDS_CLUSTER_NAME: AttributeId = 57;

/// `envoy_dynamic_module_type_http_body_type`.
pub type BodyType = u32;
pub const RECEIVED_REQUEST_BODY: BodyType = 0;
pub const BUFFERED_REQUEST_BODY: BodyType = 1;
pub const RECEIVED_RESPONSE_BODY: BodyType = 2;
pub const BUFFERED_RESPONSE_BODY: BodyType = 3;

/// `envoy_dynamic_module_type_on_http_filter_{request,response}_headers_status`.
pub type HeadersStatus = u32;
pub const HEADERS_CONTINUE: HeadersStatus = 0;
pub const HEADERS_STOP_ITERATION: HeadersStatus = 1;
/// `envoy_dynamic_module_type_on_http_filter_{request,response}_body_status`.
pub type BodyStatus = u32;
pub const BODY_CONTINUE: BodyStatus = 0;
pub const BODY_STOP_ITERATION_AND_BUFFER: BodyStatus = 1;
/// `envoy_dynamic_module_type_on_http_filter_{request,response}_trailers_status`.
pub type TrailersStatus = u32;
pub const TRAILERS_CONTINUE: TrailersStatus = 0;
pub const TRAILERS_STOP_ITERATION: TrailersStatus = 1;
/// `envoy_dynamic_module_type_on_http_filter_local_reply_status`.
pub type LocalReplyStatus = u32;
pub const LOCAL_REPLY_CONTINUE: LocalReplyStatus = 0;

/// `envoy_dynamic_module_type_http_filter_config_envoy_ptr` and the other opaque pointers.
pub type ConfigEnvoyPtr = *mut c_void;
pub type FilterEnvoyPtr = *mut c_void;
pub type ConfigSchedulerPtr = *mut c_void;
/// The module's own pointers (`..._module_ptr`), handed back on every hook.
pub type ConfigModulePtr = *const c_void;
pub type FilterModulePtr = *const c_void;

// The callbacks, exported by the Envoy binary (`nm -D envoy | grep envoy_dynamic_module_callback`).
#[allow(dead_code)]
extern "C" {
    pub fn envoy_dynamic_module_callback_log(level: LogLevel, message: ModuleBuffer);
    pub fn envoy_dynamic_module_callback_log_enabled(level: LogLevel) -> bool;

    pub fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: ConfigEnvoyPtr,
        name: ModuleBuffer,
        label_names: *const ModuleBuffer,
        label_names_length: usize,
        id: *mut usize,
    ) -> MetricsResult;
    pub fn envoy_dynamic_module_callback_http_filter_config_define_gauge(
        config: ConfigEnvoyPtr,
        name: ModuleBuffer,
        label_names: *const ModuleBuffer,
        label_names_length: usize,
        id: *mut usize,
    ) -> MetricsResult;
    pub fn envoy_dynamic_module_callback_http_filter_config_define_histogram(
        config: ConfigEnvoyPtr,
        name: ModuleBuffer,
        label_names: *const ModuleBuffer,
        label_names_length: usize,
        id: *mut usize,
    ) -> MetricsResult;
    pub fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config: ConfigEnvoyPtr,
        id: usize,
        label_values: *const ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> MetricsResult;
    pub fn envoy_dynamic_module_callback_http_filter_config_set_gauge(
        config: ConfigEnvoyPtr,
        id: usize,
        label_values: *const ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> MetricsResult;
    pub fn envoy_dynamic_module_callback_http_filter_config_record_histogram_value(
        config: ConfigEnvoyPtr,
        id: usize,
        label_values: *const ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> MetricsResult;

    pub fn envoy_dynamic_module_callback_http_get_header(
        filter: FilterEnvoyPtr,
        header_type: HeaderType,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
        index: usize,
        optional_size: *mut usize,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_get_headers_size(
        filter: FilterEnvoyPtr,
        header_type: HeaderType,
    ) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_headers(
        filter: FilterEnvoyPtr,
        header_type: HeaderType,
        result: *mut EnvoyHttpHeader,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_set_header(
        filter: FilterEnvoyPtr,
        header_type: HeaderType,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_send_response(
        filter: FilterEnvoyPtr,
        status_code: u32,
        headers: *const ModuleHttpHeader,
        headers_size: usize,
        body: ModuleBuffer,
        details: ModuleBuffer,
    );

    pub fn envoy_dynamic_module_callback_http_get_body_chunks_size(
        filter: FilterEnvoyPtr,
        body_type: BodyType,
    ) -> usize;
    /// The body's length in bytes (0 when it does not exist).
    pub fn envoy_dynamic_module_callback_http_get_body_size(filter: FilterEnvoyPtr, body_type: BodyType) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_body_chunks(
        filter: FilterEnvoyPtr,
        body_type: BodyType,
        result: *mut EnvoyBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_append_body(
        filter: FilterEnvoyPtr,
        body_type: BodyType,
        data: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_drain_body(
        filter: FilterEnvoyPtr,
        body_type: BodyType,
        bytes: usize,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_received_buffered_request_body(filter: FilterEnvoyPtr) -> bool;
    pub fn envoy_dynamic_module_callback_http_received_buffered_response_body(filter: FilterEnvoyPtr) -> bool;

    pub fn envoy_dynamic_module_callback_http_get_metadata_string(
        filter: FilterEnvoyPtr,
        source: MetadataSource,
        ns: ModuleBuffer,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_set_filter_state_bytes(
        filter: FilterEnvoyPtr,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_get_filter_state_bytes(
        filter: FilterEnvoyPtr,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_get_attribute_string(
        filter: FilterEnvoyPtr,
        id: AttributeId,
        result: *mut EnvoyBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_get_attribute_int(
        filter: FilterEnvoyPtr,
        id: AttributeId,
        result: *mut u64,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_get_cluster_name(
        filter: FilterEnvoyPtr,
        result: *mut EnvoyBuffer,
    ) -> bool;

    pub fn envoy_dynamic_module_callback_http_filter_http_callout(
        filter: FilterEnvoyPtr,
        callout_id: *mut u64,
        cluster_name: ModuleBuffer,
        headers: *const ModuleHttpHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_milliseconds: u64,
    ) -> CalloutInit;
    pub fn envoy_dynamic_module_callback_http_filter_config_http_callout(
        config: ConfigEnvoyPtr,
        callout_id: *mut u64,
        cluster_name: ModuleBuffer,
        headers: *const ModuleHttpHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_milliseconds: u64,
    ) -> CalloutInit;
    pub fn envoy_dynamic_module_callback_http_filter_continue_decoding(filter: FilterEnvoyPtr);
    pub fn envoy_dynamic_module_callback_http_clear_route_cache(filter: FilterEnvoyPtr);

    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_new(config: ConfigEnvoyPtr)
        -> ConfigSchedulerPtr;
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_commit(
        scheduler: ConfigSchedulerPtr,
        event_id: u64,
    );
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_delete(scheduler: ConfigSchedulerPtr);
}

/// Every callback name above, for the test that checks both Envoy binaries export them.
pub const CALLBACKS: &[&str] = &[
    "envoy_dynamic_module_callback_log",
    "envoy_dynamic_module_callback_log_enabled",
    "envoy_dynamic_module_callback_http_filter_config_define_counter",
    "envoy_dynamic_module_callback_http_filter_config_define_gauge",
    "envoy_dynamic_module_callback_http_filter_config_define_histogram",
    "envoy_dynamic_module_callback_http_filter_config_increment_counter",
    "envoy_dynamic_module_callback_http_filter_config_set_gauge",
    "envoy_dynamic_module_callback_http_filter_config_record_histogram_value",
    "envoy_dynamic_module_callback_http_get_header",
    "envoy_dynamic_module_callback_http_get_headers_size",
    "envoy_dynamic_module_callback_http_get_headers",
    "envoy_dynamic_module_callback_http_set_header",
    "envoy_dynamic_module_callback_http_send_response",
    "envoy_dynamic_module_callback_http_get_body_chunks_size",
    "envoy_dynamic_module_callback_http_get_body_size",
    "envoy_dynamic_module_callback_http_get_body_chunks",
    "envoy_dynamic_module_callback_http_append_body",
    "envoy_dynamic_module_callback_http_drain_body",
    "envoy_dynamic_module_callback_http_received_buffered_request_body",
    "envoy_dynamic_module_callback_http_received_buffered_response_body",
    "envoy_dynamic_module_callback_http_get_metadata_string",
    "envoy_dynamic_module_callback_http_set_filter_state_bytes",
    "envoy_dynamic_module_callback_http_get_filter_state_bytes",
    "envoy_dynamic_module_callback_http_filter_get_attribute_string",
    "envoy_dynamic_module_callback_http_filter_get_attribute_int",
    "envoy_dynamic_module_callback_http_get_cluster_name",
    "envoy_dynamic_module_callback_http_filter_http_callout",
    "envoy_dynamic_module_callback_http_filter_config_http_callout",
    "envoy_dynamic_module_callback_http_filter_continue_decoding",
    "envoy_dynamic_module_callback_http_clear_route_cache",
    "envoy_dynamic_module_callback_http_filter_config_scheduler_new",
    "envoy_dynamic_module_callback_http_filter_config_scheduler_commit",
    "envoy_dynamic_module_callback_http_filter_config_scheduler_delete",
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn buffers_are_a_pointer_and_a_length() {
        for (size, align) in [
            (size_of::<EnvoyBuffer>(), align_of::<EnvoyBuffer>()),
            (size_of::<ModuleBuffer>(), align_of::<ModuleBuffer>()),
        ] {
            assert_eq!((size, align), (16, 8));
        }
        assert_eq!((offset_of!(EnvoyBuffer, ptr), offset_of!(EnvoyBuffer, length)), (0, 8));
        assert_eq!((offset_of!(ModuleBuffer, ptr), offset_of!(ModuleBuffer, length)), (0, 8));
    }

    #[test]
    fn headers_are_two_buffers_flattened() {
        assert_eq!((size_of::<ModuleHttpHeader>(), align_of::<ModuleHttpHeader>()), (32, 8));
        assert_eq!((size_of::<EnvoyHttpHeader>(), align_of::<EnvoyHttpHeader>()), (32, 8));
        assert_eq!(
            [
                offset_of!(ModuleHttpHeader, key_ptr),
                offset_of!(ModuleHttpHeader, key_length),
                offset_of!(ModuleHttpHeader, value_ptr),
                offset_of!(ModuleHttpHeader, value_length)
            ],
            [0, 8, 16, 24]
        );
        assert_eq!(
            [
                offset_of!(EnvoyHttpHeader, key_ptr),
                offset_of!(EnvoyHttpHeader, key_length),
                offset_of!(EnvoyHttpHeader, value_ptr),
                offset_of!(EnvoyHttpHeader, value_length)
            ],
            [0, 8, 16, 24]
        );
    }

    #[test]
    fn enums_are_c_ints_with_the_headers_values() {
        // A C enum of small non-negative values is a 4-byte unsigned int on x86_64 Linux.
        assert_eq!((size_of::<HeaderType>(), align_of::<HeaderType>()), (4, 4));
        assert_eq!([REQUEST_HEADER, REQUEST_TRAILER, RESPONSE_HEADER, RESPONSE_TRAILER], [0, 1, 2, 3]);
        assert_eq!([LOG_TRACE, LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_CRITICAL], [0, 1, 2, 3, 4, 5]);
        assert_eq!(
            [
                CALLOUT_INIT_SUCCESS,
                CALLOUT_INIT_MISSING_REQUIRED_HEADERS,
                CALLOUT_INIT_CLUSTER_NOT_FOUND,
                CALLOUT_INIT_DUPLICATE_CALLOUT_ID,
                CALLOUT_INIT_CANNOT_CREATE_REQUEST
            ],
            [0, 1, 2, 3, 4]
        );
        assert_eq!([CALLOUT_SUCCESS, CALLOUT_RESET, CALLOUT_EXCEED_RESPONSE_BUFFER_LIMIT], [0, 1, 2]);
        assert_eq!([METRICS_SUCCESS, METRICS_NOT_FOUND, METRICS_INVALID_LABELS, METRICS_FROZEN], [0, 1, 2, 3]);
        assert_eq!([METADATA_DYNAMIC, METADATA_ROUTE, METADATA_CLUSTER], [0, 1, 2]);
        assert_eq!(
            [RECEIVED_REQUEST_BODY, BUFFERED_REQUEST_BODY, RECEIVED_RESPONSE_BODY, BUFFERED_RESPONSE_BODY],
            [0, 1, 2, 3]
        );
        assert_eq!([HEADERS_CONTINUE, HEADERS_STOP_ITERATION], [0, 1]);
        assert_eq!([BODY_CONTINUE, BODY_STOP_ITERATION_AND_BUFFER], [0, 1]);
        assert_eq!([TRAILERS_CONTINUE, TRAILERS_STOP_ITERATION, LOCAL_REPLY_CONTINUE], [0, 1, 0]);
    }

    #[test]
    fn attribute_ids_count_from_request_path() {
        // request.path is 0; the header lists 17 request and response attributes before
        // response.flags, the connection attributes up to uri_san_peer_certificate at 37,
        // the upstream ones up to request_attempt_count at 53, then xds.node and cluster_name.
        assert_eq!(ATTRIBUTE_RESPONSE_FLAGS, 17);
        assert_eq!(ATTRIBUTE_CONNECTION_URI_SAN_PEER_CERTIFICATE, 37);
        assert_eq!(ATTRIBUTE_UPSTREAM_REQUEST_ATTEMPT_COUNT, 53);
        assert_eq!(ATTRIBUTE_XDS_CLUSTER_NAME, 57);
    }

    #[test]
    fn the_version_string_is_nul_terminated() {
        assert_eq!(ABI_VERSION.last(), Some(&0));
        assert_eq!(&ABI_VERSION[..ABI_VERSION.len() - 1], b"v0.1.0");
    }
}
