//! Affine warps after `cv2.warpAffine` as OpenCV 5 computes them: every output pixel maps
//! back through the inverted matrix in floating point, images are sampled bilinearly and
//! rounded half to even, masks take the nearest pixel (`rint`), and points outside the image
//! follow OpenCV's border modes (a constant border blends in per neighbour). OpenCV 4's
//! 1/32-pixel fixed-point grid is *not* reproduced: OpenCV 5.0 dropped it, and a test
//! checks our output equals its output.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{Error, Result};

use crate::layout::Spatial;
use crate::BorderMode;

/// A 2 × 3 affine matrix, row-major: `x' = m[0] x + m[1] y + m[2]`, `y' = m[3] x + ...`.
pub(crate) type Affine2 = [f64; 6];

/// The inverse of `m`, as `cv::invertAffineTransform` computes it (a singular matrix maps
/// everything to its translation, as OpenCV's `D = 0` does).
pub(crate) fn invert(m: &Affine2) -> Affine2 {
    let d = m[0] * m[4] - m[1] * m[3];
    let d = if d != 0.0 { 1.0 / d } else { 0.0 };
    let (a11, a12, a21, a22) = (m[4] * d, -m[1] * d, -m[3] * d, m[0] * d);
    let b1 = -a11 * m[2] - a12 * m[5];
    let b2 = -a21 * m[2] - a22 * m[5];
    [a11, a12, b1, a21, a22, b2]
}

/// How one input is resampled.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sampling {
    /// Nearest pixel (masks) instead of bilinear.
    pub nearest: bool,
    pub border: BorderMode,
    /// The value of points outside the image under `BorderMode::Constant`.
    pub fill: f64,
}

/// `x` (in `layout`) warped by the forward matrix `m` (input → output pixel coordinates),
/// keeping its size, layout and dtype.
pub(crate) fn warp_affine(
    layout: &Spatial,
    x: &Tensor,
    m: &Affine2,
    s: Sampling,
) -> Result<Tensor> {
    let inv = invert(m);
    let (h, w) = (layout.height, layout.width);
    let opts = (Kind::Double, x.device());
    let xs = Tensor::f_arange(w, opts)?.f_view([1, w])?;
    let ys = Tensor::f_arange(h, opts)?.f_view([h, 1])?;
    let src_x = xs
        .f_mul_scalar(inv[0])?
        .f_add(&ys.f_mul_scalar(inv[1])?)?
        .f_add_scalar(inv[2])?;
    let src_y = xs
        .f_mul_scalar(inv[3])?
        .f_add(&ys.f_mul_scalar(inv[4])?)?
        .f_add_scalar(inv[5])?;
    remap(layout, x, &src_x, &src_y, s)
}

/// `cv2.remap`: output pixel `(y, x)` samples `x` (in `layout`) at the float64 source point
/// `(src_y[y, x], src_x[y, x])` (each `(H, W)`, or broadcastable to it), keeping size,
/// layout and dtype.
pub(crate) fn remap(
    layout: &Spatial,
    x: &Tensor,
    src_x: &Tensor,
    src_y: &Tensor,
    s: Sampling,
) -> Result<Tensor> {
    remap_onto(layout, x, src_x, src_y, (layout.height, layout.width), s)
}

/// [`remap`] onto an `(out_h, out_w)` canvas (the maps broadcastable to it), for warps
/// whose output has another size than their input (`cv2.warpPerspective`'s `dsize`).
pub(crate) fn remap_onto(
    layout: &Spatial,
    x: &Tensor,
    src_x: &Tensor,
    src_y: &Tensor,
    (out_h, out_w): (i64, i64),
    s: Sampling,
) -> Result<Tensor> {
    let (src_x, src_y) = (
        src_x.f_expand([out_h, out_w], false)?,
        src_y.f_expand([out_h, out_w], false)?,
    );
    let (h, w) = (layout.height, layout.width);
    let channels = if layout.plain { 1 } else { x.size()[2] };
    let flat = x.f_reshape([h * w, channels])?;
    let out = if s.nearest {
        let ix = src_x.f_round()?.f_to_kind(Kind::Int64)?;
        let iy = src_y.f_round()?.f_to_kind(Kind::Int64)?;
        gather(&flat, &ix, &iy, layout, s)?
    } else {
        bilinear(&flat, &src_x, &src_y, layout, s)?
    };
    let mut shape = x.size();
    shape[..2].copy_from_slice(&[out_h, out_w]);
    Ok(out.f_reshape(shape)?.f_contiguous()?)
}

/// Bilinear interpolation of `flat` (`(H·W, C)`) at the source points, back in its dtype.
fn bilinear(flat: &Tensor, sx: &Tensor, sy: &Tensor, l: &Spatial, s: Sampling) -> Result<Tensor> {
    let values = flat.f_to_kind(Kind::Double)?;
    let (x0, y0) = (sx.f_floor()?, sy.f_floor()?);
    let weight = |t: &Tensor| -> Result<Tensor> { Ok(t.f_reshape([-1, 1])?) };
    let fx = weight(&sx.f_sub(&x0)?)?;
    let fy = weight(&sy.f_sub(&y0)?)?;
    let (x0, y0) = (x0.f_to_kind(Kind::Int64)?, y0.f_to_kind(Kind::Int64)?);
    let (x1, y1) = (x0.f_add_scalar(1)?, y0.f_add_scalar(1)?);
    let sample = |ix: &Tensor, iy: &Tensor| gather(&values, ix, iy, l, s);
    let one = |f: &Tensor| -> Result<Tensor> { Ok(f.f_neg()?.f_add_scalar(1.0)?) };
    let (gx, gy) = (one(&fx)?, one(&fy)?);
    let top = sample(&x0, &y0)?
        .f_mul(&gx)?
        .f_add(&sample(&x1, &y0)?.f_mul(&fx)?)?;
    let bottom = sample(&x0, &y1)?
        .f_mul(&gx)?
        .f_add(&sample(&x1, &y1)?.f_mul(&fx)?)?;
    let y = top.f_mul(&gy)?.f_add(&bottom.f_mul(&fy)?)?;
    to_kind(&y, flat.kind())
}

/// The pixels of `flat` at integer points `(ix, iy)` (each `(H, W)`), borders applied.
fn gather(flat: &Tensor, ix: &Tensor, iy: &Tensor, l: &Spatial, s: Sampling) -> Result<Tensor> {
    let (h, w) = (l.height, l.width);
    let index = fold(iy, h, s.border)?
        .f_mul_scalar(w)?
        .f_add(&fold(ix, w, s.border)?)?
        .f_flatten(0, -1)?;
    let picked = flat.f_index_select(0, &index)?;
    if s.border != BorderMode::Constant {
        return Ok(picked);
    }
    let inside = ix
        .f_ge(0)?
        .f_logical_and(&ix.f_lt(w)?)?
        .f_logical_and(&iy.f_ge(0)?)?
        .f_logical_and(&iy.f_lt(h)?)?
        .f_reshape([-1, 1])?;
    let fill = Tensor::f_full([1, 1], s.fill, (flat.kind(), flat.device()))?;
    Ok(picked.f_where_self(&inside, &fill)?)
}

/// Integer coordinates folded into `0..n` by the border rule (OpenCV's `borderInterpolate`;
/// a constant border clamps here and is masked by the caller).
pub(crate) fn fold(i: &Tensor, n: i64, border: BorderMode) -> Result<Tensor> {
    let mirror = |period: i64, top: i64| -> Result<Tensor> {
        let r = i.f_remainder(period)?;
        Ok(r.f_where_self(&r.f_lt(n)?, &r.f_neg()?.f_add_scalar(top)?)?)
    };
    Ok(match border {
        BorderMode::Replicate | BorderMode::Constant => i.f_clamp(0, n - 1)?,
        _ if n == 1 => i.f_zeros_like()?,
        BorderMode::Reflect101 => mirror(2 * n - 2, 2 * n - 2)?,
        BorderMode::Reflect => mirror(2 * n, 2 * n - 1)?,
    })
}

/// Interpolated float64 values back to `kind`: integers rounded half to even (OpenCV's
/// `saturate_cast`) and saturated.
fn to_kind(y: &Tensor, kind: Kind) -> Result<Tensor> {
    let range = match kind {
        Kind::Uint8 => Some((0.0, 255.0)),
        Kind::Int8 => Some((-128.0, 127.0)),
        Kind::Int16 => Some((-32768.0, 32767.0)),
        Kind::Int => Some((-2147483648.0, 2147483647.0)),
        Kind::Int64 => Some((i64::MIN as f64, i64::MAX as f64)),
        Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16 => None,
        other => {
            return Err(Error::unsupported(format!(
                "bilinear warps take integer or float images, got {other:?}"
            )))
        }
    };
    let y = match range {
        Some((lo, hi)) => y.f_round()?.f_clamp(lo, hi)?,
        None => y.shallow_clone(),
    };
    Ok(y.f_to_kind(kind)?)
}

/// The 3 × 3 product `a · b` of row-major matrices.
pub(crate) fn matmul(a: &[[f64; 3]; 3], b: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    let mut out = [[0.0; 3]; 3];
    for (r, row) in out.iter_mut().enumerate() {
        for (c, cell) in row.iter_mut().enumerate() {
            *cell = (0..3).map(|k| a[r][k] * b[k][c]).sum();
        }
    }
    out
}
