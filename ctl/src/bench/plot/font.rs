//! The PNG backend's font: printable ASCII in a 5×7 bitmap with two rows
//! of descender, kept as a readable sheet and packed at compile time. A
//! malformed sheet fails the build, never a run. This module only maps
//! characters to pixels; placing and scaling text is the rasterizer's.

/// Glyph width, pixels.
pub(super) const COLUMNS: usize = 5;
/// Glyph height, pixels: [`ASCENT`] above the baseline, the rest below.
pub(super) const ROWS: usize = 9;
/// Rows above the baseline (the height of a capital or a digit).
pub(super) const ASCENT: usize = 7;
/// Distance from one glyph to the next, pixels: one blank column between.
pub(super) const ADVANCE: usize = COLUMNS + 1;

/// One glyph: a row each, top to bottom; bit `COLUMNS - 1` is the leftmost
/// column.
pub(super) type Glyph = [u8; ROWS];

/// The glyph of `c`; a hollow box for anything outside printable ASCII.
pub(super) fn glyph(c: char) -> &'static Glyph {
    let index = match c {
        ' '..='~' => c as usize - ' ' as usize,
        _ => GLYPH_COUNT - 1,
    };
    &GLYPHS[index]
}

/// Whether `glyph` inks column `column`, row `row`.
pub(super) fn ink(glyph: &Glyph, column: usize, row: usize) -> bool {
    column < COLUMNS && row < ROWS && glyph[row] & (1 << (COLUMNS - 1 - column)) != 0
}

/// Width of `chars` characters in pixels at scale 1, without the blank
/// column after the last one.
pub(super) fn width(chars: usize) -> usize {
    chars.saturating_mul(ADVANCE).saturating_sub(1)
}

/// ' ' to '~', then the box.
const GLYPH_COUNT: usize = 96;
const GLYPHS_PER_BAND: usize = 16;
const BANDS: usize = GLYPH_COUNT / GLYPHS_PER_BAND;
/// A sheet line: `GLYPHS_PER_BAND` groups of `COLUMNS` cells, one space
/// between groups.
const LINE_BYTES: usize = GLYPHS_PER_BAND * ADVANCE - 1;

static GLYPHS: [Glyph; GLYPH_COUNT] = pack(&SHEET);

/// `#` is ink, `.` is paper. Bands of 16 glyphs in ASCII order, `ROWS`
/// lines each: the first `ASCENT` stand on the baseline, the last two hang
/// below it (descenders).
#[rustfmt::skip]
const SHEET: [&str; BANDS * ROWS] = [
    // sp    !     "     #     $     %     &     '     (     )     *     +     ,     -     .     /
    "..... ..#.. .#.#. .#.#. ..#.. ##... .##.. ..#.. ...#. .#... ..... ..... ..... ..... ..... .....",
    "..... ..#.. .#.#. .#.#. .#### ##..# #..#. ..#.. ..#.. ..#.. ..#.. ..#.. ..... ..... ..... ....#",
    "..... ..#.. .#.#. ##### #.#.. ...#. #.#.. .#... .#... ...#. #.#.# ..#.. ..... ..... ..... ...#.",
    "..... ..#.. ..... .#.#. .###. ..#.. .#... ..... .#... ...#. .###. ##### ..... ##### ..... ..#..",
    "..... ..#.. ..... ##### ..#.# .#... #.#.# ..... .#... ...#. #.#.# ..#.. ..... ..... ..... .#...",
    "..... ..... ..... .#.#. ####. #..## #..#. ..... ..#.. ..#.. ..#.. ..#.. .##.. ..... .##.. #....",
    "..... ..#.. ..... .#.#. ..#.. ...## .##.# ..... ...#. .#... ..... ..... .##.. ..... .##.. .....",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..#.. ..... ..... .....",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... .#... ..... ..... .....",
    // 0     1     2     3     4     5     6     7     8     9     :     ;     <     =     >     ?
    ".###. ..#.. .###. ##### ...#. ##### ..##. ##### .###. .###. ..... ..... ...#. ..... .#... .###.",
    "#...# .##.. #...# ...#. ..##. #.... .#... ....# #...# #...# .##.. .##.. ..#.. ..... ..#.. #...#",
    "#...# ..#.. ....# ..#.. .#.#. ####. #.... ...#. #...# #...# .##.. .##.. .#... ##### ...#. ....#",
    "#...# ..#.. ...#. ...#. #..#. ....# ####. ..#.. .###. .#### ..... ..... #.... ..... ....# ...#.",
    "#...# ..#.. ..#.. ....# ##### ....# #...# .#... #...# ....# .##.. .##.. .#... ##### ...#. ..#..",
    "#...# ..#.. .#... #...# ...#. #...# #...# .#... #...# ...#. .##.. .##.. ..#.. ..... ..#.. .....",
    ".###. .###. ##### .###. ...#. .###. .###. .#... .###. .##.. ..... ..#.. ...#. ..... .#... ..#..",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... .#... ..... ..... ..... .....",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... .....",
    // @     A     B     C     D     E     F     G     H     I     J     K     L     M     N     O
    ".###. .###. ####. .###. ###.. ##### ##### .###. #...# .###. ..### #...# #.... #...# #...# .###.",
    "#...# #...# #...# #...# #..#. #.... #.... #...# #...# ..#.. ...#. #..#. #.... ##.## #...# #...#",
    "....# #...# #...# #.... #...# #.... #.... #.... #...# ..#.. ...#. #.#.. #.... #.#.# ##..# #...#",
    ".##.# ##### ####. #.... #...# ####. ####. #.### ##### ..#.. ...#. ##... #.... #.#.# #.#.# #...#",
    "#.#.# #...# #...# #.... #...# #.... #.... #...# #...# ..#.. ...#. #.#.. #.... #...# #..## #...#",
    "#.#.# #...# #...# #...# #..#. #.... #.... #...# #...# ..#.. #..#. #..#. #.... #...# #...# #...#",
    ".###. #...# ####. .###. ###.. ##### #.... .#### #...# .###. .##.. #...# ##### #...# #...# .###.",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... .....",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... .....",
    // P     Q     R     S     T     U     V     W     X     Y     Z     [     \     ]     ^     _
    "####. .###. ####. .#### ##### #...# #...# #...# #...# #...# ##### .###. ..... .###. ..#.. .....",
    "#...# #...# #...# #.... ..#.. #...# #...# #...# #...# #...# ....# .#... #.... ...#. .#.#. .....",
    "#...# #...# #...# #.... ..#.. #...# #...# #...# .#.#. .#.#. ...#. .#... .#... ...#. #...# .....",
    "####. #...# ####. .###. ..#.. #...# #...# #.#.# ..#.. ..#.. ..#.. .#... ..#.. ...#. ..... .....",
    "#.... #.#.# #.#.. ....# ..#.. #...# #...# #.#.# .#.#. ..#.. .#... .#... ...#. ...#. ..... .....",
    "#.... #..#. #..#. ....# ..#.. #...# .#.#. #.#.# #...# ..#.. #.... .#... ....# ...#. ..... .....",
    "#.... .##.# #...# ####. ..#.. .###. ..#.. .#.#. #...# ..#.. ##### .###. ..... .###. ..... .....",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... #####",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... .....",
    // `     a     b     c     d     e     f     g     h     i     j     k     l     m     n     o
    ".#... ..... #.... ..... ....# ..... ..##. ..... #.... ..#.. ...#. #.... .##.. ..... ..... .....",
    "..#.. ..... #.... ..... ....# ..... .#..# ..... #.... ..... ..... #.... ..#.. ..... ..... .....",
    "...#. .###. #.##. .###. .##.# .###. .#... .#### #.##. .##.. ..##. #..#. ..#.. ##.#. #.##. .###.",
    "..... ....# ##..# #.... #..## #...# ###.. #...# ##..# ..#.. ...#. #.#.. ..#.. #.#.# ##..# #...#",
    "..... .#### #...# #.... #...# ##### .#... #...# #...# ..#.. ...#. ##... ..#.. #.#.# #...# #...#",
    "..... #...# #...# #...# #...# #.... .#... #...# #...# ..#.. ...#. #.#.. ..#.. #.#.# #...# #...#",
    "..... .#### ####. .###. .#### .###. .#... .#### #...# .###. ...#. #..#. .###. #...# #...# .###.",
    "..... ..... ..... ..... ..... ..... ..... ....# ..... ..... #..#. ..... ..... ..... ..... .....",
    "..... ..... ..... ..... ..... ..... ..... .###. ..... ..... .##.. ..... ..... ..... ..... .....",
    // p     q     r     s     t     u     v     w     x     y     z     {     |     }     ~     box
    "..... ..... ..... ..... .#... ..... ..... ..... ..... ..... ..... ...#. ..#.. .#... ..... #####",
    "..... ..... ..... ..... .#... ..... ..... ..... ..... ..... ..... ..#.. ..#.. ..#.. ..... #...#",
    "####. .#### #.##. .#### ###.. #...# #...# #...# #...# #...# ##### ..#.. ..#.. ..#.. .#... #...#",
    "#...# #...# ##..# #.... .#... #...# #...# #...# .#.#. #...# ...#. .#... ..#.. ...#. #.#.# #...#",
    "#...# #...# #.... .###. .#... #...# #...# #.#.# ..#.. #...# ..#.. ..#.. ..#.. ..#.. ...#. #...#",
    "#...# #...# #.... ....# .#..# #..## .#.#. #.#.# .#.#. #...# .#... ..#.. ..#.. ..#.. ..... #...#",
    "####. .#### #.... ####. ..##. .##.# ..#.. .#.#. #...# .#### ##### ...#. ..#.. .#... ..... #####",
    "#.... ....# ..... ..... ..... ..... ..... ..... ..... ....# ..... ..... ..... ..... ..... .....",
    "#.... ....# ..... ..... ..... ..... ..... ..... ..... .###. ..... ..... ..... ..... ..... .....",
];

/// Packs the sheet, checking its shape: every line `LINE_BYTES` long,
/// groups of `COLUMNS` cells separated by single spaces.
const fn pack(sheet: &[&str; BANDS * ROWS]) -> [Glyph; GLYPH_COUNT] {
    let mut glyphs = [[0u8; ROWS]; GLYPH_COUNT];
    let mut line = 0;
    while line < sheet.len() {
        let bytes = sheet[line].as_bytes();
        assert!(
            bytes.len() == LINE_BYTES,
            "font sheet: a line of the wrong length"
        );
        let (band, row) = (line / ROWS, line % ROWS);
        let mut i = 0;
        while i < bytes.len() {
            let (slot, column) = (i / ADVANCE, i % ADVANCE);
            let glyph = band * GLYPHS_PER_BAND + slot;
            let cell = bytes[i];
            if column == COLUMNS {
                assert!(cell == b' ', "font sheet: glyphs are one space apart");
            } else if cell == b'#' {
                glyphs[glyph][row] |= 1 << (COLUMNS - 1 - column);
            } else {
                assert!(cell == b'.', "font sheet: a glyph cell is '#' or '.'");
            }
            i += 1;
        }
        line += 1;
    }
    glyphs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sheet_packs_as_drawn() {
        assert_eq!(
            glyph('A')[..ASCENT],
            [0b01110, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001]
        );
        assert_eq!(glyph('A')[ASCENT..], [0, 0], "no descender");
        // 'g' hangs below the baseline; 'y' too; '_' sits just under it.
        assert_eq!(glyph('g')[ASCENT..], [0b00001, 0b01110]);
        assert_ne!(glyph('y')[ASCENT], 0);
        assert_eq!(glyph('_')[ASCENT], 0b11111);
        assert!(ink(glyph('|'), 2, 0) && !ink(glyph('|'), 1, 0));
        assert!(!ink(glyph('|'), COLUMNS, 0) && !ink(glyph('|'), 2, ROWS));
    }

    #[test]
    fn every_printable_character_has_its_own_glyph() {
        assert_eq!(glyph(' '), &[0; ROWS]);
        let printable: Vec<char> = ('!'..='~').collect();
        for &c in &printable {
            assert_ne!(glyph(c), &[0; ROWS], "{c:?} is blank");
            for &d in &printable {
                // Zero and capital O share a shape; context tells them apart.
                if c < d && !(c == '0' && d == 'O') {
                    assert_ne!(glyph(c), glyph(d), "{c:?} and {d:?}");
                }
            }
        }
    }

    #[test]
    fn anything_else_is_a_box() {
        let boxed = glyph('\u{7f}');
        assert_eq!(boxed[0], 0b11111);
        for c in ['é', 'µ', '\n', '\0', '∎'] {
            assert_eq!(glyph(c), boxed, "{c:?}");
        }
    }

    #[test]
    fn widths_leave_no_trailing_gap() {
        assert_eq!(width(0), 0);
        assert_eq!(width(1), COLUMNS);
        assert_eq!(width(3), 3 * ADVANCE - 1);
        assert_eq!(width(usize::MAX), usize::MAX - 1);
    }
}
