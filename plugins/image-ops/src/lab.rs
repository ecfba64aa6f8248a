//! OpenCV's 8-bit sRGB ↔ CIE Lab conversions (`COLOR_RGB2LAB` / `COLOR_LAB2RGB` on uint8),
//! bit for bit: its fixed-point pipelines (`RGB2Lab_b`, `Lab2RGBinteger`) with their lookup
//! tables rebuilt here. CLAHE equalises the L channel of these; a float Lab instead differs
//! from OpenCV's L on 13% of colours, which CLAHE's steep curves then amplify.

use std::sync::OnceLock;

/// `cvRound(4096 · M / white)`: sRGB → XYZ (D65), rows divided by the white point.
const RGB_TO_XYZ: [[i64; 3]; 3] = [[1777, 1541, 778], [871, 2929, 296], [73, 448, 3575]];
/// `cvRound(4096 · M⁻¹ · white)`: XYZ → linear sRGB, columns scaled by the white point.
const XYZ_TO_RGB: [[i64; 3]; 3] = [[12615, -6296, -2223], [-3773, 7684, 185], [217, -836, 4715]];
/// Fixed point of the Lab → RGB pipeline (OpenCV's `LAB_BASE`).
const BASE: i64 = 1 << 14;
/// Smallest index of the a/b → X/Z table.
const MIN_AB: i64 = -8145;

struct Tables {
    /// sRGB byte → linear light × 2040.
    gamma: [i64; 256],
    /// Linear light × 2040 → f(t) × 2^15, Lab's cube root with its linear toe.
    cbrt: Vec<i64>,
    /// L byte → (Y × BASE, f(Y) × BASE).
    y_fy: [(i64, i64); 256],
    /// f(X) or f(Z) × BASE (offset by `MIN_AB`) → X or Z × BASE.
    ab_xz: Vec<i64>,
    /// Linear light × 4096 → sRGB byte.
    inv_gamma: Vec<i64>,
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let to_linear = |x: f64| {
            if x <= 0.04045 {
                x / 12.92
            } else {
                ((x + 0.055) / 1.055).powf(2.4)
            }
        };
        let gamma = std::array::from_fn(|i| {
            (2040.0 * to_linear(i as f64 / 255.0)).round_ties_even() as i64
        });
        let mut cbrt: Vec<i64> = (0..3072)
            .map(|i| {
                let t = i as f64 / 2040.0;
                let f = if t < 216.0 / 24389.0 {
                    t * (841.0 / 108.0) + 16.0 / 116.0
                } else {
                    t.powf(1.0 / 3.0)
                };
                (32768.0 * f).round_ties_even() as i64
            })
            .collect();
        // OpenCV builds this table with its software float32 cube root, which lands on the
        // other side of .5 from the exact value at these two entries.
        cbrt[49] = 9454;
        cbrt[628] = 22126;
        let y_fy = std::array::from_fn(|i| {
            let i = i as i64;
            if i <= 20 {
                let y = (i * BASE * 20 * 9) as f64 / (17 * 29 * 29 * 29) as f64;
                let fy = BASE as f64 * (16.0 / 116.0 + (i * 5) as f64 / (3 * 17 * 29) as f64);
                (y.round_ties_even() as i64, fy.round_ties_even() as i64)
            } else {
                let fy = (i * 100 * BASE) as f64 / (255 * 116) as f64 + (16 * BASE) as f64 / 116.0;
                let y = fy * fy * fy / (BASE * BASE) as f64;
                (y.round_ties_even() as i64, fy.round_ties_even() as i64)
            }
        });
        // Integer division truncates toward zero, as in C.
        let ab_xz = (MIN_AB..BASE * 9 / 4 + MIN_AB)
            .map(|i| {
                if i <= 3390 {
                    i * 108 / 841 - BASE * 16 / 116 * 108 / 841
                } else {
                    i * i / BASE * i / BASE
                }
            })
            .collect();
        let inv_gamma = (0..4096)
            .map(|i| {
                let x = i as f64 / 4096.0;
                let v = if x <= 0.0031308 {
                    x * 12.92
                } else {
                    1.055 * x.powf(1.0 / 2.4) - 0.055
                };
                (255.0 * v).round_ties_even() as i64
            })
            .collect();
        Tables {
            gamma,
            cbrt,
            y_fy,
            ab_xz,
            inv_gamma,
        }
    })
}

fn byte(v: i64) -> u8 {
    v.clamp(0, 255) as u8
}

/// Interleaved RGB bytes → interleaved L, a, b bytes (`cv2.COLOR_RGB2LAB`).
pub(crate) fn rgb_to_lab(rgb: &[u8]) -> Vec<u8> {
    let t = tables();
    let mut lab = Vec::with_capacity(rgb.len());
    for px in rgb.chunks_exact(3) {
        let lin = [0, 1, 2].map(|c| t.gamma[px[c] as usize]);
        let [fx, fy, fz] = RGB_TO_XYZ.map(|row| {
            let v = row[0] * lin[0] + row[1] * lin[1] + row[2] * lin[2];
            t.cbrt[((v + (1 << 11)) >> 12) as usize]
        });
        let half = 1 << 14;
        lab.push(byte((296 * fy - 1_336_934 + half) >> 15));
        lab.push(byte((500 * (fx - fy) + 128 * 32768 + half) >> 15));
        lab.push(byte((200 * (fy - fz) + 128 * 32768 + half) >> 15));
    }
    lab
}

/// Interleaved L, a, b bytes → interleaved RGB bytes (`cv2.COLOR_LAB2RGB`).
pub(crate) fn lab_to_rgb(lab: &[u8]) -> Vec<u8> {
    let t = tables();
    let mut rgb = Vec::with_capacity(lab.len());
    for px in lab.chunks_exact(3) {
        let (l, a, b) = (px[0] as i64, px[1] as i64, px[2] as i64);
        let (y, fy) = t.y_fy[l as usize];
        // OpenCV's fixed-point a / 500 and b / 200, in BASE units.
        let a_div = ((5 * a * 53687 + (1 << 7)) >> 13) - 128 * BASE / 500;
        let b_div = ((b * 41943 + (1 << 4)) >> 9) - 128 * BASE / 200 + 1;
        let x = t.ab_xz[(fy + a_div - MIN_AB) as usize];
        let z = t.ab_xz[(fy - b_div - MIN_AB) as usize];
        for row in XYZ_TO_RGB {
            let v = (row[0] * x + row[1] * y + row[2] * z + (1 << 13)) >> 14;
            rgb.push(byte(t.inv_gamma[v.clamp(0, 4095) as usize]));
        }
    }
    rgb
}
