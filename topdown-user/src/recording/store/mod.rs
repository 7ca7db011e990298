//! The always-on store (`record --store DIR`): a folder of segments, each a whole recording
//! (header, windows and the cgroup names they use) of up to an hour (`--segment`) or a size
//! (`--segment-size`), named by the UTC time it began (`20261206T031200Z.rec`). The writer
//! ([`writer::StoreWriter`]) keeps the folder within `--keep` and `--max-size` by removing the
//! oldest segments, each removal said and counted; `report --store DIR --from --to` reads the
//! windows of a time range across segments ([`range`]), the one being written included (up to
//! its last whole window).
//!
//! A segment has no totals line (a run's totals are not a segment's): a reader sums the windows
//! it reads. Each line is a zstd frame with its checksum, written and synced (`fdatasync`, and
//! the folder at each new segment) window by window: a `kill -9` or power cut loses at most the
//! window being written, and the reader says what it skipped (a cut frame, or the zero bytes a
//! filesystem leaves where data never reached the disk).
//!
//! The folder is opened once (`O_DIRECTORY | O_NOFOLLOW`) and everything in it is reached from
//! that handle, so neither a symlink planted for the folder nor one among its segments
//! redirects a write or a removal; the writer refuses a folder it does not own or that others
//! may write, and holds a lock on it (`flock`), so a second writer refuses.

pub mod range;
#[cfg(test)]
mod tests_store;
pub mod when;
pub mod writer;

use std::{
    ffi::CString,
    fs::File,
    os::{
        fd::{AsRawFd as _, FromRawFd as _},
        unix::{
            ffi::OsStrExt as _,
            fs::{DirBuilderExt as _, MetadataExt as _},
        },
    },
    path::{Path, PathBuf},
    time::SystemTime,
};

use anyhow::{Context as _, Result, bail};
use jiff::Timestamp;

/// What a segment's name ends with.
const SEGMENT_SUFFIX: &str = ".rec";

/// How a segment's name spells the UTC time it began.
const SEGMENT_TIME: &str = "%Y%m%dT%H%M%SZ";

/// A store's folder, opened.
pub struct StoreDir {
    dir: File,
    path: PathBuf,
}

/// One segment of a store, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Its name in the folder.
    pub name: String,
    /// When it began, from its name.
    pub began: Timestamp,
    /// Its number among segments begun in the same second (`-N` in its name; 0 without).
    pub nth: u32,
    /// Its size in bytes, when listed.
    pub bytes: u64,
    /// When it was last written, when listed.
    pub modified: SystemTime,
}

impl StoreDir {
    /// Opens the store at `path` for writing, making the folder (mode 0700) when it is missing:
    /// refused when it is a symlink or not a folder, owned by neither this user nor `user`
    /// (the uid and gid `--user` runs the rest as), writable by others, or held by another
    /// writer. With `user`, the folder is given to that user through the handle opened (never
    /// by its name again), so the run goes on writing it once its privileges are gone.
    pub fn open_for_writing(path: &Path, user: Option<(u32, u32)>) -> Result<Self> {
        let shown = path.display();
        match std::fs::DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => {
                return Err(error).with_context(|| format!("cannot make the store {shown}"));
            }
        }
        let store = Self::open(path)?;
        let meta = store
            .dir
            .metadata()
            .with_context(|| format!("cannot read the store {shown}"))?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me && Some(meta.uid()) != user.map(|(uid, _)| uid) {
            bail!(
                "the store {shown} belongs to user {}, not this one ({me}): give a folder of \
                 your own, or --user with its owner",
                meta.uid()
            );
        }
        if meta.mode() & 0o022 != 0 {
            bail!(
                "the store {shown} can be written by others (mode {:o}): `chmod go-w {shown}`, \
                 or give a folder of your own",
                meta.mode() & 0o777
            );
        }
        // SAFETY: flock on an fd this File owns.
        if unsafe { libc::flock(store.dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            bail!(
                "the store {shown} is being written by another run (`record --store`): stop it \
                 first, or give another folder"
            );
        }
        if let Some((uid, gid)) = user {
            // SAFETY: fchown on an fd this File owns.
            if unsafe { libc::fchown(store.dir.as_raw_fd(), uid, gid) } != 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("giving the store {shown} to --user"));
            }
        }
        Ok(store)
    }

    /// Opens the store at `path` to read it (it may be being written).
    pub fn open(path: &Path) -> Result<Self> {
        let shown = path.display();
        let name = CString::new(path.as_os_str().as_bytes())
            .with_context(|| format!("the store {shown}: a name with a NUL"))?;
        // SAFETY: a NUL-terminated path; the fd returned is owned by the File below.
        let fd = unsafe {
            libc::open(
                name.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let error = std::io::Error::last_os_error();
            let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
            return Err(match error.raw_os_error() {
                Some(libc::ELOOP | libc::ENOTDIR) if link => anyhow::anyhow!(
                    "the store {shown} is a symbolic link: give the folder's own name (a link \
                     is never followed)"
                ),
                Some(libc::ENOTDIR) => anyhow::anyhow!("the store {shown} is not a folder"),
                Some(libc::ENOENT) => anyhow::anyhow!(
                    "there is no store {shown}: make one with `topdown-bpf record --store {shown}`"
                ),
                _ => anyhow::Error::from(error).context(format!("cannot open the store {shown}")),
            });
        }
        Ok(Self {
            // SAFETY: a file descriptor just opened, owned by nobody else.
            dir: unsafe { File::from_raw_fd(fd) },
            path: path.to_owned(),
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its segments, oldest first: regular files named as segments (anything else in the
    /// folder is left alone).
    pub fn segments(&self) -> Result<Vec<Segment>> {
        let listing = format!("/proc/self/fd/{}", self.dir.as_raw_fd());
        let mut segments = Vec::new();
        let entries = std::fs::read_dir(&listing)
            .with_context(|| format!("cannot list the store {}", self.path.display()))?;
        for entry in entries {
            let entry =
                entry.with_context(|| format!("cannot list the store {}", self.path.display()))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let Some((began, nth)) = segment_time(&name) else {
                continue;
            };
            // Not followed: a symlink among the segments is neither read nor removed.
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if !meta.file_type().is_file() {
                continue;
            }
            segments.push(Segment {
                name,
                began,
                nth,
                bytes: meta.len(),
                modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
        segments.sort_by_key(|s| (s.began, s.nth));
        Ok(segments)
    }

    /// Opens segment `name` to read it, never through a symlink.
    pub fn open_segment(&self, name: &str) -> Result<File> {
        let file = self
            .openat(name, libc::O_RDONLY, 0)
            .with_context(|| format!("cannot open {}", self.shown(name)))?;
        Ok(file)
    }

    /// Makes a new segment for a window that begins at `at`: named by that second, with `-1`,
    /// `-2`, ... after it when the name is taken. Returns its name and the file.
    fn create_segment(&self, at: Timestamp) -> Result<(String, File)> {
        let stem = at.strftime(SEGMENT_TIME).to_string();
        for n in 0..100u32 {
            let name = match n {
                0 => format!("{stem}{SEGMENT_SUFFIX}"),
                n => format!("{stem}-{n}{SEGMENT_SUFFIX}"),
            };
            match self.openat(&name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600) {
                Ok(file) => return Ok((name, file)),
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(error) => {
                    return Err(error)
                        .with_context(|| format!("cannot write {}", self.shown(&name)));
                }
            }
        }
        bail!(
            "cannot name a new segment in the store {}: {stem} is taken 100 times",
            self.path.display()
        )
    }

    /// Waits until the folder's names are on the disk (a new segment's, removals).
    fn sync(&self) -> Result<()> {
        self.dir
            .sync_all()
            .with_context(|| format!("writing the store {}", self.path.display()))
    }

    /// Removes segment `name` (the name, never what a symlink points to).
    fn remove_segment(&self, name: &str) -> Result<()> {
        let cname = CString::new(name).context("a segment name with a NUL")?;
        // SAFETY: a directory fd this store owns and a NUL-terminated name.
        if unsafe { libc::unlinkat(self.dir.as_raw_fd(), cname.as_ptr(), 0) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot remove {}", self.shown(name)));
        }
        Ok(())
    }

    fn openat(&self, name: &str, flags: i32, mode: libc::mode_t) -> std::io::Result<File> {
        let cname = CString::new(name).map_err(std::io::Error::other)?;
        // SAFETY: a directory fd this store owns and a NUL-terminated name; the fd returned is
        // owned by the File below.
        let fd = unsafe {
            libc::openat(
                self.dir.as_raw_fd(),
                cname.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                libc::c_uint::from(mode),
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a file descriptor just opened, owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// A segment's path, as said in messages.
    fn shown(&self, name: &str) -> String {
        self.path.join(name).display().to_string()
    }
}

/// When segment `name` began, from its name, and its number among the segments begun in that
/// second (`None`: not a segment's name).
fn segment_time(name: &str) -> Option<(Timestamp, u32)> {
    let stem = name.strip_suffix(SEGMENT_SUFFIX)?;
    let (stem, nth) = match stem.split_once('-') {
        Some((stem, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            (stem, n.parse().ok()?)
        }
        Some(_) => return None,
        None => (stem, 0),
    };
    let at = jiff::fmt::strtime::parse(SEGMENT_TIME, stem)
        .ok()?
        .to_datetime()
        .ok()?
        .to_zoned(jiff::tz::TimeZone::UTC)
        .ok()?
        .timestamp();
    Some((at, nth))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_spell_their_utc_start_and_nothing_else_is_one() {
        let at: Timestamp = "2026-12-06T03:12:09Z".parse().unwrap();
        assert_eq!(
            at.strftime(SEGMENT_TIME).to_string() + SEGMENT_SUFFIX,
            "20261206T031209Z.rec"
        );
        assert_eq!(segment_time("20261206T031209Z.rec"), Some((at, 0)));
        assert_eq!(segment_time("20261206T031209Z-3.rec"), Some((at, 3)));
        for other in [
            "20261206T031209Z.rec.tmp",
            "20261206T031209.rec",
            "20261206T031209Z-x.rec",
            "notes.rec",
            ".lock",
        ] {
            assert_eq!(segment_time(other), None, "{other}");
        }
    }
}
