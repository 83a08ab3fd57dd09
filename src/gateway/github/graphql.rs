//! What a GraphQL document asks GitHub to do: a lexer after the GraphQL specification
//! (strings with their escapes, comments, commas as whitespace) and the document's
//! top-level structure (each definition an operation, `query`, `mutation` or
//! `subscription`, the `{ ... }` shorthand of a query, or a fragment). Anything it cannot
//! read is not an executable document it forwards: a looser reading could hide a mutation
//! inside what looks like a string. Block strings (`"""..."""`) are refused outright:
//! parsers disagree on where one ends (graphql-ruby's lexers end some before the
//! specification does, around `\"""` and quotes next to it), and a document read two ways
//! could be a query here and a mutation at GitHub; queries have no need of them.
//! Pure: a document in, its operations' types out.

/// An operation's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Query,
    Mutation,
    Subscription,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token<'a> {
    /// `{ } ( ) [ ] : = @ $ ! & |` and `...`.
    Punct(char),
    Name(&'a str),
    /// A number or a string: its text does not matter here.
    Value,
}

type Lexed<'a> = Result<Vec<Token<'a>>, &'static str>;

/// Every token of `doc`, or why it is no GraphQL document.
fn lex(doc: &str) -> Lexed<'_> {
    let b = doc.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            // Ignored tokens: whitespace, line terminators, commas, the byte order mark.
            b' ' | b'\t' | b'\n' | b'\r' | b',' => i += 1,
            0xEF if b[i..].starts_with(&[0xEF, 0xBB, 0xBF]) => i += 3,
            b'#' => {
                while i < b.len() && b[i] != b'\n' && b[i] != b'\r' {
                    i += 1;
                }
            }
            b'{' | b'}' | b'(' | b')' | b'[' | b']' | b':' | b'=' | b'@' | b'$' | b'!' | b'&'
            | b'|' => {
                out.push(Token::Punct(char::from(b[i])));
                i += 1;
            }
            b'.' if b[i..].starts_with(b"...") => {
                out.push(Token::Punct('.'));
                i += 3;
            }
            b'"' if b[i..].starts_with(b"\"\"\"") => {
                return Err("a block string (\"\"\"): not forwarded, parsers disagree on its end");
            }
            b'"' => {
                i = string_end(b, i + 1)?;
                out.push(Token::Value);
            }
            c if c == b'_' || c.is_ascii_alphabetic() => {
                let start = i;
                while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric()) {
                    i += 1;
                }
                out.push(Token::Name(&doc[start..i]));
            }
            c if c == b'-' || c.is_ascii_digit() => {
                i += 1;
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'.' | b'+' | b'-'))
                {
                    i += 1;
                }
                out.push(Token::Value);
            }
            _ => return Err("a character GraphQL does not have outside strings"),
        }
    }
    Ok(out)
}

/// Past the closing quote of a string whose content starts at `i`. Only the escapes the
/// specification has (`\" \\ \/ \b \f \n \r \t \uXXXX \u{X...}`): a parser that reads an
/// unknown one differently must not get a document this one read.
fn string_end(b: &[u8], mut i: usize) -> Result<usize, &'static str> {
    let hex = |c: &u8| c.is_ascii_hexdigit();
    while i < b.len() {
        match b[i] {
            b'"' => return Ok(i + 1),
            b'\\' => match b.get(i + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                Some(b'u') if b.len() > i + 5 && b[i + 2..i + 6].iter().all(hex) => i += 6,
                Some(b'u') if b.get(i + 2) == Some(&b'{') => {
                    let digits = b[i + 3..].iter().take_while(|c| hex(c)).count();
                    if digits == 0 || b.get(i + 3 + digits) != Some(&b'}') {
                        return Err("a \\u{...} escape that is not one");
                    }
                    i += 4 + digits;
                }
                _ => return Err("an escape GraphQL does not have"),
            },
            b'\n' | b'\r' => return Err("a string runs past its line"),
            c if c < 0x20 && c != b'\t' => return Err("a control character in a string"),
            _ => i += 1,
        }
    }
    Err("a string is not closed")
}

/// The type of every operation in `doc`, in order; `Err` with why when it is not an
/// executable document this reader knows (type definitions, unbalanced brackets, ...).
pub fn operations(doc: &str) -> Result<Vec<Op>, &'static str> {
    let tokens = lex(doc)?;
    let mut ops = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let op = match tokens[i] {
            Token::Punct('{') => Some(Op::Query),
            Token::Name("query") => Some(Op::Query),
            Token::Name("mutation") => Some(Op::Mutation),
            Token::Name("subscription") => Some(Op::Subscription),
            Token::Name("fragment") => None,
            _ => return Err("a definition that is neither an operation nor a fragment"),
        };
        i = past_definition(&tokens, i)?;
        ops.extend(op);
    }
    if ops.is_empty() {
        return Err("no operation");
    }
    Ok(ops)
}

/// What a document holds that a mutation may not (the mutation reader refuses each at any
/// depth), seen by this lexer alone: a second reading, for the fuzz target to hold the
/// parser-based walk to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    /// `name: field` outside parentheses: an alias (arguments, variable definitions and
    /// object values are inside parentheses).
    pub alias: bool,
    /// `...`: a fragment spread or an inline fragment.
    pub fragment: bool,
    /// `@`: a directive.
    pub directive: bool,
}

/// The [`Marks`] of `doc`.
pub fn marks(doc: &str) -> Result<Marks, &'static str> {
    let mut m = Marks::default();
    let mut parens = 0usize;
    for t in lex(doc)? {
        match t {
            Token::Punct('(') => parens += 1,
            Token::Punct(')') => parens = parens.checked_sub(1).ok_or("unbalanced ( )")?,
            Token::Punct(':') if parens == 0 => m.alias = true,
            Token::Punct('.') => m.fragment = true,
            Token::Punct('@') => m.directive = true,
            _ => {}
        }
    }
    Ok(m)
}

/// Past the selection set of the definition starting at `i`: its head (name, variables,
/// type condition, directives: brackets in it balanced) up to its first `{` outside
/// parentheses, then the braces balanced.
fn past_definition(t: &[Token<'_>], mut i: usize) -> Result<usize, &'static str> {
    let mut parens = 0usize;
    while i < t.len() {
        match t[i] {
            Token::Punct('(') => parens += 1,
            Token::Punct(')') => parens = parens.checked_sub(1).ok_or("unbalanced ( )")?,
            Token::Punct('{') if parens == 0 => break,
            _ => {}
        }
        i += 1;
    }
    let mut depth = 0usize;
    while i < t.len() {
        match t[i] {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth = depth.checked_sub(1).ok_or("unbalanced { }")?;
                if depth == 0 {
                    return Ok(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    Err("a definition without its closed selection set")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_see_aliases_fragments_and_directives_but_not_arguments_or_strings() {
        let none = Marks::default();
        assert_eq!(
            marks("mutation M($i: CreateIssueInput!) { createIssue(input: {title: \"a: ... @x\", body: $i}) { issue { id } } }"),
            Ok(none)
        );
        let alias = marks("mutation { createIssue(input: {}) { issue { id: title } } }").unwrap();
        assert!(alias.alias && !alias.fragment && !alias.directive);
        assert!(
            marks("mutation { a { ... on Issue { id } } }")
                .unwrap()
                .fragment
        );
        assert!(
            marks("mutation { a { id @include(if: true) } }")
                .unwrap()
                .directive
        );
    }

    #[test]
    fn queries_fragments_and_the_shorthand_are_queries() {
        for doc in [
            "{ viewer { login } }",
            "query { viewer { login } } # mutation\n",
            "query Q($a: String = \"mutation { x }\") { search(query: $a) { n } }",
            "query Q($o: In = {a: {b: 1}}) { x(o: $o) { y } }",
            "fragment F on User { login } query { viewer { ...F } }",
            "query mutation { x }",
            "\u{feff}{ a, b, c }",
        ] {
            assert!(
                operations(doc).is_ok_and(|o| o.iter().all(|x| *x == Op::Query)),
                "{doc}: {:?}",
                operations(doc)
            );
        }
    }

    #[test]
    fn a_mutation_is_found_wherever_a_looser_reading_would_miss_it() {
        for doc in [
            "mutation { closeIssue(input: {}) { clientMutationId } }",
            "query Q { a } mutation M { b }",
            "query { a(x: \"\\\"\") } mutation { b }",
            "query { a(x: \"\\u0041\\u{1F600}\\\\\") } mutation { b }",
            "subscription { s }",
            "{a}mutation{b}",
        ] {
            let ops = operations(doc).unwrap_or_else(|e| panic!("{doc}: {e}"));
            assert!(ops.iter().any(|o| *o != Op::Query), "{doc}: {ops:?}");
        }
    }

    #[test]
    fn what_it_cannot_read_is_refused() {
        for doc in [
            "",
            "# only a comment",
            "{ a(x: \"open) }",
            "{ a(x: \"\"\"open) }",
            // Block strings at all: a lone quote in one blinds a naive string skipper, and
            // graphql-ruby ends `\"""` and `"\"""` blocks sooner than the specification.
            "{ a(s: \"\"\"a \" mutation { b } \"\"\") { c } }",
            "query { a(x: \"\"\" \" \"\"\") } mutation M { createIssue(input: {repositoryId: \"R\"}) { c } }",
            "query Q { r(name: \"\"\"\\\"\"\"\"\" ) { id } } mutation M { b } # \"\"\") { id } }",
            "{ a { b }",
            "{ a } }",
            "type Query { x: Int }",
            "schema { query: Q }",
            "{ a(x: \"line\nbreak\") }",
            "{ a(x: \"\\q\") } mutation { b }",
            "{ a(x: \"\\u12\") }",
            "{ a(x: \"\\u{}\") }",
            "{ a } \u{0}",
            "{ a } ; mutation { b }",
        ] {
            assert!(operations(doc).is_err(), "{doc:?}: {:?}", operations(doc));
        }
    }
}
