//! The table a directory of the file scope shares between processes (`ctxlock.table`):
//! its layout, how it is made and checked, and the three kernel services the file scope
//! rests on: open-file-description byte-range locks, a shared mapping, futex words.
//!
//! One file, of a fixed size, made once and never removed (so two processes can never
//! hold "the same" lock on two inodes of one path). Its disk blocks are reserved when it
//! is made (`allocate`: a sparse file would fault on a full disk), but a page costs memory
//! only once it is touched (on a disk filesystem; tmpfs reserves memory). It holds
//! - a header: a magic word, the layout's version and sizes, and the scope's fence
//!   counter (one for every name: fences then increase per name, across slot reuse);
//! - `CLIENTS` client entries, one per manager alive on the directory: its doorbell (the
//!   futex word its agent thread sleeps on) and the area where it publishes its holds and
//!   waits when another client asks (`query()`, `statistics()`);
//! - `SLOTS` slots, one per name in use: the name, a hint of waiting writers, and which
//!   clients wait for it.
//!
//! What the kernel owns (open-file-description locks on byte ranges far past the end of
//! the file, so they never touch data): each manager opens the file once, and
//! - holds a write lock on its client byte for its life: a client entry whose byte is free
//!   belongs to nobody (its owner closed or died);
//! - holds the hold byte of a slot, read-locked for a shared hold, write-locked for an
//!   exclusive one: the lock itself, freed by the kernel when the process dies;
//! - read-locks the writer byte of a slot while one of its exclusive requests waits: new
//!   shared requests of other clients see it and stay back (phase fairness);
//! - read-locks the pin byte of every slot it uses; a slot is given to another name only
//!   under a write lock of its pin byte (nobody uses it) and of the claim byte.
//!
//! Nothing in the mapping needs repair after a crash: a dead client's waiting bits and
//! writer hint only cost a spurious wake-up or a system call.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// The file's name in its directory.
pub const FILE_NAME: &str = "ctxlock.table";

/// "CTXLOCK" and a format byte: what every table starts with.
const MAGIC: u64 = u64::from_le_bytes(*b"CTXLOCK\x01");
/// The layout below; a table of another version is refused, never read.
const VERSION: u32 = 1;
/// Managers alive on one directory at once (two u64 words of waiting bits per slot).
pub const CLIENTS: usize = 128;
/// Names in use (held, waited for, or kept by a manager) on one directory at once.
pub const SLOTS: usize = 4096;
const HEADER_SIZE: usize = 4096;
/// A client entry: 64 bytes of words, then its published records.
const CLIENT_SIZE: usize = 64 * 1024;
const RECORDS_AT: usize = 64;
/// A slot: 64 bytes of words, then the name (at most 1024 bytes).
const SLOT_SIZE: usize = 64 + super::named::MAX_NAME_BYTES;
const CLIENTS_AT: usize = HEADER_SIZE;
const SLOTS_AT: usize = CLIENTS_AT + CLIENTS * CLIENT_SIZE;
const TOTAL: usize = SLOTS_AT + SLOTS * SLOT_SIZE;

/// Where the byte-range locks live: far past the end of the file.
const LOCKS_AT: i64 = 1 << 40;
const CLAIM_BYTE: i64 = LOCKS_AT;
const fn client_byte(c: usize) -> i64 {
    LOCKS_AT + 64 + c as i64
}
const fn slot_byte(s: usize, which: i64) -> i64 {
    LOCKS_AT + (1 << 20) + 4 * s as i64 + which
}
const HOLD: i64 = 0;
const WRITER: i64 = 1;
const PIN: i64 = 2;

/// The header, as mapped. Every field is read and written through atomics: other
/// processes (and other managers of this one) change the mapping concurrently.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    slots: AtomicU32,
    clients: AtomicU32,
    slot_size: AtomicU32,
    client_size: AtomicU32,
    _pad: AtomicU32,
    total: AtomicU64,
    /// Bumped by a manager that found every slot in use: each manager's agent then lets
    /// go of the slots it keeps for idle names (`Table::ask_to_trim`). A word that was
    /// padding before (0 in tables made earlier, which managers of the earlier version
    /// never read: they just do not answer).
    trims: AtomicU64,
    _pad2: [AtomicU64; 2],
    /// The last fence issued, on its own cache line.
    fence: AtomicU64,
}

/// A client entry's words.
#[repr(C)]
pub struct ClientWords {
    /// The owner's process id (for `query()`'s owner strings).
    pub pid: AtomicU32,
    /// Bumped (then woken) by whoever has news for the owner's agent: a release of a
    /// name it waits for, a query, its own new waits.
    pub doorbell: AtomicU32,
    /// Bumped by a client that wants this one's records published.
    pub query_asked: AtomicU32,
    /// The last `query_asked` the owner answered (futex word the asker sleeps on).
    pub query_done: AtomicU32,
    /// Seqlock of the records area: odd while the owner writes it.
    pub records_version: AtomicU32,
    /// Bytes of records.
    pub records_len: AtomicU32,
}

/// A slot's words; the name follows them.
#[repr(C)]
struct SlotWords {
    /// The name's hash, odd (0: the slot was never used, which ends a probe).
    hash: AtomicU64,
    name_len: AtomicU32,
    /// Exclusive requests waiting, across clients: a hint that saves the writer-byte
    /// test while it is 0 (a crashed waiter leaves it too high, never too low).
    writers: AtomicU32,
    /// Bit c: client c may wait for this name (set before its first try).
    waiting: [AtomicU64; CLIENTS / 64],
    /// The client whose turn it is to take the lock (index + 1; 0: anybody's), and when
    /// the turn was given (milliseconds, `CLOCK_MONOTONIC`): a release with other clients
    /// waiting gives the next one its turn, so that no process is locked out. A turn is
    /// given to a client whose `waiting` bit the giver saw set, and ends when the heir
    /// takes the lock or its bit is cleared (or after `TURN_GRACE_MS`, if it died): a
    /// turn left to a client that no longer waits would keep every other one out.
    turn: AtomicU32,
    _pad: AtomicU32,
    turn_at: AtomicU64,
}

/// How long a turn keeps others back: the heir's agent takes it within microseconds
/// unless it died, in which case the others go on after this.
const TURN_GRACE_MS: u64 = 5;

/// One manager's view of the table: its own open file description and the mapping.
///
/// # Invariants
/// - `map` is a shared mapping of `TOTAL` bytes of the file, valid until drop; the file
///   was checked to be `TOTAL` bytes long with this layout's header, and its blocks
///   reserved, before mapping. It stays so as long as nobody truncates it: the file is
///   the scope's own, and a process that shortens it under the scope's users makes their
///   next access fault (SIGBUS), as with any shared mapping (README: the directory is
///   the scope's alone).
/// - Every byte-range lock this manager holds is on `fd`'s description, which no other
///   manager (and, after a fork, no other process: the file scope refuses forked use)
///   shares.
pub struct Table {
    fd: OwnedFd,
    map: *mut u8,
    path: PathBuf,
    /// The slots this manager has pinned, one bit each. A byte-range lock never conflicts
    /// with one of its own description, so the kernel cannot say that a slot is ours:
    /// giving a name a slot skips these. The mutex also keeps two threads of one manager
    /// from claiming at once (the claim byte would not keep them apart either).
    pinned: std::sync::Mutex<Vec<u64>>,
}

// SAFETY: the mapping is shared memory read and written only through atomics; the
// descriptor is a plain file descriptor.
unsafe impl Send for Table {}
// SAFETY: as for Send.
unsafe impl Sync for Table {}

impl Drop for Table {
    fn drop(&mut self) {
        // SAFETY: `map` is the mapping this table made, of TOTAL bytes, used by no one
        // after drop (every user borrows the table).
        unsafe { libc::munmap(self.map.cast(), TOTAL) };
    }
}

/// A lock type for `fcntl`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Range {
    Read,
    Write,
    Free,
}

fn os_err(what: &str, path: &Path, e: io::Error) -> String {
    format!("cannot {what} {}: {e}", path.display())
}

/// Give the file `TOTAL` bytes with their blocks allocated, before it is mapped. A page of
/// a sparse file that the filesystem cannot find room for when it is first written
/// (a full disk) faults the writing process with SIGBUS instead of failing a call: the
/// room is taken here, once, or the manager fails with the filesystem's error. Tables
/// made sparse (by an earlier version) get their blocks the same way; for a table that
/// has them this changes nothing.
///
/// Linux's `fallocate` (mode 0): it never changes bytes already there, and extends a
/// shorter file. Not
/// `posix_fallocate`: where the filesystem has no `fallocate`, glibc's fallback writes a
/// zero over each block it read as zero, racing the managers that write the mapped table.
/// There the file is given its length alone (sparse, as before), and `Ok` returned.
fn allocate(file: &std::fs::File) -> io::Result<()> {
    loop {
        // SAFETY: a call on a descriptor `file` owns; it reads and writes no memory of ours.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, TOTAL as libc::off_t) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // A signal handled meanwhile (tmpfs checks for one on every page).
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) => {
                if file.metadata()?.len() < TOTAL as u64 {
                    file.set_len(TOTAL as u64)?;
                }
                return Ok(());
            }
            _ => return Err(e),
        }
    }
}

impl Table {
    /// Whether `other` is a mapping of the same file (the same directory, however its
    /// path was spelled).
    pub fn same_file(&self, other: &Table) -> bool {
        let id = |t: &Table| {
            // SAFETY: a `stat` is plain integers, for which all zeros is a value.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: `fd` is this table's open descriptor; `fstat` writes only `st`.
            let ok = unsafe { libc::fstat(t.fd.as_raw_fd(), &mut st) } == 0;
            ok.then_some((st.st_dev, st.st_ino))
        };
        matches!((id(self), id(other)), (Some(a), Some(b)) if a == b)
    }

    /// Open (making it if needed) the table of the directory `dir`.
    pub fn open(dir: &Path) -> Result<Table, String> {
        std::fs::create_dir_all(dir).map_err(|e| os_err("create the lock directory", dir, e))?;
        let path = dir.join(FILE_NAME);
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Self::create(dir, &path)?,
            Err(e) => return Err(os_err("open the lock table", &path, e)),
        };
        let len = file
            .metadata()
            .map_err(|e| os_err("read the size of", &path, e))?
            .len();
        if len != TOTAL as u64 {
            return Err(format!(
                "{} is not a lock table of this version of ctxlock (it is {len} bytes, a \
                 table is {TOTAL}): it is damaged or from another program; remove it once \
                 no process uses the directory",
                path.display()
            ));
        }
        allocate(&file).map_err(|e| os_err("reserve disk space for the lock table", &path, e))?;
        // SAFETY: a fresh shared mapping of a file checked to be TOTAL bytes long, with
        // its blocks reserved (see `allocate`); the kernel picks the address.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                TOTAL,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(os_err("map", &path, io::Error::last_os_error()));
        }
        let table = Table {
            fd: file.into(),
            map: map.cast(),
            path,
            pinned: std::sync::Mutex::new(vec![0; SLOTS / 64]),
        };
        table.check()?;
        Ok(table)
    }

    /// Make the table: written whole under a temporary name, then linked into place,
    /// so that nobody ever opens a half-made one (and of two makers, one wins).
    fn create(dir: &Path, path: &Path) -> Result<std::fs::File, String> {
        let tmp = dir.join(format!(
            ".{FILE_NAME}.{}.{:x}",
            std::process::id(),
            super::named::now().to_bits()
        ));
        // Mode 0o666 less the umask, as any file the caller makes.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| os_err("create a lock table in", dir, e))?;
        let made = (|| -> io::Result<()> {
            // The whole length, with its blocks: a table is never linked in that the
            // filesystem has no room for (see `allocate`).
            allocate(&file)?;
            let mut header = [0u8; 32];
            header[0..8].copy_from_slice(&MAGIC.to_le_bytes());
            header[8..12].copy_from_slice(&VERSION.to_le_bytes());
            header[12..16].copy_from_slice(&(SLOTS as u32).to_le_bytes());
            header[16..20].copy_from_slice(&(CLIENTS as u32).to_le_bytes());
            header[20..24].copy_from_slice(&(SLOT_SIZE as u32).to_le_bytes());
            header[24..28].copy_from_slice(&(CLIENT_SIZE as u32).to_le_bytes());
            std::os::unix::fs::FileExt::write_all_at(&file, &header, 0)?;
            std::os::unix::fs::FileExt::write_all_at(&file, &(TOTAL as u64).to_le_bytes(), 32)?;
            std::fs::hard_link(&tmp, path).or_else(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => Ok(()),
                _ => Err(e),
            })
        })();
        let _ = std::fs::remove_file(&tmp);
        made.map_err(|e| os_err("create the lock table", path, e))?;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| os_err("open the lock table", path, e))
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header (all atomics, any bit pattern valid),
        // page-aligned, valid while `self` is.
        unsafe { &*self.map.cast::<Header>() }
    }

    fn check(&self) -> Result<(), String> {
        let h = self.header();
        // ORDERING: the header is written before the file is linked in; the link and
        // the mapping are system calls, which order it before these loads.
        let ok = h.magic.load(Ordering::Relaxed) == MAGIC
            && h.version.load(Ordering::Relaxed) == VERSION
            && h.slots.load(Ordering::Relaxed) as usize == SLOTS
            && h.clients.load(Ordering::Relaxed) as usize == CLIENTS
            && h.slot_size.load(Ordering::Relaxed) as usize == SLOT_SIZE
            && h.client_size.load(Ordering::Relaxed) as usize == CLIENT_SIZE
            && h.total.load(Ordering::Relaxed) as usize == TOTAL;
        if ok {
            return Ok(());
        }
        Err(format!(
            "{} is not a lock table of this version of ctxlock (its header is damaged or \
             from another version): remove it once no process uses the directory",
            self.path.display()
        ))
    }

    /// The scope's next fence. Called with the hold taken, so an exclusive hold's fence
    /// is greater than that of every earlier hold of its name.
    pub fn next_fence(&self) -> u64 {
        // ORDERING: the counter is its own total order; the holds it orders are ordered
        // by the kernel's locks, taken before and released after.
        self.header().fence.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub fn client(&self, c: usize) -> &ClientWords {
        assert!(c < CLIENTS);
        // SAFETY: client entry c lies inside the mapping, 64-aligned; all atomics.
        unsafe {
            &*self
                .map
                .add(CLIENTS_AT + c * CLIENT_SIZE)
                .cast::<ClientWords>()
        }
    }

    fn slot(&self, s: usize) -> &SlotWords {
        assert!(s < SLOTS);
        // SAFETY: slot s lies inside the mapping, 8-aligned (SLOT_SIZE is); all atomics.
        unsafe { &*self.map.add(SLOTS_AT + s * SLOT_SIZE).cast::<SlotWords>() }
    }

    /// `len` bytes of atomic words at `at` (8-aligned) inside the mapping.
    fn words(&self, at: usize, bytes: usize) -> &[AtomicU64] {
        assert!(at % 8 == 0 && at + bytes.div_ceil(8) * 8 <= TOTAL);
        // SAFETY: inside the mapping (asserted), aligned, all atomics.
        unsafe { std::slice::from_raw_parts(self.map.add(at).cast(), bytes.div_ceil(8)) }
    }

    fn name_words(&self, s: usize) -> &[AtomicU64] {
        self.words(SLOTS_AT + s * SLOT_SIZE + 64, super::named::MAX_NAME_BYTES)
    }

    /// The records area of client `c`.
    pub fn records(&self, c: usize) -> &[AtomicU64] {
        self.words(
            CLIENTS_AT + c * CLIENT_SIZE + RECORDS_AT,
            CLIENT_SIZE - RECORDS_AT,
        )
    }

    // ---- byte-range locks ------------------------------------------------------

    /// Set (or free) the lock on one byte without waiting: false if another open file
    /// description holds a conflicting one.
    pub fn set(&self, byte: i64, how: Range) -> io::Result<bool> {
        let mut fl = flock(byte, how);
        loop {
            // SAFETY: F_OFD_SETLK with a valid flock on our own descriptor.
            let r = unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
            if r == 0 {
                return Ok(true);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EACCES) => return Ok(false),
                Some(libc::EINTR) => continue,
                _ => return Err(e),
            }
        }
    }

    /// Whether another open file description holds a lock on `byte` that a lock of kind
    /// `how` would conflict with.
    fn taken(&self, byte: i64, how: Range) -> bool {
        let mut fl = flock(byte, how);
        // SAFETY: F_OFD_GETLK with a valid flock on our own descriptor.
        let r = unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
        r == 0 && fl.l_type != libc::F_UNLCK as libc::c_short
    }

    /// Wait for the claim byte (held for microseconds by whoever gives a slot a name).
    fn claim(&self) -> io::Result<()> {
        let mut fl = flock(CLAIM_BYTE, Range::Write);
        loop {
            // SAFETY: F_OFD_SETLKW with a valid flock on our own descriptor.
            let r = unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_OFD_SETLKW, &mut fl) };
            if r == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    // ---- clients -----------------------------------------------------------------

    /// Take a free client entry for this manager for its life.
    pub fn join(&self) -> Result<usize, String> {
        for c in 0..CLIENTS {
            if self
                .set(client_byte(c), Range::Write)
                .map_err(|e| self.err(e))?
            {
                let w = self.client(c);
                // ORDERING: published to askers by the kernel's lock on the client byte
                // (they read it after seeing the byte taken); Relaxed suffices.
                w.pid.store(std::process::id(), Ordering::Relaxed);
                w.records_len.store(0, Ordering::Relaxed);
                let asked = w.query_asked.load(Ordering::SeqCst);
                w.query_done.store(asked, Ordering::SeqCst);
                return Ok(c);
            }
        }
        Err(format!(
            "{} has {CLIENTS} LockManagers open on it already (the most one directory \
             serves at once)",
            self.path.display()
        ))
    }

    /// Give client entry `me` up (its manager closed).
    pub fn leave(&self, me: usize) {
        let _ = self.set(client_byte(me), Range::Free);
    }

    /// Whether client `c` is alive (some other manager holds its byte).
    pub fn alive(&self, c: usize) -> bool {
        self.taken(client_byte(c), Range::Write)
    }

    pub fn err(&self, e: io::Error) -> String {
        format!("the lock table {} failed: {e}", self.path.display())
    }

    // ---- slots -------------------------------------------------------------------

    /// The slot of `name` (hash `hash`, from [`stable_hash`]), pinned by this manager:
    /// found, or given to it. `None`: every slot is in use.
    pub fn pin(&self, name: &str, hash: u64) -> io::Result<Option<usize>> {
        let mut pinned = self.pinned.lock().unwrap_or_else(|e| e.into_inner());
        let found = match self.find(name, hash, &pinned)? {
            Some(s) => Some(s),
            None => {
                self.claim()?;
                let found = self.find(name, hash, &pinned).and_then(|s| match s {
                    Some(s) => Ok(Some(s)),
                    None => self.give(name, hash, &pinned),
                });
                self.set(CLAIM_BYTE, Range::Free)?;
                found?
            }
        };
        if let Some(s) = found {
            pinned[s / 64] |= 1 << (s % 64);
        }
        Ok(found)
    }

    /// Unpin a slot this manager pinned.
    pub fn unpin(&self, s: usize) -> io::Result<()> {
        let mut pinned = self.pinned.lock().unwrap_or_else(|e| e.into_inner());
        pinned[s / 64] &= !(1 << (s % 64));
        self.set(slot_byte(s, PIN), Range::Free).map(drop)
    }

    /// Look for `name` along its probe sequence, up to a never-used slot; pin it.
    fn find(&self, name: &str, hash: u64, pinned: &[u64]) -> io::Result<Option<usize>> {
        for i in 0..SLOTS {
            let s = (hash as usize).wrapping_add(i) % SLOTS;
            // ORDERING: Acquire pairs with the Release store in `give`, so the name's
            // words are seen (they are re-read under the pin anyway).
            let h = self.slot(s).hash.load(Ordering::Acquire);
            if h == 0 {
                return Ok(None);
            }
            // One of ours holds another name (a name is pinned once per manager).
            if h != hash || pinned[s / 64] & (1 << (s % 64)) != 0 {
                continue;
            }
            // A failed read pin: someone holds its write pin, giving it a name under the
            // claim byte; `pin` looks again under that byte.
            if !self.set(slot_byte(s, PIN), Range::Read)? {
                continue;
            }
            if self.named(s, name, hash) {
                return Ok(Some(s));
            }
            self.set(slot_byte(s, PIN), Range::Free)?;
        }
        Ok(None)
    }

    /// Whether slot `s` (pinned) holds `name`.
    fn named(&self, s: usize, name: &str, hash: u64) -> bool {
        let w = self.slot(s);
        // ORDERING: the name changes only under a write pin, which our read pin
        // excludes; the pin's system call orders the loads after the last change.
        if w.hash.load(Ordering::Acquire) != hash
            || w.name_len.load(Ordering::Relaxed) as usize != name.len()
        {
            return false;
        }
        let words = self.name_words(s);
        name.as_bytes()
            .chunks(8)
            .zip(words)
            .all(|(c, w)| pack(c) == w.load(Ordering::Relaxed))
    }

    /// Under the claim byte: give `name` the first slot of its probe sequence nobody
    /// uses (never used, or unpinned), and pin it.
    fn give(&self, name: &str, hash: u64, pinned: &[u64]) -> io::Result<Option<usize>> {
        for i in 0..SLOTS {
            let s = (hash as usize).wrapping_add(i) % SLOTS;
            if pinned[s / 64] & (1 << (s % 64)) != 0
                || !self.set(slot_byte(s, PIN), Range::Write)?
            {
                continue;
            }
            let w = self.slot(s);
            // ORDERING: under the write pin nobody else reads the slot's name (a finder
            // whose read pin fails moves on); the Release store of the hash publishes the
            // name to `find`'s Acquire load.
            for (c, word) in name.as_bytes().chunks(8).zip(self.name_words(s)) {
                word.store(pack(c), Ordering::Relaxed);
            }
            w.name_len.store(name.len() as u32, Ordering::Relaxed);
            // Nobody waits for an unpinned slot: bits left are a dead client's.
            w.writers.store(0, Ordering::Relaxed);
            w.turn.store(0, Ordering::Relaxed);
            for word in &w.waiting {
                word.store(0, Ordering::Relaxed);
            }
            w.hash.store(hash, Ordering::Release);
            // Downgrade to a read pin: atomic on one description.
            self.set(slot_byte(s, PIN), Range::Read)?;
            return Ok(Some(s));
        }
        Ok(None)
    }

    // ---- holds -------------------------------------------------------------------

    /// Take slot `s` in `how` (Read: shared, Write: exclusive) without waiting.
    pub fn take(&self, s: usize, how: Range) -> io::Result<bool> {
        self.set(slot_byte(s, HOLD), how)
    }

    /// Free this manager's hold of slot `s`.
    pub fn free(&self, s: usize) -> io::Result<()> {
        self.set(slot_byte(s, HOLD), Range::Free).map(drop)
    }

    /// Whether an exclusive request of another client waits for slot `s`.
    pub fn writer_waits(&self, s: usize) -> bool {
        // ORDERING: a hint; a writer sets it after read-locking its writer byte, and the
        // test of the byte below is the truth.
        self.slot(s).writers.load(Ordering::SeqCst) != 0
            && self.taken(slot_byte(s, WRITER), Range::Write)
    }

    /// Mark (or unmark) an exclusive request of this client waiting for slot `s`.
    pub fn mark_writer(&self, s: usize, on: bool) -> io::Result<()> {
        let w = &self.slot(s).writers;
        // ORDERING: SeqCst with `writer_waits`' load; the byte lock is taken before the
        // count rises and freed after it falls, so the count is never too low.
        if on {
            self.set(slot_byte(s, WRITER), Range::Read)?;
            w.fetch_add(1, Ordering::SeqCst);
        } else {
            let _ = w.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            self.set(slot_byte(s, WRITER), Range::Free)?;
        }
        Ok(())
    }

    /// Say (or stop saying) that client `c` waits for slot `s`.
    pub fn mark_waiting(&self, s: usize, c: usize, on: bool) {
        let word = &self.slot(s).waiting[c / 64];
        let bit = 1u64 << (c % 64);
        // ORDERING: SeqCst: set before the waiter's first try and read by a releaser
        // after its release, so one of them sees the other (no lost wake-up).
        if on {
            word.fetch_or(bit, Ordering::SeqCst);
        } else {
            word.fetch_and(!bit, Ordering::SeqCst);
        }
    }

    /// The clients (other than `me`) that may wait for slot `s`.
    pub fn waiting(&self, s: usize, me: usize) -> Vec<usize> {
        // ORDERING: when the caller reads after its release (a system call, or the kernel
        // lock given back), the release comes before these loads, as a waiter's bit comes
        // before its first try (the Dekker pairing of `mark_waiting`); the same holds for
        // a turn given before them (`pass_turn`).
        fence(Ordering::SeqCst);
        let mut out = Vec::new();
        for (i, word) in self.slot(s).waiting.iter().enumerate() {
            // ORDERING: see `mark_waiting`.
            let mut bits = word.load(Ordering::SeqCst);
            while bits != 0 {
                let c = i * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if c != me {
                    out.push(c);
                }
            }
        }
        out
    }

    /// Give the turn of slot `s` to the first of `waiting` after `me` (round robin), and
    /// say to whom.
    pub fn pass_turn(&self, s: usize, me: usize, waiting: &[usize]) -> Option<usize> {
        let &next = waiting
            .iter()
            .find(|&&c| c > me)
            .or_else(|| waiting.first())?;
        let w = self.slot(s);
        // ORDERING: the time before the turn (Release, within SeqCst), read after it
        // (Acquire). SeqCst: the giver then reads the heir's `waiting` bit, the heir
        // clears the bit and then reads the turn (`end_turn`), so one of them sees the
        // other and the turn of an heir that stopped waiting ends.
        w.turn_at.store(now_ms(), Ordering::Relaxed);
        w.turn.store(next as u32 + 1, Ordering::SeqCst);
        Some(next)
    }

    /// Whether `me` must leave slot `s` to the client whose turn it is: the heir, until
    /// it takes it, or for `TURN_GRACE_MS` at most. `Some(ms)`: wait that long at most.
    pub fn not_my_turn(&self, s: usize, me: usize) -> Option<u64> {
        let w = self.slot(s);
        // ORDERING: see `pass_turn`.
        let turn = w.turn.load(Ordering::Acquire);
        if turn == 0 || turn as usize == me + 1 {
            return None;
        }
        let (now, at) = (now_ms(), w.turn_at.load(Ordering::Relaxed));
        // A time to come is not this boot's (a table kept on disk across a reboot, or
        // damaged): that turn is over.
        let age = now.checked_sub(at)?;
        (age < TURN_GRACE_MS).then(|| TURN_GRACE_MS - age)
    }

    /// Client `heir` took the lock, or no longer waits, or cannot use its turn: if the
    /// turn is its, it is over. Whether it was.
    pub fn end_turn(&self, s: usize, heir: usize) -> bool {
        let turn = &self.slot(s).turn;
        // ORDERING: SeqCst, see `pass_turn`; the load saves the write of a shared line
        // when the turn is not the heir's (most takes), and the exchange clears only the
        // heir's turn.
        turn.load(Ordering::SeqCst) == heir as u32 + 1
            && turn
                .compare_exchange(heir as u32 + 1, 0, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
    }

    // ---- doorbells ----------------------------------------------------------------

    /// Ring client `c`'s doorbell with `news` (which of its sleepers wake).
    pub fn ring(&self, c: usize, news: u32) {
        let bell = &self.client(c).doorbell;
        // ORDERING: SeqCst, after whatever the news is; the sleeper compares the word.
        bell.fetch_add(1, Ordering::SeqCst);
        futex_wake(bell, news);
    }

    /// Every slot is in use: ask every manager of the directory to let go of the slots it
    /// keeps for names nobody uses (`trims`), and ring their agents.
    pub fn ask_to_trim(&self, me: usize) {
        // ORDERING: SeqCst, before the rings: an agent woken by one reads the new count.
        self.header().trims.fetch_add(1, Ordering::SeqCst);
        for c in (0..CLIENTS).filter(|&c| c != me) {
            self.ring(c, NEWS_AGENT);
        }
    }

    /// How many times a manager asked for slots to be let go (see `ask_to_trim`).
    pub fn trims(&self) -> u64 {
        // ORDERING: SeqCst, the other half of `ask_to_trim`'s increment.
        self.header().trims.load(Ordering::SeqCst)
    }

    /// Tell every other client waiting for slot `s` that it may be free now.
    pub fn ring_waiting(&self, s: usize, me: usize) {
        for c in self.waiting(s, me) {
            self.ring(c, NEWS_RELEASE);
        }
    }
}

/// A stable hash of a name, the same in every process and version of this layout
/// (FNV-1a, 64 bits), odd so that 0 marks a never-used slot.
pub fn stable_hash(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h | 1
}

/// Up to 8 bytes as one little-endian word, zero-padded.
fn pack(chunk: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..chunk.len()].copy_from_slice(chunk);
    u64::from_le_bytes(b)
}

fn flock(byte: i64, how: Range) -> libc::flock {
    // SAFETY: flock is plain old data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = match how {
        Range::Read => libc::F_RDLCK,
        Range::Write => libc::F_WRLCK,
        Range::Free => libc::F_UNLCK,
    } as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = byte as libc::off_t;
    fl.l_len = 1;
    fl
}

/// Milliseconds of `CLOCK_MONOTONIC`, the same clock in every process.
fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// What a doorbell ring is about, as futex bit sets: a sleeper wakes for the news it
/// waits for. A release of a name (threads waiting at a gate sleep for it, and the agent
/// while a task's ticket waits), and news for the agent alone (a query, a task's new
/// ticket, stop), so that releases do not wake an agent with nothing to do.
pub const NEWS_RELEASE: u32 = 1;
pub const NEWS_AGENT: u32 = 2;
pub const NEWS_ALL: u32 = NEWS_RELEASE | NEWS_AGENT;

/// Sleep while `word` is `expected`, for `timeout` at most (or until woken by a ring
/// whose news intersects `news`).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>, news: u32) {
    // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time.
    let at = timeout.map(|d| {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid, writable timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        let nanos = now.tv_nsec as u64 + u64::from(d.subsec_nanos());
        libc::timespec {
            tv_sec: now.tv_sec
                + d.as_secs() as libc::time_t
                + (nanos / 1_000_000_000) as libc::time_t,
            tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
        }
    });
    let atp = at
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT_BITSET (shared: the word is in a shared mapping) on a valid
    // aligned u32 that lives as long as the call; the time is null or a valid timespec;
    // the bit set is non-zero.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT_BITSET,
            expected,
            atp,
            std::ptr::null::<u32>(),
            news,
        )
    };
}

/// Wake every sleeper on `word` that waits for some of `news`.
pub fn futex_wake(word: &AtomicU32, news: u32) {
    // SAFETY: FUTEX_WAKE_BITSET on a valid aligned u32; wakes at most i32::MAX sleepers;
    // the bit set is non-zero.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE_BITSET,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            news,
        )
    };
}

/// The directory of a `file://` url's path, as bytes the kernel takes: percent-decoded
/// (RFC 8089, as `pathlib.Path.as_uri()` writes it: `%20` is a space). A query or a
/// fragment is refused: the scope has no parameters, and taken as part of the path they
/// would name another directory, a scope of its own.
pub fn dir_path(path: &str) -> Result<PathBuf, String> {
    if path.contains('\0') {
        return Err("LockManager url cannot contain a NUL byte".to_owned());
    }
    if let Some(c) = path.chars().find(|&c| c == '?' || c == '#') {
        return Err(format!(
            "LockManager url 'file://{path}' has a {}: the file scope takes none (percent-\
             encode a '{c}' of the directory's name as {})",
            if c == '?' { "query" } else { "fragment" },
            if c == '?' { "%3F" } else { "%23" },
        ));
    }
    let bytes = super::percent::decode(path).map_err(|()| {
        format!(
            "LockManager url 'file://{path}' has a '%' that is not followed by two hex digits, \
             or %00 (percent-encode a '%' of the directory's name as %25)"
        )
    })?;
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "ctxlock-table-test-{}-{:x}",
            std::process::id(),
            super::super::named::now().to_bits()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_hash_is_stable_and_odd() {
        // Every process and every build must agree on where a name goes.
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8d);
        assert_eq!(stable_hash("invoice:42") & 1, 1);
    }

    #[test]
    fn a_damaged_or_foreign_table_is_refused_with_its_path() {
        let d = dir();
        drop(Table::open(&d).unwrap());
        let path = d.join(FILE_NAME);
        let whole = std::fs::read(&path).unwrap();
        for (what, bytes) in [
            ("truncated", whole[..10].to_vec()),
            ("half", whole[..whole.len() / 2].to_vec()),
            ("another version", {
                let mut b = whole.clone();
                b[8] = 2;
                b
            }),
            ("garbage", vec![0x5a; whole.len()]),
        ] {
            std::fs::write(&path, &bytes).unwrap();
            let err = Table::open(&d)
                .err()
                .unwrap_or_else(|| panic!("{what}: opened"));
            assert!(err.contains(FILE_NAME), "{what}: {err}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_name_keeps_its_slot_while_pinned_and_a_free_slot_is_reused() {
        let d = dir();
        let (a, b) = (Table::open(&d).unwrap(), Table::open(&d).unwrap());
        let h = |n: &str| stable_hash(n);
        let s = a.pin("x", h("x")).unwrap().unwrap();
        assert_eq!(b.pin("x", h("x")).unwrap(), Some(s), "one name, one slot");
        // Another name with the same probe start goes elsewhere while "x" is pinned, by
        // another manager or by this one (whose own pin the kernel cannot see).
        let other = b.pin("y", h("x")).unwrap().unwrap();
        assert_ne!(other, s);
        let third = a.pin("w", h("x")).unwrap().unwrap();
        assert!(third != s && third != other);
        a.unpin(third).unwrap();
        // Both modes of kernel lock exclude as they should, between descriptions.
        assert!(a.take(s, Range::Write).unwrap());
        assert!(!b.take(s, Range::Read).unwrap());
        a.free(s).unwrap();
        assert!(b.take(s, Range::Read).unwrap());
        assert!(a.take(s, Range::Read).unwrap());
        assert!(!a.take(s, Range::Write).unwrap() || !b.take(s, Range::Write).unwrap());
        a.free(s).unwrap();
        b.free(s).unwrap();
        // Nobody uses "x" any more: its slot may go to a new name.
        a.unpin(s).unwrap();
        b.unpin(s).unwrap();
        assert_eq!(a.pin("z", h("x")).unwrap(), Some(s));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_turn_is_its_heirs_until_the_heir_takes_the_lock_or_stops_waiting() {
        let d = dir();
        let (a, b, c) = (
            Table::open(&d).unwrap(),
            Table::open(&d).unwrap(),
            Table::open(&d).unwrap(),
        );
        let (ma, mb, mc) = (a.join().unwrap(), b.join().unwrap(), c.join().unwrap());
        let s = a.pin("x", stable_hash("x")).unwrap().unwrap();
        for t in [&b, &c] {
            assert_eq!(t.pin("x", stable_hash("x")).unwrap(), Some(s));
        }
        // Whose turn it is, read from the word (the grace is a clock, which a busy
        // machine could run out between two lines).
        let heir = || match a.slot(s).turn.load(Ordering::SeqCst) {
            0 => None,
            n => Some(n as usize - 1),
        };
        assert!(a.take(s, Range::Write).unwrap());
        b.mark_waiting(s, mb, true);
        assert_eq!(a.waiting(s, ma), vec![mb]);
        assert_eq!(a.pass_turn(s, ma, &[]), None, "nobody waits: no heir");
        assert_eq!(heir(), None);
        // The holder passes the turn to the one waiting client, then releases.
        assert_eq!(a.pass_turn(s, ma, &[mb]), Some(mb));
        a.free(s).unwrap();
        assert_eq!(heir(), Some(mb));
        assert!(b.not_my_turn(s, mb).is_none(), "the heir's own turn");
        // Ending somebody else's turn does nothing.
        assert!(!c.end_turn(s, mc));
        assert_eq!(heir(), Some(mb));
        // The heir takes the lock: the turn is over.
        assert!(b.take(s, Range::Write).unwrap());
        assert!(b.end_turn(s, mb));
        assert_eq!(heir(), None);
        assert!(!b.end_turn(s, mb), "over once");
        assert!(c.not_my_turn(s, mc).is_none());
        // Round robin: the first waiting client after the giver, else the first.
        assert_eq!(b.pass_turn(s, mb, &[ma, mc]), Some(mc));
        assert_eq!(c.pass_turn(s, mc, &[ma, mb]), Some(ma));
        // Passed to an heir that stops waiting instead: over as well.
        assert_eq!(b.pass_turn(s, mb, &[ma, mc]), Some(mc));
        c.mark_waiting(s, mc, false);
        assert!(c.end_turn(s, mc));
        assert_eq!(heir(), None);
        b.free(s).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn fences_increase_across_managers() {
        let d = dir();
        let (a, b) = (Table::open(&d).unwrap(), Table::open(&d).unwrap());
        let f1 = a.next_fence();
        let f2 = b.next_fence();
        assert!(f2 > f1 && a.next_fence() > f2);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
