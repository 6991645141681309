//! The tokens of a `$filter`: words, quoted strings, parentheses and commas, with positions for error messages.

use super::{FilterError, bad};

/// A token of a `$filter`.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Token {
    Open,
    Close,
    Comma,
    Str(String),
    Word(String),
}

pub(super) fn tokenize(s: &str) -> Result<Vec<Token>, FilterError> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '(' => {
                out.push(Token::Open);
                i += 1;
            }
            ')' => {
                out.push(Token::Close);
                i += 1;
            }
            ',' => {
                out.push(Token::Comma);
                i += 1;
            }
            '\'' => {
                let mut value = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(bad("a string literal is not closed")),
                        Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                            value.push('\'');
                            i += 2;
                        }
                        Some('\'') => {
                            i += 1;
                            break;
                        }
                        Some(ch) => {
                            value.push(*ch);
                            i += 1;
                        }
                    }
                }
                out.push(Token::Str(value));
            }
            _ => {
                let start = i;
                while i < chars.len() && !chars[i].is_whitespace() && !matches!(chars[i], '(' | ')' | ',' | '\'') {
                    i += 1;
                }
                out.push(Token::Word(chars[start..i].iter().collect()));
            }
        }
    }
    // A `+` of a time-zone offset sent unencoded arrives as a space: `2026-09-01T00:00:00 02:00`.
    let mut merged: Vec<Token> = Vec::with_capacity(out.len());
    for t in out {
        if let (Some(Token::Word(prev)), Token::Word(w)) = (merged.last_mut(), &t)
            && prev.contains('T')
            && prev.as_bytes().first().is_some_and(u8::is_ascii_digit)
            && !prev.ends_with('Z')
            && w.len() == 5
            && w.as_bytes()[2] == b':'
        {
            prev.push('+');
            prev.push_str(w);
            continue;
        }
        merged.push(t);
    }
    Ok(merged)
}
