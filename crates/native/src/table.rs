//! Plain-text tables: left-aligned first column, right-aligned numbers.

/// Formats `rows` (the first is the header) as an aligned text table with a rule
/// under the header. Rows shorter than the header are padded with empty cells.
pub fn format(rows: &[Vec<String>]) -> String {
    let Some(header) = rows.first() else {
        return String::new();
    };
    let nr_cols = rows
        .iter()
        .map(Vec::len)
        .max()
        .unwrap_or(0)
        .max(header.len());
    let mut widths = vec![0usize; nr_cols];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for (r, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (i, w) in widths.iter().enumerate() {
            let cell = row.get(i).map_or("", String::as_str);
            if i > 0 {
                line.push_str("  ");
            }
            if i == 0 {
                line.push_str(&format!("{cell:<w$}"));
            } else {
                line.push_str(&format!("{cell:>w$}"));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
        if r == 0 {
            let total = widths.iter().sum::<usize>() + 2 * (nr_cols - 1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn aligns_columns() {
        let t = super::format(&[
            vec!["name".into(), "n".into()],
            vec!["a".into(), "1234".into()],
        ]);
        assert_eq!(t, "name     n\n----------\na     1234\n");
    }
}
