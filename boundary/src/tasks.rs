//! Whole boundary operations as tasks of a partition's task list.
//!
//! A driver keeps its exchange objects and block data in `RefCell`s, so that the tasks of
//! every partition's list can reach them: a region runs one task at a time, and each task
//! borrows only for its own call. Receives are polled tasks; when one waits past the
//! region's timeout, the error names the channels whose messages never came.

use std::cell::RefCell;

use starhalo_exec::tasks::{TaskId, TaskList};

use crate::exchange::{BoundaryType, Exchange};
use crate::flux_correction::{FluxCorrection, FluxSpace};
use crate::storage::BlockData;

/// Adds the ghost fill of partition `part` to `list`, after `deps`: for each of `types`
/// (`[Any]`, or `[Local, Nonlocal]`, which then run side by side) start-receive, send,
/// receive and set-bounds; then the finish (allocation of sparse variables that received
/// data, prolongation from coarser neighbours, physical boundaries). Returns the finishing
/// task, on which the partition's next work depends.
pub fn add_exchange<'a>(
    list: &mut TaskList<'a>,
    deps: &[TaskId],
    exchange: &'a RefCell<Exchange>,
    data: &'a RefCell<BlockData>,
    part: usize,
    types: &[BoundaryType],
) -> TaskId {
    let mut unpacked = Vec::with_capacity(types.len());
    for &ty in types {
        let name = ty.name();
        let start = list.add(format!("start_receive_{name}"), deps, move || {
            Ok(exchange.borrow_mut().start_receive(part, ty)?)
        });
        let send = list.add(format!("send_{name}"), &[start], move || {
            Ok(exchange
                .borrow_mut()
                .send(part, ty, &mut data.borrow_mut())?)
        });
        let recv = list.add_polled(
            format!("receive_{name}"),
            &[start],
            move || Ok(exchange.borrow_mut().receive(part, ty)?),
            move || exchange.borrow().pending(part, ty),
        );
        unpacked.push(
            list.add(format!("set_bounds_{name}"), &[recv, send], move || {
                Ok(exchange
                    .borrow_mut()
                    .set_bounds(part, ty, &mut data.borrow_mut())?)
            }),
        );
    }
    list.add("finish_bounds", &unpacked, move || {
        Ok(exchange.borrow_mut().finish(part, &mut data.borrow_mut())?)
    })
}

/// Adds the whole flux correction to `list`, after `deps` (the tasks that computed every
/// block's fluxes): start-receive (`flxcor_recv`), send the restricted fine fluxes
/// (`flxcor_send`), receive and replace the coarse fluxes. Returns the last task. The
/// correction spans every block of the rank, so it goes in one list.
pub fn add_flux_correction<'a, F: FluxSpace>(
    list: &mut TaskList<'a>,
    deps: &[TaskId],
    correction: &'a RefCell<FluxCorrection>,
    fluxes: &'a RefCell<F>,
    data: &'a RefCell<BlockData>,
) -> TaskId {
    let start = list.add("start_receive_flxcor", deps, move || {
        Ok(correction
            .borrow_mut()
            .start_receive(BoundaryType::FlxcorRecv)?)
    });
    let send = list.add("send_flxcor", &[start], move || {
        Ok(correction.borrow_mut().send(
            BoundaryType::FlxcorSend,
            &mut *fluxes.borrow_mut(),
            &data.borrow(),
        )?)
    });
    let recv = list.add_polled(
        "receive_flxcor",
        &[start],
        move || Ok(correction.borrow_mut().receive(BoundaryType::FlxcorRecv)?),
        move || correction.borrow().pending(),
    );
    list.add("set_flxcor", &[recv, send], move || {
        Ok(correction.borrow_mut().set_bounds(
            BoundaryType::FlxcorRecv,
            &mut *fluxes.borrow_mut(),
            &data.borrow(),
        )?)
    })
}
