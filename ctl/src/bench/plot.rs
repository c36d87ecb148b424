//! Figures of a run, the two etcd's performance reports show: latency over
//! time, and latency against throughput, side by side.
//!
//! The layout — panels, scales, ticks, series, legends, labels — is decided
//! once, by [`figure`], as a [`Figure`]: a short list of drawing primitives
//! in figure units (SVG user units, y down). Two small backends only draw
//! it, and must never decide what goes where: [`svg()`] writes hand-written
//! SVG (no plotting dependency; the files diff and open anywhere), and
//! [`png()`] rasterizes the same primitives at twice the size with an
//! embedded bitmap font and encodes them with the `png` crate.

mod font;
mod raster;
mod svg;

use std::fmt;
use std::path::Path;

use super::report::{Report, Sample};

/// Samples drawn as dots at most; more would make the file heavy without
/// showing anything new (the windowed lines carry the aggregate).
const DOTS_MAX: usize = 4000;

/// Time windows the run is cut into for the lines and the curve.
const WINDOWS: usize = 40;

const PANEL_WIDTH: f64 = 560.0;
const PANEL_HEIGHT: f64 = 320.0;
const MARGIN: f64 = 60.0;

/// The figure's default font size, units; text of this size carries no
/// size of its own in the SVG.
const FONT_SIZE: f64 = 12.0;

/// The file formats a figure is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Hand-written SVG text.
    Svg,
    /// An RGB PNG image.
    Png,
}

impl Format {
    /// PNG for a path ending in `.png` (in any case), SVG for anything else.
    pub fn for_path(path: &Path) -> Self {
        match path.extension() {
            Some(extension) if extension.eq_ignore_ascii_case("png") => Self::Png,
            _ => Self::Svg,
        }
    }
}

/// Why a figure could not be written.
#[derive(Debug)]
#[non_exhaustive]
pub enum PlotError {
    /// The PNG encoder refused the image.
    Png(png::EncodingError),
}

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Png(e) => write!(f, "encoding PNG: {e}"),
        }
    }
}

impl std::error::Error for PlotError {}

/// The file contents of the figure of `report` titled `title` in `format`.
pub fn render(report: &Report, title: &str, format: Format) -> Result<Vec<u8>, PlotError> {
    match format {
        Format::Svg => Ok(svg(report, title).into_bytes()),
        Format::Png => png(report, title),
    }
}

/// The whole figure as SVG text.
pub fn svg(report: &Report, title: &str) -> String {
    svg::write(&figure(report, title))
}

/// The whole figure as a PNG image, twice the SVG's size (two pixels per
/// unit), 8-bit RGB.
pub fn png(report: &Report, title: &str) -> Result<Vec<u8>, PlotError> {
    raster::png(&figure(report, title)).map_err(PlotError::Png)
}

/// A drawing in figure units (the SVG's user units): x right, y down.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// Width, units.
    pub width: f64,
    /// Height, units.
    pub height: f64,
    /// Fills the figure before anything is drawn.
    pub background: Colour,
    /// Drawn in order, later rows over earlier ones. Shapes that belong
    /// together (a tick's grid line and its label, a legend swatch and its
    /// text) share a row, which is one line of the SVG.
    pub rows: Vec<Vec<Shape>>,
}

/// One drawing primitive. Coordinates are in figure units.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// An unfilled rectangle outlined 1 unit wide.
    Frame {
        /// Top-left corner.
        at: (f64, f64),
        /// Width, units.
        width: f64,
        /// Height, units.
        height: f64,
        /// Outline colour.
        stroke: Colour,
    },
    /// A straight line.
    Line {
        /// One end.
        from: (f64, f64),
        /// The other end.
        to: (f64, f64),
        /// Colour.
        stroke: Colour,
        /// Width, units.
        width: f64,
    },
    /// Connected line segments through at least one point.
    Polyline {
        /// The points, in drawing order.
        points: Vec<(f64, f64)>,
        /// Colour.
        stroke: Colour,
        /// Width, units.
        width: f64,
    },
    /// A filled disc: a sample, or a point on a curve.
    Dot {
        /// Centre.
        centre: (f64, f64),
        /// Radius, units.
        radius: f64,
        /// Colour.
        fill: Colour,
        /// 1 for opaque; less lets overlapping samples show density.
        opacity: f64,
    },
    /// A line of black text (SVG's default fill).
    Text {
        /// The anchor point, on the baseline.
        at: (f64, f64),
        /// The text, unescaped.
        text: String,
        /// Which point of the text `at` is.
        anchor: Anchor,
        /// Font size, units.
        size: f64,
        /// Turned a quarter counter-clockwise about `at`, reading upwards
        /// (a y-axis label).
        vertical: bool,
    },
}

/// Which point of a text its position names, along the reading direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    /// The text starts there.
    Start,
    /// The text is centred there.
    Middle,
    /// The text ends there.
    End,
}

/// A colour, with the spelling the SVG has always used for it (so the SVG
/// output stays byte-for-byte what it was) and its RGB value for rasters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Colour {
    /// As written in SVG.
    pub svg: &'static str,
    /// Red, green, blue.
    pub rgb: [u8; 3],
}

impl Colour {
    /// The background.
    pub const WHITE: Self = Self::new("white", [0xff, 0xff, 0xff]);
    /// Panel frames.
    pub const FRAME: Self = Self::new("#888", [0x88, 0x88, 0x88]);
    /// Grid lines.
    pub const GRID: Self = Self::new("#eee", [0xee, 0xee, 0xee]);
    /// Individual samples.
    pub const SAMPLE: Self = Self::new("#4878d0", [0x48, 0x78, 0xd0]);
    /// The 99th percentile series.
    pub const P99: Self = Self::new("#d65f5f", [0xd6, 0x5f, 0x5f]);
    /// The mean series.
    pub const MEAN: Self = Self::new("#222222", [0x22, 0x22, 0x22]);

    const fn new(svg: &'static str, rgb: [u8; 3]) -> Self {
        Self { svg, rgb }
    }
}

/// One time window's throughput and latency.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// Window start, seconds into the run.
    pub start_s: f64,
    /// Completed requests per second in the window.
    pub throughput: f64,
    /// Mean latency, milliseconds.
    pub mean_ms: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
}

/// Cuts the run into [`WINDOWS`] equal windows by send time (empty windows
/// are left out).
pub fn windows(report: &Report) -> Vec<Window> {
    let span_us = report
        .samples
        .iter()
        .map(|s| s.start_us + u64::from(s.latency_us))
        .max()
        .unwrap_or(0)
        .max(1);
    let width_us = (span_us as f64 / WINDOWS as f64).max(1.0);
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); WINDOWS];
    for s in &report.samples {
        let i = ((s.start_us as f64 / width_us) as usize).min(WINDOWS - 1);
        buckets[i].push(s.latency_us);
    }
    buckets
        .into_iter()
        .enumerate()
        .filter(|(_, b)| !b.is_empty())
        .map(|(i, mut b)| {
            b.sort_unstable();
            let mean = b.iter().map(|&v| f64::from(v)).sum::<f64>() / b.len() as f64;
            Window {
                start_s: i as f64 * width_us / 1e6,
                throughput: b.len() as f64 / (width_us / 1e6),
                mean_ms: mean / 1e3,
                p99_ms: f64::from(Report::quantile_us(&b, 0.99)) / 1e3,
            }
        })
        .collect()
}

/// The layout of both panels side by side, titled with `title`.
pub fn figure(report: &Report, title: &str) -> Figure {
    let windows = windows(report);
    let width = 2.0 * (PANEL_WIDTH + 2.0 * MARGIN);
    let mut figure = Figure {
        width,
        height: PANEL_HEIGHT + 2.0 * MARGIN + 30.0,
        background: Colour::WHITE,
        rows: Vec::new(),
    };
    figure
        .rows
        .push(vec![text((width / 2.0, 22.0), title, Anchor::Middle, 15.0)]);
    // Latency over time.
    let dots = thin(&report.samples);
    let x_max = windows
        .last()
        .map_or(1.0, |w| w.start_s)
        .max(report.elapsed.as_secs_f64())
        .max(1e-3);
    // The lines count too: when the dots are thinned, a window's p99 or
    // mean can be slower than every dot, and would run out of the panel.
    let y_max = dots
        .iter()
        .map(|s| f64::from(s.latency_us) / 1e3)
        .chain(windows.iter().flat_map(|w| [w.p99_ms, w.mean_ms]))
        .fold(0.0, f64::max)
        .max(1e-3);
    let left = Panel::new(MARGIN, MARGIN + 30.0, x_max, y_max);
    left.axes(&mut figure, "time (s)", "latency (ms)", "Latency over time");
    for s in &dots {
        figure.rows.push(vec![Shape::Dot {
            centre: left.point(s.start_us as f64 / 1e6, f64::from(s.latency_us) / 1e3),
            radius: 1.2,
            fill: Colour::SAMPLE,
            opacity: 0.35,
        }]);
    }
    left.line(
        &mut figure,
        windows.iter().map(|w| (w.start_s, w.p99_ms)),
        Colour::P99,
    );
    left.line(
        &mut figure,
        windows.iter().map(|w| (w.start_s, w.mean_ms)),
        Colour::MEAN,
    );
    left.legend(
        &mut figure,
        &[
            (Colour::P99, "p99 per window"),
            (Colour::MEAN, "mean per window"),
        ],
    );
    // Throughput against latency.
    let mut curve: Vec<&Window> = windows.iter().collect();
    curve.sort_by(|a, b| a.throughput.total_cmp(&b.throughput));
    let x_max = curve
        .iter()
        .map(|w| w.throughput)
        .fold(0.0, f64::max)
        .max(1.0);
    // One slow request in a window can lift its mean above its p99.
    let y_max = curve
        .iter()
        .flat_map(|w| [w.p99_ms, w.mean_ms])
        .fold(0.0, f64::max)
        .max(1e-3);
    let right = Panel::new(MARGIN * 3.0 + PANEL_WIDTH, MARGIN + 30.0, x_max, y_max);
    right.axes(
        &mut figure,
        "throughput (requests/s)",
        "latency (ms)",
        "Latency against throughput",
    );
    right.line(
        &mut figure,
        curve.iter().map(|w| (w.throughput, w.p99_ms)),
        Colour::P99,
    );
    right.line(
        &mut figure,
        curve.iter().map(|w| (w.throughput, w.mean_ms)),
        Colour::MEAN,
    );
    for w in &curve {
        figure.rows.push(vec![Shape::Dot {
            centre: right.point(w.throughput, w.mean_ms),
            radius: 2.5,
            fill: Colour::MEAN,
            opacity: 1.0,
        }]);
    }
    right.legend(&mut figure, &[(Colour::P99, "p99"), (Colour::MEAN, "mean")]);
    figure
}

/// Every n-th sample (in send order), at most [`DOTS_MAX`].
fn thin(samples: &[Sample]) -> Vec<Sample> {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable_by_key(|s| s.start_us);
    let step = sorted.len().div_ceil(DOTS_MAX).max(1);
    sorted.into_iter().step_by(step).collect()
}

fn text(at: (f64, f64), text: &str, anchor: Anchor, size: f64) -> Shape {
    Shape::Text {
        at,
        text: text.to_owned(),
        anchor,
        size,
        vertical: false,
    }
}

/// One panel's place in the figure and its scales (from 0 to a nice
/// ceiling on both axes).
struct Panel {
    left: f64,
    top: f64,
    x_max: f64,
    y_max: f64,
}

impl Panel {
    fn new(left: f64, top: f64, x_max: f64, y_max: f64) -> Self {
        Self {
            left,
            top,
            x_max: nice_ceiling(x_max),
            y_max: nice_ceiling(y_max),
        }
    }

    fn point(&self, x: f64, y: f64) -> (f64, f64) {
        (
            self.left + x / self.x_max * PANEL_WIDTH,
            self.top + PANEL_HEIGHT - y / self.y_max * PANEL_HEIGHT,
        )
    }

    fn axes(&self, figure: &mut Figure, x_label: &str, y_label: &str, title: &str) {
        let (l, t, w, h) = (self.left, self.top, PANEL_WIDTH, PANEL_HEIGHT);
        figure.rows.push(vec![Shape::Frame {
            at: (l, t),
            width: w,
            height: h,
            stroke: Colour::FRAME,
        }]);
        figure.rows.push(vec![text(
            (l + w / 2.0, t - 10.0),
            title,
            Anchor::Middle,
            13.0,
        )]);
        for i in 0..=5 {
            let f = f64::from(i) / 5.0;
            let x = l + f * w;
            let y = t + h - f * h;
            figure.rows.push(vec![
                grid_line((x, t), (x, t + h)),
                text(
                    (x, t + h + 16.0),
                    &tick(f * self.x_max),
                    Anchor::Middle,
                    FONT_SIZE,
                ),
            ]);
            figure.rows.push(vec![
                grid_line((l, y), (l + w, y)),
                text(
                    (l - 6.0, y + 4.0),
                    &tick(f * self.y_max),
                    Anchor::End,
                    FONT_SIZE,
                ),
            ]);
        }
        figure.rows.push(vec![text(
            (l + w / 2.0, t + h + 36.0),
            x_label,
            Anchor::Middle,
            FONT_SIZE,
        )]);
        figure.rows.push(vec![Shape::Text {
            at: (l - 44.0, t + h / 2.0),
            text: y_label.to_owned(),
            anchor: Anchor::Middle,
            size: FONT_SIZE,
            vertical: true,
        }]);
    }

    fn line(&self, figure: &mut Figure, points: impl Iterator<Item = (f64, f64)>, stroke: Colour) {
        let points: Vec<(f64, f64)> = points.map(|(x, y)| self.point(x, y)).collect();
        if !points.is_empty() {
            figure.rows.push(vec![Shape::Polyline {
                points,
                stroke,
                width: 1.5,
            }]);
        }
    }

    fn legend(&self, figure: &mut Figure, entries: &[(Colour, &str)]) {
        for (i, (stroke, label)) in entries.iter().enumerate() {
            let y = self.top + 14.0 + 16.0 * i as f64;
            let x = self.left + PANEL_WIDTH - 150.0;
            figure.rows.push(vec![
                Shape::Line {
                    from: (x, y),
                    to: (x + 20.0, y),
                    stroke: *stroke,
                    width: 2.0,
                },
                text((x + 26.0, y + 4.0), label, Anchor::Start, FONT_SIZE),
            ]);
        }
    }
}

fn grid_line(from: (f64, f64), to: (f64, f64)) -> Shape {
    Shape::Line {
        from,
        to,
        stroke: Colour::GRID,
        width: 1.0,
    }
}

/// The smallest 1, 2 or 5 times a power of ten at or above `value`.
fn nice_ceiling(value: f64) -> f64 {
    let magnitude = 10f64.powf(value.log10().floor());
    for step in [1.0, 2.0, 5.0, 10.0] {
        if step * magnitude >= value {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

fn tick(value: f64) -> String {
    if value == 0.0 || value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 1.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn windows_cover_every_sample() {
        let report = Report {
            samples: (0..1000)
                .map(|i| Sample {
                    start_us: i * 1000,
                    latency_us: 500 + (i % 7) as u32,
                })
                .collect(),
            elapsed: Duration::from_secs(1),
            ..Default::default()
        };
        let w = windows(&report);
        let total: f64 = w.iter().map(|w| w.throughput).sum::<f64>() * (1.0005 / WINDOWS as f64);
        assert!((total - 1000.0).abs() < 2.0, "{total}");
        let figure = svg(&report, "put <test>");
        assert!(figure.starts_with("<svg"));
        assert!(figure.contains("put &lt;test&gt;"));
        assert!(figure.trim_end().ends_with("</svg>"));
    }

    /// A deterministic run: a two-second ramp with a few slow outliers.
    fn synthetic() -> Report {
        Report {
            samples: (0..160u64)
                .map(|i| Sample {
                    start_us: i * 12_500 + i * 7919 % 5_000,
                    latency_us: (800 + i * 37 % 400 + i * 6 + if i % 50 == 7 { 9_000 } else { 0 })
                        as u32,
                })
                .collect(),
            elapsed: Duration::from_secs(2),
            ..Default::default()
        }
    }

    #[test]
    fn svg_matches_golden() {
        let figure = svg(&synthetic(), "put <golden> & co");
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/bench/testdata/plot.svg");
        if std::env::var_os("OXETCD_REWRITE_GOLDEN").is_some() {
            std::fs::write(path, &figure).expect("rewrite golden");
        }
        assert!(
            figure == include_str!("testdata/plot.svg"),
            "SVG differs from {path}"
        );
    }

    #[test]
    fn format_follows_the_extension() {
        for png in ["out.png", "OUT.PNG", "dir.svg/plot.Png"] {
            assert_eq!(Format::for_path(Path::new(png)), Format::Png, "{png}");
        }
        for svg in ["out.svg", "out", "png", "out.png.svg", "out.pngx", ".png"] {
            assert_eq!(Format::for_path(Path::new(svg)), Format::Svg, "{svg}");
        }
        let report = synthetic();
        let svg_bytes = render(&report, "t", Format::Svg).expect("svg");
        assert_eq!(svg_bytes, svg(&report, "t").into_bytes());
        let png_bytes = render(&report, "t", Format::Png).expect("png");
        assert!(png_bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    }

    /// Decodes a PNG into (width, height, RGB rows).
    fn decode(bytes: &[u8]) -> (usize, usize, Vec<u8>) {
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .expect("PNG header");
        let mut rgb = vec![0; reader.output_buffer_size().expect("buffer size")];
        let info = reader.next_frame(&mut rgb).expect("PNG data");
        assert_eq!(info.color_type, png::ColorType::Rgb);
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        rgb.truncate(info.buffer_size());
        (info.width as usize, info.height as usize, rgb)
    }

    #[test]
    fn png_draws_every_primitive_of_the_figure() {
        let report = synthetic();
        let layout = figure(&report, "put <golden> & co");
        let (width, height, rgb) = decode(&png(&report, "put <golden> & co").expect("png"));
        assert_eq!((width, height), (2720, 940), "twice the SVG's 1360x470");
        let at = |x: usize, y: usize| {
            let i = (y * width + x) * 3;
            [rgb[i], rgb[i + 1], rgb[i + 2]]
        };
        let count = |want: fn([u8; 3]) -> bool| {
            rgb.chunks_exact(3)
                .filter(|p| want([p[0], p[1], p[2]]))
                .count()
        };
        assert!(count(|p| p == Colour::P99.rgb) > 200, "p99 lines");
        assert!(
            count(|p| p == Colour::MEAN.rgb) > 200,
            "mean lines and dots"
        );
        assert!(count(|p| p == Colour::FRAME.rgb || p == Colour::GRID.rgb) > 2000);
        // Translucent sample dots: bluish, never grey.
        assert!(
            count(|p| p[2] > p[0].saturating_add(40)) > 100,
            "sample dots"
        );
        // Text is the only pure black.
        assert!(count(|p| p == [0, 0, 0]) > 2000, "text");
        // Every text is drawn where the layout put it: black pixels within
        // a glyph's height of its anchor, on the right side of it.
        for shape in layout.rows.iter().flatten() {
            let Shape::Text {
                at: (x, y),
                text,
                vertical,
                ..
            } = shape
            else {
                continue;
            };
            let (x, y) = ((x * 2.0) as usize, (y * 2.0) as usize);
            let reach = text.len() * 18;
            let (xs, ys) = if *vertical {
                (x - 14..x, y - reach..y + reach)
            } else {
                (x.saturating_sub(reach)..x + reach, y - 14..y)
            };
            let inked = ys
                .flat_map(|py| xs.clone().map(move |px| (px, py)))
                .filter(|&(px, py)| at(px, py) == [0, 0, 0])
                .count();
            assert!(inked > 10 * text.len(), "{text:?} at ({x}, {y}): {inked}");
        }
        // The background shows between panels.
        assert_eq!(at(1360, 600), [255, 255, 255]);
    }

    #[test]
    fn lines_stay_inside_their_panels_when_dots_are_thinned() {
        // Every 999th request is slow; thinning keeps every 3rd sample, so
        // no slow one is drawn as a dot. A window with a slow request has a
        // mean slower than every dot, and than its own p99.
        let report = Report {
            samples: (0..3 * DOTS_MAX as u64)
                .map(|i| Sample {
                    start_us: i * 100,
                    latency_us: if i % 999 == 1 || i == 1_003 {
                        50_000
                    } else {
                        1_000
                    },
                })
                .collect(),
            elapsed: Duration::from_secs_f64(1.2),
            ..Default::default()
        };
        let layout = figure(&report, "thinned");
        let (top, bottom) = (MARGIN + 30.0, MARGIN + 30.0 + PANEL_HEIGHT);
        let mut lines = 0;
        for shape in layout.rows.iter().flatten() {
            if let Shape::Polyline { points, .. } = shape {
                lines += 1;
                for &(_, y) in points {
                    assert!(
                        (top..=bottom).contains(&y),
                        "{y} outside {top}..={bottom}: {shape:?}"
                    );
                }
            }
        }
        assert_eq!(lines, 4);
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(0.012), 0.02);
        assert_eq!(nice_ceiling(1000.0), 1000.0);
    }
}
