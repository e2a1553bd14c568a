//! What a sandboxed program may send to the user's terminal.
//!
//! The sandbox never holds a descriptor of the user's terminal (it would change its modes);
//! the launcher relays the program's output. Most escape sequences are harmless (colours,
//! cursor movement), but the string sequences are instructions to the terminal itself: OSC sets
//! the window title and writes the clipboard (OSC 52: the agent would choose what the user
//! pastes next), DCS, APC, PM and SOS reach terminal features beyond that. The relay drops them
//! and passes everything else unchanged. Only the 7-bit forms (`ESC ]`, …) are recognised: the
//! 8-bit C1 bytes are continuation bytes of UTF-8 text, which a UTF-8 terminal does not read as
//! controls.

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Ground,
    /// After ESC.
    Esc,
    /// Inside a string sequence: dropped up to BEL or ST (`ESC \`).
    Str,
    /// ESC inside a string sequence.
    StrEsc,
}

/// A streaming filter: sequences split across reads are handled.
#[derive(Debug, Default)]
pub struct Filter {
    state: State,
}

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;

impl Filter {
    /// Append the filtered form of `input` to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            self.state = match (self.state, b) {
                (State::Ground, ESC) => State::Esc,
                (State::Ground, _) => {
                    out.push(b);
                    State::Ground
                }
                (State::Esc, b']' | b'P' | b'^' | b'_' | b'X') => State::Str,
                (State::Esc, ESC) => {
                    out.push(ESC);
                    State::Esc
                }
                (State::Esc, _) => {
                    out.extend_from_slice(&[ESC, b]);
                    State::Ground
                }
                (State::Str, BEL) => State::Ground,
                (State::Str, ESC) => State::StrEsc,
                (State::Str, _) => State::Str,
                (State::StrEsc, b'\\') => State::Ground,
                (State::StrEsc, ESC) => State::StrEsc,
                (State::StrEsc, _) => State::Str,
            };
        }
    }
}

/// Copy `from` to `to` through a [`Filter`] until end of file.
pub fn relay(mut from: impl std::io::Read, mut to: impl std::io::Write) {
    let mut f = Filter::default();
    let mut buf = [0u8; 16 * 1024];
    let mut out = Vec::with_capacity(buf.len());
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.clear();
                f.push(&buf[..n], &mut out);
                if to.write_all(&out).and_then(|()| to.flush()).is_err() {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&[u8]]) -> Vec<u8> {
        let mut f = Filter::default();
        let mut out = Vec::new();
        for c in chunks {
            f.push(c, &mut out);
        }
        out
    }

    #[test]
    fn clipboard_title_and_device_strings_are_dropped_colours_kept() {
        let input: &[u8] =
            b"a\x1b]52;c;SGVsbG8=\x07b\x1b]0;title\x1b\\c\x1bPq#0\x1b\\d\x1b_apc\x07e\x1b[31mred\x1b[0m\n";
        assert_eq!(run(&[input]), b"abcde\x1b[31mred\x1b[0m\n");
    }

    #[test]
    fn sequences_split_across_reads_are_still_dropped() {
        assert_eq!(run(&[b"x\x1b", b"]52;c;QQ", b"==\x1b", b"\\y"]), b"xy");
        assert_eq!(run(&[b"x\x1b", b"[1m"]), b"x\x1b[1m");
    }

    #[test]
    fn utf8_text_passes_unchanged() {
        let s = "Grüße — ✓ 漢字\n".as_bytes();
        assert_eq!(run(&[s]), s);
    }
}
