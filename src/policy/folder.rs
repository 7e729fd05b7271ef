//! Matching globs against a folder that stands for everything in it: a nested repository
//! (a gitlink, mode `160000`) is one entry in a capture, but the files in it are changes in the
//! worktree all the same. A forbidden glob matches the folder when it could match the folder or
//! anything below it; an allowed glob covers the folder only when it matches everything below
//! it.

use globset::{GlobBuilder, GlobMatcher};

/// More alternatives than this from `{a,b}` groups and a pattern is judged conservatively
/// (it may match anything below a folder, and covers none).
const MAX_ALTERNATIVES: usize = 256;

/// One `/`-separated component of a glob.
#[derive(Debug, Clone)]
enum Component {
    /// `**`: zero or more components.
    AnyDepth,
    /// Anything else, matched against one path component.
    One(GlobMatcher),
}

/// A glob split into components, one list per `{a,b}` alternative; `None` when it could not
/// be split (too many alternatives, or a component that does not compile alone).
#[derive(Debug, Clone)]
pub(super) struct FolderPattern {
    alternatives: Option<Vec<Vec<Component>>>,
}

impl FolderPattern {
    /// Splits a normalised glob (as compiled by the policy).
    pub(super) fn new(pattern: &str) -> Self {
        let alternatives = expand_braces(pattern).and_then(|expanded| {
            expanded
                .iter()
                .map(|alternative| split_components(alternative))
                .collect::<Option<Vec<_>>>()
        });
        Self { alternatives }
    }

    /// True when the glob matches `folder` or could match a path below it; true as well when
    /// the glob could not be split (so a forbidden folder is never missed).
    pub(super) fn may_match_within(&self, folder: &str) -> bool {
        let parts: Vec<&str> = folder.split('/').collect();
        match &self.alternatives {
            Some(alternatives) => alternatives
                .iter()
                .any(|components| may_match(components, &parts)),
            None => true,
        }
    }

    /// True when the glob matches every path below `folder`; false when the glob could not be
    /// split (so an allowed list never covers a folder by accident).
    pub(super) fn covers(&self, folder: &str) -> bool {
        let parts: Vec<&str> = folder.split('/').collect();
        match &self.alternatives {
            Some(alternatives) => alternatives
                .iter()
                .any(|components| covers(components, &parts)),
            None => false,
        }
    }
}

fn may_match(glob: &[Component], folder: &[&str]) -> bool {
    let Some((first, rest)) = folder.split_first() else {
        // The folder is used up: the glob matched it, or what is left of the glob can match
        // something below it.
        return true;
    };
    match glob.split_first() {
        None => false,
        Some((Component::AnyDepth, after)) => may_match(after, folder) || may_match(glob, rest),
        Some((Component::One(matcher), after)) => matcher.is_match(first) && may_match(after, rest),
    }
}

fn covers(glob: &[Component], folder: &[&str]) -> bool {
    if !glob.is_empty()
        && glob
            .iter()
            .all(|component| matches!(component, Component::AnyDepth))
    {
        return true;
    }
    let (Some((head, after)), Some((first, rest))) = (glob.split_first(), folder.split_first())
    else {
        return false;
    };
    match head {
        Component::AnyDepth => covers(after, folder) || covers(glob, rest),
        Component::One(matcher) => matcher.is_match(first) && covers(after, rest),
    }
}

/// The end (exclusive) of the unit starting at `index`: an escaped character, a `[...]` class,
/// or one character.
fn unit_end(chars: &[char], index: usize) -> usize {
    match chars[index] {
        '\\' => (index + 2).min(chars.len()),
        '[' => {
            let mut end = index + 1;
            if matches!(chars.get(end), Some('!' | '^')) {
                end += 1;
            }
            if chars.get(end) == Some(&']') {
                end += 1;
            }
            match chars[end.min(chars.len())..]
                .iter()
                .position(|&character| character == ']')
            {
                Some(offset) => end + offset + 1,
                None => index + 1,
            }
        }
        _ => index + 1,
    }
}

/// Every alternative of the `{a,b}` groups (nested too) of `pattern`; `None` past
/// [`MAX_ALTERNATIVES`] or on an unbalanced group.
fn expand_braces(pattern: &str) -> Option<Vec<String>> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut index = 0;
    let mut open = None;
    while index < chars.len() {
        if chars[index] == '{' {
            open = Some(index);
            break;
        }
        index = unit_end(&chars, index);
    }
    let Some(open) = open else {
        return Some(vec![pattern.to_owned()]);
    };
    // The matching `}` and the top-level commas between.
    let mut depth = 0usize;
    let mut splits = vec![open];
    let mut close = None;
    let mut index = open + 1;
    while index < chars.len() {
        match chars[index] {
            '{' => depth += 1,
            '}' if depth == 0 => {
                close = Some(index);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => splits.push(index),
            _ => {}
        }
        index = unit_end(&chars, index);
    }
    let close = close?;
    splits.push(close);
    let prefix: String = chars[..open].iter().collect();
    let suffix: String = chars[close + 1..].iter().collect();
    let mut expanded = Vec::new();
    for bounds in splits.windows(2) {
        let alternative: String = chars[bounds[0] + 1..bounds[1]].iter().collect();
        for each in expand_braces(&format!("{prefix}{alternative}{suffix}"))? {
            expanded.push(each);
            if expanded.len() > MAX_ALTERNATIVES {
                return None;
            }
        }
    }
    Some(expanded)
}

/// Splits a pattern without braces at its `/` (not inside a class or escaped).
fn split_components(pattern: &str) -> Option<Vec<Component>> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut components = Vec::new();
    let mut start = 0;
    let mut index = 0;
    while index <= chars.len() {
        if index == chars.len() || chars[index] == '/' {
            let text: String = chars[start..index].iter().collect();
            components.push(if text == "**" {
                Component::AnyDepth
            } else {
                Component::One(
                    GlobBuilder::new(&text)
                        .literal_separator(true)
                        .backslash_escape(true)
                        .build()
                        .ok()?
                        .compile_matcher(),
                )
            });
            start = index + 1;
            index += 1;
        } else {
            index = unit_end(&chars, index);
        }
    }
    Some(components)
}

#[cfg(test)]
mod tests {
    use super::FolderPattern;

    #[test]
    fn a_glob_may_match_within_a_folder_when_its_literal_prefix_is_at_or_below_it() {
        for (pattern, folder, expected) in [
            ("secret/**", "secret", true),
            ("secret/*.txt", "secret", true),
            ("secret", "secret", true),
            ("secret/deep/**", "secret", true),
            ("**", "secret", true),
            ("**/secret/**", "a/b/secret", true),
            ("**/*.pem", "vendor/lib", true),
            ("*.pem", "vendor", false),
            ("{docs,secret}/**", "secret", true),
            ("{docs/a,secret/b}/**", "secret", true),
            ("{docs/a,other/b}/**", "secret", false),
            ("sec*/**", "secret", true),
            ("se[a-c]ret/**", "secret", true),
            (".github/**", ".github/actions", true),
            (".github/workflows/**", ".github/actions", false),
            ("other/**", "secret", false),
            ("secret/**", "secretive", false),
            ("src/secret/**", "secret", false),
        ] {
            assert_eq!(
                FolderPattern::new(pattern).may_match_within(folder),
                expected,
                "{pattern} within {folder}"
            );
        }
    }

    #[test]
    fn a_glob_covers_a_folder_only_when_it_matches_everything_below_it() {
        for (pattern, folder, expected) in [
            ("**", "secret", true),
            ("secret/**", "secret", true),
            ("src/**", "src/vendor/lib", true),
            ("**/vendor/**", "src/vendor/lib", true),
            ("{src,lib}/**", "lib/x", true),
            ("secret", "secret", false),
            ("secret/*", "secret", false),
            ("secret/**/*.rs", "secret", false),
            ("src/**", "secret", false),
            ("*", "secret", false),
        ] {
            assert_eq!(
                FolderPattern::new(pattern).covers(folder),
                expected,
                "{pattern} covers {folder}"
            );
        }
    }

    #[test]
    fn a_glob_that_cannot_be_split_is_judged_conservatively() {
        let many = "{a,b,c,d}/{a,b,c,d}/{a,b,c,d}/{a,b,c,d}/{a,b,c,d}/**";
        let pattern = FolderPattern::new(many);
        assert!(pattern.may_match_within("elsewhere"));
        assert!(!pattern.covers("a/a/a/a/a"));
    }
}
