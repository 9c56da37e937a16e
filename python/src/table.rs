//! Columns in Apache Arrow's memory layout, built in Rust and handed to
//! Python as byte buffers that pyarrow wraps without copying
//! (`pyarrow.Array.from_buffers`). This is what makes a million-event trace
//! a DataFrame in well under a second: no Python object per value.
//!
//! Layouts (the Arrow columnar format, little-endian): a primitive column
//! is its values back to back; a string column is `i32` offsets (one more
//! than rows) and the UTF-8 bytes; a dictionary column is `u32` indices
//! into a short list of strings (repeated names: metrics, event kinds); a
//! list column is `i32` offsets into a child table (a list of structs).
//! Every column may have a validity bitmap (bit `i` set: row `i` has a
//! value), kept only when some row is null.
//!
//! # Mostly-null columns
//!
//! A trace's table has one column per tracepoint field, and each event
//! kind fills only a few: most columns are mostly null, and a trace without
//! some kind has columns that are null throughout. Builders therefore pad
//! the rows an event skips in bulk (`resize`, not a push per row), and a
//! column with no value at all is sent as [`Data::Null`] (its type and
//! length only): the Python side makes it from one shared zeroed buffer
//! instead of copying megabytes of zeros.

/// A primitive Arrow type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prim {
    U8,
    U32,
    I32,
    U64,
    I64,
    F64,
}

impl Prim {
    /// The name the Python side maps to a pyarrow type.
    pub fn name(self) -> &'static str {
        match self {
            Prim::U8 => "u8",
            Prim::U32 => "u32",
            Prim::I32 => "i32",
            Prim::U64 => "u64",
            Prim::I64 => "i64",
            Prim::F64 => "f64",
        }
    }
}

/// A value that can live in a primitive column.
pub trait Native: Copy + Default {
    const PRIM: Prim;
    fn put(self, out: &mut Vec<u8>);
}

macro_rules! native {
    ($($t:ty => $p:ident),*) => {$(
        impl Native for $t {
            const PRIM: Prim = Prim::$p;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
native!(u8 => U8, u32 => U32, i32 => I32, u64 => U64, i64 => I64, f64 => F64);

/// Which rows have a value: an Arrow validity bitmap and its null count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Validity {
    bits: Vec<u8>,
    len: usize,
    nulls: usize,
}

impl Validity {
    /// Appends `k` null rows (their bits are already clear: a set bit is
    /// only ever written for a valid row).
    fn extend_nulls(&mut self, k: usize) {
        self.len += k;
        self.nulls += k;
        self.bits.resize(self.len.div_ceil(8), 0);
    }

    /// True when no row so far has a value (also when there are no rows).
    fn all_null(&self) -> bool {
        self.nulls == self.len
    }

    fn push(&mut self, valid: bool) {
        if self.len.is_multiple_of(8) {
            self.bits.push(0);
        }
        if valid {
            self.bits[self.len / 8] |= 1 << (self.len % 8);
        } else {
            self.nulls += 1;
        }
        self.len += 1;
    }

    /// The bitmap, or `None` when every row has a value (Arrow's shortcut).
    pub fn bitmap(&self) -> Option<&[u8]> {
        (self.nulls > 0).then_some(&self.bits[..])
    }

    pub fn null_count(&self) -> usize {
        self.nulls
    }
}

/// One column's data.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// Values back to back, little-endian.
    Prim { prim: Prim, bytes: Vec<u8> },
    /// One bit per row.
    Bool { bits: Vec<u8> },
    /// `offsets[i]..offsets[i+1]` of `bytes` is row `i`.
    Str { offsets: Vec<u8>, bytes: Vec<u8> },
    /// Row `i` is `dict[indices[i]]` (`u32` little-endian indices).
    Dict { indices: Vec<u8>, dict: Vec<String> },
    /// `offsets[i]..offsets[i+1]` (`i32`) of the child's rows is row `i`.
    List { offsets: Vec<u8>, child: Table },
    /// Every row null: a column of type `ty` (a [`Prim::name`], `bool` or
    /// `str`) with no buffers.
    Null { ty: &'static str },
}

/// A column: its data and which rows are null.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub data: Data,
    pub validity: Validity,
    pub len: usize,
}

/// Named columns of equal length.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub nrows: usize,
    pub columns: Vec<(String, Column)>,
}

impl Table {
    /// Adds a column; panics if its length is not the table's (a bug in
    /// the builder, not bad input).
    pub fn push(&mut self, name: &str, col: Column) {
        if self.columns.is_empty() {
            self.nrows = col.len;
        }
        assert_eq!(col.len, self.nrows, "column {name} has the wrong length");
        self.columns.push((name.to_string(), col));
    }

    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }
}

/// Builds a primitive column row by row; rows not set are null.
#[derive(Debug)]
pub struct PrimCol<T: Native> {
    bytes: Vec<u8>,
    validity: Validity,
    _t: std::marker::PhantomData<T>,
}

impl<T: Native> Default for PrimCol<T> {
    fn default() -> Self {
        PrimCol {
            bytes: Vec::new(),
            validity: Validity::default(),
            _t: std::marker::PhantomData,
        }
    }
}

/// The column of `len` rows, none with a value, of type `ty`.
fn null_column(ty: &'static str, len: usize) -> Column {
    let mut validity = Validity::default();
    validity.extend_nulls(len);
    validity.bits = Vec::new();
    Column {
        data: Data::Null { ty },
        validity,
        len,
    }
}

impl<T: Native> PrimCol<T> {
    pub fn with_capacity(n: usize) -> Self {
        PrimCol {
            bytes: Vec::with_capacity(n * std::mem::size_of::<T>()),
            ..Self::default()
        }
    }

    pub fn push(&mut self, v: Option<T>) {
        self.validity.push(v.is_some());
        v.unwrap_or_default().put(&mut self.bytes);
    }

    /// Sets row `row` (rows before it that were not set become null).
    pub fn set(&mut self, row: usize, v: T) {
        self.pad(row);
        self.push(Some(v));
    }

    /// Sets row `row` if `v` is a value (it stays null otherwise).
    pub fn set_opt(&mut self, row: usize, v: Option<T>) {
        if let Some(v) = v {
            self.set(row, v);
        }
    }

    fn pad(&mut self, rows: usize) {
        if let Some(k) = rows.checked_sub(self.validity.len) {
            self.validity.extend_nulls(k);
            self.bytes.resize(rows * std::mem::size_of::<T>(), 0);
        }
    }

    pub fn finish(mut self, rows: usize) -> Column {
        if self.validity.all_null() {
            return null_column(T::PRIM.name(), rows.max(self.validity.len));
        }
        self.pad(rows);
        Column {
            len: self.validity.len,
            data: Data::Prim {
                prim: T::PRIM,
                bytes: self.bytes,
            },
            validity: self.validity,
        }
    }
}

/// Builds a boolean column; rows not set are null.
#[derive(Debug, Default)]
pub struct BoolCol {
    bits: Validity,
    validity: Validity,
}

impl BoolCol {
    pub fn set(&mut self, row: usize, v: bool) {
        self.pad(row);
        self.bits.push(v);
        self.validity.push(true);
    }

    fn pad(&mut self, rows: usize) {
        if let Some(k) = rows.checked_sub(self.validity.len) {
            self.bits.extend_nulls(k);
            self.validity.extend_nulls(k);
        }
    }

    pub fn finish(mut self, rows: usize) -> Column {
        if self.validity.all_null() {
            return null_column("bool", rows.max(self.validity.len));
        }
        self.pad(rows);
        Column {
            len: self.validity.len,
            data: Data::Bool {
                bits: self.bits.bits,
            },
            validity: self.validity,
        }
    }
}

/// Builds a string column; rows not set are null.
#[derive(Debug)]
pub struct StrCol {
    offsets: Vec<u8>,
    bytes: Vec<u8>,
    validity: Validity,
}

impl Default for StrCol {
    fn default() -> Self {
        StrCol {
            offsets: 0i32.to_le_bytes().to_vec(),
            bytes: Vec::new(),
            validity: Validity::default(),
        }
    }
}

impl StrCol {
    fn end(&mut self) {
        // Arrow's string offsets are i32: a column holds at most 2 GiB of
        // text, far beyond any trace's file names.
        let end = i32::try_from(self.bytes.len()).unwrap_or(i32::MAX);
        self.offsets.extend_from_slice(&end.to_le_bytes());
    }

    pub fn set(&mut self, row: usize, v: &str) {
        self.pad(row);
        self.bytes.extend_from_slice(v.as_bytes());
        self.end();
        self.validity.push(true);
    }

    fn pad(&mut self, rows: usize) {
        if let Some(k) = rows.checked_sub(self.validity.len) {
            let end = i32::try_from(self.bytes.len()).unwrap_or(i32::MAX);
            for _ in 0..k {
                self.offsets.extend_from_slice(&end.to_le_bytes());
            }
            self.validity.extend_nulls(k);
        }
    }

    pub fn finish(mut self, rows: usize) -> Column {
        if self.validity.all_null() {
            return null_column("str", rows.max(self.validity.len));
        }
        self.pad(rows);
        Column {
            len: self.validity.len,
            data: Data::Str {
                offsets: self.offsets,
                bytes: self.bytes,
            },
            validity: self.validity,
        }
    }
}

/// Builds a dictionary-encoded string column (few distinct values).
#[derive(Debug, Default)]
pub struct DictCol {
    indices: Vec<u8>,
    dict: Vec<String>,
    validity: Validity,
    /// The last value's index: consecutive rows usually repeat a value.
    last: Option<u32>,
}

impl DictCol {
    pub fn push(&mut self, v: Option<&str>) {
        let i = match v {
            None => 0,
            Some(s) => match self.last.filter(|&i| self.dict[i as usize] == s) {
                Some(i) => i,
                None => {
                    let i = match self.dict.iter().position(|d| d == s) {
                        Some(i) => i as u32,
                        None => {
                            self.dict.push(s.to_string());
                            (self.dict.len() - 1) as u32
                        }
                    };
                    self.last = Some(i);
                    i
                }
            },
        };
        self.indices.extend_from_slice(&i.to_le_bytes());
        self.validity.push(v.is_some());
    }

    pub fn finish(self) -> Column {
        Column {
            len: self.validity.len,
            data: Data::Dict {
                indices: self.indices,
                dict: self.dict,
            },
            validity: self.validity,
        }
    }
}

/// Builds a column of lists of a child table's rows; rows not set are null.
#[derive(Debug)]
pub struct ListCol {
    offsets: Vec<u8>,
    child_rows: i32,
    validity: Validity,
}

impl Default for ListCol {
    fn default() -> Self {
        ListCol {
            offsets: 0i32.to_le_bytes().to_vec(),
            child_rows: 0,
            validity: Validity::default(),
        }
    }
}

impl ListCol {
    /// Row `row` is the next `n` rows of the child.
    pub fn set(&mut self, row: usize, n: usize) {
        self.pad(row);
        self.child_rows = self
            .child_rows
            .saturating_add(i32::try_from(n).unwrap_or(i32::MAX));
        self.offsets
            .extend_from_slice(&self.child_rows.to_le_bytes());
        self.validity.push(true);
    }

    fn pad(&mut self, rows: usize) {
        if let Some(k) = rows.checked_sub(self.validity.len) {
            for _ in 0..k {
                self.offsets
                    .extend_from_slice(&self.child_rows.to_le_bytes());
            }
            self.validity.extend_nulls(k);
        }
    }

    pub fn finish(mut self, rows: usize, child: Table) -> Column {
        self.pad(rows);
        Column {
            len: self.validity.len,
            data: Data::List {
                offsets: self.offsets,
                child,
            },
            validity: self.validity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64s(c: &Column) -> Vec<u64> {
        let Data::Prim { bytes, .. } = &c.data else {
            panic!("not primitive")
        };
        bytes
            .chunks(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect()
    }

    #[test]
    fn rows_not_set_are_null_and_the_bitmap_says_so() {
        let mut c = PrimCol::<u64>::default();
        c.set(1, 7);
        c.set(3, 9);
        let col = c.finish(5);
        assert_eq!(col.len, 5);
        assert_eq!(u64s(&col), [0, 7, 0, 9, 0]);
        assert_eq!(col.validity.null_count(), 3);
        assert_eq!(col.validity.bitmap(), Some(&[0b0000_1010u8][..]));
    }

    #[test]
    fn a_column_never_set_is_a_null_column_of_its_type() {
        let col = PrimCol::<u64>::default().finish(1000);
        assert_eq!(col.data, Data::Null { ty: "u64" });
        assert_eq!((col.len, col.validity.null_count()), (1000, 1000));
        assert_eq!(StrCol::default().finish(3).data, Data::Null { ty: "str" });
        assert_eq!(BoolCol::default().finish(3).data, Data::Null { ty: "bool" });
        // One value is enough for the full layout.
        let mut c = PrimCol::<u64>::default();
        c.set(999, 5);
        let col = c.finish(1000);
        assert_eq!(u64s(&col)[999], 5);
        assert_eq!(col.validity.null_count(), 999);
    }

    #[test]
    fn padding_in_bulk_keeps_the_bitmap_and_offsets_exact() {
        let mut b = BoolCol::default();
        b.set(9, true);
        b.set(10, false);
        let col = b.finish(17);
        let Data::Bool { bits } = &col.data else {
            panic!()
        };
        assert_eq!(bits, &[0, 0b0000_0010, 0]);
        assert_eq!(col.validity.bitmap(), Some(&[0, 0b0000_0110, 0][..]));
        let mut s = StrCol::default();
        s.set(2, "xy");
        let col = s.finish(4);
        let Data::Str { offsets, .. } = &col.data else {
            panic!()
        };
        assert_eq!(offsets.len(), 5 * 4);
        assert_eq!(&offsets[12..], &[2, 0, 0, 0, 2, 0, 0, 0]);
    }

    #[test]
    fn a_column_without_nulls_has_no_bitmap() {
        let mut c = PrimCol::<i32>::default();
        for i in 0..10 {
            c.push(Some(-i));
        }
        assert_eq!(c.finish(10).validity.bitmap(), None);
    }

    #[test]
    fn strings_and_dictionaries_in_arrow_layout() {
        let mut s = StrCol::default();
        s.set(0, "ab");
        s.set(2, "c");
        let col = s.finish(3);
        let Data::Str { offsets, bytes } = &col.data else {
            panic!()
        };
        let offs: Vec<i32> = offsets
            .chunks(4)
            .map(|b| i32::from_le_bytes(b.try_into().expect("4")))
            .collect();
        assert_eq!(offs, [0, 2, 2, 3]);
        assert_eq!(bytes, b"abc");
        let mut d = DictCol::default();
        for v in [Some("x"), Some("y"), Some("x"), None] {
            d.push(v);
        }
        let col = d.finish();
        let Data::Dict { indices, dict } = &col.data else {
            panic!()
        };
        assert_eq!(dict, &["x", "y"]);
        assert_eq!(indices.len(), 16);
        assert_eq!(col.validity.null_count(), 1);
    }

    #[test]
    fn list_offsets_follow_the_child_rows() {
        let mut l = ListCol::default();
        l.set(1, 2);
        l.set(2, 1);
        let col = l.finish(4, Table::default());
        let Data::List { offsets, .. } = &col.data else {
            panic!()
        };
        let offs: Vec<i32> = offsets
            .chunks(4)
            .map(|b| i32::from_le_bytes(b.try_into().expect("4")))
            .collect();
        assert_eq!(offs, [0, 0, 2, 3, 3]);
        assert_eq!(col.validity.null_count(), 2);
    }
}
