//! llama.cpp's GBNF grammars (llama-server's `grammar` field) rewritten in llguidance's Lark
//! syntax, which the constrained decoder compiles: `name ::= ...` becomes `name: ...` on one
//! line, `root` becomes the start rule, strings are re-escaped, character classes and `.`
//! become regular expressions; grouping and the `* + ? {m,n}` repetitions carry over.

/// A GBNF lexical element.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Define,
    /// A literal's decoded text.
    Lit(String),
    /// A character class, as written between (and including) the brackets.
    Class(String),
    Any,
    /// `|`, `(`, `)`, `*`, `+`, `?` or a `{m,n}` repetition.
    Punct(String),
}

fn lex(src: &str) -> Result<Vec<Tok>, String> {
    let b: Vec<char> = src.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        match c {
            '#' => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            c if c.is_whitespace() => i += 1,
            ':' if b[i..].starts_with(&[':', ':', '=']) => {
                out.push(Tok::Define);
                i += 3;
            }
            '"' => {
                let mut s = String::new();
                i += 1;
                loop {
                    let Some(&c) = b.get(i) else { return Err("unterminated string".into()) };
                    i += 1;
                    match c {
                        '"' => break,
                        '\\' => {
                            let (ch, n) = escape(&b[i..])?;
                            s.push(ch);
                            i += n;
                        }
                        c => s.push(c),
                    }
                }
                out.push(Tok::Lit(s));
            }
            '[' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != ']' {
                    if b[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if i >= b.len() {
                    return Err("unterminated character class".into());
                }
                i += 1;
                out.push(Tok::Class(b[start..i].iter().collect()));
            }
            '.' => {
                out.push(Tok::Any);
                i += 1;
            }
            '|' | '(' | ')' | '*' | '+' | '?' => {
                out.push(Tok::Punct(c.to_string()));
                i += 1;
            }
            '{' => {
                let start = i;
                while i < b.len() && b[i] != '}' {
                    i += 1;
                }
                if i >= b.len() {
                    return Err("unterminated {m,n}".into());
                }
                i += 1;
                let rep: String = b[start..i].iter().filter(|c| !c.is_whitespace()).collect();
                out.push(Tok::Punct(rep));
            }
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '-' || b[i] == '_') {
                    i += 1;
                }
                out.push(Tok::Name(b[start..i].iter().collect()));
            }
            c => return Err(format!("unexpected '{c}'")),
        }
    }
    Ok(out)
}

/// Decodes the escape after a backslash: the character and how many chars it used.
fn escape(s: &[char]) -> Result<(char, usize), String> {
    let hex = |n: usize| -> Result<(char, usize), String> {
        let h: String = s.get(1..1 + n).ok_or("short escape")?.iter().collect();
        let v = u32::from_str_radix(&h, 16).map_err(|_| format!("bad escape \\{}{h}", s[0]))?;
        Ok((char::from_u32(v).ok_or("bad code point")?, 1 + n))
    };
    match s.first() {
        Some('n') => Ok(('\n', 1)),
        Some('t') => Ok(('\t', 1)),
        Some('r') => Ok(('\r', 1)),
        Some('x') => hex(2),
        Some('u') => hex(4),
        Some('U') => hex(8),
        Some(&c) => Ok((c, 1)),
        None => Err("dangling backslash".into()),
    }
}

fn rule_name(n: &str) -> String {
    format!("r_{}", n.to_ascii_lowercase().replace('-', "_"))
}

/// The Lark form of a GBNF grammar (its `root` rule is the start).
pub fn to_lark(gbnf: &str) -> crate::Result<String> {
    to_lark_inner(gbnf).map_err(crate::ServerError::Grammar)
}

fn to_lark_inner(gbnf: &str) -> Result<String, String> {
    let toks = lex(gbnf)?;
    let mut out = String::from("start: r_root\n");
    let mut i = 0;
    let mut seen_root = false;
    while i < toks.len() {
        let Tok::Name(name) = &toks[i] else {
            return Err(format!("expected a rule name, found {:?}", toks[i]));
        };
        if toks.get(i + 1) != Some(&Tok::Define) {
            return Err(format!("expected ::= after '{name}'"));
        }
        seen_root |= name == "root";
        out.push_str(&rule_name(name));
        out.push(':');
        i += 2;
        let mut empty = true;
        while i < toks.len()
            && !(matches!(toks[i], Tok::Name(_)) && toks.get(i + 1) == Some(&Tok::Define))
        {
            let postfix = matches!(&toks[i], Tok::Punct(p) if p != "|" && p != "(" && p != ")");
            if !postfix {
                out.push(' ');
            }
            match &toks[i] {
                Tok::Name(n) => out.push_str(&rule_name(n)),
                Tok::Lit(s) => out.push_str(&serde_json::to_string(s).expect("a string")),
                Tok::Class(c) => {
                    out.push('/');
                    out.push_str(&c.replace('/', "\\/"));
                    out.push('/');
                }
                Tok::Any => out.push_str("/(?s:.)/"),
                Tok::Punct(p) => out.push_str(p),
                Tok::Define => unreachable!("a rule start ends the body"),
            }
            empty = false;
            i += 1;
        }
        if empty {
            out.push_str(" \"\"");
        }
        out.push('\n');
    }
    if !seen_root {
        return Err("no 'root' rule".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gbnf_becomes_lark() {
        let g = r#"
            # yes or no, then a number
            root ::= answer " " num
            answer ::= ("yes" | "no")
            num ::= [0-9]{1,3} "\n"? .*
        "#;
        assert_eq!(
            to_lark(g).unwrap(),
            "start: r_root\nr_root: r_answer \" \" r_num\nr_answer: ( \"yes\" | \"no\" )\n\
             r_num: /[0-9]/{1,3} \"\\n\"? /(?s:.)/*\n"
        );
        assert!(to_lark("a ::= \"x\"").unwrap_err().to_string().contains("root"));
        assert!(to_lark("root ::= \"x").is_err());
        assert!(to_lark("root = \"x\"").is_err());
    }
}
