//! `CropAndPad`'s `px` / `percent`: the forms albumentations 2.0.8 reads them in, one call's
//! draw of the four sides, and the crop and pad that draw comes to.

use fe_plugin_api::{Error, Result};
use rand::Rng;
use serde::Deserialize;

/// One entry of the four-side form of `px` / `percent`.
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum SideAmount<T> {
    /// This many pixels (or this fraction of the side).
    Value(T),
    /// `[lo, hi]`: a range; any other length: values to pick from.
    List(Vec<T>),
}

/// `px` or `percent` as written: one number for every side, `[lo, hi]` a range drawn from
/// (per side, or once with `sample_independently = false`), or four sides
/// `[top, right, bottom, left]`, each a number, a `[lo, hi]` range or a list to pick from.
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum Amounts<T> {
    /// The same amount on every side.
    All(T),
    /// A range, or the four sides.
    List(Vec<SideAmount<T>>),
}

/// How one side's amount is drawn.
#[derive(Debug, Clone, PartialEq)]
enum Draw {
    Value(f64),
    /// `randrange(lo, hi)` for pixels (`hi` excluded), `uniform(lo, hi)` for fractions.
    Range(f64, f64),
    Choice(Vec<f64>),
}

/// The checked `px` or `percent`: `[top, right, bottom, left]`, albumentations' order.
#[derive(Debug, Clone)]
pub(crate) struct Sides {
    sides: [Draw; 4],
    /// One draw for all four sides (the range form with `sample_independently = false`).
    shared: bool,
    /// `px` (whole pixels) rather than `percent` (fractions of the side).
    pixels: bool,
}

impl Sides {
    /// Reads `amounts` of config `field` as `CropAndPad._get_px_params` /
    /// `_get_percent_params` do: the first of four sides decides whether all are values,
    /// ranges or lists to pick from (a two-value list is then a choice too).
    pub(crate) fn new<T: Copy>(
        field: &str,
        amounts: Amounts<T>,
        to_f64: fn(T) -> f64,
        sample_independently: bool,
    ) -> Result<Sides> {
        let pixels = field == "px";
        let bad = |why: String| Error::config(field, why);
        let list = |v: &[T]| v.iter().map(|&x| to_f64(x)).collect::<Vec<_>>();
        let (sides, shared) = match amounts {
            Amounts::All(v) => (std::array::from_fn(|_| Draw::Value(to_f64(v))), false),
            Amounts::List(items) => match items.as_slice() {
                [SideAmount::Value(lo), SideAmount::Value(hi)] => {
                    let range = Draw::Range(to_f64(*lo), to_f64(*hi));
                    (
                        std::array::from_fn(|_| range.clone()),
                        !sample_independently,
                    )
                }
                [first, _, _, _] => {
                    let kind = match first {
                        SideAmount::Value(_) => "a number",
                        SideAmount::List(v) if v.len() == 2 => "a [lo, hi] range",
                        SideAmount::List(_) => "a list of values to pick from",
                    };
                    let mut sides = Vec::with_capacity(4);
                    for side in &items {
                        sides.push(match (first, side) {
                            (SideAmount::Value(_), SideAmount::Value(v)) => Draw::Value(to_f64(*v)),
                            (SideAmount::List(f), SideAmount::List(v))
                                if f.len() == 2 && v.len() == 2 =>
                            {
                                Draw::Range(to_f64(v[0]), to_f64(v[1]))
                            }
                            (SideAmount::List(f), SideAmount::List(v))
                                if f.len() != 2 && !v.is_empty() =>
                            {
                                Draw::Choice(list(v))
                            }
                            _ => {
                                return Err(bad(format!(
                                    "the first of the four sides is {kind}, so all four must be (albumentations reads them by the first)"
                                )))
                            }
                        });
                    }
                    let sides: [Draw; 4] = sides
                        .try_into()
                        .map_err(|_| bad("expected four sides".into()))?;
                    (sides, false)
                }
                _ => return Err(bad(
                    "expected a number, a [lo, hi] range, or four sides [top, right, bottom, left]"
                        .into(),
                )),
            },
        };
        for side in &sides {
            let values = match side {
                Draw::Value(v) => vec![*v],
                Draw::Range(lo, hi) => vec![*lo, *hi],
                Draw::Choice(v) => v.clone(),
            };
            if values.iter().any(|v| !v.is_finite()) {
                return Err(bad(format!("values must be finite, got {values:?}")));
            }
            match *side {
                // randrange(lo, hi) draws from lo..hi, which must not be empty.
                Draw::Range(lo, hi) if pixels && lo >= hi => {
                    return Err(bad(format!(
                    "range [{lo}, {hi}) is empty: pixel ranges exclude hi, as Python's randrange"
                )))
                }
                Draw::Range(lo, hi) if lo > hi => {
                    return Err(bad(format!("range [{lo}, {hi}] needs lo <= hi")))
                }
                _ => {}
            }
        }
        Ok(Sides {
            sides,
            shared,
            pixels,
        })
    }

    /// One draw of `[top, right, bottom, left]` in pixels for an `height × width` image,
    /// negative for a crop: fractions become `int(f · side)`, truncated toward zero.
    pub(crate) fn draw(&self, rng: &mut impl Rng, height: i64, width: i64) -> [i64; 4] {
        let mut one = |side: &Draw| match side {
            Draw::Value(v) => *v,
            Draw::Range(lo, hi) if self.pixels => rng.random_range(*lo as i64..*hi as i64) as f64,
            Draw::Range(lo, hi) => lo + (hi - lo) * rng.random::<f64>(),
            Draw::Choice(v) => v[rng.random_range(0..v.len())],
        };
        let values: [f64; 4] = if self.shared {
            [one(&self.sides[0]); 4]
        } else {
            std::array::from_fn(|i| one(&self.sides[i]))
        };
        let dims = [height, width, height, width];
        std::array::from_fn(|i| {
            if self.pixels {
                values[i] as i64
            } else {
                (values[i] * dims[i] as f64) as i64
            }
        })
    }
}

/// What one call does: the window kept, then the padding added around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// `[x_min, y_min, x_max, y_max)` of the input that is kept.
    pub crop: [i64; 4],
    /// `[top, bottom, left, right]` pixels added around the kept window.
    pub pad: [i64; 4],
}

impl Plan {
    /// The whole `height × width` image, nothing added.
    pub(crate) fn identity(height: i64, width: i64) -> Plan {
        Plan {
            crop: [0, 0, width, height],
            pad: [0; 4],
        }
    }

    /// `CropAndPad.get_params_dependent_on_data` for the drawn `[top, right, bottom, left]`:
    /// positive amounts pad, negative ones crop, and crops that would leave nothing give
    /// some rows or columns back (`_prevent_zero`, its arithmetic kept as is).
    pub(crate) fn new(amounts: [i64; 4], height: i64, width: i64) -> Result<Plan> {
        let [top, right, bottom, left] = amounts.map(|v| v.max(0));
        let [ct, cr, cb, cl] = prevent_zero(amounts.map(|v| -v.min(0)), height, width);
        let crop = [cl, ct, width - cr, height - cb];
        if crop[2] <= crop[0] || crop[3] <= crop[1] {
            // albumentations' crop raises here too: the regained rows do not cover the cut.
            return Err(Error::msg(format!(
                "CropAndPad: cropping {amounts:?} (top, right, bottom, left) from a {height}x{width} image leaves nothing"
            )));
        }
        Ok(Plan {
            crop,
            pad: [top, bottom, left, right],
        })
    }

    /// `(height, width)` after the crop and the pad, before any resize back.
    pub(crate) fn size(&self) -> (i64, i64) {
        let [x0, y0, x1, y1] = self.crop;
        let [t, b, l, r] = self.pad;
        (y1 - y0 + t + b, x1 - x0 + l + r)
    }
}

/// `CropAndPad._prevent_zero` on crops `[top, right, bottom, left]`.
fn prevent_zero([top, right, bottom, left]: [i64; 4], height: i64, width: i64) -> [i64; 4] {
    let (mut t, mut b) = (top, bottom);
    let (mut l, mut r) = (left, right);
    if height - (t + b) < 1 {
        (t, b) = regain(t, b, height);
    }
    if width - (l + r) < 1 {
        (l, r) = regain(l, r, width);
    }
    [t, r, b, l].map(|v| v.max(0))
}

/// `CropAndPad.__prevent_zero`: albumentations gives back `side + 1` pixels (imgaug gave
/// back the shortfall + 1), split evenly with the odd one on the first side, moved to the
/// other side where one side has less crop than its share.
fn regain(first: i64, second: i64, side: i64) -> (i64, i64) {
    let regain = side.abs() + 1;
    let (mut r1, mut r2) = (regain / 2, regain / 2);
    if r1 + r2 < regain {
        r1 += 1;
    }
    if r1 > first {
        r2 += r1 - first;
        r1 = first;
    } else if r2 > second {
        r1 += r2 - second;
        r2 = second;
    }
    (first - r1, second - r2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_crops_give_back_as_albumentations_does() {
        // 12 + 9 rows of 20: albumentations gives back 21, 11 + 10 split, but the bottom
        // has only 9, so 12 come off the top crop and nothing is cut (its own output).
        let plan = Plan::new([-12, 3, -9, -20], 20, 30).unwrap();
        assert_eq!(plan.crop, [20, 0, 30, 20]);
        assert_eq!(plan.pad, [0, 0, 0, 3]);
        assert_eq!(plan.size(), (20, 13));
        let plan = Plan::new([-15, 0, -3, 0], 10, 100).unwrap();
        assert_eq!(plan.crop, [0, 7, 100, 10]);
        assert!(Plan::new([-1000, 0, -1000, 0], 100, 100).is_err());
    }
}
