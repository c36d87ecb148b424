//! `get`, `put`, `del` and `compaction`. The request builders are shared
//! with `txn`, whose operation lines take the same flags.

use std::io::Read;

use clap::Args;
use oxetcd_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use oxetcd_proto::etcdserverpb::{CompactionRequest, DeleteRangeRequest, PutRequest, RangeRequest};

use super::{exit, parse_decimal_i64, parse_hex_i64, print_with, Context, Failure};
use crate::output::go::quote;
use crate::output::{Format, View};

/// `get [options] <key> [range_end]`.
#[derive(Args, Clone, Debug, Default)]
pub struct GetArgs {
    /// Linearizable(l) or Serializable(s)
    #[arg(long, default_value = "l")]
    pub consistency: String,
    /// Order of results; ASCEND or DESCEND (ASCEND by default)
    #[arg(long, default_value = "")]
    pub order: String,
    /// Sort target; CREATE, KEY, MODIFY, VALUE, or VERSION
    #[arg(long, default_value = "")]
    pub sort_by: String,
    /// Maximum number of results
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub limit: i64,
    /// Get keys with matching prefix
    #[arg(long)]
    pub prefix: bool,
    /// Get keys that are greater than or equal to the given key using byte compare
    #[arg(long)]
    pub from_key: bool,
    /// Specify the kv revision
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub rev: i64,
    /// Get only the keys
    #[arg(long)]
    pub keys_only: bool,
    /// Get only the count
    #[arg(long)]
    pub count_only: bool,
    /// Only write values when using the "simple" output format
    #[arg(long)]
    pub print_value_only: bool,
    /// Read the range as a stream of chunks (RangeStream, etcd 3.7)
    #[arg(long)]
    pub stream: bool,
    /// <key> [range_end]
    pub args: Vec<String>,
}

/// `put [options] <key> <value>` (value from stdin when missing).
#[derive(Args, Clone, Debug, Default)]
pub struct PutArgs {
    /// lease ID (in hexadecimal) to attach to the key
    #[arg(long, default_value = "0")]
    pub lease: String,
    /// return the previous key-value pair before modification
    #[arg(long)]
    pub prev_kv: bool,
    /// updates the key using its current value
    #[arg(long)]
    pub ignore_value: bool,
    /// updates the key using its current lease
    #[arg(long)]
    pub ignore_lease: bool,
    /// <key> <value>
    pub args: Vec<String>,
}

/// `del [options] <key> [range_end]`.
#[derive(Args, Clone, Debug, Default)]
pub struct DelArgs {
    /// delete keys with matching prefix
    #[arg(long)]
    pub prefix: bool,
    /// return deleted key-value pairs
    #[arg(long)]
    pub prev_kv: bool,
    /// delete keys that are greater than or equal to the given key using byte compare
    #[arg(long)]
    pub from_key: bool,
    /// <key> [range_end]
    pub args: Vec<String>,
}

/// `compaction [options] <revision>`.
#[derive(Args, Clone, Debug, Default)]
pub struct CompactionArgs {
    /// 'true' to wait for compaction to physically remove all old revisions
    #[arg(long)]
    pub physical: bool,
    /// <revision>
    pub args: Vec<String>,
}

pub use oxetcd_proto::prefix_end;

/// Widens `key`..`range_end` as `--prefix` and `--from-key` do; with an
/// empty key, either means every key (`\0`..`\0`).
pub fn widen_range(key: &mut Vec<u8>, range_end: &mut Vec<u8>, prefix: bool, from_key: bool) {
    if prefix {
        if key.is_empty() {
            *key = vec![0];
            *range_end = vec![0];
        } else {
            *range_end = prefix_end(key);
        }
    }
    if from_key {
        if key.is_empty() {
            *key = vec![0];
        }
        *range_end = vec![0];
    }
}

/// The `RangeRequest` for `get`'s flags, with etcdctl's checks and messages.
pub fn range_request(a: &GetArgs) -> Result<RangeRequest, Failure> {
    let Some(key) = a.args.first() else {
        return Err(Failure::bad_args(
            "get command needs one argument as key and an optional argument as range_end",
        ));
    };
    if a.prefix && a.from_key {
        return Err(Failure::bad_args(
            "`--prefix` and `--from-key` cannot be set at the same time, choose one",
        ));
    }
    let mut request = RangeRequest {
        key: key.as_bytes().to_vec(),
        ..Default::default()
    };
    match a.consistency.as_str() {
        "s" => request.serializable = true,
        "l" => {}
        other => {
            return Err(Failure::new(
                exit::BAD_FEATURE,
                format!("unknown consistency flag {}", quote(other.as_bytes())),
            ))
        }
    }
    if let Some(end) = a.args.get(1) {
        if a.prefix || a.from_key {
            return Err(Failure::bad_args(
                "too many arguments, only accept one argument when `--prefix` or `--from-key` is set",
            ));
        }
        request.range_end = end.as_bytes().to_vec();
    }
    request.limit = a.limit;
    if a.rev > 0 {
        request.revision = a.rev;
    }
    let mut order = match a.order.to_uppercase().as_str() {
        "ASCEND" => SortOrder::Ascend,
        "DESCEND" => SortOrder::Descend,
        "" => SortOrder::None,
        _ => {
            return Err(Failure::new(
                exit::BAD_FEATURE,
                format!("bad sort order {}", a.order),
            ))
        }
    };
    let target = match a.sort_by.to_uppercase().as_str() {
        "CREATE" => SortTarget::Create,
        "KEY" | "" => SortTarget::Key,
        "MODIFY" => SortTarget::Mod,
        "VALUE" => SortTarget::Value,
        "VERSION" => SortTarget::Version,
        _ => {
            return Err(Failure::new(
                exit::BAD_FEATURE,
                format!("bad sort target {}", a.sort_by),
            ))
        }
    };
    // Keys come back in ascending key order anyway; asking for that sort
    // explicitly would make the server read the whole range before limiting.
    if target == SortTarget::Key && order == SortOrder::Ascend {
        order = SortOrder::None;
    }
    request.sort_order = order as i32;
    request.sort_target = target as i32;
    widen_range(
        &mut request.key,
        &mut request.range_end,
        a.prefix,
        a.from_key,
    );
    request.keys_only = a.keys_only;
    request.count_only = a.count_only;
    Ok(request)
}

/// The `PutRequest` for `put`'s flags; `stdin` supplies the value when only
/// the key is given.
pub fn put_request(
    a: &PutArgs,
    stdin: impl FnOnce() -> Option<String>,
) -> Result<PutRequest, Failure> {
    const NEEDS: &str = "put command needs 1 argument and input from stdin or 2 arguments";
    let Some(key) = a.args.first() else {
        return Err(Failure::bad_args(NEEDS));
    };
    if a.ignore_value && a.args.len() > 1 {
        return Err(Failure::bad_args(
            "put command needs only 1 argument when 'ignore-value' is set",
        ));
    }
    let mut value = String::new();
    if !a.ignore_value {
        value = match a.args.get(1) {
            Some(v) => v.clone(),
            None => stdin()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| Failure::bad_args(NEEDS))?,
        };
    }
    let lease = parse_hex_i64(&a.lease)
        .map_err(|e| Failure::bad_args(format!("bad lease ID ({e}), expecting ID in Hex")))?;
    Ok(PutRequest {
        key: key.as_bytes().to_vec(),
        value: value.into_bytes(),
        lease,
        prev_kv: a.prev_kv,
        ignore_value: a.ignore_value,
        ignore_lease: a.ignore_lease,
    })
}

/// The `DeleteRangeRequest` for `del`'s flags.
pub fn delete_request(a: &DelArgs) -> Result<DeleteRangeRequest, Failure> {
    if a.args.is_empty() || a.args.len() > 2 {
        return Err(Failure::bad_args(
            "del command needs one argument as key and an optional argument as range_end",
        ));
    }
    if a.prefix && a.from_key {
        return Err(Failure::bad_args(
            "`--prefix` and `--from-key` cannot be set at the same time, choose one",
        ));
    }
    let key = &a.args[0];
    let mut request = DeleteRangeRequest {
        key: key.as_bytes().to_vec(),
        prev_kv: a.prev_kv,
        ..Default::default()
    };
    if let Some(end) = a.args.get(1) {
        if a.prefix || a.from_key {
            return Err(Failure::bad_args(
                "too many arguments, only accept one argument when `--prefix` or `--from-key` is set",
            ));
        }
        request.range_end = end.as_bytes().to_vec();
    }
    widen_range(
        &mut request.key,
        &mut request.range_end,
        a.prefix,
        a.from_key,
    );
    Ok(request)
}

/// `get`.
pub async fn get(ctx: &Context, a: &GetArgs) -> Result<(), Failure> {
    let request = range_request(a)?;
    if a.count_only && a.keys_only {
        return Err(Failure::bad_args(
            "`--keys-only` and `--count-only` cannot be set at the same time, choose one",
        ));
    }
    let response = if a.stream {
        ctx.client.range_stream(request).await?
    } else {
        ctx.client.range(request).await?
    };
    let mut printer = ctx.printer;
    if a.print_value_only {
        if printer.format != Format::Simple {
            return Err(Failure::bad_args(
                "print-value-only is only for `--write-out=simple`",
            ));
        }
        printer.value_only = true;
    }
    if a.count_only && printer.format != Format::Fields {
        return Err(Failure::bad_args(
            "--count-only is only for `--write-out=fields`",
        ));
    }
    print_with(&printer, &View::Get(&response))
}

/// `put`.
pub async fn put(ctx: &Context, a: &PutArgs) -> Result<(), Failure> {
    let request = put_request(a, || {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).ok()?;
        Some(text)
    })?;
    let response = ctx.client.put(request).await?;
    ctx.print(&View::Put(&response))
}

/// `del`.
pub async fn del(ctx: &Context, a: &DelArgs) -> Result<(), Failure> {
    let response = ctx.client.delete_range(delete_request(a)?).await?;
    ctx.print(&View::Del(&response))
}

/// `compaction`.
pub async fn compaction(ctx: &Context, a: &CompactionArgs) -> Result<(), Failure> {
    if a.args.len() != 1 {
        return Err(Failure::bad_args("compaction command needs 1 argument"));
    }
    let revision = parse_decimal_i64(&a.args[0]).map_err(Failure::error)?;
    ctx.client
        .compact(CompactionRequest {
            revision,
            physical: a.physical,
        })
        .await?;
    println!("compacted revision {revision}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get_args(args: &[&str]) -> GetArgs {
        GetArgs {
            consistency: "l".into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"abc"), b"abd");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
    }

    #[test]
    fn get_builds_etcdctls_request() {
        let mut a = get_args(&["k"]);
        a.prefix = true;
        a.order = "ascend".into();
        let r = range_request(&a).expect("valid");
        assert_eq!(r.range_end, b"l");
        assert_eq!(r.sort_order, SortOrder::None as i32);
        a.sort_by = "MODIFY".into();
        let r = range_request(&a).expect("valid");
        assert_eq!(r.sort_order, SortOrder::Ascend as i32);
        let mut a = get_args(&[""]);
        a.from_key = true;
        let r = range_request(&a).expect("valid");
        assert_eq!((r.key, r.range_end), (vec![0], vec![0]));
        let mut a = get_args(&["k"]);
        a.consistency = "x".into();
        let e = range_request(&a).expect_err("bad consistency");
        assert_eq!(e.code, exit::BAD_FEATURE);
        assert_eq!(e.message.as_deref(), Some("unknown consistency flag \"x\""));
        let e = range_request(&get_args(&[])).expect_err("no key");
        assert_eq!(e.code, exit::BAD_ARGS);
    }

    #[test]
    fn put_reads_the_value_from_stdin_when_missing() {
        let a = PutArgs {
            lease: "0".into(),
            args: vec!["k".into()],
            ..Default::default()
        };
        let r = put_request(&a, || Some("from stdin".into())).expect("valid");
        assert_eq!(r.value, b"from stdin");
        let e = put_request(&a, || None).expect_err("no value");
        assert_eq!(e.code, exit::BAD_ARGS);
        let a = PutArgs {
            lease: "zz".into(),
            args: vec!["k".into(), "v".into()],
            ..Default::default()
        };
        let e = put_request(&a, || None).expect_err("bad lease");
        assert_eq!(
            e.message.as_deref(),
            Some("bad lease ID (strconv.ParseInt: parsing \"zz\": invalid syntax), expecting ID in Hex")
        );
    }
}
