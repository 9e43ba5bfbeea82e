//! Which column a table is sorted by, and in which direction.

/// A table's sort: pressing a column's key sorts by it, pressing it again
/// reverses the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sort<C> {
    pub column: C,
    pub reverse: bool,
}

impl<C: Copy + PartialEq> Sort<C> {
    pub fn new(column: C) -> Sort<C> {
        Sort {
            column,
            reverse: false,
        }
    }

    /// Sorts by `column`, or reverses when it is already the sort column.
    pub fn toggle(&mut self, column: C) {
        if self.column == column {
            self.reverse = !self.reverse;
        } else {
            self.column = column;
            self.reverse = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_column_reverses_another_column_starts_ascending() {
        let mut sort = Sort::new('a');
        sort.toggle('a');
        assert_eq!(
            sort,
            Sort {
                column: 'a',
                reverse: true
            }
        );
        sort.toggle('a');
        assert!(!sort.reverse);
        sort.toggle('a');
        sort.toggle('b');
        assert_eq!(sort, Sort::new('b'));
    }
}
