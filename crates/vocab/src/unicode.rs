//! Unicode character classes as llama.cpp's `unicode.cpp` sees them, and the GPT-2 byte map.
//!
//! llama.cpp gives every code point exactly one general-category flag (from UnicodeData.txt:
//! letter, number, punctuation, symbol, mark, separator, control, or undefined for unassigned
//! code points) plus a separate whitespace bit (the Unicode `White_Space` property). The
//! category ranges here come from `regex-syntax`'s Unicode tables, so no table is duplicated
//! in this crate; they are built once, on first use.

use std::sync::OnceLock;

/// The per-code-point flags of llama.cpp's `unicode_cpt_flags`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CptFlags(u16);

impl CptFlags {
    pub(crate) const UNDEFINED: u16 = 0x0001;
    pub(crate) const NUMBER: u16 = 0x0002;
    pub(crate) const LETTER: u16 = 0x0004;
    pub(crate) const SEPARATOR: u16 = 0x0008;
    pub(crate) const ACCENT_MARK: u16 = 0x0010;
    pub(crate) const PUNCTUATION: u16 = 0x0020;
    pub(crate) const SYMBOL: u16 = 0x0040;
    pub(crate) const CONTROL: u16 = 0x0080;
    pub(crate) const WHITESPACE: u16 = 0x0100;

    /// Flags of a position outside the text being split: no bit set (llama.cpp's
    /// `unicode_cpt_flags{}`), which is how its splitters detect the end of a chunk.
    pub(crate) const NONE: CptFlags = CptFlags(0);

    fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }
    /// `\p{N}`.
    pub(crate) fn is_number(self) -> bool {
        self.has(Self::NUMBER)
    }
    /// `\p{L}`.
    pub(crate) fn is_letter(self) -> bool {
        self.has(Self::LETTER)
    }
    /// `\s` (Unicode `White_Space`).
    pub(crate) fn is_whitespace(self) -> bool {
        self.has(Self::WHITESPACE)
    }
    /// `\p{M}`.
    pub(crate) fn is_accent_mark(self) -> bool {
        self.has(Self::ACCENT_MARK)
    }
    /// `\p{P}`.
    pub(crate) fn is_punctuation(self) -> bool {
        self.has(Self::PUNCTUATION)
    }
    /// `\p{S}`.
    pub(crate) fn is_symbol(self) -> bool {
        self.has(Self::SYMBOL)
    }
    /// `\p{C}` without unassigned code points.
    pub(crate) fn is_control(self) -> bool {
        self.has(Self::CONTROL)
    }
    /// Whether any flag is set: false only past the end of a chunk.
    pub(crate) fn any(self) -> bool {
        self.0 != 0
    }
    /// The category bits alone (llama.cpp's `category_flag()`).
    pub(crate) fn category(self) -> u16 {
        self.0 & 0x00FF
    }
}

/// Sorted, disjoint `(first, last, category bit)` ranges.
fn category_table() -> &'static [(u32, u32, u16)] {
    static TABLE: OnceLock<Vec<(u32, u32, u16)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let classes: [(&str, u16); 7] = [
            (r"\p{L}", CptFlags::LETTER),
            (r"\p{N}", CptFlags::NUMBER),
            (r"\p{P}", CptFlags::PUNCTUATION),
            (r"\p{S}", CptFlags::SYMBOL),
            (r"\p{M}", CptFlags::ACCENT_MARK),
            (r"\p{Z}", CptFlags::SEPARATOR),
            (r"[\p{Cc}\p{Cf}\p{Co}]", CptFlags::CONTROL),
        ];
        let mut table = Vec::new();
        for (pattern, bit) in classes {
            for (first, last) in class_ranges(pattern) {
                table.push((first, last, bit));
            }
        }
        table.sort_unstable_by_key(|r| r.0);
        table
    })
}

/// The code-point ranges of a Unicode class expression, from `regex-syntax`'s tables.
fn class_ranges(pattern: &str) -> Vec<(u32, u32)> {
    use regex_syntax::hir::{Class, HirKind};
    let Ok(hir) = regex_syntax::Parser::new().parse(pattern) else {
        return Vec::new();
    };
    match hir.kind() {
        HirKind::Class(Class::Unicode(class)) => {
            class.ranges().iter().map(|r| (u32::from(r.start()), u32::from(r.end()))).collect()
        }
        _ => Vec::new(),
    }
}

/// llama.cpp's whitespace set: the Unicode `White_Space` property.
pub(crate) fn is_whitespace_cpt(c: char) -> bool {
    matches!(
        c as u32,
        0x09..=0x0D
            | 0x20
            | 0x85
            | 0xA0
            | 0x1680
            | 0x2000..=0x200A
            | 0x2028
            | 0x2029
            | 0x202F
            | 0x205F
            | 0x3000
    )
}

/// The flags of one code point (`unicode_cpt_flags_from_cpt`).
pub(crate) fn flags(c: char) -> CptFlags {
    let cpt = c as u32;
    let category = if cpt < 0x80 {
        ascii_category(cpt as u8)
    } else {
        let table = category_table();
        let i = table.partition_point(|r| r.0 <= cpt);
        match i.checked_sub(1).map(|j| table[j]) {
            Some((first, last, bit)) if first <= cpt && cpt <= last => bit,
            _ => CptFlags::UNDEFINED,
        }
    };
    let ws = if is_whitespace_cpt(c) { CptFlags::WHITESPACE } else { 0 };
    CptFlags(category | ws)
}

/// General category of an ASCII byte (fast path; same answer as the table).
fn ascii_category(b: u8) -> u16 {
    match b {
        b'0'..=b'9' => CptFlags::NUMBER,
        b'a'..=b'z' | b'A'..=b'Z' => CptFlags::LETTER,
        b' ' => CptFlags::SEPARATOR,
        0x00..=0x1F | 0x7F => CptFlags::CONTROL,
        b'$' | b'+' | b'<' | b'=' | b'>' | b'^' | b'`' | b'|' | b'~' => CptFlags::SYMBOL,
        _ => CptFlags::PUNCTUATION,
    }
}

/// Simple lowercase mapping (`unicode_tolower`): the first code point of the lowercase form.
pub(crate) fn to_lower(c: char) -> char {
    c.to_lowercase().next().unwrap_or(c)
}

/// llama.cpp's "NFD": the first code point of the canonical decomposition.
pub(crate) fn nfd_first(c: char) -> char {
    let mut first = None;
    unicode_normalization::char::decompose_canonical(c, |d| {
        if first.is_none() {
            first = Some(d);
        }
    });
    first.unwrap_or(c)
}

/// GPT-2's byte-to-unicode map: printable Latin-1 bytes map to themselves, the other 68 bytes
/// to U+0100.. in byte order.
pub(crate) fn byte_to_char_table() -> &'static [char; 256] {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = ['\0'; 256];
        let mut next = 256u32;
        for (b, slot) in table.iter_mut().enumerate() {
            let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
            let cpt = if printable {
                b as u32
            } else {
                next += 1;
                next - 1
            };
            *slot = char::from_u32(cpt).unwrap_or('\u{FFFD}');
        }
        table
    })
}

/// The inverse of [`byte_to_char_table`]: the byte a GPT-2 alphabet character stands for.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    static SHIFTED: OnceLock<[u8; 68]> = OnceLock::new();
    let cpt = c as u32;
    match cpt {
        0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF => Some(cpt as u8),
        0x100..=0x143 => {
            let shifted = SHIFTED.get_or_init(|| {
                let mut t = [0u8; 68];
                let bytes =
                    (0..=255u8).filter(|b| !matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF));
                for (slot, b) in t.iter_mut().zip(bytes) {
                    *slot = b;
                }
                t
            });
            shifted.get((cpt - 0x100) as usize).copied()
        }
        _ => None,
    }
}

/// Encodes a string's UTF-8 bytes in the GPT-2 alphabet.
pub(crate) fn byte_encode(text: &str) -> String {
    let table = byte_to_char_table();
    text.bytes().map(|b| table[usize::from(b)]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_round_trips() {
        let table = byte_to_char_table();
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(table[usize::from(b)]), Some(b));
        }
        assert_eq!(table[usize::from(b' ')], 'Ġ');
        assert_eq!(table[usize::from(b'\n')], 'Ċ');
    }

    #[test]
    fn categories() {
        assert!(flags('é').is_letter());
        assert!(flags('٣').is_number());
        assert!(flags('、').is_punctuation());
        assert!(flags('€').is_symbol());
        assert!(flags('\u{301}').is_accent_mark());
        assert!(flags('\u{3000}').is_whitespace());
        assert!(flags('\u{85}').is_control() && flags('\u{85}').is_whitespace());
        assert_eq!(flags('\u{378}').category(), CptFlags::UNDEFINED);
        for b in 0u8..0x80 {
            let slow = {
                let t = category_table();
                let c = u32::from(b);
                t.iter().find(|r| r.0 <= c && c <= r.1).map_or(CptFlags::UNDEFINED, |r| r.2)
            };
            assert_eq!(ascii_category(b), slow, "byte {b:#x}");
        }
        assert_eq!(nfd_first('é'), 'e');
        assert_eq!(nfd_first('가'), '\u{1100}');
        assert_eq!(to_lower('İ'), 'i');
    }
}
