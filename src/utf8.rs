//! UTF-8 that a grammar lets through. llama.cpp's grammar decodes a token's bytes leniently: it
//! takes F8–FF as the lead of a 4-byte character and accepts overlong forms and surrogates
//! (`C0 80`, `E0 80 80`, `ED A0 80`), each counted as one character. A JSON reader sees those
//! bytes as several invalid characters, so a string the grammar held to its `maxLength` comes out
//! longer, with U+FFFD in it. Under a grammar, llb refuses the tokens that would write such bytes:
//! those invalid wherever they stand ([`never_valid`]), and, while a character is incomplete,
//! those that do not continue it ([`continues`]).

/// Whether `piece` holds bytes no UTF-8 text holds, whatever comes before or after it: after at
/// most 3 leading continuation bytes (the end of a character begun by the token before), the
/// rest must be valid UTF-8 that may only be cut short at its end.
pub fn never_valid(piece: &[u8]) -> bool {
    let lead = piece.iter().take(3).take_while(|&&b| b & 0xC0 == 0x80).count();
    matches!(std::str::from_utf8(&piece[lead..]), Err(e) if e.error_len().is_some())
}

/// Whether `piece` may follow the incomplete character `pending` (its first bytes): together
/// they are valid UTF-8, possibly cut short at the end.
pub fn continues(pending: &[u8], piece: &[u8]) -> bool {
    match std::str::from_utf8(&[pending, piece].concat()) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    }
}

/// The incomplete character at the end of `pending` followed by `piece` (empty when the text
/// ends on a character boundary).
pub fn pending_after(pending: &[u8], piece: &[u8]) -> Vec<u8> {
    let buf = [pending, piece].concat();
    match std::str::from_utf8(&buf) {
        Err(e) if e.error_len().is_none() => buf[e.valid_up_to()..].to_vec(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_no_text_holds_are_never_valid() {
        for bad in [&[0xF8u8][..], &[0xC0, 0x80], &[0xC1], &[0xFF], &[b'a', 0xF5], &[0xE0, 0x80], &[0xED, 0xA0]] {
            assert!(never_valid(bad), "{bad:02x?}");
        }
        // Cut short at either end is fine: the rest comes from the next token, or came before.
        for ok in [&b"abc"[..], "诈".as_bytes(), &[0xE8, 0xAF], &[0x88, b'x'], &[0xAF, 0x88], &[0xF0, 0x9F, 0x98]] {
            assert!(!never_valid(ok), "{ok:02x?}");
        }
        assert!(never_valid(&[0x80, 0x80, 0x80, 0x80]), "a character has at most 3 continuation bytes");
    }

    #[test]
    fn an_incomplete_character_takes_only_its_continuation() {
        assert!(continues(&[0xE8, 0xAF], &[0x88, b'a']));
        assert!(continues(&[0xE8], &[0xAF]));
        assert!(!continues(&[0xE8, 0xAF], b"a"));
        assert!(!continues(&[0xE0], &[0x80]), "overlong");
        assert!(!continues(&[0xED], &[0xA0]), "a surrogate");
        assert!(!continues(&[0xF4], &[0x90]), "beyond U+10FFFF");
        assert!(continues(&[], b"plain"));
    }

    #[test]
    fn the_pending_bytes_are_the_cut_character() {
        assert_eq!(pending_after(&[], &[b'n', b'p', 0xE8, 0xAF]), [0xE8, 0xAF]);
        assert_eq!(pending_after(&[0xE8, 0xAF], &[0x88]), [0u8; 0]);
        assert_eq!(pending_after(&[0xE8], &[0xAF, 0x88, 0xEB]), [0xEB]);
        assert_eq!(pending_after(&[], b"abc"), [0u8; 0]);
    }
}
