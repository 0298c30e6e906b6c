//! CI's check that a long source file says why it is long, and how long
//! it was when that was written: no file over 700 lines without a reason
//! at its top. The reason is a plain comment in the house form,
//! `// (Over 700 lines, 934: ...)` (`host/src/algo.rs`), among the file's
//! first lines so a reader meets it before the code; a plain comment, not
//! `//!`, so rustdoc does not show it to the crate's users (the check
//! accepts either). The number is the file's line count when the reason
//! was written: a file that has since grown by more than a tenth fails,
//! so the reason is read again (and the file split, or the count
//! updated) rather than left to cover any length.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Lines a tracked `.rs` file may have without a reason.
pub const MAX_LINES: usize = 700;
/// The text that opens the reason, before the recorded line count.
pub const REASON: &str = "(Over 700 lines, ";
/// The reason must start within this many lines of the top.
pub const HEAD_LINES: usize = 60;

/// What is wrong with a file's length, if anything.
#[derive(Debug, PartialEq, Eq)]
pub enum Problem {
    /// Over [`MAX_LINES`] with no reason (or one without its line count)
    /// among the first [`HEAD_LINES`] lines.
    NoReason { lines: usize },
    /// Longer than the recorded count allows ([`allowed_lines`]).
    Grown { lines: usize, recorded: usize },
}

/// The most lines a file whose reason records `recorded` may have: a
/// tenth more.
pub fn allowed_lines(recorded: usize) -> usize {
    recorded + recorded / 10
}

/// The line count a reason line records (`(Over 700 lines, 934: ...`).
fn recorded_lines(line: &str) -> Option<usize> {
    let rest = &line[line.find(REASON)? + REASON.len()..];
    let (count, _) = rest.split_once(':')?;
    count.trim().parse().ok()
}

/// What is wrong with `text`'s length, if anything.
pub fn problem(text: &str) -> Option<Problem> {
    let lines = text.lines().count();
    if lines <= MAX_LINES {
        return None;
    }
    let recorded = text.lines().take(HEAD_LINES).find_map(recorded_lines);
    match recorded {
        None => Some(Problem::NoReason { lines }),
        Some(recorded) if lines > allowed_lines(recorded) => {
            Some(Problem::Grown { lines, recorded })
        }
        Some(_) => None,
    }
}

/// Fails, naming every offending file and its length, when a `.rs` file
/// git tracks under `root` is over [`MAX_LINES`] lines without a reason,
/// or has grown past the count its reason records.
pub fn check(root: &Path) -> Result<()> {
    let out = Command::new("git")
        .args(["ls-files", "-z", "--", "*.rs"])
        .current_dir(root)
        .output()
        .context("starting `git ls-files` (the check reads the files git tracks)")?;
    if !out.status.success() {
        bail!(
            "`git ls-files` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let listed =
        String::from_utf8(out.stdout).context("`git ls-files` printed a non-UTF-8 path")?;
    let mut no_reason = Vec::new();
    let mut grown = Vec::new();
    let mut checked = 0;
    let mut long = 0;
    for rel in listed.split('\0').filter(|p| !p.is_empty()) {
        let path = root.join(rel);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            // Tracked but deleted in the work tree (not yet `git rm`ed):
            // the check is about the files there are.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let text = String::from_utf8_lossy(&bytes);
        checked += 1;
        long += usize::from(text.lines().count() > MAX_LINES);
        match problem(&text) {
            None => {}
            Some(Problem::NoReason { lines }) => no_reason.push(format!("{rel} ({lines} lines)")),
            Some(Problem::Grown { lines, recorded }) => grown.push(format!(
                "{rel}: {lines} lines, its reason records {recorded} ({} allowed)",
                allowed_lines(recorded)
            )),
        }
    }
    let mut failures = Vec::new();
    if !no_reason.is_empty() {
        failures.push(format!(
            "over {MAX_LINES} lines with no `// {REASON}N: ...)` line (N: the file's line \
             count) among the first {HEAD_LINES} saying why (split the file, or give the \
             reason):\n  {}",
            no_reason.join("\n  ")
        ));
    }
    if !grown.is_empty() {
        failures.push(format!(
            "grown by more than a tenth since their reason was written (split the file, or \
             read the reason again and update its count):\n  {}",
            grown.join("\n  ")
        ));
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }
    eprintln!(
        "xtask: {checked} tracked .rs files: {long} over {MAX_LINES} lines, each with its reason \
         and within a tenth of its recorded length"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` lines of code, with `head` as the first lines.
    fn file(head: &[&str], n: usize) -> String {
        let mut lines: Vec<&str> = head.to_vec();
        lines.resize(n, "let x = 1;");
        lines.join("\n") + "\n"
    }

    #[test]
    fn short_files_need_no_reason() {
        assert_eq!(problem(&file(&["//! A module."], MAX_LINES)), None);
        assert_eq!(problem(""), None);
    }

    #[test]
    fn long_files_need_the_reason_and_count_near_the_top() {
        let lines = MAX_LINES + 1;
        assert_eq!(
            problem(&file(&["//! A module."], lines)),
            Some(Problem::NoReason { lines })
        );
        let reason = "// (Over 700 lines, 900: the tests stay beside the rules.)";
        assert_eq!(problem(&file(&[reason, "", "//! A module."], 900)), None);
        let in_doc = "//! (Over 700 lines, 900: the tests stay beside the rules.)";
        assert_eq!(problem(&file(&["//! A module.", "//!", in_doc], 900)), None);
        // On the last line of the head, and one line too far.
        let mut head = vec!["//!"; HEAD_LINES - 1];
        head.push(reason);
        assert_eq!(problem(&file(&head, 900)), None);
        head.insert(0, "//!");
        assert_eq!(
            problem(&file(&head, 900)),
            Some(Problem::NoReason { lines: 900 })
        );
        // Another wording, or a reason without its count, is not the
        // house form.
        for other in [
            "//! (Over 700 lines, tests.)",
            "// (Over 700 lines: the tests stay beside the rules.)",
            "// (Over 700 lines, many: the tests stay beside the rules.)",
        ] {
            assert_eq!(
                problem(&file(&[other], 900)),
                Some(Problem::NoReason { lines: 900 }),
                "{other}"
            );
        }
    }

    #[test]
    fn a_file_may_grow_a_tenth_past_its_recorded_count() {
        let reason = "// (Over 700 lines, 800: one table.)";
        assert_eq!(allowed_lines(800), 880);
        assert_eq!(problem(&file(&[reason], 880)), None);
        assert_eq!(
            problem(&file(&[reason], 881)),
            Some(Problem::Grown {
                lines: 881,
                recorded: 800
            })
        );
        // Shrinking is no failure, nor is dropping under the limit.
        assert_eq!(problem(&file(&[reason], 720)), None);
        assert_eq!(problem(&file(&[reason], 500)), None);
        assert_eq!(
            recorded_lines("// (Over 700 lines, 1437: the loop)"),
            Some(1437)
        );
    }
}
