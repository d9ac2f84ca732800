//! The memory-window builder of a batch: `ibv_wr_bind_mw`.

use super::{Addressed, SendFlags, Wr};
use crate::error::{Error, Result};
use crate::mr::RemoteBuf;
use crate::mw::{MemoryWindow, MwBind, MwType};
use crate::qp::{ReliableConnection, SendOps};

impl<'m> Wr<'_, 'm, ReliableConnection> {
    /// Binds the type 2 window `mw` as `bind` says (`ibv_wr_bind_mw`),
    /// giving it a new rkey: the window's with its low 8 bits replaced by
    /// [`MwBind::key`], or one more (`ibv_inc_rkey`). RC only; needs
    /// [`SendOps::BIND_MW`]. Signalled, it completes with
    /// [`WcOpcode::BIND_MW`](crate::WcOpcode::BIND_MW).
    ///
    /// Returns what the peer reaches through the window once the bind has
    /// completed: the bound range (from 0 when zero-based) under the new
    /// rkey, which [`MemoryWindow::rkey`] also reads from then on. The
    /// window and the region stay borrowed for as long as the batch's
    /// memory is (until the completions, for [`post_and_wait`](crate::QpEx::post_and_wait)).
    ///
    /// Refused before C is called: a type 1 window ([`Error::InvalidArgument`]:
    /// bind those with [`QpEx::bind_mw`](crate::QpEx::bind_mw)), a window,
    /// region and QP not in one PD, a QP created without `BIND_MW`
    /// ([`Error::Unsupported`]); the range and access were checked by
    /// [`MwBind::new`].
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # use std::time::Duration;
    /// # fn f(qp: &mut RcQp, cq: &mut CompletionQueue, mr: &MemoryRegion) -> Result<()> {
    /// let mut mw = MemoryWindow::new(mr.pd(), MwType::Type2)?;
    /// let bind = MwBind::new(mr, 0..4096, AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE)?;
    /// let mut remote = None;
    /// qp.post_and_wait(cq, Duration::from_secs(5), |b| {
    ///     remote = Some(b.wr(1).signaled().bind_mw(&mut mw, &bind)?);
    ///     Ok(())
    /// })?;
    /// // `remote` goes to the peer; `mw.rkey()` is its rkey.
    /// # Ok(()) }
    /// ```
    ///
    /// The region stays borrowed until the batch's memory is released:
    ///
    /// ```compile_fail,E0505
    /// # use mlx5dv::*;
    /// # fn f(qp: &mut RcQp, mw: &mut MemoryWindow, mr: MemoryRegion) -> Result<()> {
    /// let bind = MwBind::new(&mr, 0..64, AccessFlags::REMOTE_READ)?;
    /// let mut b = qp.batch();
    /// b.wr(1).bind_mw(mw, &bind)?;
    /// drop(mr); // ERROR: the bind still borrows `mr`
    /// // SAFETY: (not reached)
    /// unsafe { b.complete()? };
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn bind_mw(self, mw: &'m mut MemoryWindow, bind: &MwBind<'m>) -> Result<RemoteBuf> {
        if !self.state.send_ops.contains(SendOps::BIND_MW) {
            return Err(Error::Unsupported {
                what: "memory window bind: the QP was not created with BIND_MW in its send ops"
                    .into(),
            });
        }
        // SAFETY: the batch's QP is live; its PD is read, not changed.
        let qp_pd = unsafe { (*self.state.qpx.as_ptr()).qp_base.pd };
        mw.check_bind(MwType::Type2, bind, qp_pd)?;
        let rkey = bind.new_rkey(mw.rkey());
        let info = bind.info();
        let raw = mw.as_ptr();
        self.commit_as(
            SendFlags::empty(),
            Addressed::No,
            #[inline(always)]
            |q, ops| {
                // SAFETY: the live extended QP; wr_bind_mw was resolved
                // non-NULL at creation since BIND_MW is in its send ops; the
                // window is live and `info` valid for the call (the provider
                // copies it into the WQE); the region is borrowed for 'm.
                unsafe { (ops.bind_mw)(q, raw, rkey, &info) }
            },
        )?;
        // In the batch: the window may reach the region's memory from when
        // it is posted until it is deallocated.
        mw.hold(bind.mr);
        // The window's rkey from now on (libmlx5 names the window by it at
        // the next bind; soft-RoCE checks it).
        mw.set_rkey(rkey);
        Ok(bind.remote(rkey))
    }
}
