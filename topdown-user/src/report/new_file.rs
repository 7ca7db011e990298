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
        if let Ok(target) = std::fs::metadata(path) {
            let same = |input: &&Path| {
                std::fs::metadata(input)
                    .is_ok_and(|m| m.dev() == target.dev() && m.ino() == target.ino())
            };
            if inputs.iter().any(same) {
                bail!("{what} {shown} is this command's input: give another name");
            }
            if !force {
                bail!("{what} {shown} exists: give another name, or --force to replace it");
            }
            if target.is_dir() {
                bail!("{what} {shown} is a folder: give a file name");
            }
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

#[cfg(test)]
mod tests {
    use super::*;

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
