//! Opening a source's file: regular files only, refused before the open when not.

use std::fs::{File, Metadata};
use std::path::Path;

use faucet_core::FaucetError;

use super::bookmark::read_error;

/// Opens `path` for reading when it is a regular file (a symbolic link to one is fine).
///
/// A FIFO, socket or device is refused *before* it is opened: opening a FIFO blocks until a
/// writer appears (out of reach of cancellation), and a source's bookmark is a byte offset
/// to seek to, which such a file does not have. Copy the stream into a file first.
///
/// # Errors
/// [`FaucetError::Read`] naming the file: missing, unreadable, or not a regular file.
pub(crate) fn open_regular(connector: &str, path: &Path) -> Result<(File, Metadata), FaucetError> {
    let before =
        std::fs::metadata(path).map_err(|e| read_error(connector, path, "cannot open", e))?;
    if !before.is_file() {
        return Err(not_regular(connector, path, &before));
    }
    let file = File::open(path).map_err(|e| read_error(connector, path, "cannot open", e))?;
    let meta = file
        .metadata()
        .map_err(|e| read_error(connector, path, "cannot stat", e))?;
    if !meta.is_file() {
        return Err(not_regular(connector, path, &meta));
    }
    Ok((file, meta))
}

fn not_regular(connector: &str, path: &Path, meta: &Metadata) -> FaucetError {
    let what = if meta.is_dir() {
        "a directory"
    } else {
        kind_of_special(meta)
    };
    FaucetError::read(
        connector,
        format!(
            "{} is {what}, not a regular file: the {connector} source reads regular files \
             only (it resumes by seeking to a byte offset); write the data to a file and \
             point `path` at it",
            path.display()
        ),
        None,
    )
}

#[cfg(unix)]
fn kind_of_special(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    let t = meta.file_type();
    if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn kind_of_special(_meta: &Metadata) -> &'static str {
    "a special file"
}
