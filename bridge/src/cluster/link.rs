//! A node's connection to the others ([`Link`]): an LLMP broker of its own, in a
//! thread, connected broker-to-broker over TCP. LibAFL's LLMP carries the messages;
//! trestle adds no protocol of its own beyond what a message holds ([`super::Message`]).
//!
//! The main node's broker listens on loopback, behind the [`super::gate`] on the
//! `--listen` address; a worker's broker connects to it through a gate of its own,
//! once the two gates have proved to each other that they hold the campaign's key. Every message a broker gets from a peer goes to the node (through
//! a channel) and on to its other peers, so the workers hear each other through the
//! main node's broker; what the node sends goes out on its broker's own page, which
//! the broker-to-broker threads carry to the peers. The broker keeps its pages, so a
//! worker that joins late reads everything sent before it came.

use super::gate::{self, Key};
use super::Message;
use anyhow::{anyhow, Context as _, Result};
use libafl_bolts::llmp::{
    Flags, Listener, LlmpBroker, LlmpBrokerInner, LlmpHook, LlmpMsgHookResult, Tag,
};
use libafl_bolts::shmem::{ShMemProvider, StdShMemProvider};
use libafl_bolts::ClientId;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The LLMP tag of trestle's messages (others on the same brokers are passed by).
const TAG: Tag = Tag(0x7e57_1e00);

/// How long the broker thread sleeps when there was nothing to move.
const IDLE: Duration = Duration::from_millis(2);

/// The largest message a node takes (a batch of units is the largest kind); one
/// larger is passed over unread.
pub const MAX_MESSAGE: usize = 1 << 30;

/// Encode a message as it goes over the link.
pub fn encode(m: &Message) -> Result<Vec<u8>> {
    bincode::serialize(m).context("cannot encode a cluster message")
}

/// Decode a message from the link: at most [`MAX_MESSAGE`] bytes, and nothing in it
/// may claim more than the message holds (a length field of 2^60 is an error, not an
/// allocation).
pub fn decode(bytes: &[u8]) -> Result<Message> {
    use bincode::Options as _;
    if bytes.len() > MAX_MESSAGE {
        anyhow::bail!(
            "{} bytes, more than a message may have ({MAX_MESSAGE})",
            bytes.len()
        );
    }
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .with_limit(bytes.len() as u64)
        .deserialize(bytes)
        .map_err(|e| anyhow!("{e}"))
}

/// A node's end of the cluster: send to every peer, receive from any.
pub struct Link {
    out: Sender<Vec<u8>>,
    incoming: Receiver<Vec<u8>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The address it listens on (main node) or is connected to (worker).
    pub addr: SocketAddr,
}

/// Hands each trestle message to the node; forwards all messages to the other peers.
struct ToNode(Sender<Vec<u8>>);

impl<SHM, SP> LlmpHook<SHM, SP> for ToNode {
    fn on_new_message(
        &mut self,
        _broker: &mut LlmpBrokerInner<SHM, SP>,
        _client: ClientId,
        tag: &mut Tag,
        _flags: &mut Flags,
        msg: &mut [u8],
        _new: &mut Vec<(Tag, Flags, Vec<u8>)>,
    ) -> Result<LlmpMsgHookResult, libafl_bolts::Error> {
        if *tag == TAG {
            // A node that has gone away takes no more messages; the broker goes on.
            let _ = self.0.send(msg.to_vec());
        }
        Ok(LlmpMsgHookResult::ForwardToClients)
    }
}

impl Link {
    /// The main node's link: a broker on loopback behind a gate listening on `addr`
    /// (`HOST:PORT`) that admits holders of `key`; the broker says [`Message::Alive`]
    /// every `heartbeat` by itself, however busy the node is.
    pub fn listen(addr: &str, heartbeat: Duration, key: Key) -> Result<Link> {
        let public = TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
        let bound = public.local_addr()?;
        let local = TcpListener::bind("127.0.0.1:0").context("cannot open a loopback port")?;
        let broker = local.local_addr()?;
        let alive = encode(&Message::Alive { elapsed: 0.0 })?;
        let link = Link::start(bound, Some((heartbeat, alive)), move |inner| {
            inner
                .launch_listener(Listener::Tcp(local))
                .map(|_| ())
                .map_err(|e| anyhow!("cannot start the broker's listener: {e}"))
        })?;
        gate::serve(public, broker, key, link.stop.clone())?;
        Ok(link)
    }

    /// A worker's link: a broker of its own, connected to the main node's at `addr`
    /// once the gates' handshake proved both hold `key`.
    pub fn join(addr: &str, key: &Key) -> Result<Link> {
        let target = addr
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve {addr}"))?
            .next()
            .ok_or_else(|| anyhow!("{addr} resolves to no address"))?;
        let through = gate::connect(target, key)?;
        Link::start(target, None, move |inner| {
            // A listener (on loopback, for nobody) first, as LibAFL's own brokers have:
            // the broker-to-broker connection must not get the id of the broker's own
            // page, or it takes the node's messages for ones it sent and drops them.
            let local = TcpListener::bind("127.0.0.1:0").context("cannot open a loopback port")?;
            inner
                .launch_listener(Listener::Tcp(local))
                .map_err(|e| anyhow!("cannot start the local listener: {e}"))?;
            inner
                .connect_b2b(through)
                .map_err(|e| anyhow!("cannot reach the main node at {target}: {e}"))
        })
    }

    /// Start the broker thread; `setup` makes its connections (in the thread that
    /// owns the broker), and its error is this call's.
    fn start<F>(addr: SocketAddr, heartbeat: Option<(Duration, Vec<u8>)>, setup: F) -> Result<Link>
    where
        F: FnOnce(
                &mut LlmpBrokerInner<<StdShMemProvider as ShMemProvider>::ShMem, StdShMemProvider>,
            ) -> Result<()>
            + Send
            + 'static,
    {
        let (to_node, incoming) = mpsc::channel();
        let (out, to_send) = mpsc::channel::<Vec<u8>>();
        let (ready_tx, ready) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("trestle-link".into())
            .spawn(move || {
                let broker = StdShMemProvider::new()
                    .map_err(|e| anyhow!("cannot use shared memory: {e}"))
                    .and_then(|p| {
                        LlmpBroker::new(p, libafl_bolts::tuples::tuple_list!(ToNode(to_node)))
                            .map_err(|e| anyhow!("cannot start a broker: {e}"))
                    });
                let mut broker = match broker.and_then(|mut b| setup(b.inner_mut()).map(|()| b)) {
                    Ok(b) => {
                        let _ = ready_tx.send(Ok(()));
                        b
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                pump(&mut broker, &to_send, heartbeat, &stopping);
            })
            .context("cannot start the link thread")?;
        ready
            .recv()
            .map_err(|_| anyhow!("the link thread ended before it was ready"))??;
        Ok(Link {
            out,
            incoming,
            stop,
            thread: Some(thread),
            addr,
        })
    }

    /// Send `m` to every peer.
    pub fn send(&self, m: &Message) -> Result<()> {
        let bytes = encode(m)?;
        self.out
            .send(bytes)
            .map_err(|_| anyhow!("the link to the other nodes is down"))
    }

    /// The next message, waiting at most `wait`; `None` if none came. A message
    /// that does not decode (another trestle's) is said and passed over.
    pub fn recv(&self, wait: Duration) -> Result<Option<Message>> {
        loop {
            let bytes = match self.incoming.recv_timeout(wait) {
                Ok(b) => b,
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(anyhow!("the link to the other nodes is down"))
                }
            };
            match decode(&bytes) {
                Ok(m) => return Ok(Some(m)),
                Err(e) => log::info!("trestle: passing over a cluster message that does not decode ({} bytes): {e:#}", bytes.len()),
            }
        }
    }

    /// Every message there is now, without waiting.
    pub fn drain(&self) -> Result<Vec<Message>> {
        let mut v = Vec::new();
        while let Some(m) = self.recv(Duration::ZERO)? {
            v.push(m);
        }
        Ok(v)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Move messages until told to stop: the peers' to the node (the hook), the node's
/// to the peers. What the node sent last is flushed before the thread ends.
fn pump<HT>(
    broker: &mut LlmpBroker<HT, <StdShMemProvider as ShMemProvider>::ShMem, StdShMemProvider>,
    to_send: &Receiver<Vec<u8>>,
    heartbeat: Option<(Duration, Vec<u8>)>,
    stop: &AtomicBool,
) where
    HT: libafl_bolts::llmp::LlmpHookTuple<
        <StdShMemProvider as ShMemProvider>::ShMem,
        StdShMemProvider,
    >,
{
    let mut last_beat: Option<std::time::Instant> = None;
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        let mut moved = false;
        if let Some((every, alive)) = &heartbeat {
            if last_beat.is_none_or(|t| t.elapsed() >= *every) {
                if let Err(e) = broker.inner_mut().send_buf(TAG, alive) {
                    log::info!(
                        "trestle: cannot send a cluster message ({} bytes): {e}",
                        alive.len()
                    );
                }
                last_beat = Some(std::time::Instant::now());
            }
        }
        while let Ok(bytes) = to_send.try_recv() {
            if let Err(e) = broker.inner_mut().send_buf(TAG, &bytes) {
                log::info!(
                    "trestle: cannot send a cluster message ({} bytes): {e}",
                    bytes.len()
                );
            }
            moved = true;
        }
        match broker.broker_once() {
            Ok(got) => moved |= got,
            Err(e) => log::info!("trestle: the cluster broker: {e}"),
        }
        if stopping {
            // Give the broker-to-broker threads a moment to carry the last messages.
            std::thread::sleep(Duration::from_millis(200));
            return;
        }
        if !moved {
            std::thread::sleep(IDLE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// The main node's own heartbeat (sent at once, then every hour here).
    fn heartbeat(m: &Message) -> bool {
        *m == Message::Alive { elapsed: 0.0 }
    }

    /// The next message that is not a heartbeat.
    fn next(link: &Link, within: Duration) -> Option<Message> {
        let end = Instant::now() + within;
        while Instant::now() < end {
            match link.recv(Duration::from_millis(50)).unwrap() {
                Some(m) if !heartbeat(&m) => return Some(m),
                _ => {}
            }
        }
        None
    }

    /// Two workers and a main node on 127.0.0.1, each a broker: a worker's message
    /// reaches the main node and the other worker (through the main node's broker),
    /// the main node's reaches both, and nobody hears its own.
    #[test]
    fn messages_cross_brokers_both_ways_and_between_workers() {
        let key = test_key();
        let main = Link::listen("127.0.0.1:0", Duration::from_secs(3600), key.clone()).unwrap();
        let addr = main.addr.to_string();
        let a = Link::join(&addr, &key).unwrap();
        let b = Link::join(&addr, &key).unwrap();
        let hello = Message::Hello {
            node: "a".into(),
            protocol: PROTOCOL_FOR_TEST,
            build: 7,
            cores: 1,
        };
        a.send(&hello).unwrap();
        assert_eq!(next(&main, Duration::from_secs(10)), Some(hello.clone()));
        assert_eq!(next(&b, Duration::from_secs(10)), Some(hello));
        let alive = Message::Alive { elapsed: 1.5 };
        main.send(&alive).unwrap();
        assert_eq!(next(&a, Duration::from_secs(10)), Some(alive.clone()));
        assert_eq!(next(&b, Duration::from_secs(10)), Some(alive));
        std::thread::sleep(Duration::from_millis(300));
        for link in [&main, &a, &b] {
            assert!(
                link.drain().unwrap().iter().all(heartbeat),
                "a node heard its own message or one twice"
            );
        }
    }

    const PROTOCOL_FOR_TEST: u32 = super::super::PROTOCOL;

    fn test_key() -> Key {
        let d = tempfile::tempdir().unwrap();
        Key::load_or_create(&d.path().join("k")).unwrap().0
    }

    /// The decoder as a fuzz target, for a bounded time: valid messages of every
    /// kind, flipped, cut short, padded and with length fields blown up, and random
    /// bytes, never panic and never allocate what the message does not hold.
    #[test]
    fn the_message_decoder_takes_any_bytes_without_panicking() {
        let seeds: Vec<Vec<u8>> = [
            Message::Hello {
                node: "w".into(),
                protocol: 1,
                build: 7,
                cores: 2,
            },
            Message::Refused {
                node: "w".into(),
                reason: "why".into(),
            },
            Message::Queue {
                from: "w".into(),
                name: "q.json".into(),
                test: b"{}".to_vec(),
            },
            Message::SystemCrash {
                from: "w".into(),
                name: "c".into(),
                test: vec![1, 2, 3],
            },
            Message::Alive { elapsed: 1.0 },
            Message::Done {
                reason: "over".into(),
            },
        ]
        .iter()
        .map(|m| encode(m).unwrap())
        .collect();
        for s in &seeds {
            assert!(decode(s).is_ok());
        }
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let end = Instant::now() + Duration::from_secs(3);
        let mut runs = 0u64;
        while Instant::now() < end {
            let mut b = seeds[(rnd() % seeds.len() as u64) as usize].clone();
            match rnd() % 5 {
                0 => {
                    let i = (rnd() % b.len() as u64) as usize;
                    b[i] ^= 1 << (rnd() % 8);
                }
                1 => b.truncate((rnd() % b.len() as u64) as usize),
                2 => b.extend((0..rnd() % 64).map(|_| rnd() as u8)),
                3 => {
                    // A length or tag field claims the most it can.
                    let i = (rnd() % b.len() as u64) as usize;
                    for k in i..(i + 8).min(b.len()) {
                        b[k] = 0xff;
                    }
                }
                _ => b = (0..rnd() % 256).map(|_| rnd() as u8).collect(),
            }
            let _ = decode(&b);
            runs += 1;
        }
        assert!(runs > 10_000, "only {runs} inputs in 3 s");
        assert!(decode(&vec![0u8; MAX_MESSAGE + 1]).is_err());
    }

    #[test]
    fn a_main_node_that_is_not_there_is_an_error_naming_it() {
        let e = Link::join("127.0.0.1:9", &test_key())
            .err()
            .expect("nothing listens on port 9");
        assert!(format!("{e:#}").contains("127.0.0.1:9"), "{e:#}");
    }
}
