//! `effects mcp`'s stdio transport: JSON-RPC lines in and out, with two
//! promises rmcp's own stdio transport does not make (docs/mcp.md, "Lines
//! and load").
//!
//! Every line is answered or is a message: a line that is not JSON (invalid
//! UTF-8, a lone surrogate, a cut message) is answered `-32700` with id
//! `null`, one over the input bound `-32600` with id `null`, and JSON that
//! is no message the server reads `-32600` (with its id when it has one).
//! rmcp drops the first two silently, so a client waits forever for an
//! answer that never comes. A notification the server does not know is the
//! one line left unanswered: JSON-RPC never answers a notification.
//!
//! The requests read and not yet answered are bounded, in number
//! ([`REQUESTS_READ`]) and in bytes ([`REQUEST_BYTES`]): a request is handed
//! to rmcp only with an [`Admitted`] ticket in its extensions, which its
//! handler holds until it answers, and while none is free nothing more is
//! read, so the client's writes block (back-pressure) instead of the server
//! growing a task, and a thread, per pipelined call. Notifications and
//! answers are never held: they come after a request only in what is read.
//!
//! It never decides what a request means: parsing is rmcp's model's, the
//! handler's bound on steps running is `server.rs`'s.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, GetExtensions, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use effect_ledger::bounded::INPUT_BOUND;

/// Requests read and not yet answered: beyond it the server reads no more
/// input until one is answered. Four times the steps that may run at once
/// (`server::STEPS_AT_ONCE`), so a burst of pipelined calls keeps every
/// step slot fed while the rest wait as parsed messages (no thread each).
pub const REQUESTS_READ: usize = 64;

/// The bytes of the requests read and not yet answered, counted in KiB:
/// 64 MiB, four lines at the input bound, so a request at the bound waits
/// for room and is never refused.
pub const REQUEST_BYTES: usize = 64 << 10;

/// JSON-RPC's codes for a line that is not JSON and for JSON that is not a
/// request the server reads.
const PARSE_ERROR: i64 = -32700;
/// The longest line read: the input bound, and its newline.
const LINE_BOUND: usize = INPUT_BOUND as usize + 1;
const INVALID_REQUEST: i64 = -32600;

/// A request's claim on the server's room for requests, held (in the
/// request's extensions, then its handler's context) until it is answered.
#[derive(Clone)]
pub struct Admitted {
    _room: Arc<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
}

/// What a read of a line got.
enum Got {
    /// A whole line, in `Lines::line`.
    Line,
    /// A line over the bound, read to its end and dropped.
    Overlong,
}

/// What one line is.
enum Read {
    Message(Box<ClientJsonRpcMessage>),
    /// An answer the transport gives itself (the line is no message).
    Answer(Value),
    Skip,
}

/// JSON-RPC lines over `R` and `W` (the process's stdin and stdout).
pub struct Lines<R, W> {
    reader: BufReader<R>,
    line: Vec<u8>,
    /// The rest of an over-long line is being dropped.
    discarding: bool,
    /// A request read, waiting for room. Kept here, not in a local, since
    /// rmcp drops a `receive` in progress whenever it has something to send.
    waiting: Option<(ClientJsonRpcMessage, u32)>,
    writer: Arc<Mutex<W>>,
    /// Answers being written: `close` waits for them.
    answering: JoinSet<()>,
    requests: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
}

impl<R, W> Lines<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    pub fn new(reader: R, writer: W) -> Self {
        Self {
            reader: BufReader::new(reader),
            line: Vec::new(),
            discarding: false,
            waiting: None,
            writer: Arc::new(Mutex::new(writer)),
            answering: JoinSet::new(),
            requests: Arc::new(Semaphore::new(REQUESTS_READ)),
            bytes: Arc::new(Semaphore::new(REQUEST_BYTES)),
        }
    }

    /// Reads one line into `self.line`, never past the input bound; `None`
    /// at the end of the input (once a last line without a newline has been
    /// given). Cancel-safe: a partial line stays in
    /// `self.line` for the next call.
    async fn read_line(&mut self) -> Option<Got> {
        loop {
            let available = match self.reader.fill_buf().await {
                Ok(available) => available,
                Err(error) => {
                    tracing::error!("reading the client's input: {error}");
                    return None;
                }
            };
            if available.is_empty() {
                // The input ends: a last line without its newline is still
                // a line, read (or answered) like any other.
                if std::mem::take(&mut self.discarding) {
                    return Some(Got::Overlong);
                }
                return (!self.line.is_empty()).then_some(Got::Line);
            }
            let newline = memchr::memchr(b'\n', available);
            let take = newline.map_or(available.len(), |at| at + 1);
            let over = !self.discarding && self.line.len() + take > LINE_BOUND;
            if over {
                self.line.clear();
                self.discarding = true;
            } else if !self.discarding {
                self.line.extend_from_slice(&available[..take]);
            }
            self.reader.consume(take);
            // An over-long line is answered once its end has come.
            if newline.is_some() {
                return Some(if std::mem::take(&mut self.discarding) { Got::Overlong } else { Got::Line });
            }
        }
    }

    /// Writes `answer` as one line, on a task of its own (so a `receive`
    /// rmcp drops cannot cut it), which `close` waits for.
    fn answer(&mut self, answer: Value) {
        while self.answering.try_join_next().is_some() {}
        let writer = Arc::clone(&self.writer);
        self.answering.spawn(async move {
            let mut line = answer.to_string().into_bytes();
            line.push(b'\n');
            let mut writer = writer.lock().await;
            if let Err(error) = writer.write_all(&line).await.and(writer.flush().await) {
                tracing::warn!("answering the client: {error}");
            }
        });
    }
}

/// A JSON-RPC error answer to `id`.
fn error(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// What `line` (without its newline) is.
fn read(line: &[u8]) -> Read {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xef\xbb\xbf").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Read::Skip;
    }
    let why = match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
        Ok(message) => return Read::Message(Box::new(message)),
        Err(why) => why,
    };
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        return Read::Answer(error(Value::Null, PARSE_ERROR, format!("the line is not JSON ({why})")));
    };
    let object = value.as_object();
    let method = object.and_then(|o| o.get("method")).and_then(Value::as_str);
    if let (Some(method), false) = (method, object.is_some_and(|o| o.contains_key("id"))) {
        // JSON-RPC answers no notification, not even one it cannot read.
        tracing::debug!("a notification the server does not read ({method}): ignored ({why})");
        return Read::Skip;
    }
    let id = object.and_then(|o| o.get("id")).filter(|id| id.is_string() || id.is_number());
    let message = format!("not a JSON-RPC message this server reads ({why})");
    Read::Answer(error(id.cloned().unwrap_or(Value::Null), INVALID_REQUEST, message))
}

impl<R, W> Transport<RoleServer> for Lines<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = Arc::clone(&self.writer);
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            let mut writer = writer.lock().await;
            writer.write_all(&line).await?;
            writer.flush().await
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            if let Some((_, cost)) = &self.waiting {
                // Cancel-safe: a permit acquired before a drop is released.
                let request = Arc::clone(&self.requests).acquire_owned().await.ok()?;
                let bytes = Arc::clone(&self.bytes).acquire_many_owned(*cost).await.ok()?;
                let (mut message, _) = self.waiting.take()?;
                if let ClientJsonRpcMessage::Request(request_message) = &mut message {
                    request_message
                        .request
                        .extensions_mut()
                        .insert(Admitted { _room: Arc::new((request, bytes)) });
                }
                return Some(message);
            }
            if let Got::Overlong = self.read_line().await? {
                let why = format!("a message over {INPUT_BOUND} bytes: not read");
                self.answer(error(Value::Null, INVALID_REQUEST, why));
                continue;
            }
            let line = std::mem::take(&mut self.line);
            let cost = u32::try_from(line.len().div_ceil(1 << 10).max(1)).unwrap_or(u32::MAX);
            match read(line.strip_suffix(b"\n").unwrap_or(&line)) {
                Read::Message(message) if matches!(*message, ClientJsonRpcMessage::Request(_)) => {
                    self.waiting = Some((*message, cost));
                }
                Read::Message(message) => return Some(*message),
                Read::Answer(answer) => self.answer(answer),
                Read::Skip => {}
            }
            // Keep the buffer's room for the next line.
            self.line = line;
            self.line.clear();
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        while self.answering.join_next().await.is_some() {}
        self.writer.lock().await.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(read: Read) -> (Value, Value) {
        match read {
            Read::Answer(answer) => (answer["id"].clone(), answer["error"]["code"].clone()),
            Read::Message(message) => panic!("read as a message: {message:?}"),
            Read::Skip => panic!("skipped"),
        }
    }

    #[test]
    fn every_line_that_is_no_message_is_answered() {
        for line in [
            &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":\"\xff\"}"[..],
            b"{",
            b"hello",
            br#"{"a":"\ud800"}"#,
        ] {
            assert_eq!(code(read(line)), (Value::Null, json!(PARSE_ERROR)), "{line:?}");
        }
        for line in [&b"42"[..], b"[]", b"null", br#"{"jsonrpc":"2.0"}"#] {
            assert_eq!(code(read(line)), (Value::Null, json!(INVALID_REQUEST)), "{line:?}");
        }
        assert_eq!(
            code(read(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":"x"}"#)),
            (json!(7), json!(INVALID_REQUEST))
        );
        assert!(matches!(
            read(br#"{"jsonrpc":"2.0","method":"notifications/unknown","params":3}"#),
            Read::Skip
        ));
        assert!(matches!(read(b"  \r"), Read::Skip));
        assert!(matches!(read(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Read::Message(_)));
    }
}
