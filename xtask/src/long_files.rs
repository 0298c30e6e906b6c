//! CI's check that a long source file says why it is long: no file over
//! 700 lines without a reason at its top. The reason is a plain comment in
//! the house form, `// (Over 700 lines: ...)` (`host/src/algo.rs`), among
//! the file's first lines so a reader meets it before the code; a plain
//! comment, not `//!`, so rustdoc does not show it to the crate's users
//! (the check accepts either).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Lines a tracked `.rs` file may have without a reason.
pub const MAX_LINES: usize = 700;
/// The text that opens the reason.
pub const REASON: &str = "(Over 700 lines:";
/// The reason must start within this many lines of the top.
pub const HEAD_LINES: usize = 60;

/// Whether `text` is longer than [`MAX_LINES`] lines and carries no
/// [`REASON`] in its first [`HEAD_LINES`] lines.
pub fn lacks_reason(text: &str) -> bool {
    text.lines().count() > MAX_LINES && !text.lines().take(HEAD_LINES).any(|l| l.contains(REASON))
}

/// Fails, naming every offending file and its length, when a `.rs` file
/// git tracks under `root` is over [`MAX_LINES`] lines without a reason.
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
    let mut offenders = Vec::new();
    let mut checked = 0;
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
        if lacks_reason(&text) {
            offenders.push(format!("{rel} ({} lines)", text.lines().count()));
        }
    }
    if !offenders.is_empty() {
        bail!(
            "over {MAX_LINES} lines with no `// {REASON} ...)` line among the first \
             {HEAD_LINES} saying why (split the file, or give the reason):\n  {}",
            offenders.join("\n  ")
        );
    }
    eprintln!("xtask: {checked} tracked .rs files: none over {MAX_LINES} lines without a reason");
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
        assert!(!lacks_reason(&file(&["//! A module."], MAX_LINES)));
        assert!(!lacks_reason(""));
    }

    #[test]
    fn long_files_need_the_reason_near_the_top() {
        assert!(lacks_reason(&file(&["//! A module."], MAX_LINES + 1)));
        let reason = "// (Over 700 lines: the tests stay beside the rules.)";
        assert!(!lacks_reason(&file(&[reason, "", "//! A module."], 900)));
        let in_doc = "//! (Over 700 lines: the tests stay beside the rules.)";
        assert!(!lacks_reason(&file(&["//! A module.", "//!", in_doc], 900)));
        // On the last line of the head, and one line too far.
        let mut head = vec!["//!"; HEAD_LINES - 1];
        head.push(reason);
        assert!(!lacks_reason(&file(&head, 900)));
        head.insert(0, "//!");
        assert!(lacks_reason(&file(&head, 900)));
        // Another wording is not the house form.
        assert!(lacks_reason(&file(&["//! (Over 700 lines, tests.)"], 900)));
    }
}
