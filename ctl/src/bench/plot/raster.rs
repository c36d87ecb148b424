//! The raster backend: draws a [`Figure`] into an RGB pixel buffer and
//! encodes it as PNG. It decides nothing about the layout, only how each
//! primitive becomes pixels: lines and discs by their coverage of each
//! pixel (anti-aliased, round ends), text with the bitmap [`font`] at an
//! integer scale. Nothing here panics on a coordinate: everything is
//! clipped to the buffer, and a non-finite coordinate draws nothing.

use super::{font, Anchor, Figure, Shape, FONT_SIZE};

/// Pixels per figure unit. Twice the SVG's size, as a high-density screen
/// shows it: 1-unit lines are 2 pixels wide, and the bitmap font is drawn
/// at 2× for 12-unit text, close to the SVG's sans-serif in width.
pub(super) const SCALE: f64 = 2.0;

/// Longest side of an image, pixels. The figure is 1360×470 units; the
/// bound keeps a mistaken layout from allocating gigabytes.
const SIDE_PIXELS_MAX: f64 = 8192.0;

/// Characters of one text drawn at most: more than the widest image holds
/// at the smallest scale, so nothing visible is lost.
const TEXT_CHARS_MAX: usize = 2048;

/// Glyph scales are whole numbers, so every font pixel stays square.
const GLYPH_SCALE_MAX: f64 = 16.0;

/// Text is black, as in the SVG (which sets no fill).
const TEXT_COLOUR: [u8; 3] = [0, 0, 0];

/// The figure as a PNG image of [`SCALE`] pixels per unit.
pub(super) fn png(figure: &Figure) -> Result<Vec<u8>, png::EncodingError> {
    let pixels = |units: f64| (units * SCALE).round().clamp(1.0, SIDE_PIXELS_MAX) as u32;
    let mut canvas = Canvas::new(
        pixels(figure.width),
        pixels(figure.height),
        figure.background.rgb,
    );
    for shape in figure.rows.iter().flatten() {
        canvas.shape(shape);
    }
    canvas.encode_png()
}

/// The glyph scale for text of `size` units: the font's 6-pixel advance
/// stands for about half the font size, as in a sans-serif.
fn glyph_scale(size: f64) -> usize {
    // A NaN size casts to 0, hence the last `max`.
    ((size * SCALE / FONT_SIZE)
        .round()
        .clamp(1.0, GLYPH_SCALE_MAX) as usize)
        .max(1)
}

/// An RGB image, row by row from the top.
pub(super) struct Canvas {
    width: usize,
    height: usize,
    rgb: Vec<u8>,
}

impl Canvas {
    /// A `width` × `height` image filled with `background`.
    pub(super) fn new(width: u32, height: u32, background: [u8; 3]) -> Self {
        let (width, height) = (width as usize, height as usize);
        Self {
            width,
            height,
            rgb: background.repeat(width * height),
        }
    }

    /// The colour at (`x`, `y`), if inside.
    #[cfg(test)]
    pub(super) fn pixel(&self, x: usize, y: usize) -> Option<[u8; 3]> {
        if x >= self.width || y >= self.height {
            return None;
        }
        let i = (y * self.width + x) * 3;
        Some([self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]])
    }

    /// Draws one primitive, scaling figure units to pixels.
    fn shape(&mut self, shape: &Shape) {
        let px = |(x, y): (f64, f64)| (x * SCALE, y * SCALE);
        match shape {
            Shape::Frame {
                at,
                width,
                height,
                stroke,
            } => {
                let (left, top) = px(*at);
                let (right, bottom) = (left + width * SCALE, top + height * SCALE);
                let corners = [(left, top), (right, top), (right, bottom), (left, bottom)];
                for i in 0..corners.len() {
                    let next = corners[(i + 1) % corners.len()];
                    self.line(corners[i], next, SCALE, stroke.rgb);
                }
            }
            Shape::Line {
                from,
                to,
                stroke,
                width,
            } => self.line(px(*from), px(*to), width * SCALE, stroke.rgb),
            Shape::Polyline {
                points,
                stroke,
                width,
            } => {
                for pair in points.windows(2) {
                    self.line(px(pair[0]), px(pair[1]), width * SCALE, stroke.rgb);
                }
            }
            Shape::Dot {
                centre,
                radius,
                fill,
                opacity,
            } => self.disc(px(*centre), radius * SCALE, fill.rgb, *opacity),
            Shape::Text {
                at,
                text,
                anchor,
                size,
                vertical,
            } => self.text(
                px(*at),
                text,
                *anchor,
                glyph_scale(*size),
                *vertical,
                TEXT_COLOUR,
            ),
        }
    }

    /// A line `width` pixels wide from `from` to `to` (pixel coordinates;
    /// pixel (i, j) covers [i, i+1) × [j, j+1)), with round ends.
    pub(super) fn line(&mut self, from: (f64, f64), to: (f64, f64), width: f64, colour: [u8; 3]) {
        let half = width / 2.0;
        let reach = half + 1.0;
        let Some((x_range, y_range)) = self.clip(
            (from.0.min(to.0) - reach, from.0.max(to.0) + reach),
            (from.1.min(to.1) - reach, from.1.max(to.1) + reach),
        ) else {
            return;
        };
        let (dx, dy) = (to.0 - from.0, to.1 - from.1);
        let length_squared = dx * dx + dy * dy;
        for y in y_range {
            for x in x_range.clone() {
                let (cx, cy) = (x as f64 + 0.5, y as f64 + 0.5);
                let t = if length_squared > 0.0 {
                    (((cx - from.0) * dx + (cy - from.1) * dy) / length_squared).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                let distance = (cx - from.0 - t * dx).hypot(cy - from.1 - t * dy);
                self.blend(x, y, colour, half + 0.5 - distance);
            }
        }
    }

    /// A filled disc of `radius` pixels, `opacity` from 0 to 1.
    pub(super) fn disc(&mut self, centre: (f64, f64), radius: f64, colour: [u8; 3], opacity: f64) {
        let reach = radius + 1.0;
        let Some((x_range, y_range)) = self.clip(
            (centre.0 - reach, centre.0 + reach),
            (centre.1 - reach, centre.1 + reach),
        ) else {
            return;
        };
        for y in y_range {
            for x in x_range.clone() {
                let distance = (x as f64 + 0.5 - centre.0).hypot(y as f64 + 0.5 - centre.1);
                let coverage = (radius + 0.5 - distance).clamp(0.0, 1.0);
                self.blend(x, y, colour, coverage * opacity);
            }
        }
    }

    /// `text` on the baseline through `at`, anchored there by `anchor`,
    /// each font pixel `scale` × `scale`; `vertical` turns it a quarter
    /// counter-clockwise about `at`, to read upwards.
    pub(super) fn text(
        &mut self,
        at: (f64, f64),
        text: &str,
        anchor: Anchor,
        scale: usize,
        vertical: bool,
        colour: [u8; 3],
    ) {
        if !(at.0.is_finite() && at.1.is_finite()) {
            return;
        }
        // Far enough off the image that nothing could show; the bound keeps
        // the integer arithmetic below from overflowing.
        let far = (self.width
            + self.height
            + font::width(TEXT_CHARS_MAX) * GLYPH_SCALE_MAX as usize) as f64;
        if at.0.abs() > far || at.1.abs() > far {
            return;
        }
        let chars: Vec<char> = text.chars().take(TEXT_CHARS_MAX).collect();
        let scale = scale.clamp(1, GLYPH_SCALE_MAX as usize) as i64;
        let width = (font::width(chars.len()) as i64 * scale) as f64;
        let before = match anchor {
            Anchor::Start => 0.0,
            Anchor::Middle => width / 2.0,
            Anchor::End => width,
        };
        // Where the text starts, on its baseline.
        let (ax, ay) = if vertical {
            (at.0.round() as i64, (at.1 + before).round() as i64)
        } else {
            ((at.0 - before).round() as i64, at.1.round() as i64)
        };
        for (k, &c) in chars.iter().enumerate() {
            let glyph = font::glyph(c);
            for row in 0..font::ROWS {
                for column in 0..font::COLUMNS {
                    if !font::ink(glyph, column, row) {
                        continue;
                    }
                    // (u, v): along the text and down from its baseline.
                    let u = (k * font::ADVANCE + column) as i64 * scale;
                    let v = (row as i64 - font::ASCENT as i64) * scale;
                    for du in 0..scale {
                        for dv in 0..scale {
                            let (x, y) = if vertical {
                                (ax + v + dv, ay - (u + du) - 1)
                            } else {
                                (ax + u + du, ay + v + dv)
                            };
                            if let (Ok(x), Ok(y)) = (usize::try_from(x), usize::try_from(y)) {
                                self.blend(x, y, colour, 1.0);
                            }
                        }
                    }
                }
            }
        }
    }

    /// The PNG file of the image.
    pub(super) fn encode_png(&self) -> Result<Vec<u8>, png::EncodingError> {
        let mut out = Vec::new();
        let (width, height) = (self.width as u32, self.height as u32);
        let mut encoder = png::Encoder::new(&mut out, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(&self.rgb)?;
        writer.finish()?;
        Ok(out)
    }

    /// The pixels of a box (`x` and `y` as low and high bounds, pixel
    /// coordinates) that are on the image; `None` if none is, or if a
    /// bound is not a number.
    fn clip(
        &self,
        x: (f64, f64),
        y: (f64, f64),
    ) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
        let range = |(low, high): (f64, f64), size: usize| {
            if low.is_nan() || high.is_nan() {
                return None;
            }
            // Casts saturate, and both ends are within 0..=size here.
            let start = low.floor().clamp(0.0, size as f64) as usize;
            let end = high.ceil().clamp(0.0, size as f64) as usize;
            (start < end).then_some(start..end)
        };
        Some((range(x, self.width)?, range(y, self.height)?))
    }

    /// Paints (`x`, `y`) with `colour` over what is there, `alpha` from 0
    /// (nothing) to 1 (replace); outside the image, nothing.
    fn blend(&mut self, x: usize, y: usize, colour: [u8; 3], alpha: f64) {
        if x >= self.width || y >= self.height || alpha.is_nan() || alpha <= 0.0 {
            return;
        }
        let alpha = alpha.min(1.0);
        let i = (y * self.width + x) * 3;
        for (old, new) in self.rgb[i..i + 3].iter_mut().zip(colour) {
            let old_value = f64::from(*old);
            *old = (old_value + (f64::from(new) - old_value) * alpha).round() as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WHITE: [u8; 3] = [255, 255, 255];
    const BLACK: [u8; 3] = [0, 0, 0];

    fn inked(canvas: &Canvas) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for y in 0..canvas.height {
            for x in 0..canvas.width {
                if canvas.pixel(x, y) != Some(WHITE) {
                    out.push((x, y));
                }
            }
        }
        out
    }

    #[test]
    fn lines_cover_their_endpoints_and_nothing_far() {
        let mut canvas = Canvas::new(20, 10, WHITE);
        canvas.line((2.5, 2.5), (15.5, 7.5), 1.0, BLACK);
        assert_eq!(canvas.pixel(2, 2), Some(BLACK));
        assert_eq!(canvas.pixel(15, 7), Some(BLACK));
        // Halfway, the line passes 0.3 px from the centre of (9, 5).
        assert!(canvas.pixel(9, 5).is_some_and(|p| p[0] < 100), "the middle");
        assert_eq!(canvas.pixel(15, 1), Some(WHITE));
        assert_eq!(canvas.pixel(2, 8), Some(WHITE));
        // Round ends reach at most half the width (plus the anti-aliased
        // pixel) past the endpoints.
        assert!(inked(&canvas)
            .iter()
            .all(|&(x, y)| (1..=16).contains(&x) && (1..=8).contains(&y)));
    }

    #[test]
    fn axis_aligned_lines_on_pixel_edges_are_crisp() {
        let mut canvas = Canvas::new(12, 8, WHITE);
        canvas.line((1.0, 4.0), (11.0, 4.0), 2.0, BLACK);
        for x in 1..11 {
            assert_eq!(canvas.pixel(x, 3), Some(BLACK), "({x}, 3)");
            assert_eq!(canvas.pixel(x, 4), Some(BLACK), "({x}, 4)");
            assert_eq!(canvas.pixel(x, 2), Some(WHITE), "({x}, 2)");
            assert_eq!(canvas.pixel(x, 5), Some(WHITE), "({x}, 5)");
        }
    }

    #[test]
    fn out_of_range_coordinates_are_clipped_not_fatal() {
        let mut canvas = Canvas::new(10, 10, WHITE);
        canvas.line((-1e12, -1e12), (1e12, 1e12), 1.0, BLACK);
        assert_eq!(canvas.pixel(0, 0), Some(BLACK));
        assert_eq!(canvas.pixel(5, 5), Some(BLACK));
        assert_eq!(canvas.pixel(9, 9), Some(BLACK));
        assert_eq!(canvas.pixel(9, 0), Some(WHITE));
        // Lines this long may or may not be drawn, but never panic.
        canvas.line((f64::MAX, f64::MIN), (f64::MIN, f64::MAX), 1.0, BLACK);
        canvas.line((-1e300, 5.0), (1e300, 5.0), 1e300, BLACK);
        let mut canvas = Canvas::new(10, 10, WHITE);
        let red = [255, 0, 0];
        for (from, to) in [
            ((f64::NAN, 1.0), (5.0, 5.0)),
            ((f64::INFINITY, 1.0), (5.0, 5.0)),
            ((f64::NEG_INFINITY, f64::INFINITY), (5.0, f64::NAN)),
            ((100.0, 100.0), (200.0, 300.0)),
            ((-50.0, 3.0), (-20.0, 3.0)),
            ((3.0, -1e18), (4.0, -1e17)),
        ] {
            canvas.line(from, to, 1.0, red);
            canvas.line(to, from, f64::NAN, red);
            canvas.disc(from, 3.0, red, 1.0);
            canvas.disc(to, f64::INFINITY, red, f64::NAN);
            canvas.text(from, "Wy", Anchor::Middle, 3, true, red);
            canvas.text(from, "Wy", Anchor::End, 1, false, red);
        }
        canvas.text((1e3, 1e3), "Wy", Anchor::Start, usize::MAX, false, red);
        canvas.text((-100.0, 5.0), "far left", Anchor::Start, 1, false, red);
        canvas.text((5.0, 1e6), "far below", Anchor::Middle, 1, true, red);
        assert_eq!(inked(&canvas), [], "nothing off the image shows");
        assert_eq!(canvas.pixel(10, 0), None);
        // A zero-sized image draws nothing and still encodes or refuses.
        let mut empty = Canvas::new(0, 0, WHITE);
        empty.line((0.0, 0.0), (5.0, 5.0), 1.0, BLACK);
        empty.text((0.0, 0.0), "x", Anchor::Start, 1, false, BLACK);
        let _ = empty.encode_png();
    }

    #[test]
    fn discs_blend_by_opacity() {
        let mut canvas = Canvas::new(10, 10, WHITE);
        canvas.disc((5.0, 5.0), 2.4, [0, 0, 200], 0.5);
        assert_eq!(canvas.pixel(5, 5), Some([128, 128, 228]));
        canvas.disc((5.0, 5.0), 2.4, [0, 0, 200], 0.5);
        assert_eq!(canvas.pixel(5, 5), Some([64, 64, 214]), "overlaps darken");
        assert_eq!(canvas.pixel(0, 0), Some(WHITE));
    }

    /// The pixels `text` would ink at scale 1, starting at (x, baseline).
    fn expected(text: &str, x: usize, baseline: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (k, c) in text.chars().enumerate() {
            for row in 0..font::ROWS {
                for column in 0..font::COLUMNS {
                    if font::ink(font::glyph(c), column, row) {
                        out.push((
                            x + k * font::ADVANCE + column,
                            baseline + row - font::ASCENT,
                        ));
                    }
                }
            }
        }
        out.sort_by_key(|&(x, y)| (y, x));
        out
    }

    #[test]
    fn text_is_the_font_at_its_anchor() {
        let mut canvas = Canvas::new(40, 12, WHITE);
        canvas.text((2.0, 8.0), "Ag1", Anchor::Start, 1, false, BLACK);
        assert_eq!(inked(&canvas), expected("Ag1", 2, 8));
        // "Ag1" is 17 pixels wide: ending at 19 or centred on 10.5 starts
        // it at 2 too.
        for (x, anchor) in [(19.0, Anchor::End), (10.5, Anchor::Middle)] {
            let mut other = Canvas::new(40, 12, WHITE);
            other.text((x, 8.0), "Ag1", anchor, 1, false, BLACK);
            assert_eq!(inked(&other), expected("Ag1", 2, 8), "{anchor:?}");
        }
    }

    #[test]
    fn text_scales_by_whole_pixels() {
        let mut canvas = Canvas::new(20, 20, WHITE);
        canvas.text((0.0, 14.0), "I", Anchor::Start, 2, false, BLACK);
        let mut want: Vec<(usize, usize)> = expected("I", 0, 7)
            .into_iter()
            .flat_map(|(x, y)| {
                [(0, 0), (1, 0), (0, 1), (1, 1)].map(|(dx, dy)| (2 * x + dx, 2 * y + dy))
            })
            .collect();
        want.sort_by_key(|&(x, y)| (y, x));
        assert_eq!(inked(&canvas), want);
    }

    #[test]
    fn vertical_text_reads_upwards() {
        let mut canvas = Canvas::new(12, 20, WHITE);
        canvas.text((9.0, 18.0), "L", Anchor::Start, 1, true, BLACK);
        // Glyph column c, row r lands at (9 + r - ASCENT, 18 - c - 1): the
        // stem of the L (column 0) is the bottom row, its foot (row 6)
        // the column just left of the anchor.
        let mut want: Vec<(usize, usize)> = expected("L", 0, font::ASCENT)
            .into_iter()
            .map(|(c, r)| (9 + r - font::ASCENT, 18 - c - 1))
            .collect();
        want.sort_by_key(|&(x, y)| (y, x));
        assert_eq!(inked(&canvas), want);
        for y in 13..18 {
            assert_eq!(canvas.pixel(8, y), Some(BLACK), "foot at y {y}");
        }
        for x in 2..9 {
            assert_eq!(canvas.pixel(x, 17), Some(BLACK), "stem at x {x}");
        }
    }

    #[test]
    fn glyph_scales_follow_font_size() {
        assert_eq!(glyph_scale(12.0), 2);
        assert_eq!(glyph_scale(13.0), 2);
        assert_eq!(glyph_scale(15.0), 3);
        assert_eq!(glyph_scale(1.0), 1);
        assert_eq!(glyph_scale(f64::NAN), 1);
        assert_eq!(glyph_scale(1e9), GLYPH_SCALE_MAX as usize);
    }
}
