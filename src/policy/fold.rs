//! Case folding as Go's `encoding/json` matches object keys (and `strings.EqualFold`
//! compares strings): simple Unicode case folding, one code point for one, each folded to
//! the smallest code point of its class (`K`, `k` and the Kelvin sign `K` are one; so are
//! `ß` and `ẞ`; `ß` and `ss` are not). The classes come from Unicode's CaseFolding.txt
//! ([`fold_table`](self), made by `scripts/gen-case-fold.py`); a newer Unicode only adds
//! pairs, so a key pair that some Go release folds together is folded here too as long as
//! the table is at least that release's Unicode.

#[path = "fold_table.rs"]
mod fold_table;

pub use fold_table::UNICODE_VERSION;

/// The smallest code point of `c`'s simple case-folding class.
pub fn fold_char(c: char) -> char {
    let cp = u32::from(c);
    match fold_table::FOLD.binary_search_by_key(&cp, |(from, _)| *from) {
        Ok(i) => char::from_u32(fold_table::FOLD[i].1).unwrap_or(c),
        Err(_) => c,
    }
}

/// `s` with every character folded: two strings Go's `strings.EqualFold` takes for equal
/// fold to the same string, and two it does not fold to different ones.
pub fn fold(s: &str) -> String {
    s.chars().map(fold_char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Classes Go's `unicode.SimpleFold` orbits through (its own tests name several:
    /// "KkK", "Ssſ", "ρϱΡ", "ͅΙιι", Cherokee), each folded together here; and pairs Go
    /// keeps apart (full folding, Turkish dotted and dotless i).
    #[test]
    fn the_pairs_go_folds_together_fold_together() {
        let together: &[&[char]] = &[
            &['A', 'a'],
            &['K', 'k', '\u{212A}'],
            &['S', 's', '\u{17F}'],
            &['\u{DF}', '\u{1E9E}'],
            &['\u{B5}', '\u{39C}', '\u{3BC}'],
            &['\u{C5}', '\u{E5}', '\u{212B}'],
            &['\u{398}', '\u{3B8}', '\u{3D1}', '\u{3F4}'],
            &['\u{3A1}', '\u{3C1}', '\u{3F1}'],
            &['\u{345}', '\u{399}', '\u{3B9}', '\u{1FBE}'],
            &['\u{3A3}', '\u{3C2}', '\u{3C3}'],
            &['\u{392}', '\u{3B2}', '\u{3D0}'],
            &['\u{395}', '\u{3B5}', '\u{3F5}'],
            &['\u{39A}', '\u{3BA}', '\u{3F0}'],
            &['\u{3A0}', '\u{3C0}', '\u{3D6}'],
            &['\u{3A6}', '\u{3C6}', '\u{3D5}'],
            &['\u{1C4}', '\u{1C5}', '\u{1C6}'],
            &['\u{1E60}', '\u{1E61}', '\u{1E9B}'],
            &['\u{412}', '\u{432}', '\u{1C80}'],
            &['\u{13A0}', '\u{AB70}'],
            &['\u{10400}', '\u{10428}'],
            &['\u{1E900}', '\u{1E922}'],
        ];
        for class in together {
            let want = fold_char(class[0]);
            for c in *class {
                assert_eq!(
                    fold_char(*c),
                    want,
                    "{class:?}: {c:?} (U+{:04X})",
                    u32::from(*c)
                );
            }
            // The smallest member stands for the class, as Go's foldRune picks it.
            assert_eq!(
                u32::from(want),
                class.iter().map(|c| u32::from(*c)).min().unwrap()
            );
        }
        for (a, b) in [
            ("i", "\u{130}"),
            ("I", "\u{131}"),
            ("\u{130}", "\u{131}"),
            ("\u{DF}", "ss"),
            ("\u{1E9E}", "SS"),
            ("\u{FB00}", "ff"),
            ("\u{149}", "\u{2BC}n"),
            ("a", "b"),
        ] {
            assert_ne!(fold(a), fold(b), "{a:?} and {b:?} are not one key to Go");
        }
        assert_eq!(fold("ba\u{17F}e"), fold("BASE"));
        assert_eq!(fold("stra\u{DF}e"), fold("STRA\u{1E9E}E"));
    }

    /// The table is Unicode's CaseFolding.txt (C and S entries) exactly: every class, from
    /// the file Debian's unicode-data installs.
    #[test]
    fn the_table_is_unicodes_case_folding() {
        let path = "/usr/share/unicode/CaseFolding.txt";
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
            panic!("{path}: {e}; install unicode-data (scripts/install-deps.sh)")
        });
        assert!(
            text.contains(&format!("CaseFolding-{UNICODE_VERSION}.txt")),
            "the table was made from CaseFolding {UNICODE_VERSION}, {path} is another version: run scripts/gen-case-fold.py"
        );
        // Union of each code point with what it folds to.
        let mut parent: BTreeMap<u32, u32> = BTreeMap::new();
        fn root(p: &BTreeMap<u32, u32>, mut x: u32) -> u32 {
            while let Some(&up) = p.get(&x).filter(|up| **up != x) {
                x = up;
            }
            x
        }
        for line in text.lines() {
            let data = line.split('#').next().unwrap_or("").trim();
            let f: Vec<&str> = data.split(';').map(str::trim).collect();
            if f.len() < 3 || !matches!(f[1], "C" | "S") {
                continue;
            }
            let (a, b) = (
                u32::from_str_radix(f[0], 16).unwrap(),
                u32::from_str_radix(f[2], 16).unwrap(),
            );
            let (ra, rb) = (root(&parent, a), root(&parent, b));
            parent.entry(a).or_insert(a);
            parent.entry(b).or_insert(b);
            if ra != rb {
                parent.insert(ra.max(rb), ra.min(rb));
            }
        }
        let mut checked = 0;
        for cp in 0..=0x10FFFFu32 {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            let want = if parent.contains_key(&cp) {
                root(&parent, cp)
            } else {
                cp
            };
            assert_eq!(u32::from(fold_char(c)), want, "U+{cp:04X}");
            checked += 1;
        }
        assert!(checked > 1_000_000);
    }
}
