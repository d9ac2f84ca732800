//! The channel's waits and acknowledgements over a pipe with fake C
//! calls, and the channel operations a CQ without one refuses.

#![allow(clippy::undocumented_unsafe_blocks)]

use super::*;
use crate::cq::CompletionQueue;
#[cfg(feature = "tokio")]
use std::future::Future;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Instant;

/// A pipe: (read end, write end).
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// The acknowledgements the fake `ack` was asked for: (CQ, count).
static ACKS: Mutex<Vec<(usize, u32)>> = Mutex::new(Vec::new());

/// Reads one event from the pipe the fake channel's fd is: the CQ's
/// address, 8 bytes, as the kernel's `cq_handle`.
unsafe fn fake_get_event(
    chan: *mut ffi::ibv_comp_channel,
) -> std::result::Result<*mut ffi::ibv_cq, i32> {
    let mut buf = [0u8; 8];
    let n = unsafe { libc::read((*chan).fd, buf.as_mut_ptr().cast(), 8) };
    match n {
        8 => Ok(usize::from_ne_bytes(buf) as *mut ffi::ibv_cq),
        0 => Err(libc::EIO), // the write end was closed
        _ => Err(io::Error::last_os_error().raw_os_error().unwrap()),
    }
}

unsafe fn fake_ack(cq: *mut ffi::ibv_cq, n: u32) {
    ACKS.lock().unwrap().push((cq as usize, n));
}

unsafe fn fake_destroy(_: *mut ffi::ibv_comp_channel) -> i32 {
    0
}

static FAKES: ChannelOps = ChannelOps {
    get_event: fake_get_event,
    ack: fake_ack,
    destroy: fake_destroy,
};

/// A channel over a pipe, with CQs whose handles are `ids`: events are
/// sent by writing a CQ's address into the pipe.
struct Fx {
    channel: CompletionChannel,
    tx: OwnedFd,
    /// Never grown after the CQs are attached: their addresses stay.
    cqs: Vec<ffi::ibv_cq>,
    _rx: OwnedFd,
    _raw: Box<ffi::ibv_comp_channel>,
    _ctx: Box<ffi::ibv_context>,
}

impl Fx {
    fn new(ids: &[u32]) -> Fx {
        let (rx, tx) = pipe();
        set_nonblocking(rx.as_fd(), || "a pipe".into()).unwrap();
        let mut ctx: Box<ffi::ibv_context> = Box::default();
        let context = Context::fake(NonNull::from(&mut *ctx), "fake0", false);
        let mut raw = Box::new(ffi::ibv_comp_channel {
            context: &mut *ctx,
            fd: rx.as_raw_fd(),
            refcnt: 0,
        });
        let channel = CompletionChannel(Arc::new(ChannelInner {
            chan: NonNull::from(&mut *raw),
            ops: &FAKES,
            state: Mutex::new(State::default()),
            read: Condvar::new(),
            ctx: context,
        }));
        let mut cqs: Vec<ffi::ibv_cq> = ids
            .iter()
            .map(|&handle| ffi::ibv_cq {
                handle,
                ..Default::default()
            })
            .collect();
        for cq in &mut cqs {
            unsafe { channel.attach(NonNull::from(cq)) };
        }
        // Acknowledgements an earlier test's CQs got at these addresses
        // (freed and given to these) are not these CQs'.
        let keys: Vec<usize> = cqs.iter().map(|cq| cq as *const _ as usize).collect();
        ACKS.lock().unwrap().retain(|a| !keys.contains(&a.0));
        Fx {
            channel,
            tx,
            cqs,
            _rx: rx,
            _raw: raw,
            _ctx: ctx,
        }
    }

    fn cq(&self, i: usize) -> NonNull<ffi::ibv_cq> {
        NonNull::from(&self.cqs[i])
    }

    /// What arming CQ `i` notes (as `CompletionChannel::arm`, without the
    /// C call): a wait ends on an event after this.
    fn arm(&self, i: usize) -> EventCount {
        self.channel.0.lock().note_arm(self.cq(i).as_ptr() as usize)
    }

    /// Raises an event for CQ `i` (or any address).
    fn event(&self, cq: NonNull<ffi::ibv_cq>) {
        let bytes = (cq.as_ptr() as usize).to_ne_bytes();
        let n = unsafe { libc::write(self.tx.as_raw_fd(), bytes.as_ptr().cast(), 8) };
        assert_eq!(n, 8);
    }

    /// The acknowledgements made for CQ `cq` so far.
    fn acks(cq: NonNull<ffi::ibv_cq>) -> Vec<u32> {
        let key = cq.as_ptr() as usize;
        let acks = ACKS.lock().unwrap();
        acks.iter().filter(|a| a.0 == key).map(|a| a.1).collect()
    }
}

#[test]
fn threads_waiting_for_cqs_of_one_channel_each_wake_for_their_own_event() {
    let fx = Fx::new(&[1, 2, 3]);
    let deadline = Mono::now().after(Duration::from_secs(20));
    let (c0, c1, c2) = (fx.cq(0), fx.cq(1), fx.cq(2));
    std::thread::scope(|s| {
        let ch = &fx.channel;
        let w: Vec<_> = [c0, c1, c2]
            .into_iter()
            .enumerate()
            .map(|(i, cq)| {
                let cq = cq.as_ptr() as usize;
                let armed = fx.arm(i);
                s.spawn(move || {
                    let cq = NonNull::new(cq as *mut ffi::ibv_cq).unwrap();
                    assert!(ch.wait_notified(cq, armed, deadline).unwrap());
                    Instant::now()
                })
            })
            .collect();
        // Whichever thread reads the pipe, each wakes for its own CQ,
        // in the order the events come: each no earlier than its event
        // (the cause), compared as instants, not as spans from the
        // threads' own starts.
        let start = Instant::now();
        let mut sent = [start; 3];
        for (i, cq) in [(2, c2), (0, c0), (1, c1)] {
            std::thread::sleep(Duration::from_millis(100));
            sent[i] = Instant::now();
            fx.event(cq);
        }
        let woke: Vec<Instant> = w.into_iter().map(|t| t.join().unwrap()).collect();
        // (No thread wakes before its own CQ's event: none was woken by
        // another CQ's. A thread the scheduler runs late may wake after a
        // later event's; that says nothing of the channel.)
        for i in 0..3 {
            assert!(woke[i] >= sent[i], "CQ {i} woke before its event");
        }
        assert!(woke[1] - start < Duration::from_secs(10), "{woke:?}");
    });
    // Each event was counted, none acknowledged yet (fewer than a batch).
    assert!(Fx::acks(c0).is_empty());
    // The waits consumed nothing: get_event has the same events, in the
    // order they came.
    let ids: Vec<CqId> = std::iter::from_fn(|| fx.channel.try_get_event().unwrap())
        .map(|e| e.cq())
        .collect();
    assert_eq!(ids, [CqId(3), CqId(1), CqId(2)]);
    // Events of CQs nobody waits for are handed to get_event, oldest
    // first, each CQ once however many events it had.
    fx.event(c1);
    fx.event(c0);
    fx.event(c1);
    let ids: Vec<CqId> = std::iter::from_fn(|| fx.channel.try_get_event().unwrap())
        .map(|e| e.cq())
        .collect();
    assert_eq!(ids, [CqId(2), CqId(1)]);
}

#[test]
fn events_are_acknowledged_in_batches_and_the_rest_when_their_cq_goes() {
    let fx = Fx::new(&[7, 8]);
    let (c0, c1) = (fx.cq(0), fx.cq(1));
    for _ in 0..40 {
        fx.event(c0);
    }
    fx.event(c1);
    assert_eq!(fx.channel.try_get_event().unwrap().unwrap().cq(), CqId(7));
    assert_eq!(fx.channel.try_get_event().unwrap().unwrap().cq(), CqId(8));
    assert!(fx.channel.try_get_event().unwrap().is_none());
    assert_eq!(Fx::acks(c0), [ACK_BATCH]);
    assert_eq!(fx.channel.cq_count(), 2);
    // Dropping a CQ acknowledges what is left of its events ...
    unsafe { fx.channel.detach(c0) };
    assert_eq!(Fx::acks(c0), [ACK_BATCH, 40 - ACK_BATCH]);
    assert_eq!(fx.channel.cq_count(), 1);
    // ... and an event read for a CQ no longer registered (its destroy
    // waits for it) is acknowledged at once, and given to nobody.
    fx.event(c0);
    assert!(fx.channel.try_get_event().unwrap().is_none());
    assert_eq!(Fx::acks(c0), [ACK_BATCH, 40 - ACK_BATCH, 1]);
    unsafe { fx.channel.detach(c1) };
    assert_eq!(Fx::acks(c1), [1]);
    assert_eq!(fx.channel.cq_count(), 0);
}

#[test]
fn waits_end_at_their_deadline_and_errors_name_the_call() {
    let fx = Fx::new(&[5]);
    let c0 = fx.cq(0);
    let start = Instant::now();
    let woken = fx
        .channel
        .wait_notified(c0, fx.arm(0), Mono::of(start + Duration::from_millis(100)))
        .unwrap();
    assert!(!woken);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let start = Instant::now();
    let e = fx.channel.get_event(Duration::from_millis(50)).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(start.elapsed() >= Duration::from_millis(50));
    // An event that came after the arm, before the wait, wakes it at once.
    let armed = fx.arm(0);
    fx.event(c0);
    assert!(fx.channel.wait_notified(c0, armed, None).unwrap());
    assert_eq!(
        fx.channel.try_get_event().unwrap().map(|e| e.cq()),
        Some(CqId(5)),
        "left to get_event"
    );
    // A failing read is returned, naming the call, and leaves no
    // reader behind: the next wait fails too, rather than hang.
    let Fx { channel, tx, .. } = fx;
    drop(tx);
    for _ in 0..2 {
        let e = channel.get_event(Duration::from_secs(5)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("ibv_get_cq_event failed (the completion channel of fake0)"),
            "{e}"
        );
        assert_eq!(e.errno(), Some(libc::EIO));
    }
    assert!(format!("{channel:?}").contains("cqs: 1"));
}

/// Provider entries that count their calls and find the CQ empty.
static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
unsafe extern "C" fn start_poll(_: *mut ffi::ibv_cq_ex, _: *mut ffi::ibv_poll_cq_attr) -> i32 {
    CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    libc::ENOENT
}
unsafe extern "C" fn next_poll(_: *mut ffi::ibv_cq_ex) -> i32 {
    libc::ENOENT
}
unsafe extern "C" fn end_poll(_: *mut ffi::ibv_cq_ex) {}
unsafe extern "C" fn read_u32(_: *mut ffi::ibv_cq_ex) -> u32 {
    0
}

#[test]
fn channel_operations_on_a_cq_without_one_are_refused_before_any_c_call() {
    let mut ctx: Box<ffi::ibv_context> = Box::default();
    let context = Context::fake(NonNull::from(&mut *ctx), "fake0", false);
    let mut raw = Box::new(ffi::ibv_cq_ex {
        context: &mut *ctx,
        cqe: 8,
        start_poll: Some(start_poll),
        next_poll: Some(next_poll),
        end_poll: Some(end_poll),
        read_opcode: Some(read_u32),
        read_vendor_err: Some(read_u32),
        read_byte_len: Some(read_u32),
        read_imm_data: Some(read_u32),
        read_qp_num: Some(read_u32),
        read_wc_flags: Some(read_u32),
        ..Default::default()
    });
    let mut cq = unsafe { CompletionQueue::from_raw(&context, NonNull::from(&mut *raw)) }.unwrap();
    assert!(cq.channel().is_none());
    let e = cq.req_notify(false).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("req_notify") && m.contains("fake0")),
        "{e}"
    );
    let e = cq.poll_or_arm(4, |_| {}).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("poll_or_arm")),
        "{e}"
    );
    let e = cq.poll_or_arm(0, |_| {}).unwrap_err();
    assert!(matches!(e, Error::OutOfRange { value: 0, .. }), "{e}");
    assert_eq!(
        CALLS.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "no poll was started"
    );
    // A wait on it polls (and backs off) without touching a channel.
    let e = cq.wait(1, Duration::from_millis(20)).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(CALLS.load(std::sync::atomic::Ordering::Relaxed) > 0);
    drop(cq);
}

#[test]
fn the_oldest_event_is_taken_first_and_each_cq_is_queued_once() {
    let mut st = State::default();
    for (key, id) in [(0x1000, 7), (0x2000, 9)] {
        st.cqs.insert(
            key,
            Slot {
                id: CqId(id),
                unacked: 0,
                events: 0,
                notified: false,
                queued: false,
                wakers: Vec::new(),
            },
        );
    }
    // As `record` marks them (without the C calls).
    for key in [0x2000usize, 0x1000, 0x2000] {
        let slot = st.cqs.get_mut(&key).unwrap();
        slot.notified = true;
        if !slot.queued {
            slot.queued = true;
            st.ready.push_back(key);
        }
    }
    assert_eq!(st.ready.len(), 2);
    assert_eq!(st.pop_ready(), Some(CqId(9)));
    assert_eq!(st.pop_ready(), Some(CqId(7)));
    assert_eq!(st.pop_ready(), None);
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_waits_and_a_blocking_one_on_one_channel_each_end_for_their_own_event() {
    let fx = Fx::new(&[1, 2, 3, 4]);
    let tasks: Vec<_> = (0..3)
        .map(|i| {
            let (ch, key) = (fx.channel.clone(), fx.cq(i).as_ptr() as usize);
            let armed = fx.arm(i);
            tokio::spawn(async move {
                ch.cq_event(key, armed).await.unwrap();
                Instant::now()
            })
        })
        .collect();
    // A blocking wait on the fourth CQ, asleep in poll(2) on the same fd.
    let blocking = {
        let (ch, key) = (fx.channel.clone(), fx.cq(3).as_ptr() as usize);
        let armed = fx.arm(3);
        std::thread::spawn(move || {
            let cq = NonNull::new(key as *mut ffi::ibv_cq).unwrap();
            let deadline = Mono::now().after(Duration::from_secs(20));
            assert!(ch.wait_notified(cq, armed, deadline).unwrap());
            Instant::now()
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut sent = [Instant::now(); 4];
    for i in [2, 3, 0, 1] {
        sent[i] = Instant::now();
        fx.event(fx.cq(i));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Each ended after its own event, whoever read it (not before: an
    // event of another CQ did not end it).
    for (i, t) in tasks.into_iter().enumerate() {
        assert!(t.await.unwrap() >= sent[i], "task {i} ended early");
    }
    let woke = blocking.join().unwrap();
    assert!(woke >= sent[3]);
    assert!(
        woke < sent[3] + Duration::from_secs(5),
        "the blocking wait slept on"
    );
    // One registration with the runtime's reactor for the channel, kept.
    let reg = fx.channel.0.lock().reactor.only();
    let key = fx.cq(0).as_ptr() as usize;
    let armed = fx.arm(0);
    fx.event(fx.cq(0));
    fx.channel.clone().cq_event(key, armed).await.unwrap();
    assert!(Arc::ptr_eq(&reg, &fx.channel.0.lock().reactor.only()));
}

#[cfg(feature = "tokio")]
#[test]
fn an_async_wait_outside_a_runtime_is_refused() {
    let fx = Fx::new(&[1]);
    let key = fx.cq(0).as_ptr() as usize;
    let wait = fx.channel.clone().cq_event(key, fx.arm(0));
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let r = std::future::Future::poll(std::pin::pin!(wait), &mut cx);
    assert!(
        matches!(r, std::task::Poll::Ready(Err(Error::InvalidArgument(_)))),
        "{r:?}"
    );
}

#[test]
fn a_cq_wait_ends_on_its_event_when_get_event_takes_it() {
    // Thread X sleeps in get_event (it reads the fd); thread Y waits for
    // CQ 0's event. X reads the event and takes it: Y must wake all the
    // same, soon, not at its deadline.
    let fx = Fx::new(&[1, 2]);
    let c0 = fx.cq(0);
    std::thread::scope(|s| {
        let ch = &fx.channel;
        let x = s.spawn(|| ch.get_event(Duration::from_secs(20)).unwrap().cq());
        std::thread::sleep(Duration::from_millis(100));
        let armed = fx.arm(0);
        let key = c0.as_ptr() as usize;
        let y = s.spawn(move || {
            let cq = NonNull::new(key as *mut ffi::ibv_cq).unwrap();
            let start = Instant::now();
            let woken = ch
                .wait_notified(cq, armed, Mono::of(start + Duration::from_secs(20)))
                .unwrap();
            (woken, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        fx.event(c0);
        assert_eq!(x.join().unwrap(), CqId(1), "X took the event");
        let (woken, took) = y.join().unwrap();
        assert!(woken, "Y's wait timed out: {took:?}");
        assert!(took < Duration::from_secs(5), "Y woke late: {took:?}");
    });
    // The other way round: a CQ wait that saw the event leaves it to
    // get_event, which still reports it.
    let armed = fx.arm(1);
    fx.event(fx.cq(1));
    assert!(fx.channel.wait_notified(fx.cq(1), armed, None).unwrap());
    assert_eq!(
        fx.channel.try_get_event().unwrap().map(|e| e.cq()),
        Some(CqId(2))
    );
}

#[cfg(feature = "tokio")]
#[test]
fn a_task_ends_on_its_event_when_a_blocking_get_event_takes_it() {
    let fx = Fx::new(&[1]);
    let rt = current_thread();
    let key = fx.cq(0).as_ptr() as usize;
    let armed = fx.arm(0);
    let ch = fx.channel.clone();
    let x = std::thread::spawn(move || ch.get_event(Duration::from_secs(20)).map(|e| e.cq()));
    std::thread::sleep(Duration::from_millis(100));
    let took = rt.block_on(async {
        let wait = tokio::spawn(fx.channel.clone().cq_event(key, armed));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let sent = Instant::now();
        fx.event(fx.cq(0));
        tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .expect("the task's wakeup was lost")
            .unwrap()
            .unwrap();
        sent.elapsed()
    });
    assert_eq!(
        x.join().unwrap().unwrap(),
        CqId(1),
        "the thread took the event"
    );
    assert!(took < Duration::from_secs(5));
}

#[cfg(feature = "tokio")]
#[test]
fn each_runtime_gets_its_own_registration_and_a_dead_one_is_replaced() {
    // A wait on runtime R1 registers the fd there; R1 then idles. A task on
    // R2 waits for the next event: only its own reactor can wake it.
    let fx = Fx::new(&[1]);
    let current = || current_thread();
    let key = fx.cq(0).as_ptr() as usize;
    let r1 = current();
    let armed = fx.arm(0);
    fx.event(fx.cq(0));
    r1.block_on(fx.channel.clone().cq_event(key, armed))
        .unwrap();
    let wait_on_r2 = |ch: CompletionChannel, armed: EventCount, raise: Box<dyn FnOnce() + Send>| {
        std::thread::spawn(move || {
            current().block_on(async move {
                let wait = tokio::spawn(ch.cq_event(key, armed));
                tokio::time::sleep(Duration::from_millis(100)).await;
                raise();
                tokio::time::timeout(Duration::from_secs(5), wait).await
            })
        })
    };
    let tx = Arc::new(fx.tx.try_clone().unwrap());
    let cq = fx.cq(0).as_ptr() as usize;
    let raise = move || {
        let bytes = cq.to_ne_bytes();
        assert_eq!(
            unsafe { libc::write(tx.as_raw_fd(), bytes.as_ptr().cast(), 8) },
            8
        );
    };
    let r = wait_on_r2(fx.channel.clone(), fx.arm(0), Box::new(raise.clone()));
    r.join()
        .unwrap()
        .expect("a task on R2 slept on while R1 idled")
        .unwrap()
        .unwrap();
    assert_eq!(
        fx.channel.0.lock().reactor.len(),
        2,
        "one registration a runtime"
    );
    // R1 gone: R2's waits go on.
    drop(r1);
    let r = wait_on_r2(fx.channel.clone(), fx.arm(0), Box::new(raise));
    r.join()
        .unwrap()
        .expect("a task on R2 slept on after R1 was dropped")
        .unwrap()
        .unwrap();
    // Registering for that last runtime dropped those of the runtimes
    // shut down before it (R1, the first R2): they held their reactors.
    assert_eq!(
        fx.channel.0.lock().reactor.len(),
        1,
        "dead registrations kept"
    );
}

#[cfg(feature = "tokio")]
#[test]
fn a_wait_polled_on_one_runtime_then_awaited_on_another_ends_on_its_event() {
    // First polled on R1 (registered there), which then idles; the same
    // future is then awaited on R2: R2's reactor must wake it.
    let fx = Fx::new(&[1]);
    let key = fx.cq(0).as_ptr() as usize;
    let r1 = current_thread();
    let wait = pending_on(&r1, fx.channel.clone().cq_event(key, fx.arm(0)));
    let r2 = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let r = r2.block_on(async {
        let w = tokio::spawn(wait);
        tokio::time::sleep(Duration::from_millis(100)).await;
        fx.event(fx.cq(0));
        tokio::time::timeout(Duration::from_secs(5), w).await
    });
    drop(r1);
    r.expect("the wait slept on past its event on R2")
        .unwrap()
        .unwrap();
}

#[test]
fn a_re_arm_by_the_cqs_own_waiter_leaves_the_event_to_get_event() {
    // An event of CQ 0 is read; before an "any event" reader takes it,
    // CQ 0's own waiter arms the CQ again: the reader still gets it, at
    // once, not at its timeout.
    let fx = Fx::new(&[4]);
    let armed = fx.arm(0);
    fx.event(fx.cq(0));
    assert!(fx.channel.wait_notified(fx.cq(0), armed, None).unwrap());
    let _ = fx.arm(0);
    let start = Instant::now();
    let e = fx.channel.get_event(Duration::from_secs(5)).unwrap();
    assert_eq!(e.cq(), CqId(4));
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[cfg(feature = "tokio")]
#[test]
fn a_cancelled_async_wait_leaves_no_waker_behind() {
    let fx = Fx::new(&[1]);
    let rt = current_thread();
    let key = fx.cq(0).as_ptr() as usize;
    rt.block_on(async {
        let wait = fx.channel.clone().cq_event(key, fx.arm(0));
        let r = tokio::time::timeout(Duration::from_millis(20), wait).await;
        assert!(r.is_err(), "no event came");
    });
    let st = fx.channel.0.lock();
    assert!(
        st.cqs[&key].wakers.is_empty(),
        "the cancelled task's waker stayed"
    );
}

#[cfg(feature = "tokio")]
#[test]
fn a_wait_polled_outside_any_runtime_after_tokio_keeps_its_registration() {
    // First polled on tokio (registered), then by another executor (no
    // tokio runtime current): it keeps waiting, rather than failing.
    let fx = Fx::new(&[1]);
    let key = fx.cq(0).as_ptr() as usize;
    let rt = current_thread();
    let mut wait = pending_on(&rt, fx.channel.clone().cq_event(key, fx.arm(0)));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let r = wait.as_mut().poll(&mut cx);
    assert!(r.is_pending(), "{r:?}");
    // The event ends it, the registration's runtime still alive.
    fx.event(fx.cq(0));
    let r = rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), wait).await });
    r.expect("ended on its event").unwrap();
}

#[cfg(feature = "tokio")]
#[test]
fn an_async_wait_on_a_runtime_without_io_is_an_error_not_a_panic() {
    let fx = Fx::new(&[1]);
    let key = fx.cq(0).as_ptr() as usize;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let r = rt.block_on(fx.channel.clone().cq_event(key, fx.arm(0)));
    let e = r.unwrap_err();
    assert!(e.to_string().contains("enable_io"), "{e}");
}

/// A current-thread runtime with its drivers.
#[cfg(feature = "tokio")]
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `wait`, polled on `rt` (so registered there) until it is seen pending.
#[cfg(feature = "tokio")]
fn pending_on<F: Future<Output = Result<()>>>(
    rt: &tokio::runtime::Runtime,
    wait: F,
) -> std::pin::Pin<Box<F>> {
    let mut wait = Box::pin(wait);
    rt.block_on(async {
        let first = tokio::time::timeout(Duration::from_millis(50), &mut wait).await;
        assert!(first.is_err(), "no event yet");
    });
    wait
}

#[test]
fn a_direct_arm_and_sleep_sees_a_ready_cq_sleeps_to_its_event_or_deadline_and_drains_the_fd() {
    let fx = Fx::new(&[1, 2]);
    let (c0, c1) = (fx.cq(0), fx.cq(1));
    let ch = &fx.channel;
    let later = || Mono::now().after(Duration::from_secs(20));

    // A completion there after the arm: no sleep. The arm is given the
    // CQ's count of events.
    let mut seen = None;
    let start = Instant::now();
    let r = ch
        .arm_and_sleep(c0, later(), |n| seen = Some(n), || true)
        .unwrap();
    assert_eq!((r, seen), (Slept::Ready, Some(0)));
    assert!(start.elapsed() < Duration::from_secs(5));

    // Nothing comes: the deadline, not before.
    let start = Instant::now();
    let r = ch
        .arm_and_sleep(
            c0,
            Mono::now().after(Duration::from_millis(100)),
            |_| {},
            || false,
        )
        .unwrap();
    assert_eq!(r, Slept::Expired);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(5),
        "{took:?}"
    );

    // Three events waiting, two of another CQ: the sleep ends on its own
    // and reads them all, leaving the fd empty, each counted for its CQ.
    fx.event(c1);
    fx.event(c0);
    fx.event(c1);
    let r = ch
        .arm_and_sleep(c0, later(), |n| seen = Some(n), || false)
        .unwrap();
    assert_eq!((r, seen), (Slept::Event, Some(0)));
    assert!(!readable_now(ch.as_fd()), "events were left on the fd");
    assert_eq!((fx.arm(0), fx.arm(1)), (EventCount(1), EventCount(2)));
    // get_event's queue names each CQ once, oldest first.
    let next = || ch.try_get_event().unwrap().map(|e| e.cq());
    assert_eq!(next(), Some(CqId(2)));
    assert_eq!(next(), Some(CqId(1)));
    assert_eq!(next(), None);

    // An event that comes while it sleeps ends the sleep.
    std::thread::scope(|s| {
        let key = c0.as_ptr() as usize;
        let sleeper = s.spawn(move || {
            let cq = NonNull::new(key as *mut ffi::ibv_cq).unwrap();
            let mut seen = None;
            let r = ch
                .arm_and_sleep(cq, later(), |n| seen = Some(n), || false)
                .unwrap();
            (r, seen, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(100));
        // The wake's cause: the sleeper may not end before this moment
        // (measured from the event, not from the sleeper's own start,
        // which a loaded machine may delay past the main thread's sleep).
        let sent = Instant::now();
        fx.event(c0);
        let (r, seen, woke) = sleeper.join().unwrap();
        assert_eq!((r, seen), (Slept::Event, Some(1)));
        assert!(woke >= sent, "the sleep ended before the event came");
        assert!(woke - sent < Duration::from_secs(5), "{:?}", woke - sent);
    });
}
