//! The cluster's front door: a shared key admits a worker before any of LibAFL's LLMP
//! traffic flows.
//!
//! The main node's broker listens on loopback only; the `--listen` address is the
//! gate's. A connection there first proves, in a handshake of fixed-size messages,
//! that the other side holds the campaign's key (`cluster.key`, 32 random bytes as
//! hex), and learns that the main node holds it too; only then are its bytes passed
//! to the broker and back. A worker's broker likewise connects to a gate of its own
//! on loopback, which has done the handshake with the main node's.
//!
//! The handshake (HMAC-SHA256 under the key, fresh nonces on both sides, so a
//! recorded handshake is worth nothing on the next connection):
//!
//! ```text
//! main   → worker  MAGIC, nonce_m                                  (40 bytes)
//! worker → main    MAGIC, nonce_w, mac("worker" nonce_m nonce_w)   (72 bytes)
//! main   → worker  WELCOME, mac("main" nonce_w nonce_m)            (40 bytes)
//!               or REFUSED and the connection closes               (8 bytes)
//! ```
//!
//! Nothing is read beyond those sizes before the proof, and a peer that does not
//! send them within [`HANDSHAKE_TIME`] is dropped: random bytes, a wrong key, a
//! replayed handshake or a flood of bytes cost the main node one line and a closed
//! socket.
//!
//! After the handshake the two gates pass the brokers' bytes in frames, each bound in
//! size and sealed with a MAC under a key of its direction (derived from the campaign
//! key and both nonces) over its sequence number, length and bytes:
//!
//! ```text
//! length (u32, big-endian, 1..=MAX_FRAME)  bytes  mac(seq length bytes)  (32 bytes)
//! ```
//!
//! A frame that is too long, forged, altered, replayed, reordered or from another
//! connection fails its check before its bytes reach the broker, and the connection
//! closes with one line. The frames are not encrypted (an SSH tunnel or a VPN does
//! that where the network needs it).

use anyhow::{anyhow, bail, Context as _, Result};
use hmac::{Hmac, Mac as _};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

type HmacSha256 = Hmac<sha2::Sha256>;

/// The first bytes of the gate's hello and of a worker's answer.
const MAGIC: &[u8; 8] = b"TRESTLE1";
/// The main node admits the worker.
const WELCOME: &[u8; 8] = b"WELCOME!";
/// The main node turns the worker away.
const REFUSED: &[u8; 8] = b"REFUSED!";
/// What a handshake may take, each side.
pub const HANDSHAKE_TIME: Duration = Duration::from_secs(5);
/// Handshakes under way at once on the main node; more wait for the next accept.
const MAX_HANDSHAKES: usize = 16;
/// The most bytes one frame carries after the handshake.
pub const MAX_FRAME: usize = 64 << 10;

/// The campaign's shared secret.
#[derive(Clone)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// The key in `path` (64 hex digits).
    pub fn load(path: &Path) -> Result<Key> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the cluster key {}", path.display()))?;
        Key::parse(text.trim()).ok_or_else(|| {
            anyhow!(
                "{} is no cluster key (64 hex digits, as `trestle run --listen` writes)",
                path.display()
            )
        })
    }

    fn parse(hex: &str) -> Option<Key> {
        if hex.len() != 64 {
            return None;
        }
        let mut k = [0u8; 32];
        for (i, b) in k.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Key(k))
    }

    /// The key in `path`, or a new random one written there (readable by its owner
    /// only) when there is none; says which.
    pub fn load_or_create(path: &Path) -> Result<(Key, bool)> {
        if path.exists() {
            return Key::load(path).map(|k| (k, false));
        }
        let key = Key(random()?);
        let hex: String = key.0.iter().map(|b| format!("{b:02x}")).collect();
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("cannot create the cluster key {}", path.display()))?;
        f.write_all(format!("{hex}\n").as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok((key, true))
    }

    fn mac(&self, role: &[u8], a: &[u8; 32], b: &[u8; 32]) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        m.update(role);
        m.update(a);
        m.update(b);
        m
    }

    /// The keys of a connection's two directions, after a handshake with these nonces.
    fn session(&self, nonce_m: &[u8; 32], nonce_w: &[u8; 32]) -> Session {
        let derive = |dir: &[u8]| {
            Key(self
                .mac(dir, nonce_m, nonce_w)
                .finalize()
                .into_bytes()
                .into())
        };
        Session {
            to_main: derive(b"frames to main"),
            to_worker: derive(b"frames to worker"),
        }
    }

    /// The MAC of frame `seq` carrying `bytes`.
    fn seal(&self, seq: u64, bytes: &[u8]) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        m.update(&seq.to_be_bytes());
        m.update(&(bytes.len() as u32).to_be_bytes());
        m.update(bytes);
        m
    }
}

/// The frame keys of one admitted connection.
struct Session {
    to_main: Key,
    to_worker: Key,
}

/// 32 bytes from the kernel's random source.
fn random() -> Result<[u8; 32]> {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("cannot read /dev/urandom")?;
    Ok(b)
}

/// The main node's side of the handshake on `s`; Err says why the peer is refused.
fn admit(s: &mut TcpStream, key: &Key) -> Result<Session> {
    s.set_read_timeout(Some(HANDSHAKE_TIME))?;
    s.set_write_timeout(Some(HANDSHAKE_TIME))?;
    let nonce_m = random()?;
    s.write_all(&[&MAGIC[..], &nonce_m].concat())?;
    let mut answer = [0u8; 72];
    s.read_exact(&mut answer)
        .map_err(|e| anyhow!("no handshake ({e})"))?;
    if &answer[..8] != MAGIC {
        let _ = s.write_all(REFUSED);
        bail!("it does not speak trestle's cluster handshake");
    }
    let nonce_w: [u8; 32] = answer[8..40].try_into().expect("32 bytes");
    if key
        .mac(b"worker", &nonce_m, &nonce_w)
        .verify_slice(&answer[40..])
        .is_err()
    {
        let _ = s.write_all(REFUSED);
        bail!("its key is not this campaign's");
    }
    let proof = key.mac(b"main", &nonce_w, &nonce_m).finalize().into_bytes();
    s.write_all(&[&WELCOME[..], &proof].concat())?;
    s.set_read_timeout(None)?;
    s.set_write_timeout(None)?;
    Ok(key.session(&nonce_m, &nonce_w))
}

/// A worker's side of the handshake with the main node on `s`.
fn prove(s: &mut TcpStream, key: &Key, main: SocketAddr) -> Result<Session> {
    s.set_read_timeout(Some(HANDSHAKE_TIME))?;
    s.set_write_timeout(Some(HANDSHAKE_TIME))?;
    let mut hello = [0u8; 40];
    s.read_exact(&mut hello)
        .map_err(|e| anyhow!("{main} did not greet as a trestle main node ({e})"))?;
    if &hello[..8] != MAGIC {
        bail!("{main} is not a trestle main node (or one of another version)");
    }
    let nonce_m: [u8; 32] = hello[8..].try_into().expect("32 bytes");
    let nonce_w = random()?;
    let mac = key
        .mac(b"worker", &nonce_m, &nonce_w)
        .finalize()
        .into_bytes();
    s.write_all(&[&MAGIC[..], &nonce_w, &mac].concat())?;
    let mut verdict = [0u8; 40];
    let n = read_up_to(s, &mut verdict)?;
    if n >= 8 && &verdict[..8] == REFUSED {
        bail!("the main node at {main} refused this worker: its --key is not the campaign's");
    }
    if n < 40
        || &verdict[..8] != WELCOME
        || key
            .mac(b"main", &nonce_w, &nonce_m)
            .verify_slice(&verdict[8..])
            .is_err()
    {
        bail!("{main} did not prove it holds the campaign's key: not the main node, or another campaign's");
    }
    s.set_read_timeout(None)?;
    s.set_write_timeout(None)?;
    Ok(key.session(&nonce_m, &nonce_w))
}

/// Read until `buf` is full or the peer closes; the bytes read.
fn read_up_to(s: &mut TcpStream, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match s.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(anyhow!("the main node's answer did not come ({e})")),
        }
    }
    Ok(n)
}

/// Frames of the bytes read from `from`, written to `to` (see the module's text),
/// until either side closes.
fn seal_all(mut from: &TcpStream, mut to: &TcpStream, key: &Key) {
    let mut buf = vec![0u8; MAX_FRAME];
    for seq in 0u64.. {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let tag = key.seal(seq, &buf[..n]).finalize().into_bytes();
        if to
            .write_all(&[&(n as u32).to_be_bytes()[..], &buf[..n], &tag].concat())
            .is_err()
        {
            return;
        }
    }
}

/// The bytes of the frames read from `from`, checked, written to `to`, until either
/// side closes (Ok) or a frame is refused (Err says why).
fn open_all(mut from: &TcpStream, mut to: &TcpStream, key: &Key) -> Result<()> {
    let mut buf = vec![0u8; MAX_FRAME + 32];
    for seq in 0u64.. {
        let mut len = [0u8; 4];
        if from.read_exact(&mut len).is_err() {
            return Ok(());
        }
        let n = u32::from_be_bytes(len) as usize;
        if n == 0 || n > MAX_FRAME {
            bail!("a message of {n} bytes (at most {MAX_FRAME})");
        }
        if from.read_exact(&mut buf[..n + 32]).is_err() {
            return Ok(());
        }
        if key
            .seal(seq, &buf[..n])
            .verify_slice(&buf[n..n + 32])
            .is_err()
        {
            bail!("message {seq} failed its check: forged, altered or replayed");
        }
        if to.write_all(&buf[..n]).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// Pass bytes both ways between the local broker's `raw` connection and the other
/// gate's `framed` one until either side closes: frames going out are sealed with
/// `out`, frames coming in checked with `inn`, and a refused one closes both
/// connections with a line that starts with `who`.
fn splice(
    raw: TcpStream,
    framed: TcpStream,
    out: Key,
    inn: Key,
    who: &'static str,
    peer: SocketAddr,
) {
    let (raw2, framed2) = match (raw.try_clone(), framed.try_clone()) {
        (Ok(r), Ok(f)) => (r, f),
        _ => return,
    };
    let close = |a: &TcpStream, b: &TcpStream| {
        let _ = a.shutdown(Shutdown::Both);
        let _ = b.shutdown(Shutdown::Both);
    };
    let _ = std::thread::Builder::new()
        .name("trestle-gate".into())
        .spawn(move || {
            seal_all(&raw, &framed, &out);
            close(&raw, &framed);
        });
    let _ = std::thread::Builder::new()
        .name("trestle-gate".into())
        .spawn(move || {
            if let Err(why) = open_all(&framed2, &raw2, &inn) {
                log::info!("{who}: dropped the connection with {peer}: {why:#}");
            }
            close(&raw2, &framed2);
        });
}

/// The main node's gate: accept on `public`, and pass each admitted connection on to
/// the broker at `broker` (loopback), until `stop`. Refusals are said in one line.
pub fn serve(
    public: TcpListener,
    broker: SocketAddr,
    key: Key,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    public.set_nonblocking(true)?;
    let busy = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new().name("trestle-gate".into()).spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            let (mut s, peer) = match public.accept() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                Err(_) => continue,
            };
            if busy.load(Ordering::SeqCst) >= MAX_HANDSHAKES {
                continue; // dropped: a flood of connections waits on no one
            }
            let _ = s.set_nonblocking(false);
            let (key, busy) = (key.clone(), busy.clone());
            busy.fetch_add(1, Ordering::SeqCst);
            let _ = std::thread::Builder::new().name("trestle-gate".into()).spawn(move || {
                let admitted = admit(&mut s, &key);
                busy.fetch_sub(1, Ordering::SeqCst);
                match admitted {
                    Ok(session) => match TcpStream::connect(broker) {
                        Ok(b) => splice(b, s, session.to_worker, session.to_main, "trestle run", peer),
                        Err(e) => log::info!("trestle run: cannot reach this node's own broker at {broker}: {e}"),
                    },
                    Err(why) => log::info!("trestle run: refused a connection from {peer}: {why:#}"),
                }
            });
        }
    })?;
    Ok(())
}

/// A worker's gate: do the handshake with the main node at `main`, then listen on
/// loopback for the worker's own broker and pass its connection on. Returns the
/// loopback address to connect the broker to.
pub fn connect(main: SocketAddr, key: &Key) -> Result<SocketAddr> {
    let mut upstream = TcpStream::connect_timeout(&main, HANDSHAKE_TIME)
        .map_err(|e| anyhow!("cannot reach the main node at {main}: {e}"))?;
    let session = prove(&mut upstream, key, main)?;
    let local = TcpListener::bind("127.0.0.1:0").context("cannot open a loopback port")?;
    let addr = local.local_addr()?;
    std::thread::Builder::new()
        .name("trestle-gate".into())
        .spawn(move || {
            if let Ok((broker, _)) = local.accept() {
                splice(
                    broker,
                    upstream,
                    session.to_main,
                    session.to_worker,
                    "trestle join",
                    main,
                );
            }
        })?;
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> Key {
        Key([b; 32])
    }

    /// A main gate in front of an echo server; returns the gate's address.
    fn echo_behind_gate(k: Key) -> SocketAddr {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let echo_addr = echo.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in echo.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut r = s.try_clone().unwrap();
                    let mut w = s;
                    let _ = std::io::copy(&mut r, &mut w);
                });
            }
        });
        let public = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = public.local_addr().unwrap();
        serve(public, echo_addr, k, Arc::new(AtomicBool::new(false))).unwrap();
        addr
    }

    #[test]
    fn a_worker_with_the_key_gets_through_and_one_without_is_refused() {
        let addr = echo_behind_gate(key(7));
        let local = connect(addr, &key(7)).unwrap();
        let mut s = TcpStream::connect(local).unwrap();
        s.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        let e = connect(addr, &key(8)).unwrap_err();
        assert!(format!("{e:#}").contains("refused this worker"), "{e:#}");
    }

    #[test]
    fn a_worker_does_not_take_a_main_node_without_the_key_for_one() {
        let addr = echo_behind_gate(key(1));
        // The main node holds key 1; a worker holding key 2 is refused before it could
        // be fooled; and one told another campaign's answer rejects it.
        assert!(connect(addr, &key(2)).is_err());
        let fake = TcpListener::bind("127.0.0.1:0").unwrap();
        let fake_addr = fake.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = fake.accept() {
                let _ = s.write_all(&[&MAGIC[..], &[0u8; 32]].concat());
                let mut a = [0u8; 72];
                let _ = s.read_exact(&mut a);
                let _ = s.write_all(&[&WELCOME[..], &[0u8; 32]].concat());
            }
        });
        let e = connect(fake_addr, &key(1)).unwrap_err();
        assert!(format!("{e:#}").contains("did not prove"), "{e:#}");
    }

    /// Random bytes, a replayed handshake and an endless stream each end in a closed
    /// socket, and the gate goes on admitting its own.
    #[test]
    fn random_bytes_a_replayed_handshake_and_a_flood_are_refused() {
        let k = key(3);
        let addr = echo_behind_gate(k.clone());
        // Random bytes: refused.
        let mut s = TcpStream::connect(addr).unwrap();
        let mut hello = [0u8; 40];
        s.read_exact(&mut hello).unwrap();
        s.write_all(&[0x5a; 72]).unwrap();
        let mut v = Vec::new();
        let _ = s.read_to_end(&mut v);
        assert_eq!(v, REFUSED, "random bytes are refused");
        // A handshake recorded on one connection and replayed on the next: the
        // nonce differs, so the proof does not hold.
        let mut s1 = TcpStream::connect(addr).unwrap();
        let mut h1 = [0u8; 40];
        s1.read_exact(&mut h1).unwrap();
        let nonce_m: [u8; 32] = h1[8..].try_into().unwrap();
        let nonce_w = [9u8; 32];
        let mac = k.mac(b"worker", &nonce_m, &nonce_w).finalize().into_bytes();
        let answer = [&MAGIC[..], &nonce_w, &mac].concat();
        s1.write_all(&answer).unwrap();
        let mut ok = [0u8; 40];
        s1.read_exact(&mut ok).unwrap();
        assert_eq!(&ok[..8], WELCOME);
        let mut s2 = TcpStream::connect(addr).unwrap();
        let mut h2 = [0u8; 40];
        s2.read_exact(&mut h2).unwrap();
        assert_ne!(h1, h2, "each connection gets a fresh nonce");
        s2.write_all(&answer).unwrap();
        let mut v = Vec::new();
        let _ = s2.read_to_end(&mut v);
        assert_eq!(v, REFUSED, "a replayed handshake is refused");
        // A flood: megabytes without a handshake are read no further than 72 bytes.
        let mut s3 = TcpStream::connect(addr).unwrap();
        s3.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let flood = vec![b'A'; 1 << 20];
        let mut sent = 0usize;
        for _ in 0..64 {
            match s3.write(&flood) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        assert!(sent < 64 << 20, "the gate kept reading a flood");
        // And the gate still admits a worker with the key.
        assert!(connect(addr, &k).is_ok());
    }

    /// A frame sealed with `key` as number `seq`.
    fn frame(key: &Key, seq: u64, bytes: &[u8]) -> Vec<u8> {
        let tag = key.seal(seq, bytes).finalize().into_bytes();
        [&(bytes.len() as u32).to_be_bytes()[..], bytes, &tag].concat()
    }

    /// Everything the peer sends until it closes (within 10 s).
    fn rest(s: &mut TcpStream) -> Vec<u8> {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut v = Vec::new();
        let _ = s.read_to_end(&mut v);
        v
    }

    /// After the handshake, sealed frames pass both ways; a frame replayed, altered,
    /// too long or sealed for another connection closes the connection before its
    /// bytes reach the broker.
    #[test]
    fn frames_replayed_altered_too_long_or_of_another_connection_are_refused() {
        let k = key(5);
        let addr = echo_behind_gate(k.clone());
        let admitted = || {
            let mut s = TcpStream::connect(addr).unwrap();
            let session = prove(&mut s, &k, addr).unwrap();
            (s, session)
        };
        // Sealed frames pass, and the answer comes sealed for this connection.
        let (mut s, session) = admitted();
        let ping = frame(&session.to_main, 0, b"ping");
        s.write_all(&ping).unwrap();
        let mut back = vec![0u8; 4 + 4 + 32];
        s.read_exact(&mut back).unwrap();
        assert_eq!(
            back,
            frame(&session.to_worker, 0, b"ping"),
            "the echo comes back as frame 0"
        );
        s.write_all(&frame(&session.to_main, 1, b"pong")).unwrap();
        s.read_exact(&mut back).unwrap();
        assert_eq!(back, frame(&session.to_worker, 1, b"pong"));
        // The first frame again: refused, nothing echoed.
        s.write_all(&ping).unwrap();
        assert!(
            rest(&mut s).is_empty(),
            "a replayed frame reached the broker"
        );
        // An altered frame.
        let (mut s, session) = admitted();
        let mut f = frame(&session.to_main, 0, b"ping");
        f[5] ^= 1;
        s.write_all(&f).unwrap();
        assert!(
            rest(&mut s).is_empty(),
            "an altered frame reached the broker"
        );
        // A frame longer than the bound: refused on its length, before its bytes.
        let (mut s, session) = admitted();
        let big = vec![0u8; MAX_FRAME + 1];
        let _ = s.write_all(&frame(&session.to_main, 0, &big));
        assert!(
            rest(&mut s).is_empty(),
            "an oversized frame reached the broker"
        );
        // A frame of an earlier connection, replayed on a new one.
        let (mut s, _) = admitted();
        s.write_all(&ping).unwrap();
        assert!(
            rest(&mut s).is_empty(),
            "another connection's frame reached the broker"
        );
        // The gate goes on admitting its own.
        let (mut s, session) = admitted();
        s.write_all(&frame(&session.to_main, 0, b"ping")).unwrap();
        s.read_exact(&mut back).unwrap();
        assert_eq!(back, frame(&session.to_worker, 0, b"ping"));
    }

    #[test]
    fn keys_are_made_once_readable_by_their_owner_and_read_back() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("cluster.key");
        let (k1, made) = Key::load_or_create(&p).unwrap();
        assert!(made);
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let (k2, made) = Key::load_or_create(&p).unwrap();
        assert!(!made && k1.0 == k2.0);
        std::fs::write(&p, "not a key\n").unwrap();
        assert!(format!("{:#}", Key::load(&p).unwrap_err()).contains("no cluster key"));
    }
}
