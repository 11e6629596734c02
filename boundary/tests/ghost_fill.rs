//! Same-level ghost fill on random uniform periodic meshes: pack every channel from block
//! interiors in one dispatch, unpack into ghosts in one dispatch, and check every ghost cell
//! against the value of the cell it images, computed from global coordinates.

use starhalo_boundary::bnd_info::{
    recv_box, send_box, BndCache, BndInfo, FieldLayout, Space, FLAG_ALLOCATED,
};
use starhalo_boundary::channel::all_channels;
use starhalo_boundary::comm_buffer::{same_rank_pair, BufferState};
use starhalo_exec::Policy;
use starhalo_mesh::field::IndexShape;
use starhalo_mesh::{find_neighbors, Forest, RootGrid};

/// A small deterministic generator (xorshift64*), enough to draw mesh shapes.
struct Rng(u64);

impl Rng {
    fn gen_range(&mut self, r: std::ops::RangeInclusive<usize>) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33;
        r.start() + (x as usize) % (r.end() - r.start() + 1)
    }
}

/// The value of variable `var` at global cell `x` (exact in f64).
fn value(x: [i64; 3], var: usize) -> f64 {
    (((x[0] * 100 + x[1]) * 100 + x[2]) * 10 + var as i64) as f64
}

#[test]
fn random_periodic_meshes_fill_every_ghost_with_its_image() {
    let mut rng = Rng(0x0005_eedb);
    for round in 0..24 {
        let ndim = rng.gen_range(2..=3);
        let ng = rng.gen_range(1..=2);
        let mut nrb = [1i64; 3];
        let mut nx = [1usize; 3];
        for d in 0..ndim {
            nrb[d] = rng.gen_range(1..=3) as i64;
            nx[d] = rng.gen_range(ng..=4);
        }
        let nvar = rng.gen_range(1..=2);
        let policy = if round % 2 == 0 {
            Policy::Serial
        } else {
            Policy::Threaded
        };
        let grid = RootGrid::new(ndim, nrb, [true; 3]).unwrap();
        let forest = Forest::uniform(grid, 0);
        let nblocks = forest.len();
        let nb = find_neighbors(&forest, &vec![0; nblocks]).unwrap();
        let shape = IndexShape::new(nx, ng, ndim).unwrap();
        let layout = FieldLayout::of_shape(&shape, nvar);
        let vars: Vec<usize> = (0..nvar).collect();

        let mut send = Vec::new();
        let mut recv = Vec::new();
        for ch in all_channels(&nb, &vars) {
            let (sb, ss) = send_box(&ch, &shape).unwrap();
            let (rb, rs) = recv_box(&ch, &shape).unwrap();
            assert_eq!((ss, rs), (Space::Block, Space::Block));
            send.push(BndInfo::new(
                ch.key.sender,
                ch.key.var,
                &sb,
                0,
                FLAG_ALLOCATED,
            ));
            recv.push(BndInfo::new(
                ch.key.receiver,
                ch.key.var,
                &rb,
                0,
                FLAG_ALLOCATED,
            ));
        }
        let send = BndCache::new(layout, nblocks, send).unwrap();
        let recv = BndCache::new(layout, nblocks, recv).unwrap();
        assert_eq!(send.buffer_len(), recv.buffer_len());

        // Interiors hold their global value; ghosts hold NaN.
        let global = |gid: usize, d: usize, c: usize| {
            forest.leaves()[gid].lx_dir(d) * nx[d] as i64 + c as i64 - shape.ghosts(d) as i64
        };
        let interior = |d: usize, c: usize| {
            let g = shape.ghosts(d);
            c >= g && c < g + nx[d]
        };
        let mut data = vec![f64::NAN; nblocks * layout.block_len()];
        let points = |f: &mut dyn FnMut(usize, usize, [usize; 3])| {
            for b in 0..nblocks {
                for v in 0..nvar {
                    for k in 0..layout.dims[2] {
                        for j in 0..layout.dims[1] {
                            for i in 0..layout.dims[0] {
                                f(b, v, [i, j, k]);
                            }
                        }
                    }
                }
            }
        };
        points(&mut |b, v, p| {
            if (0..3).all(|d| interior(d, p[d])) {
                let x = [0, 1, 2].map(|d| global(b, d, p[d]));
                data[b * layout.block_len() + layout.index_in_block(v, p)] = value(x, v);
            }
        });

        let mut buf = vec![0.0; send.buffer_len()];
        send.pack(policy, &data, &mut buf).unwrap();
        // Each channel's values travel through its own same-rank CommBuffer pair.
        let mut arrived = vec![f64::NAN; buf.len()];
        for (si, ri) in send.infos().iter().zip(recv.infos()) {
            let n = si.len();
            assert_eq!(ri.buf_offset, si.buf_offset);
            let (mut tx, mut rx) = same_rank_pair(n);
            tx.allocate().unwrap();
            tx.data_mut()
                .copy_from_slice(&buf[si.buf_offset..si.buf_offset + n]);
            tx.send().unwrap();
            assert!(rx.try_receive().unwrap());
            assert_eq!(rx.state(), BufferState::Received);
            arrived[ri.buf_offset..ri.buf_offset + n].copy_from_slice(rx.data());
        }
        recv.unpack(policy, &arrived, &mut data, &[]).unwrap();

        let mut checked = 0;
        points(&mut |b, v, p| {
            let period = [0, 1, 2].map(|d| nrb[d] * nx[d] as i64);
            let x = [0, 1, 2].map(|d| global(b, d, p[d]).rem_euclid(period[d]));
            let got = data[b * layout.block_len() + layout.index_in_block(v, p)];
            assert_eq!(
                got,
                value(x, v),
                "round {round} block {b} var {v} point {p:?}"
            );
            checked += usize::from(!(0..3).all(|d| interior(d, p[d])));
        });
        // Every ghost cell was checked (and hence filled: NaN never equals a value).
        let all: usize = layout.dims.iter().product();
        assert_eq!(
            checked,
            nblocks * nvar * (all - nx.iter().product::<usize>())
        );
    }
}
