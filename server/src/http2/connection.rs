//! One HTTP/2 server connection as a state machine: bytes in, events and
//! bytes out.
//!
//! Design: [`Connection::receive`] takes every whole frame off the read
//! buffer, keeps the connection's and streams' state (RFC 9113 §5.1),
//! flow-control windows both ways, the HPACK decoder and open header
//! blocks, and reports what the server must act on as [`Event`]s: a new
//! request, request body data, a stream the client ended or reset, a
//! stream with room to send again. The server answers through
//! [`Connection::send_headers`], [`Connection::send_data`],
//! [`Connection::send_trailers`] and [`Connection::reset`]; data waits in
//! its stream's queue for window, and header blocks are encoded only when
//! they are written, so the peer's HPACK decoder sees them in the order
//! they were encoded. Everything to write gathers in one buffer
//! ([`Connection::output`]), so whatever one pass produced leaves in one
//! write. A protocol error ends the stream (RST_STREAM) or the connection
//! (GOAWAY, then [`Connection::is_closed`]) as RFC 9113 §5.4 says, and
//! never panics. Request bodies are acknowledged (WINDOW_UPDATE) as the
//! server consumes them ([`Connection::release`]), so a connection holds
//! at most its window of unread data.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Bytes, BytesMut};
use hashbrown::HashMap;
use http::{HeaderMap, StatusCode};

use super::frame::{self, setting, Frame, FrameError, Reason, Settings, MAX_WINDOW};
use super::hpack::{DecodeError, Decoder, Encoder, Field, Name, Pseudo};
use super::output::Output;

/// What this server advertises.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`.
    pub(crate) max_concurrent_streams: u32,
    /// Each stream's receive window (`SETTINGS_INITIAL_WINDOW_SIZE`).
    pub(crate) stream_window: u32,
    /// The connection's receive window.
    pub(crate) connection_window: u32,
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`.
    pub(crate) max_header_list_size: u32,
}

/// The HPACK table size this server's decoder keeps (the default).
const HEADER_TABLE_SIZE: usize = 4096;

/// Streams this server may reset for the client's own errors (a malformed
/// or refused request, a stream's protocol or flow-control error) before
/// the connection ends with GOAWAY `ENHANCE_YOUR_CALM`, as the `h2` crate
/// bounds them: a client that keeps erring costs a reset each, not a
/// connection's lifetime of them.
const ERROR_RESETS_MAX: u32 = 1024;

/// Streams the client may reset before they were answered, beyond the
/// streams that were, within one period of the server's (see
/// [`Connection::forgive_resets`]), before the connection ends with
/// GOAWAY `ENHANCE_YOUR_CALM`. Opening a stream and resetting it at once
/// ("rapid reset", CVE-2023-44487) costs the client two small frames and
/// the server a request's start, and such a client resets thousands a
/// second; a client whose calls time out (while the cluster has no
/// leader, say) resets far fewer, and one whose streams are mostly
/// answered never comes near the bound.
pub const UNANSWERED_RESETS_MAX: u32 = 1024;

/// What the server must act on.
#[derive(Debug)]
pub(crate) enum Event {
    /// A new request; its body follows as `Data` unless `end_stream`.
    Request {
        stream: u32,
        request: http::Request<()>,
        end_stream: bool,
    },
    /// Request body bytes; give them back with [`Connection::release`]
    /// once consumed.
    Data {
        stream: u32,
        data: Bytes,
        end_stream: bool,
    },
    /// The request ended without data (trailers, or an empty DATA frame
    /// with END_STREAM that carried nothing).
    End { stream: u32 },
    /// The stream is gone: the client reset it, or its request was
    /// malformed. The server drops its work for it.
    Reset { stream: u32 },
    /// A stream told to wait has room in its queue again.
    Writable { stream: u32 },
}

/// Something queued on a stream, waiting for window.
#[derive(Debug)]
enum Queued {
    Data { data: Bytes, end_stream: bool },
    Trailers(HeaderMap),
}

#[derive(Debug)]
struct Stream {
    /// The client may still send on it.
    recv_open: bool,
    /// We have not ended our side.
    send_open: bool,
    send_window: i64,
    recv_window: i64,
    /// Consumed by the server, not yet given back to the client.
    recv_released: u32,
    queue: VecDeque<Queued>,
    queued_bytes: usize,
    /// Waiting in [`Connection::starved`] for the connection's window.
    starved: bool,
    /// Told to wait for room (see [`Connection::has_room`]).
    waiting: bool,
    /// Its response's headers went out.
    answered: bool,
}

/// Header blocks out: the HPACK encoder, and the buffer it encodes into.
struct Blocks {
    encoder: Encoder,
    scratch: Vec<u8>,
}

impl Blocks {
    /// Appends `headers` (after `:status`, when given) as a HEADERS frame
    /// and as many CONTINUATIONs as frames of `max_frame_size` need. Blocks
    /// are encoded as they are written, so the peer decodes them in the
    /// order they were encoded.
    fn write(
        &mut self,
        out: &mut BytesMut,
        stream: u32,
        status: Option<StatusCode>,
        headers: &HeaderMap,
        end_stream: bool,
        max_frame_size: u32,
    ) {
        self.scratch.clear();
        self.encoder.encode(status, headers, &mut self.scratch);
        frame::write_headers(out, stream, &self.scratch, end_stream, max_frame_size);
    }
}

/// One client connection's HTTP/2 state.
pub(crate) struct Connection {
    config: Config,
    /// The client preface has been read.
    preface: bool,
    decoder: Decoder,
    blocks: Blocks,
    peer_max_frame_size: u32,
    peer_initial_window: u32,
    streams: HashMap<u32, Stream>,
    /// The highest stream id the client opened.
    last_stream: u32,
    send_window: i64,
    recv_window: i64,
    recv_released: u32,
    /// Streams with data waiting for the connection's window, in order.
    starved: VecDeque<u32>,
    /// An open header block: (stream, end_stream, bytes so far).
    block: Option<(u32, bool, Vec<u8>)>,
    out: Output,
    /// Reused for each request's fields.
    fields: Vec<Field>,
    /// We sent GOAWAY: nothing more is read.
    closed: bool,
    /// The client sent GOAWAY: the connection ends when its streams do.
    peer_gone: bool,
    /// Streams reset for the client's errors ([`ERROR_RESETS_MAX`]).
    error_resets: u32,
    /// Streams the client reset unanswered, less those answered, in this
    /// period ([`UNANSWERED_RESETS_MAX`]).
    unanswered_resets: u32,
}

impl Connection {
    /// A connection that has read nothing yet; our SETTINGS (and the
    /// connection window's first update) are already in the output.
    pub(crate) fn new(config: Config) -> Self {
        let mut out = Output::default();
        frame::write_settings(
            out.buf(),
            &[
                (setting::ENABLE_PUSH, 0),
                (
                    setting::MAX_CONCURRENT_STREAMS,
                    config.max_concurrent_streams,
                ),
                (
                    setting::INITIAL_WINDOW_SIZE,
                    config.stream_window.min(MAX_WINDOW),
                ),
                (setting::MAX_HEADER_LIST_SIZE, config.max_header_list_size),
            ],
        );
        let default_window = 65_535;
        let connection_window = config.connection_window.clamp(default_window, MAX_WINDOW);
        if connection_window > default_window {
            frame::write_window_update(out.buf(), 0, connection_window - default_window);
        }
        Self {
            config: Config {
                connection_window,
                ..config
            },
            preface: false,
            decoder: Decoder::new(HEADER_TABLE_SIZE),
            blocks: Blocks {
                encoder: Encoder::new(),
                scratch: Vec::with_capacity(256),
            },
            peer_max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            peer_initial_window: default_window,
            streams: HashMap::new(),
            last_stream: 0,
            send_window: i64::from(default_window),
            recv_window: i64::from(connection_window),
            recv_released: 0,
            starved: VecDeque::new(),
            block: None,
            out,
            fields: Vec::with_capacity(16),
            closed: false,
            peer_gone: false,
            error_resets: 0,
            unanswered_resets: 0,
        }
    }

    /// Reads every whole frame in `buf`, reporting to `events`.
    pub(crate) fn receive(&mut self, buf: &mut BytesMut, events: &mut Vec<Event>) {
        if !self.preface {
            let have = buf.len().min(frame::PREFACE.len());
            if buf[..have] != frame::PREFACE[..have] {
                return self.fail(Reason::PROTOCOL_ERROR);
            }
            if have < frame::PREFACE.len() {
                return;
            }
            let _ = buf.split_to(have);
            self.preface = true;
        }
        while !self.closed {
            match frame::decode(buf, frame::DEFAULT_MAX_FRAME_SIZE) {
                Ok(Some(frame)) => {
                    if let Err(error) = self.on_frame(frame, events) {
                        self.on_error(error, events);
                    }
                }
                Ok(None) => return,
                Err(error) => self.on_error(error, events),
            }
        }
    }

    /// How many bytes wait to be written.
    pub(crate) fn output_len(&self) -> usize {
        self.out.len()
    }

    /// Fills `slices` with the bytes to write, in order (see
    /// [`Output::slices`]); call [`Connection::written`] with how many
    /// went.
    pub(crate) fn output<'a>(&'a self, slices: &mut [IoSlice<'a>]) -> usize {
        self.out.slices(slices)
    }

    /// `n` bytes of [`Connection::output`] were written.
    pub(crate) fn written(&mut self, n: usize) {
        self.out.advance(n);
    }

    /// The output holds nothing but PING acknowledgements.
    pub(crate) fn only_pongs(&self) -> bool {
        self.out.only_pongs()
    }

    /// Whether the client reset streams unanswered in this period (see
    /// [`Connection::forgive_resets`]).
    pub(crate) fn has_unanswered_resets(&self) -> bool {
        self.unanswered_resets > 0
    }

    /// Starts a new period for [`UNANSWERED_RESETS_MAX`]: the server calls
    /// it a while after resets began (a second), so the bound is on how
    /// fast a client resets, not on how many it ever did.
    pub(crate) fn forgive_resets(&mut self) {
        self.unanswered_resets = 0;
    }

    /// The connection is over: once the output is written, close it.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed || (self.peer_gone && self.streams.is_empty())
    }

    /// Whether `stream` may queue more: nothing of it waits for window.
    /// When not, an [`Event::Writable`] tells when it may again. So a
    /// response body is read no faster than the client reads the stream,
    /// and what the server streams (watch events, range chunks) waits
    /// where it is produced, as the client's windows ask.
    pub(crate) fn has_room(&mut self, stream: u32) -> bool {
        match self.streams.get_mut(&stream) {
            Some(s) if s.queued_bytes > 0 => {
                s.waiting = true;
                false
            }
            _ => true,
        }
    }

    /// Sends the response's HEADERS; `end_stream` for a response without
    /// body or trailers (gRPC's trailers-only responses).
    pub(crate) fn send_headers(
        &mut self,
        stream: u32,
        status: StatusCode,
        headers: &HeaderMap,
        end_stream: bool,
    ) {
        let Some(s) = self.streams.get_mut(&stream).filter(|s| s.send_open) else {
            return;
        };
        if !std::mem::replace(&mut s.answered, true) {
            self.unanswered_resets = self.unanswered_resets.saturating_sub(1);
        }
        self.blocks.write(
            self.out.buf(),
            stream,
            Some(status),
            headers,
            end_stream,
            self.peer_max_frame_size,
        );
        if end_stream {
            self.end_sent(stream);
        }
    }

    /// Queues response body bytes, and sends what the windows allow.
    pub(crate) fn send_data(&mut self, stream: u32, data: Bytes, end_stream: bool) {
        self.enqueue(stream, Queued::Data { data, end_stream });
    }

    /// Queues the response's trailers (they end the stream).
    pub(crate) fn send_trailers(&mut self, stream: u32, trailers: HeaderMap) {
        self.enqueue(stream, Queued::Trailers(trailers));
    }

    /// Ends `stream` with RST_STREAM; nothing queued on it is sent.
    pub(crate) fn reset(&mut self, stream: u32, reason: Reason) {
        if self.streams.remove(&stream).is_some() {
            frame::write_reset(self.out.buf(), stream, reason);
        }
    }

    /// The server consumed `n` bytes of `stream`'s request body: the
    /// client may send them again once enough have gathered.
    pub(crate) fn release(&mut self, stream: u32, n: usize) {
        let n = n.min(MAX_WINDOW as usize) as u32;
        self.recv_released = self.recv_released.saturating_add(n);
        if self.recv_released >= self.config.connection_window / 2 {
            frame::write_window_update(self.out.buf(), 0, self.recv_released);
            self.recv_window += i64::from(self.recv_released);
            self.recv_released = 0;
        }
        let half = self.config.stream_window / 2;
        if let Some(s) = self.streams.get_mut(&stream) {
            if !s.recv_open {
                return;
            }
            s.recv_released = s.recv_released.saturating_add(n);
            if s.recv_released >= half {
                frame::write_window_update(self.out.buf(), stream, s.recv_released);
                s.recv_window += i64::from(s.recv_released);
                s.recv_released = 0;
            }
        }
    }

    fn enqueue(&mut self, stream: u32, item: Queued) {
        let Some(s) = self.streams.get_mut(&stream) else {
            return;
        };
        if !s.send_open {
            return;
        }
        if let Queued::Data { data, .. } = &item {
            s.queued_bytes += data.len();
        }
        let ends = matches!(
            item,
            Queued::Trailers(_)
                | Queued::Data {
                    end_stream: true,
                    ..
                }
        );
        if ends {
            s.send_open = false;
        }
        self.send(stream, Some(item), &mut Vec::new());
    }

    /// Writes what `stream`'s windows let go of its queue.
    fn flush(&mut self, id: u32, events: &mut Vec<Event>) {
        self.send(id, None, events);
    }

    /// Writes what `id`'s windows let go of its queue and then of `item`;
    /// what they hold back stays queued, `item` behind the rest. An item
    /// written at once is never queued (a unary call's answer usually is).
    fn send(&mut self, id: u32, mut item: Option<Queued>, events: &mut Vec<Event>) {
        let max_frame = self.peer_max_frame_size as usize;
        let mut ended = false;
        {
            let Some(stream) = self.streams.get_mut(&id) else {
                return;
            };
            while let Some(next) = stream.queue.pop_front().or_else(|| item.take()) {
                match next {
                    Queued::Data {
                        mut data,
                        end_stream,
                    } => {
                        let window = stream.send_window.min(self.send_window).max(0) as usize;
                        let n = data.len().min(window).min(max_frame);
                        if n == 0 && !data.is_empty() {
                            if self.send_window <= 0 && !stream.starved {
                                stream.starved = true;
                                self.starved.push_back(id);
                            }
                            stream.queue.push_front(Queued::Data { data, end_stream });
                            break;
                        }
                        let last = n == data.len();
                        let end = last && end_stream;
                        frame::write_data_head(self.out.buf(), id, n, end);
                        stream.send_window -= n as i64;
                        self.send_window -= n as i64;
                        stream.queued_bytes -= n;
                        if last {
                            self.out.payload(data);
                            ended |= end;
                        } else {
                            self.out.payload(data.split_to(n));
                            stream.queue.push_front(Queued::Data { data, end_stream });
                        }
                    }
                    Queued::Trailers(trailers) => {
                        self.blocks.write(
                            self.out.buf(),
                            id,
                            None,
                            &trailers,
                            true,
                            max_frame as u32,
                        );
                        ended = true;
                    }
                }
            }
            stream.queue.extend(item);
            if stream.waiting && stream.queued_bytes == 0 {
                stream.waiting = false;
                events.push(Event::Writable { stream: id });
            }
        }
        if ended {
            self.end_sent(id);
        }
    }

    /// Our side of `id` has ended on the wire: the stream closes, and a
    /// client still sending is told to stop (RST_STREAM NO_ERROR, as gRPC
    /// servers do).
    fn end_sent(&mut self, id: u32) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        stream.send_open = false;
        if stream.recv_open {
            frame::write_reset(self.out.buf(), id, Reason::NO_ERROR);
        }
        self.streams.remove(&id);
    }

    fn on_error(&mut self, error: FrameError, events: &mut Vec<Event>) {
        match error {
            FrameError::Connection(reason) => self.fail(reason),
            FrameError::Stream(stream, reason) => {
                if self.streams.remove(&stream).is_some() {
                    events.push(Event::Reset { stream });
                }
                self.reset_for_error(stream, reason);
            }
        }
    }

    /// Resets `stream` for the client's own error; past
    /// [`ERROR_RESETS_MAX`] of them, the connection ends.
    fn reset_for_error(&mut self, stream: u32, reason: Reason) {
        frame::write_reset(self.out.buf(), stream, reason);
        self.error_resets += 1;
        if self.error_resets > ERROR_RESETS_MAX {
            self.fail(Reason::ENHANCE_YOUR_CALM);
        }
    }

    /// Ends the connection with GOAWAY.
    fn fail(&mut self, reason: Reason) {
        if !self.closed {
            frame::write_goaway(self.out.buf(), self.last_stream, reason);
            self.closed = true;
        }
    }

    fn on_frame(&mut self, frame: Frame, events: &mut Vec<Event>) -> Result<(), FrameError> {
        use FrameError::{Connection as Conn, Stream as OnStream};
        if let Some((open, _, _)) = &self.block {
            if !matches!(&frame, Frame::Continuation { stream, .. } if stream == open) {
                return Err(Conn(Reason::PROTOCOL_ERROR));
            }
        }
        match frame {
            Frame::Data {
                stream: id,
                data,
                end_stream,
                flow_len,
            } => {
                let flow = i64::from(flow_len);
                if flow > self.recv_window {
                    return Err(Conn(Reason::FLOW_CONTROL_ERROR));
                }
                self.recv_window -= flow;
                let Some(stream) = self.streams.get_mut(&id).filter(|s| s.recv_open) else {
                    // Data for a stream already over: the connection's
                    // window is given back at once.
                    self.release(0, flow_len as usize);
                    if id > self.last_stream {
                        return Err(Conn(Reason::PROTOCOL_ERROR));
                    }
                    return Ok(());
                };
                if flow > stream.recv_window {
                    self.release(0, flow_len as usize);
                    return Err(OnStream(id, Reason::FLOW_CONTROL_ERROR));
                }
                stream.recv_window -= flow;
                if end_stream {
                    stream.recv_open = false;
                }
                // Padding is never handed on, so it is given back now.
                let padding = flow_len as usize - data.len();
                if padding > 0 {
                    self.release(id, padding);
                }
                if data.is_empty() {
                    if end_stream {
                        events.push(Event::End { stream: id });
                    }
                } else {
                    events.push(Event::Data {
                        stream: id,
                        data,
                        end_stream,
                    });
                }
                if end_stream {
                    self.close_if_done(id);
                }
            }
            Frame::Headers {
                stream,
                block,
                end_stream,
                end_headers,
            } => {
                if end_headers {
                    self.on_block(stream, end_stream, &block, events)?;
                } else {
                    self.block = Some((stream, end_stream, block.to_vec()));
                }
            }
            Frame::Continuation {
                stream: _,
                block,
                end_headers,
            } => {
                let Some((open, end_stream, mut gathered)) = self.block.take() else {
                    return Err(Conn(Reason::PROTOCOL_ERROR));
                };
                gathered.extend_from_slice(&block);
                if gathered.len() > 4 * self.config.max_header_list_size as usize {
                    return Err(Conn(Reason::ENHANCE_YOUR_CALM));
                }
                if end_headers {
                    self.on_block(open, end_stream, &gathered, events)?;
                } else {
                    self.block = Some((open, end_stream, gathered));
                }
            }
            Frame::Priority | Frame::Unknown | Frame::SettingsAck => {}
            Frame::Reset { stream, .. } => {
                if stream > self.last_stream {
                    return Err(Conn(Reason::PROTOCOL_ERROR));
                }
                if let Some(reset) = self.streams.remove(&stream) {
                    events.push(Event::Reset { stream });
                    if !reset.answered {
                        self.unanswered_resets += 1;
                        if self.unanswered_resets > UNANSWERED_RESETS_MAX {
                            return Err(Conn(Reason::ENHANCE_YOUR_CALM));
                        }
                    }
                }
            }
            Frame::Settings(settings) => self.on_settings(settings, events)?,
            Frame::Ping { ack: true, .. } => {}
            Frame::Ping {
                ack: false,
                payload,
            } => {
                self.out.pong(payload);
            }
            Frame::GoAway { .. } => self.peer_gone = true,
            Frame::WindowUpdate {
                stream: 0,
                increment,
            } => {
                self.send_window += i64::from(increment);
                if self.send_window > i64::from(MAX_WINDOW) {
                    return Err(Conn(Reason::FLOW_CONTROL_ERROR));
                }
                while self.send_window > 0 {
                    let Some(id) = self.starved.pop_front() else {
                        break;
                    };
                    if let Some(stream) = self.streams.get_mut(&id) {
                        stream.starved = false;
                    }
                    self.flush(id, events);
                }
            }
            Frame::WindowUpdate {
                stream: id,
                increment,
            } => {
                let Some(stream) = self.streams.get_mut(&id) else {
                    if id > self.last_stream {
                        return Err(Conn(Reason::PROTOCOL_ERROR));
                    }
                    return Ok(());
                };
                stream.send_window += i64::from(increment);
                if stream.send_window > i64::from(MAX_WINDOW) {
                    return Err(OnStream(id, Reason::FLOW_CONTROL_ERROR));
                }
                self.flush(id, events);
            }
        }
        Ok(())
    }

    fn on_settings(
        &mut self,
        settings: Settings,
        events: &mut Vec<Event>,
    ) -> Result<(), FrameError> {
        if let Some(size) = settings.header_table_size {
            self.blocks.encoder.set_max_table_size(size as usize);
        }
        if let Some(size) = settings.max_frame_size {
            self.peer_max_frame_size = size;
        }
        if let Some(window) = settings.initial_window_size {
            let delta = i64::from(window) - i64::from(self.peer_initial_window);
            self.peer_initial_window = window;
            for stream in self.streams.values_mut() {
                stream.send_window += delta;
                if stream.send_window > i64::from(MAX_WINDOW) {
                    return Err(FrameError::Connection(Reason::FLOW_CONTROL_ERROR));
                }
            }
            if delta > 0 {
                let ids: Vec<u32> = self.streams.keys().copied().collect();
                for id in ids {
                    self.flush(id, events);
                }
            }
        }
        frame::write_settings_ack(self.out.buf());
        Ok(())
    }

    /// A whole header block for `id`: a new request, or trailers.
    fn on_block(
        &mut self,
        id: u32,
        end_stream: bool,
        block: &[u8],
        events: &mut Vec<Event>,
    ) -> Result<(), FrameError> {
        use FrameError::{Connection as Conn, Stream as OnStream};
        let fields = &mut self.fields;
        fields.clear();
        let decoded =
            self.decoder
                .decode(block, self.config.max_header_list_size as usize, |field| {
                    fields.push(field)
                });
        if decoded == Err(DecodeError::Compression) {
            return Err(Conn(Reason::COMPRESSION_ERROR));
        }
        if let Some(stream) = self.streams.get_mut(&id) {
            // Trailers: they must end the stream, and are not handed on.
            if !stream.recv_open || !end_stream || decoded.is_err() {
                return Err(OnStream(id, Reason::PROTOCOL_ERROR));
            }
            stream.recv_open = false;
            events.push(Event::End { stream: id });
            self.close_if_done(id);
            return Ok(());
        }
        if id.is_multiple_of(2) {
            return Err(Conn(Reason::PROTOCOL_ERROR));
        }
        if id <= self.last_stream {
            // A stream already over (ours ended first, or was refused):
            // the block kept the decoder in step, and nothing else is due.
            return Ok(());
        }
        self.last_stream = id;
        if self.peer_gone {
            return Ok(());
        }
        if self.streams.len() >= self.config.max_concurrent_streams as usize {
            self.reset_for_error(id, Reason::REFUSED_STREAM);
            return Ok(());
        }
        let request = match decoded.ok().and_then(|()| request(&mut self.fields)) {
            Some(request) => request,
            None => {
                self.reset_for_error(id, Reason::PROTOCOL_ERROR);
                return Ok(());
            }
        };
        self.streams.insert(
            id,
            Stream {
                recv_open: !end_stream,
                send_open: true,
                send_window: i64::from(self.peer_initial_window),
                recv_window: i64::from(self.config.stream_window),
                recv_released: 0,
                queue: VecDeque::new(),
                queued_bytes: 0,
                starved: false,
                waiting: false,
                answered: false,
            },
        );
        events.push(Event::Request {
            stream: id,
            request,
            end_stream,
        });
        Ok(())
    }

    /// Nothing for a stream whose both sides are over.
    fn close_if_done(&mut self, id: u32) {
        if self
            .streams
            .get(&id)
            .is_some_and(|s| !s.recv_open && !s.send_open && s.queue.is_empty())
        {
            self.streams.remove(&id);
        }
    }
}

/// Builds a request's head from its fields, or `None` when they make a
/// malformed request (RFC 9113 §8.1.1, §8.3.1).
fn request(fields: &mut Vec<Field>) -> Option<http::Request<()>> {
    let mut method = None;
    let mut path = None;
    let mut scheme = false;
    let mut headers = HeaderMap::with_capacity(fields.len());
    for Field { name, value } in fields.drain(..) {
        match name {
            Name::Pseudo(pseudo) => {
                if !headers.is_empty() {
                    return None;
                }
                let slot = match pseudo {
                    Pseudo::Method => &mut method,
                    Pseudo::Path => &mut path,
                    Pseudo::Scheme => {
                        if std::mem::replace(&mut scheme, true) {
                            return None;
                        }
                        continue;
                    }
                    // The authority is not needed to route a request; it is
                    // accepted as any client writes it.
                    Pseudo::Authority => continue,
                    Pseudo::Status | Pseudo::Protocol => return None,
                };
                if slot.replace(value).is_some() {
                    return None;
                }
            }
            Name::Header(name) => {
                if is_connection_specific(&name, &value) {
                    return None;
                }
                let value = http::HeaderValue::from_maybe_shared(value).ok()?;
                headers.append(name, value);
            }
        }
    }
    let method = http::Method::from_bytes(&method?).ok()?;
    let path = path.filter(|p| !p.is_empty())?;
    if !scheme {
        return None;
    }
    let uri = http::Uri::from_maybe_shared(path).ok()?;
    let mut request = http::Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = http::Version::HTTP_2;
    *request.headers_mut() = headers;
    Some(request)
}

/// Fields HTTP/2 forbids (RFC 9113 §8.2.2): `te` only as `trailers`.
fn is_connection_specific(name: &http::HeaderName, value: &Bytes) -> bool {
    use http::header::{CONNECTION, TE, TRANSFER_ENCODING, UPGRADE};
    if name == TE {
        return value.as_ref() != b"trailers";
    }
    name == CONNECTION
        || name == TRANSFER_ENCODING
        || name == UPGRADE
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

#[cfg(test)]
mod tests;
