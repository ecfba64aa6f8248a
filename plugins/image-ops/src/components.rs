//! 8-connected pieces of a binary mask in `cv2.connectedComponents`' label order, which
//! albumentations' `RandomGridShuffle` (boxes) and `MaskDropout` (objects) rely on.

/// The pixels (row-major indices) of each 8-connected piece of the `height × width` `mask`,
/// in the order OpenCV labels them: its block-based scan numbers pieces by the first 2 × 2
/// block (row-major over blocks) they reach, not by their first pixel.
pub(crate) fn components(mask: &[bool], height: i64, width: i64) -> Vec<Vec<usize>> {
    let mut seen = vec![false; mask.len()];
    let mut pieces: Vec<((i64, i64), Vec<usize>)> = Vec::new();
    for start in 0..mask.len() {
        if !mask[start] || seen[start] {
            continue;
        }
        seen[start] = true;
        let (mut stack, mut pixels) = (vec![start], Vec::new());
        let mut first_block = (i64::MAX, i64::MAX);
        while let Some(i) = stack.pop() {
            pixels.push(i);
            let (y, x) = (i as i64 / width, i as i64 % width);
            first_block = first_block.min((y / 2, x / 2));
            for dy in -1..=1 {
                for dx in -1..=1 {
                    let (ny, nx) = (y + dy, x + dx);
                    if (0..height).contains(&ny) && (0..width).contains(&nx) {
                        let j = (ny * width + nx) as usize;
                        if mask[j] && !seen[j] {
                            seen[j] = true;
                            stack.push(j);
                        }
                    }
                }
            }
        }
        pixels.sort_unstable();
        pieces.push((first_block, pixels));
    }
    pieces.sort_by_key(|(block, _)| *block);
    pieces.into_iter().map(|(_, pixels)| pixels).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_come_in_opencv_label_order() {
        // A pair at row 1 shares the first block row with a pair at row 0 further right:
        // OpenCV labels the left one first. Diagonal neighbours join.
        let mut mask = vec![false; 6 * 12];
        for i in [12, 13, 5, 6, 3 * 12 + 8, 4 * 12 + 9] {
            mask[i] = true;
        }
        assert_eq!(
            components(&mask, 6, 12),
            [vec![12, 13], vec![5, 6], vec![44, 57]]
        );
    }
}
