//! OpenCV's float32 RGB ↔ HLS (`cv2.COLOR_RGB2HLS` / `COLOR_HLS2RGB` on float images): hue in
//! degrees [0, 360), lightness and saturation in [0, 1]. Written per pixel in `f32` as
//! OpenCV's scalar path is, so `ISONoise` sees the same HLS values albumentations does.

/// `[h, l, s]` of one RGB pixel in [0, 1].
pub(crate) fn rgb_to_hls([r, g, b]: [f32; 3]) -> [f32; 3] {
    let vmax = r.max(g).max(b);
    let vmin = r.min(g).min(b);
    let diff = vmax - vmin;
    let l = (vmax + vmin) * 0.5;
    if diff <= f32::EPSILON {
        return [0.0, l, 0.0];
    }
    let s = if l < 0.5 {
        diff / (vmax + vmin)
    } else {
        diff / (2.0 - vmax - vmin)
    };
    let scale = 60.0 / diff;
    let mut h = if vmax == r {
        (g - b) * scale
    } else if vmax == g {
        (b - r) * scale + 120.0
    } else {
        (r - g) * scale + 240.0
    };
    if h < 0.0 {
        h += 360.0;
    }
    [h, l, s]
}

/// The RGB pixel of `[h, l, s]`; any hue (it wraps), lightness outside [0, 1] gives values
/// outside [0, 1] as OpenCV's does (callers clip).
pub(crate) fn hls_to_rgb([h, l, s]: [f32; 3]) -> [f32; 3] {
    if s == 0.0 {
        return [l, l, l];
    }
    // Which of p2, p1, rising, falling each of (b, g, r) takes per sector: OpenCV's table.
    const SECTORS: [[usize; 3]; 6] = [
        [1, 3, 0],
        [1, 0, 2],
        [3, 0, 1],
        [0, 2, 1],
        [0, 1, 3],
        [2, 1, 0],
    ];
    let p2 = if l <= 0.5 {
        l * (1.0 + s)
    } else {
        l + s - l * s
    };
    let p1 = 2.0 * l - p2;
    let mut h = h * (6.0 / 360.0);
    while h < 0.0 {
        h += 6.0;
    }
    while h >= 6.0 {
        h -= 6.0;
    }
    let sector = h.floor() as usize;
    let h = h - sector as f32;
    let tab = [p2, p1, p1 + (p2 - p1) * (1.0 - h), p1 + (p2 - p1) * h];
    let [b, g, r] = SECTORS[sector.min(5)].map(|i| tab[i]);
    [r, g, b]
}
