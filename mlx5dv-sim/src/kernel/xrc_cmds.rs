//! XRC domains and XRC SRQs: OPEN_XRCD, CLOSE_XRCD and CREATE_XSRQ.
//!
//! As the kernel's uverbs (`ib_uverbs_open_xrcd`): a domain opened with a
//! file descriptor is found again by the file's inode, so every context
//! of the process that opens the same file shares one domain (`O_CREAT`
//! creates it when there is none; `O_EXCL` refuses an existing one; without
//! `O_CREAT` a missing one is ENOENT). Fd -1 opens a private domain. A
//! handle is closed with CLOSE_XRCD, refused (EBUSY) while an SRQ or QP
//! of its context still lives in the domain. Domains are per process: two
//! processes on one fabric each have their own.

use super::cmd::{xrcdn_of, Cmd};
use super::errno::{refuse, Res};
use super::queue_cmds::{new_srq, SrqRequest};
use crate::config::debug;
use crate::model::lock;
use crate::model::state::{XrcSrq, Xrcd};
use crate::sys::real;

/// `IBV_SRQT_XRC`.
const SRQT_XRC: u32 = 1;

/// Runs OPEN_XRCD (37), CLOSE_XRCD (38) and CREATE_XSRQ (39).
pub fn dispatch(cmd: &mut Cmd, code: u32) -> Res<()> {
    match code {
        37 => open_xrcd(cmd),
        38 => close_xrcd(cmd),
        _ => create_xsrq(cmd),
    }
}

/// The (device, inode) of the caller's file `fd`.
fn inode(fd: i32) -> Res<(u64, u64)> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable `struct stat`; a bad fd makes fstat fail.
    if unsafe { (real::fstat())(fd, &mut st) } != 0 {
        return Err(refuse(libc::EBADF, format_args!("OPEN_XRCD: fd {fd}")));
    }
    Ok((st.st_dev, st.st_ino))
}

fn open_xrcd(cmd: &mut Cmd) -> Res<()> {
    // ib_uverbs_open_xrcd: response @0, fd @8, oflags @12.
    let (fd, oflags) = (cmd.core.u32(8) as i32, cmd.core.u32(12) as i32);
    let ino = if fd == -1 { None } else { Some(inode(fd)?) };
    let mut dev = lock();
    let existing = ino.and_then(|i| {
        dev.xrcds
            .values()
            .find(|x| x.inode == Some(i))
            .map(|x| x.xrcdn)
    });
    let xrcdn = match existing {
        Some(_) if oflags & libc::O_EXCL != 0 => {
            return Err(refuse(
                libc::EINVAL,
                format_args!("OPEN_XRCD: O_EXCL and the file's domain exists"),
            ))
        }
        Some(n) => n,
        None if ino.is_some() && oflags & libc::O_CREAT == 0 => {
            return Err(refuse(
                libc::ENOENT,
                format_args!("OPEN_XRCD: no domain for the file and no O_CREAT"),
            ))
        }
        None => dev.xrcdn(),
    };
    let h = dev.handle();
    dev.xrcds.insert(
        h,
        Xrcd {
            ctx: cmd.fd,
            xrcdn,
            inode: ino,
        },
    );
    debug!("OPEN_XRCD xrcdn {xrcdn} (file {ino:?})");
    cmd.out.u32(0, h);
    Ok(())
}

fn close_xrcd(cmd: &mut Cmd) -> Res<()> {
    let h = cmd.core.u32(0);
    let mut dev = lock();
    let n = xrcdn_of(&dev, cmd.fd, h, "CLOSE_XRCD")?;
    let fd = cmd.fd;
    let in_use = dev.qps.values().any(|q| q.ctx == fd && q.xrcdn == Some(n))
        || dev
            .srqs
            .values()
            .any(|s| s.ctx == fd && s.xrc.is_some_and(|x| x.xrcdn == n));
    if in_use {
        return Err(refuse(
            libc::EBUSY,
            format_args!("CLOSE_XRCD: domain {n} still has SRQs or QPs"),
        ));
    }
    dev.xrcds.remove(&h);
    Ok(())
}

fn create_xsrq(cmd: &mut Cmd) -> Res<()> {
    // ib_uverbs_create_xsrq: response @0, user_handle @8, srq_type @16,
    // pd_handle @20, max_wr @24, max_sge @28, srq_limit @32,
    // max_num_tags @36, xrcd_handle @40, cq_handle @44.
    let c = cmd.core.clone();
    let ty = c.u32(16);
    if ty == 0 {
        // A basic SRQ through the extended command.
    } else if ty != SRQT_XRC {
        return Err(refuse(
            libc::EOPNOTSUPP,
            format_args!("CREATE_XSRQ: SRQ type {ty} (tag matching) is not modelled"),
        ));
    }
    let req = SrqRequest {
        user_handle: c.u64(8),
        pd: c.u32(20),
        max_wr: c.u32(24),
        max_sge: c.u32(28),
        limit: c.u32(32),
    };
    let (xrcd, cq) = (c.u32(40), c.u32(44));
    let fd = cmd.fd;
    new_srq(cmd, &req, |dev| {
        if ty != SRQT_XRC {
            return Ok(None);
        }
        let xrcdn = xrcdn_of(dev, fd, xrcd, "CREATE_XSRQ")?;
        match dev.cqs.get(&cq) {
            Some(q) if q.ctx == fd => Ok(Some(XrcSrq { xrcdn, cq })),
            _ => Err(refuse(
                libc::EINVAL,
                format_args!("CREATE_XSRQ: unknown CQ handle {cq}"),
            )),
        }
    })
}
