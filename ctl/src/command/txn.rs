//! `txn`: etcdctl's transaction grammar, read from stdin.
//!
//! ```text
//! <compare>*      one per line: target("key") op "value"; blank line ends
//! <success op>*   put/get/del lines with their flags; blank line ends
//! <failure op>*   likewise
//! ```
//!
//! Targets are `ver`/`version`, `c`/`create`, `m`/`mod`, `val`/`value` and
//! `lease`; ops are `=`, `!=`, `<`, `>`. Every line, blank ones included,
//! must end with a newline (etcdctl fails with `EOF` otherwise).
//!
//! Two deliberate differences from etcdctl 3.4, both where it crashes or
//! mangles input: a single-quoted argument is unquoted correctly (etcdctl
//! cuts it to the number of arguments on the line), and an unknown compare
//! operator or a `lease` compare gives an error or a working compare
//! (etcdctl panics). `lease` compares take the lease ID in hex.

use std::io::BufRead;

use clap::{Args, Parser, Subcommand};
use oxetcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use oxetcd_proto::etcdserverpb::request_op::Request;
use oxetcd_proto::etcdserverpb::{Compare, RequestOp, TxnRequest};

use super::kv::{delete_request, put_request, range_request, DelArgs, GetArgs, PutArgs};
use super::{exit, parse_hex_i64, Context, Failure};
use crate::output::go::quote;
use crate::output::View;

/// `txn [options]`.
#[derive(Args, Clone, Debug, Default)]
pub struct TxnArgs {
    /// Input transaction in interactive mode
    #[arg(short, long)]
    pub interactive: bool,
    /// txn takes no arguments; any given are reported.
    #[arg(hide = true)]
    pub args: Vec<String>,
}

/// `txn`.
pub async fn txn(ctx: &Context, a: &TxnArgs) -> Result<(), Failure> {
    if !a.args.is_empty() {
        return Err(Failure::bad_args("txn command does not accept argument"));
    }
    let request = {
        let mut stdin = std::io::stdin().lock();
        read_txn(&mut stdin, |prompt| {
            if a.interactive {
                println!("{prompt}");
            }
        })?
    };
    let response = ctx.client.txn(request).await?;
    ctx.print(&View::Txn(&response))
}

/// Reads a whole transaction; `prompt` is called before each section.
pub fn read_txn(
    reader: &mut impl BufRead,
    mut prompt: impl FnMut(&str),
) -> Result<TxnRequest, Failure> {
    prompt("compares:");
    let mut compare = Vec::new();
    while let Some(line) = read_line(reader)? {
        compare.push(parse_compare(&line)?);
    }
    prompt("success requests (get, put, del):");
    let success = read_ops(reader)?;
    prompt("failure requests (get, put, del):");
    let failure = read_ops(reader)?;
    Ok(TxnRequest {
        compare,
        success,
        failure,
    })
}

/// The next line, trimmed, or `None` at a blank line.
fn read_line(reader: &mut impl BufRead) -> Result<Option<String>, Failure> {
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| Failure::new(exit::INVALID_INPUT, e))?;
    if !line.ends_with('\n') {
        return Err(Failure::new(exit::INVALID_INPUT, "EOF"));
    }
    let line = line.trim();
    Ok((!line.is_empty()).then(|| line.to_owned()))
}

fn read_ops(reader: &mut impl BufRead) -> Result<Vec<RequestOp>, Failure> {
    let mut ops = Vec::new();
    while let Some(line) = read_line(reader)? {
        ops.push(parse_op(&line)?);
    }
    Ok(ops)
}

#[derive(Parser)]
#[command(no_binary_name = true, infer_subcommands = true)]
struct OpLine {
    #[command(subcommand)]
    op: Op,
}

#[derive(Subcommand)]
enum Op {
    Put(PutArgs),
    Get(GetArgs),
    Del(DelArgs),
}

/// One `put`/`get`/`del` line.
pub fn parse_op(line: &str) -> Result<RequestOp, Failure> {
    let args = argify(line)?;
    if args.len() < 2 {
        return Err(Failure::new(
            exit::INVALID_INPUT,
            format!("invalid txn compare request: {line}"),
        ));
    }
    let parsed = OpLine::try_parse_from(&args)
        .map_err(|_| Failure::new(exit::INVALID_INPUT, format!("invalid txn request: {line}")))?;
    let request = match parsed.op {
        // Standard input is already consumed by the transaction itself.
        Op::Put(a) => Request::RequestPut(put_request(&a, || None)?),
        Op::Get(a) => Request::RequestRange(range_request(&a)?),
        Op::Del(a) => Request::RequestDeleteRange(delete_request(&a)?),
    };
    Ok(RequestOp {
        request: Some(request),
    })
}

/// One compare line: `target("key") op "value"`.
pub fn parse_compare(line: &str) -> Result<Compare, Failure> {
    let malformed = |detail: String| Failure::new(exit::INVALID_INPUT, detail);
    let Some((target, rest)) = line.split_once('(') else {
        return Err(malformed(format!("malformed comparison: {line}")));
    };
    let mut scan = Scanner { rest };
    let key = scan.quoted();
    let op = key
        .as_ref()
        .and_then(|_| scan.literal(')').then(|| scan.word()).flatten());
    let value = op.as_ref().and_then(|_| scan.quoted());
    let (Some(key), Some(op), Some(value)) = (key.clone(), op.clone(), value.clone()) else {
        return Err(malformed(format!(
            "malformed comparison: {line}; got {target}({}) {} {}",
            quote(key.unwrap_or_default().as_bytes()),
            op.unwrap_or_default(),
            quote(value.unwrap_or_default().as_bytes()),
        )));
    };
    let result = match op.as_str() {
        "=" => CompareResult::Equal,
        "!=" => CompareResult::NotEqual,
        "<" => CompareResult::Less,
        ">" => CompareResult::Greater,
        _ => {
            return Err(malformed(format!(
                "malformed comparison: {line} (unknown result op {op})"
            )))
        }
    };
    let invalid = || {
        Failure::new(
            exit::INVALID_INPUT,
            format!("invalid txn compare request: {line}"),
        )
    };
    let number = || value.parse::<i64>().map_err(|_| invalid());
    let (target, union) = match target {
        "ver" | "version" => (CompareTarget::Version, TargetUnion::Version(number()?)),
        "c" | "create" => (
            CompareTarget::Create,
            TargetUnion::CreateRevision(number()?),
        ),
        "m" | "mod" => (CompareTarget::Mod, TargetUnion::ModRevision(number()?)),
        "val" | "value" => (
            CompareTarget::Value,
            TargetUnion::Value(value.clone().into_bytes()),
        ),
        "lease" => (
            CompareTarget::Lease,
            TargetUnion::Lease(parse_hex_i64(&value).map_err(|_| invalid())?),
        ),
        other => {
            return Err(malformed(format!(
                "malformed comparison: {line} (unknown target {other})"
            )))
        }
    };
    Ok(Compare {
        result: result as i32,
        target: target as i32,
        key: key.into_bytes(),
        range_end: Vec::new(),
        target_union: Some(union),
    })
}

/// Go's `fmt.Sscanf` for the `%q) %s %q` pattern.
struct Scanner<'a> {
    rest: &'a str,
}

impl Scanner<'_> {
    fn skip_spaces(&mut self) {
        self.rest = self.rest.trim_start_matches([' ', '\t', '\r']);
    }

    /// A Go-quoted string: `"…"` with escapes, or a raw `` `…` ``.
    fn quoted(&mut self) -> Option<String> {
        self.skip_spaces();
        let (text, rest) = unquote_prefix(self.rest)?;
        self.rest = rest;
        Some(text)
    }

    fn literal(&mut self, c: char) -> bool {
        match self.rest.strip_prefix(c) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn word(&mut self) -> Option<String> {
        self.skip_spaces();
        let end = self
            .rest
            .find(char::is_whitespace)
            .unwrap_or(self.rest.len());
        if end == 0 {
            return None;
        }
        let word = self.rest[..end].to_owned();
        self.rest = &self.rest[end..];
        Some(word)
    }
}

/// Splits a quoted string off the front of `text` and unescapes it.
fn unquote_prefix(text: &str) -> Option<(String, &str)> {
    if let Some(raw) = text.strip_prefix('`') {
        let end = raw.find('`')?;
        return Some((raw[..end].to_owned(), &raw[end + 1..]));
    }
    let body = text.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &body[i + 1..])),
            '\\' => {
                let (_, e) = chars.next()?;
                match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'a' => out.push('\u{7}'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'v' => out.push('\u{b}'),
                    '\\' | '"' | '\'' => out.push(e),
                    'x' | 'u' | 'U' => {
                        let digits = match e {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let mut code = 0u32;
                        for _ in 0..digits {
                            code = code * 16 + chars.next()?.1.to_digit(16)?;
                        }
                        out.push(char::from_u32(code)?);
                    }
                    '0'..='7' => {
                        let mut code = e.to_digit(8)?;
                        for _ in 0..2 {
                            code = code * 8 + chars.next()?.1.to_digit(8)?;
                        }
                        out.push(char::from_u32(code)?);
                    }
                    _ => return None,
                }
            }
            '\n' => return None,
            c => out.push(c),
        }
    }
    None
}

/// etcdctl's `argify`: splits a line into words, honouring `"…"` (Go
/// escapes) and `'…'` quoting.
pub fn argify(line: &str) -> Result<Vec<String>, Failure> {
    let mut args = Vec::new();
    let mut rest = line;
    loop {
        rest = rest.trim_start();
        let Some(first) = rest.chars().next() else {
            return Ok(args);
        };
        match first {
            '"' => {
                // The whole quoted token, escapes included.
                let mut end = None;
                let mut escaped = false;
                for (i, c) in rest.char_indices().skip(1) {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        end = Some(i);
                        break;
                    }
                }
                match end {
                    Some(end) => {
                        let token = &rest[..=end];
                        let (text, _) = unquote_prefix(token)
                            .ok_or_else(|| Failure::new(exit::INVALID_INPUT, "invalid syntax"))?;
                        args.push(text);
                        rest = &rest[end + 1..];
                    }
                    None => rest = &rest[1..],
                }
            }
            '\'' => match rest[1..].find('\'') {
                Some(end) => {
                    args.push(rest[1..=end].to_owned());
                    rest = &rest[end + 2..];
                }
                None => rest = &rest[1..],
            },
            _ => {
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                args.push(rest[..end].to_owned());
                rest = &rest[end..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_quotes() {
        assert_eq!(
            argify(r#"put "a b" 'c d' e\"f --prev-kv"#).expect("valid"),
            vec!["put", "a b", "c d", r#"e\"f"#, "--prev-kv"]
        );
        assert_eq!(argify(r#"put k "line\n""#).expect("valid")[2], "line\n");
    }

    #[test]
    fn compares() {
        let c = parse_compare(r#"value("a") = "1""#).expect("valid");
        assert_eq!(c.key, b"a");
        assert_eq!(c.target_union, Some(TargetUnion::Value(b"1".to_vec())));
        let c = parse_compare(r#"mod("a") > "0""#).expect("valid");
        assert_eq!(c.result, CompareResult::Greater as i32);
        assert_eq!(c.target_union, Some(TargetUnion::ModRevision(0)));
        let e = parse_compare("bogus").expect_err("malformed");
        assert_eq!(e.message.as_deref(), Some("malformed comparison: bogus"));
        assert_eq!(e.code, exit::INVALID_INPUT);
        let e = parse_compare(r#"ver("a") = "x""#).expect_err("not a number");
        assert_eq!(
            e.message.as_deref(),
            Some(r#"invalid txn compare request: ver("a") = "x""#)
        );
    }

    #[test]
    fn whole_transactions() {
        let text = "value(\"a\") = \"1\"\n\nput a 2 --prev-kv\nget a\n\nput b 2\n\n";
        let mut prompts = Vec::new();
        let t = read_txn(&mut text.as_bytes(), |p| prompts.push(p.to_owned())).expect("valid");
        assert_eq!(
            (t.compare.len(), t.success.len(), t.failure.len()),
            (1, 2, 1)
        );
        assert_eq!(prompts.len(), 3);
        let e = read_txn(&mut "value(\"a\") = \"1\"".as_bytes(), |_| {}).expect_err("EOF");
        assert_eq!(e.message.as_deref(), Some("EOF"));
        let e = read_txn(&mut "\nput a\n\n\n".as_bytes(), |_| {}).expect_err("no value");
        assert_eq!(e.code, exit::BAD_ARGS);
        let e = read_txn(&mut "\nfoo a b\n\n\n".as_bytes(), |_| {}).expect_err("no such op");
        assert_eq!(e.message.as_deref(), Some("invalid txn request: foo a b"));
    }
}
