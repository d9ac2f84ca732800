//! The fake kernel's framing and refusals, driven with hand-made command
//! buffers (no libibverbs): what a strict kernel answers to malformed or
//! unknown requests.

use super::*;

/// A legacy command: header + core (with the response pointer first when
/// `resp` is given) + driver data.
fn legacy(cmd: u32, core: &[u8], uhw: &[u8], resp: Option<&mut [u8]>) -> Vec<u8> {
    let mut b = Vec::new();
    let len = 8 + core.len() + uhw.len();
    let out_words = resp.as_ref().map_or(0, |r| r.len() / 4) as u16;
    b.extend_from_slice(&cmd.to_le_bytes());
    b.extend_from_slice(&((len / 4) as u16).to_le_bytes());
    b.extend_from_slice(&out_words.to_le_bytes());
    b.extend_from_slice(core);
    b.extend_from_slice(uhw);
    if let Some(r) = resp {
        b[8..16].copy_from_slice(&(r.as_mut_ptr() as u64).to_le_bytes());
    }
    b
}

fn send(fd: i32, b: &[u8]) -> Result<(), i32> {
    // SAFETY: `b` is a complete command whose response pointer (if any)
    // points to a live buffer of the length its out_words give.
    match unsafe { write_cmds::dispatch(fd, b.as_ptr(), b.len()) } {
        Ok(()) => Ok(()),
        Err(Errno(e)) => Err(e),
    }
}

fn context() -> i32 {
    let fd = open_cmd_fd(libc::O_CLOEXEC);
    assert!(fd >= 0);
    let mut resp = vec![0u8; 8 + 72];
    let mut uhw = vec![0u8; 32];
    uhw[8] = 1; // flags: DEVX
    uhw[16] = 1; // max_cqe_version
    let cmd = legacy(0, &[0; 8], &uhw, Some(&mut resp));
    send(fd, &cmd).expect("GET_CONTEXT");
    let r = bytes::In(resp);
    assert!(r.u32(0) as i32 > 2, "async fd");
    assert_eq!(r.u16(8 + 16), 1024, "max_sq_desc_sz");
    assert_eq!(r.u8(8 + 44), 1, "cqe_version");
    fd
}

fn close_context(fd: i32) {
    assert!(crate::kernel::fds::unmark(fd));
    close_cmd_fd(fd);
    close_raw(fd);
}

#[test]
fn get_context_answers_and_a_second_one_is_refused() {
    let fd = context();
    let mut resp = vec![0u8; 8 + 72];
    let mut uhw = vec![0u8; 32];
    uhw[16] = 1;
    let cmd = legacy(0, &[0; 8], &uhw, Some(&mut resp));
    assert_eq!(send(fd, &cmd), Err(libc::EINVAL));
    close_context(fd);
}

#[test]
fn malformed_and_unknown_writes_are_refused() {
    let fd = context();
    assert_eq!(
        send(fd, &[0; 4]),
        Err(libc::EINVAL),
        "shorter than a header"
    );
    let mut cmd = legacy(4, &[0; 4], &[], None);
    cmd[4] = 9; // in_words disagrees with the length
    assert_eq!(send(fd, &cmd), Err(libc::EINVAL));
    // Commands the device does not implement (QUERY_AH, OPEN_QP) and
    // one no kernel knows: EOPNOTSUPP, as uverbs answers, so that
    // callers (rdma-core's tests) see "not supported".
    for code in [7, 40, 200] {
        let cmd = legacy(code, &[0; 8], &[], None);
        assert_eq!(send(fd, &cmd), Err(libc::EOPNOTSUPP), "command {code}");
    }
    let cmd = legacy(4, &[0x77, 0, 0, 0], &[], None); // DEALLOC_PD of nothing
    assert_eq!(send(fd, &cmd), Err(libc::EINVAL));
    close_context(fd);
}

#[test]
fn reg_mr_checks_access_and_range() {
    let fd = context();
    let mut resp = vec![0u8; 4];
    let cmd = legacy(3, &[0; 8], &[], Some(&mut resp));
    send(fd, &cmd).expect("ALLOC_PD");
    let pd = u32::from_le_bytes(resp[..4].try_into().unwrap());
    let buf = vec![0u8; 4096];
    let reg = |access: u32, len: u64| {
        let mut out = vec![0u8; 12];
        let mut core = vec![0u8; 40];
        core[8..16].copy_from_slice(&(buf.as_ptr() as u64).to_le_bytes());
        core[16..24].copy_from_slice(&len.to_le_bytes());
        core[24..32].copy_from_slice(&(buf.as_ptr() as u64).to_le_bytes());
        core[32..36].copy_from_slice(&pd.to_le_bytes());
        core[36..40].copy_from_slice(&access.to_le_bytes());
        let cmd = legacy(9, &core, &[], Some(&mut out));
        send(fd, &cmd)
    };
    assert_eq!(reg(0x8000_0000, 4096), Err(libc::EINVAL), "unknown bit");
    assert_eq!(
        reg(0x2, 4096),
        Err(libc::EINVAL),
        "remote write without local"
    );
    assert_eq!(reg(0x1, 0), Err(libc::EINVAL), "empty");
    assert_eq!(reg(0x1 | 0x2 | 0x4, 4096), Ok(()));
    close_context(fd);
}

#[test]
fn ioctls_refuse_with_the_errnos_libibverbs_falls_back_on() {
    let fd = context();
    // INVOKE_WRITE probe: UVERBS_OBJECT_DEVICE (0), method 0, no attrs.
    let mut hdr = [0u8; 24];
    hdr[0..2].copy_from_slice(&24u16.to_le_bytes());
    // SAFETY: a header of 24 bytes with no attributes.
    let r = unsafe { ioctl::dispatch(fd, ioctl::RDMA_VERBS_IOCTL, hdr.as_mut_ptr()) };
    assert_eq!(r.err(), Some(Errno(libc::EPROTONOSUPPORT)));
    // Some other request on the fd (isatty's TCGETS).
    // SAFETY: the request is refused before `arg` is read.
    let r = unsafe { ioctl::dispatch(fd, libc::TCGETS, std::ptr::null_mut()) };
    assert_eq!(r.err(), Some(Errno(libc::ENOTTY)));
    // An mlx5 method that is not modelled: EOPNOTSUPP, never ENOTTY.
    hdr[2..4].copy_from_slice(&(0x1000u16 + 6).to_le_bytes()); // VAR object
    hdr[4..6].copy_from_slice(&0x1000u16.to_le_bytes());
    // SAFETY: as above.
    let r = unsafe { ioctl::dispatch(fd, ioctl::RDMA_VERBS_IOCTL, hdr.as_mut_ptr()) };
    assert_eq!(r.err(), Some(Errno(libc::EOPNOTSUPP)));
    close_context(fd);
}

/// OPEN_XRCD of `file` (-1: none) with `oflags`: the handle.
fn open_xrcd(fd: i32, file: i32, oflags: i32) -> Result<u32, i32> {
    let mut resp = vec![0u8; 4];
    let mut core = vec![0u8; 16];
    core[8..12].copy_from_slice(&file.to_le_bytes());
    core[12..16].copy_from_slice(&oflags.to_le_bytes());
    send(fd, &legacy(37, &core, &[], Some(&mut resp)))?;
    Ok(u32::from_le_bytes(resp[..4].try_into().unwrap()))
}

#[test]
fn xrc_domains_are_shared_through_a_file() {
    let (a, b) = (context(), context());
    let path = std::env::temp_dir().join(format!("mlx5dv-sim-xrcd-{}", std::process::id()));
    let file = std::fs::File::create(&path).expect("temporary file");
    let raw = std::os::fd::AsRawFd::as_raw_fd(&file);
    assert_eq!(open_xrcd(a, raw, 0), Err(libc::ENOENT), "no O_CREAT");
    let ha = open_xrcd(a, raw, libc::O_CREAT).expect("OPEN_XRCD O_CREAT");
    let hb = open_xrcd(b, raw, 0).expect("the file's domain, found again");
    assert_eq!(
        open_xrcd(b, raw, libc::O_CREAT | libc::O_EXCL),
        Err(libc::EINVAL),
        "O_EXCL and the domain exists"
    );
    let private = open_xrcd(a, -1, 0).expect("a private domain");
    {
        let dev = lock();
        assert_eq!(dev.xrcds[&ha].xrcdn, dev.xrcds[&hb].xrcdn, "one domain");
        assert_ne!(dev.xrcds[&ha].xrcdn, dev.xrcds[&private].xrcdn);
    }
    assert_eq!(open_xrcd(a, 9999, libc::O_CREAT), Err(libc::EBADF));
    for (fd, h) in [(a, ha), (b, hb), (a, private)] {
        assert_eq!(send(fd, &legacy(38, &h.to_le_bytes(), &[], None)), Ok(()));
    }
    assert_eq!(
        send(a, &legacy(38, &ha.to_le_bytes(), &[], None)),
        Err(libc::EINVAL),
        "closed twice"
    );
    drop(file);
    let _ = std::fs::remove_file(&path);
    close_context(a);
    close_context(b);
}

#[test]
fn alloc_mw_answers_a_window_and_dealloc_mw_takes_only_windows() {
    let fd = context();
    let mut resp = vec![0u8; 4];
    let cmd = legacy(3, &[0; 8], &[], Some(&mut resp));
    send(fd, &cmd).expect("ALLOC_PD");
    let pd = u32::from_le_bytes(resp[..4].try_into().unwrap());
    let alloc = |pd: u32, kind: u8| {
        let mut out = vec![0u8; 8];
        let mut core = vec![0u8; 16];
        core[8..12].copy_from_slice(&pd.to_le_bytes());
        core[12] = kind;
        let cmd = legacy(14, &core, &[], Some(&mut out));
        send(fd, &cmd).map(|()| {
            let r = bytes::In(out);
            (r.u32(0), r.u32(4))
        })
    };
    assert_eq!(alloc(pd, 3), Err(libc::EINVAL), "type 3");
    assert_eq!(alloc(pd + 1000, 1), Err(libc::EINVAL), "unknown PD");
    let (h1, k1) = alloc(pd, 1).expect("type 1");
    let (h2, k2) = alloc(pd, 2).expect("type 2");
    assert_ne!(h1, h2);
    assert_ne!(k1 >> 8, k2 >> 8);
    // A window's key reaches nothing until it is bound.
    assert!(matches!(
        lock().key(k2).map(|m| &m.kind),
        Some(state::MkeyKind::Window {
            type2: true,
            bound: None
        })
    ));
    let handle = |h: u32| h.to_le_bytes().to_vec();
    assert_eq!(
        send(fd, &legacy(13, &handle(h1), &[], None)),
        Err(libc::EINVAL),
        "DEREG_MR of a window"
    );
    assert_eq!(send(fd, &legacy(16, &handle(h1), &[], None)), Ok(()));
    assert_eq!(
        send(fd, &legacy(16, &handle(h1), &[], None)),
        Err(libc::EINVAL),
        "twice"
    );
    assert!(lock().key(k1).is_none());
    assert_eq!(send(fd, &legacy(16, &handle(h2), &[], None)), Ok(()));
    close_context(fd);
}
