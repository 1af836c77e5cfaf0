//! Best-row search over int8 vector codes grouped by chunk.
//!
//! A long-lived process keeps every span vector of a collection in memory as
//! int8 codes (a scale per row): a quarter of float32, and scored here with
//! integer dot products over all cores, where numpy has no fast int8 product.
//! Rows are grouped by chunk (`offsets[g]..offsets[g + 1]`); a chunk scores
//! its best row, as Milvus's search grouped by chunk does.

use rayon::prelude::*;

/// Codes, scales and group offsets as the caller's bytes (little-endian),
/// checked once and read in place: a search copies none of them.
pub struct Rows<'a> {
    codes: &'a [u8],
    dim: usize,
    scales: &'a [u8],
    offsets: &'a [u8],
    /// Every group one row, the row of its own position (a copy's own vectors).
    one_each: bool,
}

/// The `i`th little-endian 4 bytes of `bytes`.
#[inline(always)]
fn le4(bytes: &[u8], i: usize) -> [u8; 4] {
    bytes[4 * i..4 * i + 4].try_into().unwrap()
}

impl<'a> Rows<'a> {
    /// `codes`: rows × dim int8; `scales`: a float32 per row; `offsets`: groups + 1 u32.
    pub fn new(
        codes: &'a [u8],
        dim: usize,
        scales: &'a [u8],
        offsets: &'a [u8],
    ) -> Result<Self, String> {
        if dim == 0 || !codes.len().is_multiple_of(dim) {
            return Err(format!(
                "codes of {} bytes are not rows of {dim}",
                codes.len()
            ));
        }
        let rows = codes.len() / dim;
        if scales.len() != 4 * rows {
            return Err(format!("{} bytes of scales for {rows} rows", scales.len()));
        }
        // One pass over the offsets, nothing copied: each at least the one before.
        let mut last: Option<u32> = None;
        let mut one_each = true;
        for (i, o) in offsets
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .enumerate()
        {
            if last.map_or(o != 0, |p| p > o) {
                return Err("offsets must rise from 0 to the number of rows".into());
            }
            one_each &= o as usize == i;
            last = Some(o);
        }
        if !offsets.len().is_multiple_of(4) || last.map(|o| o as usize) != Some(rows) {
            return Err("offsets must rise from 0 to the number of rows".into());
        }
        Ok(Rows {
            codes,
            dim,
            scales,
            offsets,
            one_each,
        })
    }

    #[inline(always)]
    fn scale(&self, r: usize) -> f32 {
        f32::from_le_bytes(le4(self.scales, r))
    }

    #[inline(always)]
    fn offset(&self, g: usize) -> usize {
        u32::from_le_bytes(le4(self.offsets, g)) as usize
    }

    pub fn groups(&self) -> usize {
        self.offsets.len() / 4 - 1
    }

    /// (best row, its score) of group `g`; None for a group without rows.
    fn best(&self, g: usize, query: &Query) -> Option<(u32, f32)> {
        let (a, b) = (self.offset(g), self.offset(g + 1));
        if a == b {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU was just seen to have AVX2.
                return Some(unsafe { self.best_avx2(a, b, query) });
            }
        }
        Some(self.best_rows(a, b, query, |code| dot(code, &query.codes)))
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn best_avx2(&self, a: usize, b: usize, query: &Query) -> (u32, f32) {
        // SAFETY: this function runs only where AVX2 was seen (the caller's check).
        self.best_rows(a, b, query, |code| unsafe { dot_avx2(code, &query.wide) })
    }

    /// The best of rows `a..b` (not empty) by `dot`; ties: the first.
    #[inline(always)]
    fn best_rows(
        &self,
        a: usize,
        b: usize,
        query: &Query,
        dot: impl Fn(&[u8]) -> i32,
    ) -> (u32, f32) {
        let mut best = (a as u32, f32::NEG_INFINITY);
        for r in a..b {
            let code = &self.codes[r * self.dim..(r + 1) * self.dim];
            let score = dot(code) as f32 * self.scale(r) * query.scale;
            if score > best.1 {
                best = (r as u32, score);
            }
        }
        best
    }
}

/// The integer dot product of two int8 vectors: sixteen lanes of i16 products
/// summed into i32 (the portable form; [`dot_avx2`] where the CPU has AVX2).
#[inline(always)]
fn dot(code: &[u8], query: &[i8]) -> i32 {
    let mut acc = [0i32; 16];
    let mut c = code.chunks_exact(16);
    let mut q = query.chunks_exact(16);
    for (cc, qq) in (&mut c).zip(&mut q) {
        for i in 0..16 {
            acc[i] += i32::from(i16::from(cc[i] as i8) * i16::from(qq[i]));
        }
    }
    let tail: i32 = c
        .remainder()
        .iter()
        .zip(q.remainder())
        .map(|(&x, &y)| i32::from(x as i8) * i32::from(y))
        .sum();
    acc.iter().sum::<i32>() + tail
}

/// [`dot`] with AVX2 spelled out: sixteen codes widened to i16
/// (`vpmovsxbw`) and multiplied into pairs summed to i32 (`vpmaddwd`)
/// against the query already widened: about a sixth faster than what the
/// compiler makes of the loop above (docs/retrieval.md).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2(code: &[u8], query: &[i16]) -> i32 {
    use std::arch::x86_64::*;
    let len = code.len().min(query.len());
    let whole = len - len % 16;
    let mut acc = _mm256_setzero_si256();
    let mut i = 0;
    while i < whole {
        // SAFETY: `i + 16 <= len`, within both slices; unaligned loads.
        let c = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(code.as_ptr().add(i).cast()) });
        let q = unsafe { _mm256_loadu_si256(query.as_ptr().add(i).cast()) };
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(c, q));
        i += 16;
    }
    let s = _mm_add_epi32(
        _mm256_castsi256_si128(acc),
        _mm256_extracti128_si256::<1>(acc),
    );
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    let tail: i32 = code[whole..len]
        .iter()
        .zip(&query[whole..len])
        .map(|(&x, &y)| i32::from(x as i8) * i32::from(y))
        .sum();
    _mm_cvtsi128_si32(s) + tail
}

/// A query vector as int8 codes with its scale, and its sign bits.
pub struct Query {
    codes: Vec<i8>,
    /// Bit `i` set where component `i` is above zero, packed as [`Signs`] packs
    /// rows. Taken from the float vector: a small component whose code rounds
    /// to 0 still has a sign, and a shortlist by signs must see it.
    positive: Vec<u8>,
    /// The codes as i16, as [`dot_avx2`] reads them.
    wide: Vec<i16>,
    scale: f32,
}

impl Query {
    pub fn new(vector: &[f32]) -> Self {
        let top = vector.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = if top > 0.0 { top / 127.0 } else { 1.0 };
        let codes: Vec<i8> = vector
            .iter()
            .map(|v| (v / scale).round().clamp(-127.0, 127.0) as i8)
            .collect();
        let wide = codes.iter().map(|&c| i16::from(c)).collect();
        let mut positive = vec![0u8; vector.len().div_ceil(8)];
        for (i, _) in vector.iter().enumerate().filter(|(_, &v)| v > 0.0) {
            positive[i / 8] |= 1 << (i % 8);
        }
        Query {
            codes,
            positive,
            wide,
            scale,
        }
    }
}

/// The `k` groups whose best row scores highest: (group, row, score), best first
/// (ties: the lower group first).
pub fn top_groups(rows: &Rows, query: &Query, k: usize) -> Vec<(u32, u32, f32)> {
    let mut best: Vec<(u32, u32, f32)> = (0..rows.groups())
        .into_par_iter()
        .filter_map(|g| rows.best(g, query).map(|(r, s)| (g as u32, r, s)))
        .collect();
    let order = |x: &(u32, u32, f32), y: &(u32, u32, f32)| y.2.total_cmp(&x.2).then(x.0.cmp(&y.0));
    if k < best.len() {
        if k == 0 {
            return Vec::new();
        }
        best.select_nth_unstable_by(k - 1, order);
        best.truncate(k);
    }
    best.sort_unstable_by(order);
    best
}

/// Sign bits of rows, `(dim + 7) / 8` bytes a row (bit `j` of byte `b` is
/// component `8b + j`, as numpy's `packbits(..., bitorder="little")` packs them):
/// an eighth of the int8 codes, so a first pass over every row reads little.
pub struct Signs<'a> {
    bits: &'a [u8],
    width: usize,
}

impl<'a> Signs<'a> {
    pub fn new(bits: &'a [u8], rows: &Rows) -> Result<Self, String> {
        let width = rows.dim.div_ceil(8);
        if width > MAX_SIGN_BYTES {
            return Err(format!(
                "{} dimensions are too many for sign bits",
                rows.dim
            ));
        }
        if bits.len() != width * (rows.codes.len() / rows.dim) {
            return Err(format!(
                "{} bytes of sign bits for {} rows of {} dimensions",
                bits.len(),
                rows.codes.len() / rows.dim,
                rows.dim
            ));
        }
        Ok(Signs { bits, width })
    }

    /// Each row's count of bits that differ from `query`, in row order: one
    /// forward pass over the bits, in blocks over all cores.
    fn row_distances(&self, query: &[u8]) -> Vec<u16> {
        const BLOCK: usize = 8192;
        let mut out = vec![0u16; self.bits.len() / self.width];
        out.par_chunks_mut(BLOCK)
            .zip(self.bits.par_chunks(BLOCK * self.width))
            .for_each(|(out, bits)| {
                #[cfg(target_arch = "x86_64")]
                {
                    if std::is_x86_feature_detected!("popcnt") {
                        // SAFETY: the CPU was just seen to have POPCNT.
                        return unsafe { self.distances_popcnt(bits, query, out) };
                    }
                }
                self.distances(bits, query, out)
            });
        out
    }

    #[inline(always)]
    fn distances(&self, bits: &[u8], query: &[u8], out: &mut [u16]) {
        for (row, d) in bits.chunks_exact(self.width).zip(out) {
            let mut n = 0u32;
            let mut x = row.chunks_exact(8);
            let mut y = query.chunks_exact(8);
            for (xx, yy) in (&mut x).zip(&mut y) {
                n += (u64::from_le_bytes(xx.try_into().unwrap())
                    ^ u64::from_le_bytes(yy.try_into().unwrap()))
                .count_ones();
            }
            for (xx, yy) in x.remainder().iter().zip(y.remainder()) {
                n += (xx ^ yy).count_ones();
            }
            *d = n as u16;
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    unsafe fn distances_popcnt(&self, bits: &[u8], query: &[u8], out: &mut [u16]) {
        self.distances(bits, query, out)
    }

    /// Each group's fewest differing bits over its rows; [`EMPTY`] for a group without rows.
    fn group_distances(&self, rows: &Rows, query: &[u8]) -> Vec<u16> {
        let by_row = self.row_distances(query);
        if rows.one_each {
            return by_row;
        }
        (0..rows.groups())
            .into_par_iter()
            .map(|g| {
                let (a, b) = (rows.offset(g), rows.offset(g + 1));
                by_row[a..b].iter().copied().min().unwrap_or(EMPTY)
            })
            .collect()
    }
}

/// The distance of a group without rows: above any row's (a row has at most
/// [`MAX_SIGN_BYTES`] × 8 bits).
const EMPTY: u16 = u16::MAX;
/// The widest sign bits a row may have, so that distances fit below [`EMPTY`].
const MAX_SIGN_BYTES: usize = 8190;

/// The `shortlist` groups of least distance, ties to the lower group (those of
/// [`EMPTY`] never), in group order: a count of each distance finds the last one
/// taken, then one pass picks them, where sorting 1.2 M pairs took most of a search.
fn nearest_groups(distances: &[u16], shortlist: usize, bits: usize) -> Vec<u32> {
    let mut count = vec![0usize; bits + 1];
    for &d in distances.iter().filter(|&&d| d != EMPTY) {
        count[usize::from(d)] += 1;
    }
    // Past every distance: a shortlist longer than the groups with rows takes them all.
    let (mut below, mut last) = (0usize, bits + 1);
    for (d, &n) in count.iter().enumerate() {
        if below + n >= shortlist {
            last = d;
            break;
        }
        below += n;
    }
    let mut at_last = shortlist.saturating_sub(below);
    let last = last as u16;
    let mut picked = Vec::with_capacity(shortlist.min(distances.len()));
    for (g, &d) in distances.iter().enumerate() {
        if d < last || (d == last && d != EMPTY && at_last > 0) {
            if d == last {
                at_last -= 1;
            }
            picked.push(g as u32);
        }
    }
    picked
}

/// [`top_groups`] over a shortlist: the `shortlist` groups whose rows' sign bits
/// are nearest the query's (Hamming distance, ties: the lower group), then
/// scored exactly with the int8 codes. The first pass reads an eighth of the
/// bytes; a group whose best row is not among the shortlist's is missed, so the
/// shortlist is sized for the recall measured (docs/retrieval.md).
pub fn top_groups_shortlisted(
    rows: &Rows,
    signs: &Signs,
    query: &Query,
    k: usize,
    shortlist: usize,
) -> Vec<(u32, u32, f32)> {
    if shortlist >= rows.groups() {
        return top_groups(rows, query, k);
    }
    let mut bits = query.positive.clone();
    bits.resize(signs.width, 0);
    if shortlist == 0 {
        return Vec::new();
    }
    // In group order: the rows are read forward, as the hardware prefetches them.
    let picked = nearest_groups(
        &signs.group_distances(rows, &bits),
        shortlist,
        8 * signs.width,
    );
    let mut best: Vec<(u32, u32, f32)> = picked
        .par_iter()
        .filter_map(|&g| rows.best(g as usize, query).map(|(r, s)| (g, r, s)))
        .collect();
    let order = |x: &(u32, u32, f32), y: &(u32, u32, f32)| y.2.total_cmp(&x.2).then(x.0.cmp(&y.0));
    best.sort_unstable_by(order);
    best.truncate(k);
    best
}

/// The best row of each of `groups` (those with rows), in the order given.
pub fn best_in(rows: &Rows, query: &Query, groups: &[u32]) -> Vec<(u32, u32, f32)> {
    groups
        .iter()
        .filter(|&&g| (g as usize) < rows.groups())
        .filter_map(|&g| rows.best(g as usize, query).map(|(r, s)| (g, r, s)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_f32(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn bytes_u32(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn groups_rank_by_their_best_row() {
        // dim 2; group 0: rows 0-1, group 1: row 2, group 2: no rows, group 3: row 3.
        let codes: Vec<u8> = [127i8, 0, 0, 127, 90, 90, -127, 0]
            .iter()
            .map(|&c| c as u8)
            .collect();
        let scales = bytes_f32(&[1.0 / 127.0; 4]);
        let offsets = bytes_u32(&[0, 2, 3, 3, 4]);
        let rows = Rows::new(&codes, 2, &scales, &offsets).unwrap();
        let q = Query::new(&[0.0, 1.0]);
        let top = top_groups(&rows, &q, 10);
        assert_eq!(
            top.iter().map(|t| (t.0, t.1)).collect::<Vec<_>>(),
            vec![(0, 1), (1, 2), (3, 3)]
        );
        assert!((top[0].2 - 1.0).abs() < 0.02 && (top[1].2 - 90.0 / 127.0).abs() < 0.02);
        assert_eq!(top_groups(&rows, &q, 1).len(), 1);
        assert_eq!(
            best_in(&rows, &q, &[3, 2, 9])
                .iter()
                .map(|t| t.0)
                .collect::<Vec<_>>(),
            vec![3]
        );
    }

    /// Sign bits as numpy's `packbits(codes > 0, axis=1, bitorder="little")` packs them.
    fn sign_bits(codes: &[i8], dim: usize) -> Vec<u8> {
        codes
            .chunks_exact(dim)
            .flat_map(|row| {
                let mut out = vec![0u8; dim.div_ceil(8)];
                for (i, &c) in row.iter().enumerate() {
                    if c > 0 {
                        out[i / 8] |= 1 << (i % 8);
                    }
                }
                out
            })
            .collect()
    }

    #[test]
    fn a_shortlist_by_sign_bits_keeps_the_groups_nearest_in_sign() {
        // dim 10 (two bytes of bits, the second partial); four groups of one or two rows.
        let dim = 10;
        let q: Vec<f32> = (0..dim)
            .map(|i| if i % 3 == 0 { -0.3 } else { 0.3 })
            .collect();
        let same: Vec<i8> = q.iter().map(|&v| (v * 300.0) as i8).collect();
        let mut flipped = same.clone();
        for c in flipped.iter_mut().take(6) {
            *c = -*c; // six signs differ: far by sign bits, and by cosine
        }
        let mut near = same.clone();
        near[9] = -near[9]; // one sign differs
        let rows_i8: Vec<i8> =
            [flipped.clone(), same.clone(), near.clone(), flipped, near].concat();
        let codes: Vec<u8> = rows_i8.iter().map(|&c| c as u8).collect();
        let scales = bytes_f32(&[1.0 / 127.0; 5]);
        let offsets = bytes_u32(&[0, 1, 3, 4, 5]); // g0: flipped; g1: same, near; g2: flipped; g3: near
        let rows = Rows::new(&codes, dim, &scales, &offsets).unwrap();
        let bits = sign_bits(&rows_i8, dim);
        let signs = Signs::new(&bits, &rows).unwrap();
        let query = Query::new(&q);
        let exact = top_groups(&rows, &query, 4);
        // A shortlist as long as the groups is the exact ranking.
        assert_eq!(top_groups_shortlisted(&rows, &signs, &query, 4, 4), exact);
        // Two: the groups holding the rows nearest in sign (g1, g3), in exact order and score.
        let two = top_groups_shortlisted(&rows, &signs, &query, 4, 2);
        assert_eq!(two, exact[..2].to_vec());
        assert_eq!(two.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(two[0].1, 1); // g1's best row is its exact copy of the query
        assert!(top_groups_shortlisted(&rows, &signs, &query, 1, 2).len() == 1);
        // A component too small for its int8 code still counts by its sign:
        // 0.001 rounds to code 0, yet a row positive there agrees with it.
        let mut tiny = q.clone();
        tiny[9] = 0.001;
        let tiny = Query::new(&tiny);
        assert_eq!(tiny.codes[9], 0);
        assert_eq!(tiny.positive[1] & 0b10, 0b10);
        // Bits that are not a row's worth each are refused.
        assert!(Signs::new(&bits[1..], &rows).is_err());
    }

    #[test]
    fn the_shortlist_is_the_least_distances_ties_to_the_lower_group() {
        // Distances of a few values (many ties) and groups without rows, against
        // sorting every (distance, group) pair, for shortlists of every length.
        let mut state = 0x9e37_79b9_u32;
        let distances: Vec<u16> = (0..300)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                if state.is_multiple_of(11) {
                    EMPTY
                } else {
                    (state % 9) as u16 // up to 8, every bit of a byte: the farthest a row can be
                }
            })
            .collect();
        let mut pairs: Vec<(u16, u32)> = distances
            .iter()
            .enumerate()
            .filter(|(_, &d)| d != EMPTY)
            .map(|(g, &d)| (d, g as u32))
            .collect();
        pairs.sort_unstable();
        for shortlist in 1..=distances.len() + 2 {
            let mut want: Vec<u32> = pairs.iter().take(shortlist).map(|&(_, g)| g).collect();
            want.sort_unstable();
            assert_eq!(
                nearest_groups(&distances, shortlist, 8),
                want,
                "shortlist {shortlist}"
            );
        }
    }

    #[test]
    fn one_row_a_group_is_searched_as_groups_are() {
        // The same rows as groups of one, and with an empty group between two of
        // them: the shortlist names the same rows either way.
        let (dim, n) = (24, 200);
        let mut state = 0x2545_f491_u32;
        let mut codes_i8 = Vec::with_capacity(dim * n);
        for _ in 0..dim * n {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            codes_i8.push(((state % 255) as i32 - 127) as i8);
        }
        let codes: Vec<u8> = codes_i8.iter().map(|&c| c as u8).collect();
        let scales = bytes_f32(&vec![1.0 / 127.0; n]);
        let each: Vec<u32> = (0..=n as u32).collect();
        let mut gap: Vec<u32> = (0..=n as u32).collect();
        gap.insert(100, 100); // group 100 empty, rows 100.. one group later
        let bits = sign_bits(&codes_i8, dim);
        let q: Vec<f32> = (0..dim).map(|i| (i as f32 * 0.7).sin()).collect();
        let query = Query::new(&q);
        let (a, b) = (bytes_u32(&each), bytes_u32(&gap));
        let one = Rows::new(&codes, dim, &scales, &a).unwrap();
        let grouped = Rows::new(&codes, dim, &scales, &b).unwrap();
        assert!(one.one_each && !grouped.one_each);
        for shortlist in [1, 7, 50, 199] {
            let x = top_groups_shortlisted(
                &one,
                &Signs::new(&bits, &one).unwrap(),
                &query,
                10,
                shortlist,
            );
            let y = top_groups_shortlisted(
                &grouped,
                &Signs::new(&bits, &grouped).unwrap(),
                &query,
                10,
                shortlist,
            );
            let rows_of = |t: &[(u32, u32, f32)]| t.iter().map(|h| (h.1, h.2)).collect::<Vec<_>>();
            assert_eq!(rows_of(&x), rows_of(&y), "shortlist {shortlist}");
        }
    }

    #[test]
    fn the_avx2_dot_is_the_plain_one() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        // Codes at the int8 extremes (the widest products) and a pseudo-random mix,
        // for lengths around and past the 16-lane step (a tail of every size).
        let mut state = 0x2545_f491_u32;
        for len in (0..70).chain([383, 384, 385]) {
            let mut code: Vec<u8> = Vec::with_capacity(len);
            let mut query: Vec<i8> = Vec::with_capacity(len);
            for _ in 0..len {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                // 384: every product the largest (-127 * -127), the widest sum.
                let (c, q) = if len == 384 {
                    (-127i8, -127i8)
                } else {
                    (state as i8, (state >> 8) as i8)
                };
                code.push(c as u8);
                query.push(q.max(-127));
            }
            let wide: Vec<i16> = query.iter().map(|&q| i16::from(q)).collect();
            // SAFETY: AVX2 was just seen.
            assert_eq!(
                unsafe { dot_avx2(&code, &wide) },
                dot(&code, &query),
                "length {len}"
            );
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        let codes = [0u8; 6];
        assert!(Rows::new(&codes, 4, &bytes_f32(&[1.0]), &bytes_u32(&[0, 1])).is_err());
        assert!(Rows::new(&codes, 3, &bytes_f32(&[1.0]), &bytes_u32(&[0, 2])).is_err());
        assert!(Rows::new(&codes, 3, &bytes_f32(&[1.0, 1.0]), &bytes_u32(&[0, 3])).is_err());
        assert!(Rows::new(&codes, 3, &bytes_f32(&[1.0, 1.0]), &bytes_u32(&[0, 2])).is_ok());
        // Offsets that fall, do not start at 0, are empty, or end in a partial u32.
        let scales = bytes_f32(&[1.0, 1.0]);
        assert!(Rows::new(&codes, 3, &scales, &bytes_u32(&[0, 2, 1, 2])).is_err());
        assert!(Rows::new(&codes, 3, &scales, &bytes_u32(&[1, 2])).is_err());
        assert!(Rows::new(&codes, 3, &scales, &[]).is_err());
        let mut ragged = bytes_u32(&[0, 2]);
        ragged.push(0);
        assert!(Rows::new(&codes, 3, &scales, &ragged).is_err());
        // Scales that are not a whole float32 per row.
        let mut scales = scales;
        scales.push(0);
        assert!(Rows::new(&codes, 3, &scales, &bytes_u32(&[0, 2])).is_err());
        // A group without rows between two with.
        let (scales, offsets) = (bytes_f32(&[1.0, 1.0]), bytes_u32(&[0, 1, 1, 2]));
        let rows = Rows::new(&codes, 3, &scales, &offsets).unwrap();
        assert_eq!(rows.groups(), 3);
    }
}
