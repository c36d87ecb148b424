//! The SVG backend: writes a [`Figure`] as hand-written SVG, one row per
//! line. It decides nothing about the layout; its number formats (one
//! decimal for dots and polylines, shortest for the rest) and its omission
//! of defaults keep the output byte-for-byte what oxetcdctl has always
//! written for the same run.

use std::fmt::Write as _;

use super::{Anchor, Figure, Shape, FONT_SIZE};

/// The figure as an SVG document.
pub(super) fn write(figure: &Figure) -> String {
    let (width, height) = (figure.width, figure.height);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="{FONT_SIZE}">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="{}"/>"#,
        figure.background.svg
    );
    for row in &figure.rows {
        for shape in row {
            shape_to(&mut out, shape);
        }
        out.push('\n');
    }
    out.push_str("</svg>\n");
    out
}

fn shape_to(out: &mut String, shape: &Shape) {
    match shape {
        Shape::Frame {
            at: (x, y),
            width,
            height,
            stroke,
        } => {
            let _ = write!(
                out,
                r#"<rect x="{x}" y="{y}" width="{width}" height="{height}" fill="none" stroke="{}"/>"#,
                stroke.svg
            );
        }
        Shape::Line {
            from: (x1, y1),
            to: (x2, y2),
            stroke,
            width,
        } => {
            let _ = write!(
                out,
                r#"<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{}""#,
                stroke.svg
            );
            if *width != 1.0 {
                let _ = write!(out, r#" stroke-width="{width}""#);
            }
            out.push_str("/>");
        }
        Shape::Polyline {
            points,
            stroke,
            width,
        } => {
            out.push_str(r#"<polyline points=""#);
            for (i, (x, y)) in points.iter().enumerate() {
                let separator = if i == 0 { "" } else { " " };
                let _ = write!(out, "{separator}{x:.1},{y:.1}");
            }
            let _ = write!(
                out,
                r#"" fill="none" stroke="{}" stroke-width="{width}"/>"#,
                stroke.svg
            );
        }
        Shape::Dot {
            centre: (x, y),
            radius,
            fill,
            opacity,
        } => {
            let _ = write!(
                out,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="{radius}" fill="{}""#,
                fill.svg
            );
            if *opacity != 1.0 {
                let _ = write!(out, r#" fill-opacity="{opacity}""#);
            }
            out.push_str("/>");
        }
        Shape::Text {
            at: (x, y),
            text,
            anchor,
            size,
            vertical,
        } => {
            let _ = write!(out, r#"<text x="{x}" y="{y}""#);
            match anchor {
                Anchor::Start => {}
                Anchor::Middle => out.push_str(r#" text-anchor="middle""#),
                Anchor::End => out.push_str(r#" text-anchor="end""#),
            }
            if *size != FONT_SIZE {
                let _ = write!(out, r#" font-size="{size}""#);
            }
            if *vertical {
                let _ = write!(out, r#" transform="rotate(-90 {x} {y})""#);
            }
            let _ = write!(out, ">{}</text>", escape(text));
        }
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
