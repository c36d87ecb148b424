//! grpc-gateway v1's error answers: the HTTP status for each gRPC code
//! (`runtime.HTTPStatusFromCode`), the body of a failed call
//! (`DefaultHTTPError`'s `errorBody`) and the chunk that ends a failed
//! stream (`streamChunk`'s `StreamError`), in etcd's marshaler's form:
//! proto field names, zero values left out.

use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};
use serde::Serialize;
use tonic::Code;

/// The HTTP status grpc-gateway answers a gRPC code with.
pub(crate) fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::REQUEST_TIMEOUT,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// `errorBody`: the message twice (as `error`, and as `message` for
/// clients that expect a `google.rpc.Status`) and the gRPC code.
#[derive(Serialize)]
struct ErrorBody<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    error: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    code: i32,
}

/// `StreamError`, inside `{"error": …}`.
#[derive(Serialize)]
struct StreamError<'a> {
    #[serde(skip_serializing_if = "is_zero")]
    grpc_code: i32,
    #[serde(skip_serializing_if = "is_zero")]
    http_code: i32,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    http_status: &'a str,
}

#[derive(Serialize)]
struct StreamChunk<'a> {
    error: StreamError<'a>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// The answer to a call that failed with `status`.
pub(crate) fn response(status: &tonic::Status) -> http::Response<tonic::body::Body> {
    let body = ErrorBody {
        error: status.message(),
        message: status.message(),
        code: status.code() as i32,
    };
    // Serializing two strings and a number cannot fail; the fallback is
    // grpc-gateway's own.
    let json = serde_json::to_vec(&body)
        .unwrap_or_else(|_| br#"{"error": "failed to marshal error message"}"#.to_vec());
    json_response(http_status(status.code()), Bytes::from(json))
}

/// The chunk a stream ends with when it fails with `status`.
pub(crate) fn stream_chunk(status: &tonic::Status) -> Bytes {
    let http = http_status(status.code());
    let chunk = StreamChunk {
        error: StreamError {
            grpc_code: status.code() as i32,
            http_code: i32::from(http.as_u16()),
            message: status.message(),
            http_status: http.canonical_reason().unwrap_or(""),
        },
    };
    Bytes::from(serde_json::to_vec(&chunk).unwrap_or_default())
}

/// A JSON answer with `status`, as grpc-gateway's marshaler labels it.
pub(crate) fn json_response(status: StatusCode, body: Bytes) -> http::Response<tonic::body::Body> {
    crate::http::respond(status, "application/json", body)
}

/// grpc-gateway's answer for a path or method it does not route: Go's
/// `http.Error`, plain text.
pub(crate) fn plain(status: StatusCode) -> http::Response<tonic::body::Body> {
    let text = format!("{}\n", status.canonical_reason().unwrap_or(""));
    let mut response = crate::http::respond(status, "text/plain; charset=utf-8", Bytes::from(text));
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn body(response: http::Response<tonic::body::Body>) -> String {
        let bytes = futures_lite::future::block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn a_failed_call_is_grpc_gateways_error_body() {
        let status = tonic::Status::permission_denied("etcdserver: permission denied");
        let response = response(&status);
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            body(response),
            r#"{"error":"etcdserver: permission denied","message":"etcdserver: permission denied","code":7}"#
        );
    }

    #[test]
    fn a_failed_stream_ends_with_a_stream_error() {
        let status = tonic::Status::unavailable("etcdserver: no leader");
        assert_eq!(
            stream_chunk(&status),
            Bytes::from_static(
                br#"{"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}}"#
            )
        );
    }

    #[test]
    fn every_code_has_grpc_gateways_status() {
        let cases = [
            (Code::Cancelled, 408),
            (Code::Unknown, 500),
            (Code::InvalidArgument, 400),
            (Code::DeadlineExceeded, 504),
            (Code::NotFound, 404),
            (Code::AlreadyExists, 409),
            (Code::PermissionDenied, 403),
            (Code::Unauthenticated, 401),
            (Code::ResourceExhausted, 429),
            (Code::FailedPrecondition, 412),
            (Code::Aborted, 409),
            (Code::OutOfRange, 400),
            (Code::Unimplemented, 501),
            (Code::Internal, 500),
            (Code::Unavailable, 503),
            (Code::DataLoss, 500),
        ];
        for (code, status) in cases {
            assert_eq!(http_status(code).as_u16(), status, "{code:?}");
        }
    }
}
