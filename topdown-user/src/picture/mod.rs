//! Pictures the tool writes: SVG as it is, PNG rasterized from SVG by resvg with the system's
//! fonts; and a terminal screen (ratatui's buffer) as SVG, for screenshots made by the tool
//! itself (`report --screenshot`).

pub mod timelines;

use std::{fmt::Write as _, io::Write as _, path::Path};

use anyhow::{Context as _, Result, bail};

use crate::report::new_file::NewFile;
use ratatui::{
    buffer::Buffer,
    style::{Color, Modifier},
};

/// Whether `path` names a PNG (`.png`) or an SVG (`.svg`) picture; anything else is refused.
pub fn is_png(path: &Path) -> Result<bool> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("svg") => Ok(false),
        Some("png") => Ok(true),
        _ => bail!(
            "cannot tell the picture's format from {}: name it .svg or .png",
            path.display()
        ),
    }
}

/// Writes `svg` to `path`, as SVG or rasterized to PNG by its extension, whole or not at all
/// ([`NewFile`]: not over one of `inputs`, not over an existing file unless `force`).
pub fn write(svg: &str, path: &Path, inputs: &[&Path], force: bool) -> Result<()> {
    let bytes = if is_png(path)? {
        png(svg)?
    } else {
        svg.as_bytes().to_vec()
    };
    let new = NewFile::create(path, "the picture", inputs, force)?;
    new.file()
        .write_all(&bytes)
        .with_context(|| format!("cannot write {}", path.display()))?;
    new.commit()
}

/// Rasterizes `svg` to PNG bytes with the system's fonts (DejaVu where present).
fn png(svg: &str) -> Result<Vec<u8>> {
    use resvg::{tiny_skia, usvg};
    let mut options = usvg::Options::default();
    let fonts = options.fontdb_mut();
    fonts.load_system_fonts();
    if fonts.faces().next().is_none() {
        bail!(
            "PNG needs a TrueType font and none is installed: install fonts-dejavu-core, or \
             write .svg"
        );
    }
    fonts.set_sans_serif_family("DejaVu Sans");
    fonts.set_monospace_family("DejaVu Sans Mono");
    let tree = usvg::Tree::from_str(svg, &options).context("reading back the SVG")?;
    let size = tree.size().to_int_size();
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height())
        .context("the picture is too large to rasterize")?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap.encode_png().context("encoding the PNG")
}

/// Width and height of one terminal cell, in pixels.
const CELL: (usize, usize) = (9, 18);
/// The terminal's default colours (a dark theme).
const FOREGROUND: &str = "#d8d8d8";
const BACKGROUND: &str = "#1c1c1c";

/// A terminal colour as the xterm palette draws it; `None` for the default.
fn hex(color: Color) -> Option<String> {
    let named = match color {
        Color::Reset => return None,
        Color::Black => "#000000",
        Color::Red => "#cd3131",
        Color::Green => "#0dbc79",
        Color::Yellow => "#e5e510",
        Color::Blue => "#2472c8",
        Color::Magenta => "#bc3fbc",
        Color::Cyan => "#11a8cd",
        Color::Gray => "#bfbfbf",
        Color::DarkGray => "#666666",
        Color::LightRed => "#f14c4c",
        Color::LightGreen => "#23d18b",
        Color::LightYellow => "#f5f543",
        Color::LightBlue => "#3b8eea",
        Color::LightMagenta => "#d670d6",
        Color::LightCyan => "#29b8db",
        Color::White => "#ffffff",
        Color::Rgb(r, g, b) => return Some(format!("#{r:02x}{g:02x}{b:02x}")),
        Color::Indexed(_) => return None,
    };
    Some(named.to_owned())
}

/// `buffer` drawn as a terminal shows it: each cell's background, then runs of characters of
/// one style in a monospace font (reversed, bold and dim as the terminal draws them).
pub fn screen_svg(buffer: &Buffer) -> String {
    let area = buffer.area;
    let (width, height) = (
        usize::from(area.width) * CELL.0,
        usize::from(area.height) * CELL.1,
    );
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"{BACKGROUND}\"/>\n<g font-family=\"monospace\" font-size=\"15\" \
         xml:space=\"preserve\">\n"
    );
    for y in 0..area.height {
        // Runs of cells with one style: (first column, text, fg, bg, bold, dim).
        let mut runs: Vec<(u16, String, String, Option<String>, bool, bool)> = Vec::new();
        for x in 0..area.width {
            let cell = &buffer[(area.x + x, area.y + y)];
            let reversed = cell.modifier.contains(Modifier::REVERSED);
            let (mut fg, mut bg) = (hex(cell.fg), hex(cell.bg));
            if reversed {
                (fg, bg) = (
                    bg.or_else(|| Some(BACKGROUND.to_owned())),
                    fg.or_else(|| Some(FOREGROUND.to_owned())),
                );
            }
            let fg = fg.unwrap_or_else(|| FOREGROUND.to_owned());
            let bold = cell.modifier.contains(Modifier::BOLD);
            let dim = cell.modifier.contains(Modifier::DIM);
            match runs.last_mut() {
                Some(run) if run.2 == fg && run.3 == bg && run.4 == bold && run.5 == dim => {
                    run.1.push_str(cell.symbol());
                }
                _ => runs.push((x, cell.symbol().to_owned(), fg, bg, bold, dim)),
            }
        }
        let top = usize::from(y) * CELL.1;
        for (x, text, fg, bg, bold, dim) in runs {
            let left = usize::from(x) * CELL.0;
            let cells = text.chars().count();
            if let Some(bg) = bg {
                let _ = writeln!(
                    svg,
                    "<rect x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\" fill=\"{bg}\"/>",
                    cells * CELL.0,
                    CELL.1
                );
            }
            if text.trim().is_empty() {
                continue;
            }
            let _ = writeln!(
                svg,
                "<text x=\"{left}\" y=\"{}\" fill=\"{fg}\"{}{} textLength=\"{}\">{}</text>",
                top + CELL.1 - 5,
                if bold { " font-weight=\"bold\"" } else { "" },
                if dim { " opacity=\"0.6\"" } else { "" },
                cells * CELL.0,
                escape(&text)
            );
        }
    }
    svg.push_str("</g>\n</svg>\n");
    svg
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use ratatui::{layout::Rect, style::Style};

    use super::*;

    #[test]
    fn a_screen_is_an_svg_of_its_cells_with_their_colours() {
        let mut buffer = Buffer::empty(Rect::new(0, 0, 20, 2));
        buffer.set_string(
            0,
            0,
            "TID <comm> & ok",
            Style::new().add_modifier(Modifier::REVERSED),
        );
        buffer.set_string(2, 1, "███", Style::new().fg(Color::Blue));
        let svg = screen_svg(&buffer);
        let doc = roxmltree::Document::parse(&svg).expect("valid SVG");
        let texts: Vec<(String, Option<&str>)> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| (n.text().unwrap_or_default().to_owned(), n.attribute("fill")))
            .collect();
        assert_eq!(texts[0].0, "TID <comm> & ok", "escaped, then read back");
        assert_eq!(
            texts[0].1,
            Some(BACKGROUND),
            "reversed: the background's colour"
        );
        assert_eq!(texts[1], ("███".to_owned(), Some("#2472c8")));
        let backgrounds = doc
            .descendants()
            .filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some(FOREGROUND))
            .count();
        assert_eq!(backgrounds, 1, "one run of reversed cells");
        assert!(is_png(Path::new("a.PNG")).unwrap() && !is_png(Path::new("a.svg")).unwrap());
        assert!(is_png(Path::new("a.jpg")).is_err());
    }
}
