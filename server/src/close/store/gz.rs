//! The bundle compressed on a thread of its own: gzip at level 6 is ~7 s of CPU for a 10,000-GPU month, and done
//! inline it ran while the database waited; on its own thread it runs while the close waits for the database
//! (the cursor's next rows, the evidence index's writes). The compressed stream goes to an unnamed temporary file,
//! not memory: a 100,000-GPU month's bundle is ~460 MB, and the close stores it in chunks from the file
//! (`period_bundle_chunks`), so its memory does not grow with the fleet.

use std::{
    fs::File,
    io::{self, BufWriter, Seek, SeekFrom, Write},
    sync::mpsc::{Receiver, SyncSender, sync_channel},
    thread::JoinHandle,
};

use flate2::{Compression, write::GzEncoder};

/// Bytes handed to the thread at a time.
const CHUNK: usize = 1 << 18;
/// Chunks in flight at most (the memory it may hold: 8 × 256 KiB).
const IN_FLIGHT: usize = 8;

/// A gzip writer whose compression runs on its own thread; [`ThreadedGz::finish`] gives the compressed stream, in
/// an unnamed temporary file positioned at its start, and its length.
pub(crate) struct ThreadedGz {
    buf: Vec<u8>,
    tx: Option<SyncSender<Vec<u8>>>,
    worker: Option<JoinHandle<io::Result<(File, u64)>>>,
}

fn compress(file: File, rx: Receiver<Vec<u8>>) -> io::Result<(File, u64)> {
    let mut gz = GzEncoder::new(BufWriter::with_capacity(1 << 16, file), Compression::default());
    for chunk in rx {
        gz.write_all(&chunk)?;
    }
    let mut file = gz.finish()?.into_inner().map_err(|e| e.into_error())?;
    let len = file.stream_position()?;
    file.seek(SeekFrom::Start(0))?;
    Ok((file, len))
}

fn gone() -> io::Error {
    io::Error::other("the bundle's compression thread stopped")
}

impl ThreadedGz {
    /// Starts the compression thread, writing into `file` (an unnamed temporary file).
    pub(crate) fn new(file: File) -> io::Result<Self> {
        let (tx, rx) = sync_channel::<Vec<u8>>(IN_FLIGHT);
        let worker = std::thread::Builder::new().name("bundle-gzip".into()).spawn(move || compress(file, rx))?;
        Ok(Self { buf: Vec::with_capacity(CHUNK), tx: Some(tx), worker: Some(worker) })
    }

    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx.as_ref().ok_or_else(gone)?.send(chunk).map_err(|_| gone())
    }

    /// The compressed stream (the file at its start, and its length), once everything written is compressed.
    pub(crate) fn finish(mut self) -> io::Result<(File, u64)> {
        self.send()?;
        drop(self.tx.take());
        match self.worker.take() {
            Some(w) => w.join().map_err(|_| gone())?,
            None => Err(gone()),
        }
    }
}

impl Write for ThreadedGz {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for ThreadedGz {
    fn drop(&mut self) {
        // A close that failed midway: the thread ends when its channel closes.
        drop(self.tx.take());
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::io::Read;

    fn read_back((mut file, len): (File, u64)) -> (Vec<u8>, u64) {
        let mut gz = Vec::new();
        file.read_to_end(&mut gz).unwrap();
        assert_eq!(gz.len() as u64, len, "the length is the file's, read from its start");
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(gz.as_slice()).read_to_end(&mut back).unwrap();
        (back, len)
    }

    #[test]
    fn what_is_written_in_any_pieces_reads_back_whole() {
        let data: Vec<u8> = (0..3 * CHUNK + 123).map(|i| (i * 7 % 251) as u8).collect();
        let mut w = ThreadedGz::new(super::super::energy::unnamed_file().unwrap()).unwrap();
        for piece in data.chunks(777) {
            w.write_all(piece).unwrap();
        }
        let (back, len) = read_back(w.finish().unwrap());
        assert_eq!(back, data);
        assert!(len < data.len() as u64 / 4, "compressed: {len}");
        // Nothing written: an empty gzip stream.
        let (back, _) =
            read_back(ThreadedGz::new(super::super::energy::unnamed_file().unwrap()).unwrap().finish().unwrap());
        assert!(back.is_empty());
    }
}
