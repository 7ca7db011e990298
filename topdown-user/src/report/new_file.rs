//! Every file the tool writes, opened so that no symlink, planted file or second writer can
//! redirect or corrupt it.
//!
//! Files a report writes whole ([`NewFile`]) go to a temporary file of an unpredictable name in
//! the same folder, renamed to their name only when whole and on disk (a full disk or an error
//! leaves nothing under the name, and removes the temporary file). Files written as a run goes
//! ([`StreamFile`]: recordings, live reports) are under their name from the start, created with
//! `O_EXCL` (so a name that exists, a dangling symlink among them, is never followed), or with
//! `--force` made the same way under a temporary name and renamed over the old file, and locked
//! (`flock`) while written, so a second writer refuses. A symlink is refused, forced or not
//! (only one to a device or pipe, `/dev/stdout`, is written through). A name that exists is
//! refused unless forced, and a name that is one of the command's inputs always is. FIFOs and
//! devices are opened without blocking: a FIFO nobody reads is an error, not a run stuck in
//! `open()` that no SIGTERM ends.

use std::{
    fs::File,
    io::Write as _,
    os::{
        fd::AsRawFd as _,
        unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _},
    },
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

use crate::model::{frame::Frame, sink::WindowSink};

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
        // Renamed into place, it would replace a device or FIFO with a file, or a link
        // (`/dev/stdout` is one) with a file.
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            bail!("{what} {shown} is not a regular file: give a file name");
        }
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            bail!("{what} {shown} is a symbolic link: give the file's own name");
        }
        let dir = folder_of(path);
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

/// A sink that writes into a [`NewFile`]: its errors name the file (`cannot write the trace
/// run.json`), and the file takes its name only once the sink has finished, whole.
pub struct IntoNewFile<'a> {
    sink: Box<dyn WindowSink + 'a>,
    file: NewFile,
    /// What the file is and its name, for errors.
    what: String,
}

impl<'a> IntoNewFile<'a> {
    /// `sink`, writing into `file` (`what` names it in errors: `the trace`).
    pub fn new(sink: Box<dyn WindowSink + 'a>, file: NewFile, what: &str) -> Self {
        let what = format!("{what} {}", file.path.display());
        Self { sink, file, what }
    }
}

impl WindowSink for IntoNewFile<'_> {
    fn window(&mut self, frame: &Frame<'_>) -> Result<()> {
        let what = &self.what;
        self.sink
            .window(frame)
            .with_context(|| format!("cannot write {what}"))
    }

    fn finish(self: Box<Self>, totals: &Frame<'_>) -> Result<Option<String>> {
        let Self { sink, file, what } = *self;
        // The sink is dropped here, its writes flushed: the file is whole.
        let said = sink
            .finish(totals)
            .with_context(|| format!("cannot write {what}"))?;
        file.commit()?;
        Ok(said)
    }

    fn closed(&self) -> bool {
        self.sink.closed()
    }
}

/// Mode of the files the tool makes: its owner's alone, as `perf record` makes `perf.data`
/// (they name processes, cgroups and commands).
const MODE: u32 = 0o600;

/// An output written as the run goes, under its name from the start (see the module's text).
pub struct StreamFile {
    file: File,
    path: PathBuf,
    /// Device and inode of the regular file made (`None`: a device or FIFO, written in place).
    made: Option<(u64, u64)>,
}

impl StreamFile {
    /// Opens `path` (`what` names it in errors: `the recording`) to be written as the run goes:
    /// refused when it is one of `inputs`, a folder, a file or symlink that exists and `force`
    /// is not given, a file another writer holds, or a FIFO nobody reads.
    pub fn create(path: &Path, what: &str, inputs: &[&Path], force: bool) -> Result<Self> {
        let shown = path.display();
        may_write(path, what, inputs, force)?;
        match std::fs::symlink_metadata(path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                Self::made(path, create_excl(path).map_err(|e| refused(path, what, e))?)
            }
            Err(error) => Err(error).with_context(|| format!("cannot write {what} {shown}")),
            Ok(meta) if meta.file_type().is_symlink() => {
                // A link to a device or pipe (`/dev/stdout`, `/dev/null`) is written through;
                // any other link is refused, --force or not: it is never followed, and never
                // replaced either (`/dev/stdout` is a link too).
                let special = std::fs::metadata(path).is_ok_and(|m| is_special(&m.file_type()));
                if !special {
                    bail!(
                        "{what} {shown} is a symbolic link: give the file's own name (a link is \
                         never followed or replaced)"
                    );
                }
                Self::special(path, what, true)
            }
            Ok(meta) if is_special(&meta.file_type()) => Self::special(path, what, false),
            Ok(_) if force => Self::replace(path, what),
            Ok(_) => bail!("{what} {shown} exists: give another name, or --force to replace it"),
        }
    }

    /// The file to write.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// A second handle on the file (for writers that own a `File`; the lock stays with both).
    pub fn handle(&self) -> Result<File> {
        self.file
            .try_clone()
            .with_context(|| format!("writing {}", self.path.display()))
    }

    /// Whether the name still holds the file this run made (a device always does): a name
    /// replaced by hand while the run wrote is said, never lost silently.
    pub fn still_named(&self) -> Result<()> {
        if self.made.is_none() || self.is_named() {
            return Ok(());
        }
        bail!(
            "{} was removed or replaced while this run wrote it: what it wrote is lost",
            self.path.display()
        )
    }

    /// Removes the file this run made when nothing was written to it (a run that failed before
    /// its first line leaves nothing behind).
    pub fn remove_if_empty(self) {
        if self.is_named() && self.file.metadata().is_ok_and(|m| m.len() == 0) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Whether the name holds the regular file this run made (never true of a device).
    fn is_named(&self) -> bool {
        self.made.is_some_and(|(dev, ino)| {
            std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.dev() == dev && m.ino() == ino)
        })
    }

    /// A regular file this run just made at `path`: locked for as long as it is written.
    fn made(path: &Path, file: File) -> Result<Self> {
        lock(&file, path)?;
        let meta = file
            .metadata()
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(Self {
            made: Some((meta.dev(), meta.ino())),
            file,
            path: path.to_owned(),
        })
    }

    /// `--force` over a file: refused while another writer holds it; else made under an
    /// unpredictable name beside it, locked, and renamed over the name.
    fn replace(path: &Path, what: &str) -> Result<Self> {
        let shown = path.display();
        if let Ok(old) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            && held(&old)
        {
            bail!("{what} {shown} is being written by another run: give another name");
        }
        let temp = tempfile::Builder::new()
            .prefix(".topdown-bpf.")
            .suffix(".partial")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(MODE))
            .tempfile_in(folder_of(path))
            .with_context(|| format!("cannot write {what} {shown}"))?;
        lock(temp.as_file(), path)?;
        let file = temp
            .persist(path)
            .map_err(|error| anyhow::anyhow!("cannot write {what} {shown}: {}", error.error))?;
        Self::made(path, file)
    }

    /// A FIFO or device, written in place, opened without blocking: a FIFO with no reader is
    /// an error (`ENXIO`), never an `open()` that waits past every signal but SIGKILL.
    fn special(path: &Path, what: &str, through_link: bool) -> Result<Self> {
        let shown = path.display();
        let flags = libc::O_NONBLOCK | if through_link { 0 } else { libc::O_NOFOLLOW };
        let file = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(flags)
            .open(path)
            .map_err(|error| {
                if error.raw_os_error() == Some(libc::ENXIO) {
                    anyhow::anyhow!("nobody reads the FIFO {shown}: start its reader first")
                } else {
                    anyhow::Error::from(error).context(format!("cannot write {what} {shown}"))
                }
            })?;
        let meta = file
            .metadata()
            .with_context(|| format!("cannot write {what} {shown}"))?;
        if !is_special(&meta.file_type()) {
            bail!("{what} {shown} changed while it was opened: give it again");
        }
        // Blocking from here: a reader that falls behind slows the writer, as with a pipe.
        // SAFETY: fcntl on an fd this File owns; F_SETFL with plain flags.
        unsafe {
            let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
            }
        }
        Ok(Self {
            file,
            path: path.to_owned(),
            made: None,
        })
    }
}

/// The folder `path` is in (`.` for a bare name): where its temporary file is made, so that
/// the rename into place stays on one filesystem.
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Creates `path` as a new regular file: fails on any name that exists, links included.
fn create_excl(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// The one-line error for a name that could not be made.
fn refused(path: &Path, what: &str, error: std::io::Error) -> anyhow::Error {
    let shown = path.display();
    if error.kind() == std::io::ErrorKind::AlreadyExists {
        anyhow::anyhow!(
            "{what} {shown} appeared while the run started (another writer?): give another name"
        )
    } else {
        anyhow::Error::from(error).context(format!("cannot write {what} {shown}"))
    }
}

/// A device, FIFO or socket: written in place, never replaced.
fn is_special(kind: &std::fs::FileType) -> bool {
    kind.is_fifo() || kind.is_char_device() || kind.is_block_device() || kind.is_socket()
}

/// Takes the writer's lock on `file` (made for `path`).
fn lock(file: &File, path: &Path) -> Result<()> {
    // SAFETY: flock on an fd this File owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        bail!(
            "{} is being written by another run: give another name",
            path.display()
        );
    }
    Ok(())
}

/// Whether another writer holds `file`'s lock.
fn held(file: &File) -> bool {
    // SAFETY: flock on an fd this File owns; a lock taken here is dropped with the File.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) != 0 }
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

/// Cuts the file after its last newline: a stream of lines that an error stopped (a full
/// disk) keeps its whole lines and loses the half-written one. Read through a handle opened
/// for reading on the same file (by `/proc/self/fd`, never by its name again).
pub fn keep_whole_lines(file: &File) -> std::io::Result<()> {
    let mut reader = File::open(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    let whole = last_newline(&mut reader)?;
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
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        keep_whole_lines(&file).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{{\"a\":1}}\n{long}\n")
        );
        std::fs::write(&path, "{\"half").unwrap();
        keep_whole_lines(&file).unwrap();
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

    /// The symlink findings of issue 52: a link, dangling or not, is never followed nor
    /// replaced, --force or not; a file is replaced with --force.
    #[test]
    fn a_stream_never_writes_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        let link = dir.path().join("run.rec");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let error = StreamFile::create(&link, "the recording", &[], false)
            .err()
            .unwrap();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert!(!outside.exists(), "a dangling link's target is not created");

        std::fs::write(&outside, b"root's file").unwrap();
        let error = StreamFile::create(&link, "the recording", &[], false)
            .err()
            .unwrap();
        assert!(error.to_string().contains("--force"), "{error}");
        let error = StreamFile::create(&link, "the recording", &[], true)
            .err()
            .unwrap();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert_eq!(std::fs::read(&outside).unwrap(), b"root's file");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let error = NewFile::create(&link, "the file", &[], true).err().unwrap();
        assert!(error.to_string().contains("symbolic link"), "{error}");

        // A file is replaced with --force, made 0600.
        let file = dir.path().join("run2.rec");
        std::fs::write(&file, b"old").unwrap();
        let stream = StreamFile::create(&file, "the recording", &[], true).unwrap();
        stream.file().write_all(b"windows").unwrap();
        let meta = std::fs::symlink_metadata(&file).unwrap();
        assert_eq!(meta.mode() & 0o777, MODE);
        assert_eq!(std::fs::read(&file).unwrap(), b"windows");
        stream.still_named().unwrap();
    }

    /// A name that exists, or appears, is refused without --force; a second writer is refused
    /// even with it; a name replaced while written is said.
    #[test]
    fn one_writer_a_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live.json");
        let first = StreamFile::create(&path, "the report", &[], false).unwrap();
        let error = StreamFile::create(&path, "the report", &[], false)
            .err()
            .unwrap();
        assert!(error.to_string().contains("exists"), "{error}");
        let error = StreamFile::create(&path, "the report", &[], true)
            .err()
            .unwrap();
        assert!(error.to_string().contains("another run"), "{error}");
        // The name taken between the check and the open (the planted file of the finding).
        let planted = dir.path().join("planted");
        std::fs::write(&planted, b"x").unwrap();
        let error = refused(&planted, "the report", create_excl(&planted).err().unwrap());
        assert!(error.to_string().contains("appeared"), "{error}");
        assert_eq!(std::fs::read(&planted).unwrap(), b"x");

        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"someone else's").unwrap();
        let error = first.still_named().err().unwrap();
        assert!(error.to_string().contains("lost"), "{error}");
        drop(first);
        // The first writer gone, --force replaces the file.
        StreamFile::create(&path, "the report", &[], true).unwrap();
    }

    /// A FIFO nobody reads is an error at once, not an `open()` that waits; with a reader it is
    /// written; a failed run's empty file is removed, a device never is.
    #[test]
    fn fifos_and_devices_are_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let started = std::time::Instant::now();
        let error = StreamFile::create(&fifo, "the recording", &[], true)
            .err()
            .unwrap();
        assert!(error.to_string().contains("nobody reads"), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let stream = StreamFile::create(&fifo, "the recording", &[], false).unwrap();
        stream.file().write_all(b"line\n").unwrap();
        let mut got = [0; 5];
        std::io::Read::read_exact(&mut &reader, &mut got).unwrap();
        assert_eq!(&got, b"line\n");
        stream.remove_if_empty();
        assert!(fifo.exists());

        let null = StreamFile::create(Path::new("/dev/null"), "the report", &[], false).unwrap();
        null.remove_if_empty();
        assert!(Path::new("/dev/null").exists());
        let path = dir.path().join("empty.json");
        StreamFile::create(&path, "the report", &[], false)
            .unwrap()
            .remove_if_empty();
        assert!(!path.exists(), "nothing was written: nothing is left");
    }
}
