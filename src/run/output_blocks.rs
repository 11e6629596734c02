//! The output blocks of a deck, read for a problem: the part of the outputs that knows decks
//! (the [`crate::output`] module itself does not, so that its tests build it alone).

use crate::deck::Deck;
use crate::exit::bad_input;
use crate::output::{FileType, OutputBlock, OutputError};
use starhalo_mesh::field::Fields;
use starhalo_mesh::Mesh;

/// Every `parthenon/outputN` block of `deck`, sorted by block name; two blocks of one file
/// type with one `id` (which would write the same files) are bad input. A key of another file
/// type (left by an override of `file_type`, say) draws a warning and is ignored.
pub fn blocks_of(deck: &Deck) -> anyhow::Result<Vec<OutputBlock>> {
    let map = deck.flat_map();
    let mut outputs = Vec::new();
    for b in deck.blocks() {
        let Some(n) = b.name.strip_prefix("parthenon/output") else {
            continue;
        };
        let n: usize = n.parse().map_err(|_| {
            bad_input!(
                "block {} at {}: output blocks are named parthenon/outputN",
                b.name,
                b.origin
            )
        })?;
        deck.mark_read(&b.name, &OutputBlock::keys().collect::<Vec<_>>());
        let o = OutputBlock::from_map(&map, &b.name, n).map_err(|e| deck_error(deck, e))?;
        let others = OutputBlock::keys().filter(|k| !o.file_type.applies(k));
        deck.ignore(
            &b.name,
            others,
            &format!("file_type {}", o.file_type.name()),
        );
        outputs.push(o);
    }
    outputs.sort_by(|a, b| a.block.cmp(&b.block));
    for (i, o) in outputs.iter().enumerate() {
        if let Some(first) = outputs[..i]
            .iter()
            .find(|p| p.file_type == o.file_type && p.id == o.id)
        {
            return Err(deck
                .invalid(
                    &o.block,
                    "id",
                    format!(
                        "`{}` is also the id of {} (file_type {}): both would write the same files",
                        o.id,
                        first.block,
                        o.file_type.name()
                    ),
                )
                .into());
        }
    }
    Ok(outputs)
}

/// Checks `block` against the mesh and the fields before the first step (see
/// [`crate::output::check_block`]); a PNG's `x3` or `slice` on a mesh of fewer than three
/// dimensions, which has one slice, draws a warning naming where it was given.
pub fn check(deck: &Deck, block: &OutputBlock, mesh: &Mesh, fields: &Fields) -> anyhow::Result<()> {
    if block.file_type == FileType::Png && mesh.ndim() < 3 {
        let what = format!("a {}-D mesh (it has one slice)", mesh.ndim());
        deck.ignore(&block.block, ["x3", "slice"], &what);
    }
    crate::output::check_block(block, mesh, fields).map_err(|e| deck_error(deck, e))
}

/// An output block's error as bad input naming the deck's key, file and line.
pub fn deck_error(deck: &Deck, e: OutputError) -> anyhow::Error {
    match e {
        OutputError::Invalid { key, value, reason } => deck.key_error(&key, &value, &reason).into(),
        e => bad_input!("{e}"),
    }
}
