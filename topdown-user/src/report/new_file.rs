//! Files a report writes, never lost or half-written: the content goes to a temporary file in
//! the same folder, renamed to its name only when whole and on disk (a full disk or an error
//! leaves nothing under the name, and removes the temporary file). A name that exists is
//! refused unless forced, and a name that is one of the command's inputs always is.

use std::{
    fs::File,
    io::Write as _,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

/// An output being written.
pub struct NewFile {
    path: PathBuf,
    temp: tempfile::NamedTempFile,
    force: bool,
}

impl NewFile {
    /// Starts `path` (`what` names it in errors: `the Parquet file`): refused when it is one of
    /// `inputs` (the same file, by device and inode), or exists and `force` is not given.
    pub fn create(path: &Path, what: &str, inputs: &[&Path], force: bool) -> Result<Self> {
        let shown = path.display();
        may_write(path, what, inputs, force)?;
        // Renamed into place, it would replace a device or FIFO with a file.
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            bail!("{what} {shown} is not a regular file: give a file name");
        }
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let name = path.file_name().map_or_else(
            || "output".into(),
            |name| name.to_string_lossy().into_owned(),
        );
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".partial")
            .tempfile_in(dir)
            .with_context(|| format!("cannot write {what} {shown}"))?;
        Ok(Self {
            path: path.to_owned(),
            temp,
            force,
        })
    }

    /// The temporary file to write into.
    pub fn file(&self) -> &File {
        self.temp.as_file()
    }

    /// A second handle on the temporary file (for writers that take a `File`).
    pub fn handle(&self) -> Result<File> {
        self.temp
            .as_file()
            .try_clone()
            .with_context(|| format!("writing {}", self.path.display()))
    }

    /// Puts the whole file on disk and under its name.
    pub fn commit(self) -> Result<()> {
        let shown = self.path.display().to_string();
        self.temp
            .as_file()
            .flush()
            .and_then(|()| self.temp.as_file().sync_all())
            .with_context(|| format!("writing {shown}"))?;
        let persisted = if self.force {
            self.temp.persist(&self.path).map(|_| ())
        } else {
            self.temp.persist_noclobber(&self.path).map(|_| ())
        };
        persisted.map_err(|error| anyhow::anyhow!("cannot write {shown}: {}", error.error))
    }
}

/// Whether `path` (`what` names it in errors) may be written: refused when it is one of
/// `inputs` (the same file, by device and inode), a folder, or a file that exists when `force`
/// is not given. A device or FIFO (`/dev/null`, a pipe) holds nothing to lose: allowed.
pub fn may_write(path: &Path, what: &str, inputs: &[&Path], force: bool) -> Result<()> {
    let shown = path.display();
    if let Ok(target) = std::fs::metadata(path) {
        let same = |input: &&Path| {
            std::fs::metadata(input)
                .is_ok_and(|m| m.dev() == target.dev() && m.ino() == target.ino())
        };
        if inputs.iter().any(same) {
            bail!("{what} {shown} is this command's input: give another name");
        }
        if !target.is_file() && !target.is_dir() {
            return Ok(());
        }
        if !force {
            bail!("{what} {shown} exists: give another name, or --force to replace it");
        }
        if target.is_dir() {
            bail!("{what} {shown} is a folder: give a file name");
        }
    }
    Ok(())
}

/// Cuts the file at `path` after its last newline: a stream of lines that an error stopped
/// (a full disk) keeps its whole lines and loses the half-written one.
pub fn keep_whole_lines(path: &Path) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let whole = last_newline(&mut file)?;
    file.set_len(whole)
}

/// The length of `file` up to and with its last newline (0: none), read backwards.
fn last_newline(file: &mut File) -> std::io::Result<u64> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    const CHUNK: u64 = 64 * 1024;
    let mut end = file.metadata()?.len();
    let mut buffer = vec![0; CHUNK as usize];
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let chunk = &mut buffer[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(at) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(start + at as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of lines that an error stopped keeps its whole lines only.
    #[test]
    fn an_error_keeps_the_whole_lines_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        let long = "x".repeat(100_000);
        std::fs::write(&path, format!("{{\"a\":1}}\n{long}\n{{\"half")).unwrap();
        keep_whole_lines(&path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{{\"a\":1}}\n{long}\n")
        );
        std::fs::write(&path, "{\"half").unwrap();
        keep_whole_lines(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }

    /// A device holds nothing to lose: a stream may write to it without --force; a file
    /// renamed into place never replaces it.
    #[test]
    fn devices_are_written_in_place_never_replaced() {
        let null = Path::new("/dev/null");
        may_write(null, "the report", &[], false).unwrap();
        let error = NewFile::create(null, "the trace", &[], true).err().unwrap();
        assert!(error.to_string().contains("not a regular file"), "{error}");
    }

    /// Nothing appears under the name before the commit, and nothing stays when the writer
    /// gives up; an existing file is refused unless forced, the input always.
    #[test]
    fn a_file_appears_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.parquet");
        let new = NewFile::create(&path, "the file", &[], false).unwrap();
        new.file().write_all(b"rows").unwrap();
        assert!(!path.exists(), "not under its name before it is whole");
        new.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"rows");

        let error = NewFile::create(&path, "the file", &[], false)
            .err()
            .unwrap();
        assert!(error.to_string().contains("--force"), "{error}");
        let input = NewFile::create(&path, "the file", &[&path], true)
            .err()
            .unwrap();
        assert!(input.to_string().contains("input"), "{input}");

        let abandoned = NewFile::create(&path, "the file", &[], true).unwrap();
        abandoned.file().write_all(b"half").unwrap();
        drop(abandoned);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"rows",
            "the old file is untouched"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "no temporary file is left: {left:?}");

        let replaced = NewFile::create(&path, "the file", &[], true).unwrap();
        replaced.file().write_all(b"new").unwrap();
        replaced.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
    }
}
