//! SVG figures of a run, the two etcd's performance reports show: latency
//! over time, and latency against throughput. Hand-written SVG: no plotting
//! dependency, and the files diff and open anywhere.

use std::fmt::Write as _;

use super::report::{Report, Sample};

/// Samples drawn as dots at most; more would make the file heavy without
/// showing anything new (the windowed lines carry the aggregate).
const DOTS_MAX: usize = 4000;

/// Time windows the run is cut into for the lines and the curve.
const WINDOWS: usize = 40;

const PANEL_WIDTH: f64 = 560.0;
const PANEL_HEIGHT: f64 = 320.0;
const MARGIN: f64 = 60.0;

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

/// The whole figure: both panels side by side, titled with `title`.
pub fn svg(report: &Report, title: &str) -> String {
    let windows = windows(report);
    let width = 2.0 * (PANEL_WIDTH + 2.0 * MARGIN);
    let height = PANEL_HEIGHT + 2.0 * MARGIN + 30.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        width / 2.0,
        escape(title)
    );
    // Latency over time.
    let dots = thin(&report.samples);
    let x_max = windows
        .last()
        .map_or(1.0, |w| w.start_s)
        .max(report.elapsed.as_secs_f64())
        .max(1e-3);
    let y_max = dots
        .iter()
        .map(|s| f64::from(s.latency_us) / 1e3)
        .fold(0.0, f64::max)
        .max(1e-3);
    let left = Panel::new(MARGIN, MARGIN + 30.0, x_max, y_max);
    left.axes(&mut out, "time (s)", "latency (ms)", "Latency over time");
    for s in &dots {
        let (x, y) = left.point(s.start_us as f64 / 1e6, f64::from(s.latency_us) / 1e3);
        let _ = writeln!(
            out,
            r##"<circle cx="{x:.1}" cy="{y:.1}" r="1.2" fill="#4878d0" fill-opacity="0.35"/>"##
        );
    }
    left.line(
        &mut out,
        windows.iter().map(|w| (w.start_s, w.p99_ms)),
        "#d65f5f",
    );
    left.line(
        &mut out,
        windows.iter().map(|w| (w.start_s, w.mean_ms)),
        "#222222",
    );
    left.legend(
        &mut out,
        &[
            ("#d65f5f", "p99 per window"),
            ("#222222", "mean per window"),
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
    let y_max = curve.iter().map(|w| w.p99_ms).fold(0.0, f64::max).max(1e-3);
    let right = Panel::new(MARGIN * 3.0 + PANEL_WIDTH, MARGIN + 30.0, x_max, y_max);
    right.axes(
        &mut out,
        "throughput (requests/s)",
        "latency (ms)",
        "Latency against throughput",
    );
    right.line(
        &mut out,
        curve.iter().map(|w| (w.throughput, w.p99_ms)),
        "#d65f5f",
    );
    right.line(
        &mut out,
        curve.iter().map(|w| (w.throughput, w.mean_ms)),
        "#222222",
    );
    for w in &curve {
        let (x, y) = right.point(w.throughput, w.mean_ms);
        let _ = writeln!(
            out,
            r##"<circle cx="{x:.1}" cy="{y:.1}" r="2.5" fill="#222222"/>"##
        );
    }
    right.legend(&mut out, &[("#d65f5f", "p99"), ("#222222", "mean")]);
    out.push_str("</svg>\n");
    out
}

/// Every n-th sample (in send order), at most [`DOTS_MAX`].
fn thin(samples: &[Sample]) -> Vec<Sample> {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable_by_key(|s| s.start_us);
    let step = sorted.len().div_ceil(DOTS_MAX).max(1);
    sorted.into_iter().step_by(step).collect()
}

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

    fn axes(&self, out: &mut String, x_label: &str, y_label: &str, title: &str) {
        let (l, t, w, h) = (self.left, self.top, PANEL_WIDTH, PANEL_HEIGHT);
        let _ = writeln!(
            out,
            r##"<rect x="{l}" y="{t}" width="{w}" height="{h}" fill="none" stroke="#888"/>"##
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="13">{}</text>"#,
            l + w / 2.0,
            t - 10.0,
            escape(title)
        );
        for i in 0..=5 {
            let f = f64::from(i) / 5.0;
            let x = l + f * w;
            let y = t + h - f * h;
            let _ = writeln!(
                out,
                r##"<line x1="{x}" y1="{t}" x2="{x}" y2="{}" stroke="#eee"/><text x="{x}" y="{}" text-anchor="middle">{}</text>"##,
                t + h,
                t + h + 16.0,
                tick(f * self.x_max)
            );
            let _ = writeln!(
                out,
                r##"<line x1="{l}" y1="{y}" x2="{}" y2="{y}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
                l + w,
                l - 6.0,
                y + 4.0,
                tick(f * self.y_max)
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            l + w / 2.0,
            t + h + 36.0,
            escape(x_label)
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle" transform="rotate(-90 {} {})">{}</text>"#,
            l - 44.0,
            t + h / 2.0,
            l - 44.0,
            t + h / 2.0,
            escape(y_label)
        );
    }

    fn line(&self, out: &mut String, points: impl Iterator<Item = (f64, f64)>, colour: &str) {
        let path: Vec<String> = points
            .map(|(x, y)| {
                let (x, y) = self.point(x, y);
                format!("{x:.1},{y:.1}")
            })
            .collect();
        if !path.is_empty() {
            let _ = writeln!(
                out,
                r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="1.5"/>"#,
                path.join(" ")
            );
        }
    }

    fn legend(&self, out: &mut String, entries: &[(&str, &str)]) {
        for (i, (colour, label)) in entries.iter().enumerate() {
            let y = self.top + 14.0 + 16.0 * i as f64;
            let x = self.left + PANEL_WIDTH - 150.0;
            let _ = writeln!(
                out,
                r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{colour}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
                x + 20.0,
                x + 26.0,
                y + 4.0,
                escape(label)
            );
        }
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

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
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

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(0.012), 0.02);
        assert_eq!(nice_ceiling(1000.0), 1000.0);
    }
}
