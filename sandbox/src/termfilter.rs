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
    /// After ESC (not yet passed on: it is sent only with the byte that completes it).
    Esc,
    /// After the UTF-8 lead byte 0xC2: the next byte may make a C1 control (U+0080–U+009F),
    /// which VTE-style terminals obey like its 7-bit form.
    C2,
    /// Inside a string sequence: dropped up to BEL, ST, CAN or SUB.
    Str,
    /// ESC inside a string sequence.
    StrEsc,
    /// 0xC2 inside a string sequence (U+009C is ST).
    StrC2,
}

/// A streaming filter: sequences split across reads are handled. Its parser follows the DEC
/// one terminals use: C0 controls inside an escape are executed without ending it, a second
/// ESC restarts it, CAN and SUB abort, and a string ends at BEL or ST — or after
/// `MAX_STRING` bytes, so an unterminated one cannot swallow the rest of the output.
#[derive(Debug, Default)]
pub struct Filter {
    state: State,
    in_string: usize,
}

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;
const MAX_STRING: usize = 4096;

/// `ESC x` for these `x` opens a string the terminal acts on: OSC `]`, DCS `P`, PM `^`, APC `_`,
/// SOS `X`, and screen's title `k`.
fn opens_string(b: u8) -> bool {
    matches!(b, b']' | b'P' | b'^' | b'_' | b'X' | b'k')
}

impl Filter {
    /// Append the filtered form of `input` to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            self.step(b, out);
        }
    }

    fn step(&mut self, b: u8, out: &mut Vec<u8>) {
        self.state = match self.state {
            State::Ground => match b {
                ESC => State::Esc,
                0xC2 => State::C2,
                _ => {
                    out.push(b);
                    State::Ground
                }
            },
            State::Esc => match b {
                ESC => State::Esc,
                CAN | SUB => State::Ground,
                0x00..=0x1f => {
                    out.push(b);
                    State::Esc
                }
                b if opens_string(b) => self.string(),
                _ => {
                    out.extend_from_slice(&[ESC, b]);
                    State::Ground
                }
            },
            State::C2 => match b {
                // C1 string introducers (DCS, SOS, OSC, PM, APC) open a string; every other C1
                // control (CSI included) is dropped.
                0x90 | 0x98 | 0x9d | 0x9e | 0x9f => self.string(),
                0x80..=0x9f => State::Ground,
                _ => {
                    out.push(0xC2);
                    self.state = State::Ground;
                    self.step(b, out);
                    return;
                }
            },
            State::Str | State::StrEsc | State::StrC2 if self.in_string >= MAX_STRING => {
                self.state = State::Ground;
                self.step(b, out);
                return;
            }
            State::Str => {
                self.in_string += 1;
                match b {
                    BEL | CAN | SUB => State::Ground,
                    ESC => State::StrEsc,
                    0xC2 => State::StrC2,
                    _ => State::Str,
                }
            }
            State::StrEsc => match b {
                b'\\' => State::Ground,
                // Any other byte ends the string and starts a new escape with it.
                _ => {
                    self.state = State::Esc;
                    self.step(b, out);
                    return;
                }
            },
            State::StrC2 => match b {
                0x9c => State::Ground,
                _ => {
                    self.in_string += 1;
                    State::Str
                }
            },
        };
    }

    fn string(&mut self) -> State {
        self.in_string = 0;
        State::Str
    }
}

/// Copy `from` to `to` through `filter` until end of file. Output streams that reach the same
/// terminal share one filter (and its lock): an ESC on stdout followed by `]` on stderr would
/// otherwise make a sequence neither filter saw.
pub fn relay(mut from: impl std::io::Read, mut to: impl std::io::Write, filter: &std::sync::Mutex<Filter>) {
    let mut buf = [0u8; 16 * 1024];
    let mut out = Vec::with_capacity(buf.len());
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let Ok(mut f) = filter.lock() else { break };
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
    fn the_parser_tricks_of_a_real_terminal_do_not_pass() {
        // ESC ESC: the first ESC is dropped, never joined with what follows a dropped string.
        assert_eq!(run(&[b"\x1b\x1b]x\x07]52;c;QQ==\x07z"]), b"]52;c;QQ==\x07z");
        // A C0 control between ESC and `]` is executed, the escape goes on.
        assert_eq!(run(&[b"\x1b\x07]52;c;QQ==\x07z"]), b"\x07z");
        assert_eq!(run(&[b"\x1b\r\n]0;t\x07z"]), b"\r\nz");
        // C1 OSC in UTF-8, ended by C1 ST; other C1 controls dropped.
        assert_eq!(run(&["a\u{9d}52;c;QQ==\u{9c}b\u{9b}31mc".as_bytes()]), b"ab31mc");
        // screen's title; CAN aborts a string and output resumes.
        assert_eq!(run(&[b"\x1bktitle\x1b\\x\x1b]0;never ended\x18y"]), b"xy");
        // An unterminated string ends after MAX_STRING bytes.
        let mut long = b"\x1b]".to_vec();
        long.extend(std::iter::repeat_n(b'a', MAX_STRING + 10));
        long.extend_from_slice(b"\x1b[1mafter");
        assert!(run(&[&long]).ends_with(b"\x1b[1mafter"));
    }

    #[test]
    fn utf8_text_passes_unchanged() {
        let s = "Grüße — ✓ 漢字\n".as_bytes();
        assert_eq!(run(&[s]), s);
    }
}
