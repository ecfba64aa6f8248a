//! Text for PNG plots. plotters' bitmap text puts every glyph at the pen position and ignores
//! its bearing, so glyphs that sit away from their origin land beside their place: `_` under
//! the next letter, the dot of an `i` over the previous one (`epoch_time` read `epoch time`).
//! [`GlyphText`] wraps the bitmap backend and draws text with ab_glyph's own glyph placement;
//! everything else goes to the bitmap unchanged. SVG plots are unaffected: they carry text as
//! text.

use std::sync::OnceLock;

use ab_glyph::{point, Font, FontRef, ScaleFont};
use plotters::prelude::*;
use plotters_backend::{
    text_anchor::{HPos, VPos},
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};

/// A bitmap backend whose text is drawn glyph by glyph at ab_glyph's positions.
pub struct GlyphText<'a>(pub BitMapBackend<'a>);

type Failure<'a> = DrawingErrorKind<<BitMapBackend<'a> as DrawingBackend>::ErrorType>;

/// The font the plots embed (see plot.rs), parsed once.
fn font() -> Option<&'static FontRef<'static>> {
    static FONT: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    FONT.get_or_init(|| FontRef::try_from_slice(ttf_noto_sans::REGULAR).ok())
        .as_ref()
}

impl<'a> DrawingBackend for GlyphText<'a> {
    type ErrorType = <BitMapBackend<'a> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), Failure<'a>> {
        self.0.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), Failure<'a>> {
        self.0.present()
    }

    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Result<(), Failure<'a>> {
        self.0.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), Failure<'a>> {
        self.0.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), Failure<'a>> {
        self.0.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), Failure<'a>> {
        self.0.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), Failure<'a>> {
        self.0.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), Failure<'a>> {
        self.0.fill_polygon(vert, style)
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        (width, height): (u32, u32),
        src: &[u8],
    ) -> Result<(), Failure<'a>> {
        self.0.blit_bitmap(pos, (width, height), src)
    }

    /// As plotters' default (the same layout box, anchor and transform, so text lands where
    /// the chart expects it, the baseline half the font size below the box's top), with each
    /// glyph at its own bounds.
    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), Failure<'a>> {
        let color = style.color();
        let Some(font) = font().filter(|_| color.alpha > 0.0) else {
            return Ok(());
        };
        let ((min_x, min_y), (max_x, max_y)) = style
            .layout_box(text)
            .map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -(max_x - min_x),
            HPos::Center => -(max_x - min_x) / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -(max_y - min_y) / 2,
            VPos::Bottom => -(max_y - min_y),
        };
        let transform = style.transform();
        let (width, height) = self.get_size();
        let scaled = font.as_scaled(style.size() as f32);
        let baseline = style.size() as f32 / 2.0;
        let mut pen = 0.0f32;
        let mut previous = None;
        let mut pixels = Vec::new();
        for c in text.chars() {
            let id = scaled.glyph_id(c);
            if let Some(previous) = previous {
                pen += scaled.kern(previous, id);
            }
            previous = Some(id);
            let glyph = id.with_scale_and_position(scaled.scale(), point(pen, baseline));
            pen += scaled.h_advance(id);
            let Some(outline) = font.outline_glyph(glyph) else {
                continue;
            };
            let bounds = outline.px_bounds();
            outline.draw(|x, y, coverage| {
                pixels.push((
                    bounds.min.x as i32 + x as i32,
                    bounds.min.y as i32 + y as i32,
                    coverage,
                ))
            });
        }
        for (x, y, coverage) in pixels {
            let (x, y) = transform.transform(x + dx - min_x, y + dy - min_y);
            let (x, y) = (pos.0 + x, pos.1 + y);
            if x >= 0 && y >= 0 && (x as u32) < width && (y as u32) < height {
                let alpha = color.alpha * f64::from(coverage.clamp(0.0, 1.0));
                self.0.draw_pixel(
                    (x, y),
                    BackendColor {
                        alpha,
                        rgb: color.rgb,
                    },
                )?;
            }
        }
        Ok(())
    }
}
