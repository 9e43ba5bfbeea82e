//! A table's view over its rows: the filter, the sort, the selection and the
//! scroll offset. Rows are never copied; the view holds indices into them.
//!
//! The selection follows a row's key (a resource, a node name) across
//! refreshes, so a new poll re-sorting the rows does not move the cursor to
//! another lock.

use std::cmp::Ordering;

use super::filter::Filter;
use super::sort::Sort;

/// A set of rows a [`TableView`] can filter and sort.
pub trait Rows {
    type Column: Copy + PartialEq;

    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stable identity of row `i`, unique among the rows.
    fn key(&self, i: usize) -> &str;

    /// Does row `i` pass `filter`? Usually: does its text match.
    fn keep(&self, i: usize, filter: &Filter) -> bool;

    /// Order of rows `a` and `b` by `column`, ascending.
    fn compare(&self, a: usize, b: usize, column: Self::Column) -> Ordering;
}

/// Filter, sort, selection and scroll of one table.
#[derive(Debug, Clone)]
pub struct TableView<C> {
    sort: Sort<C>,
    filter: Option<Filter>,
    /// Row indices that pass the filter, in sort order.
    order: Vec<usize>,
    /// Rows before filtering.
    total: usize,
    /// Position of the selection in `order`.
    selected: usize,
    selected_key: Option<String>,
    /// First visible position, as last scrolled to.
    offset: usize,
}

impl<C: Copy + PartialEq> TableView<C> {
    pub fn new(column: C) -> TableView<C> {
        TableView {
            sort: Sort::new(column),
            filter: None,
            order: Vec::new(),
            total: 0,
            selected: 0,
            selected_key: None,
            offset: 0,
        }
    }

    pub fn sort(&self) -> Sort<C> {
        self.sort
    }

    pub fn filter(&self) -> Option<&Filter> {
        self.filter.as_ref()
    }

    /// Sorts by `column`, or reverses when it already is the sort column.
    pub fn sort_by<R: Rows<Column = C>>(&mut self, column: C, rows: &R) {
        self.sort.toggle(column);
        self.rebuild(rows);
    }

    pub fn set_filter<R: Rows<Column = C>>(&mut self, filter: Option<Filter>, rows: &R) {
        self.filter = filter;
        self.rebuild(rows);
    }

    /// Re-applies filter and sort after the rows changed, keeping the
    /// selection on the same key when it is still there.
    pub fn rebuild<R: Rows<Column = C>>(&mut self, rows: &R) {
        self.total = rows.len();
        self.order.clear();
        self.order.extend(
            (0..rows.len()).filter(|&i| self.filter.as_ref().is_none_or(|f| rows.keep(i, f))),
        );
        let Sort { column, reverse } = self.sort;
        self.order.sort_by(|&a, &b| {
            let order = rows
                .compare(a, b, column)
                .then_with(|| rows.key(a).cmp(rows.key(b)));
            if reverse {
                order.reverse()
            } else {
                order
            }
        });
        let kept = self
            .selected_key
            .as_deref()
            .and_then(|key| self.order.iter().position(|&i| rows.key(i) == key));
        self.selected = kept.unwrap_or(self.selected.min(self.order.len().saturating_sub(1)));
        self.remember(rows);
    }

    fn remember<R: Rows<Column = C>>(&mut self, rows: &R) {
        self.selected_key = self
            .order
            .get(self.selected)
            .map(|&i| rows.key(i).to_string());
    }

    /// Row indices shown, in order.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// Rows before the filter.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The selected row's index into the rows.
    pub fn selected_row(&self) -> Option<usize> {
        self.order.get(self.selected).copied()
    }

    /// The selected row's position among the shown rows.
    pub fn selected_position(&self) -> Option<usize> {
        (self.selected < self.order.len()).then_some(self.selected)
    }

    pub fn selected_key(&self) -> Option<&str> {
        self.selected_key.as_deref()
    }

    /// Moves the selection by `delta` rows, stopping at either end, and
    /// scrolls so it stays within a window of `height` rows.
    pub fn move_by<R: Rows<Column = C>>(&mut self, delta: isize, height: usize, rows: &R) {
        if self.order.is_empty() {
            return;
        }
        let last = self.order.len() - 1;
        self.selected = self.selected.saturating_add_signed(delta).min(last);
        self.remember(rows);
        self.offset = self.offset_for(height);
    }

    pub fn top<R: Rows<Column = C>>(&mut self, height: usize, rows: &R) {
        self.move_by(isize::MIN, height, rows);
    }

    pub fn bottom<R: Rows<Column = C>>(&mut self, height: usize, rows: &R) {
        self.move_by(isize::MAX, height, rows);
    }

    /// First position to show in a window of `height` rows so that the
    /// selection is visible, moving as little as possible from the last
    /// scroll; never leaves empty rows at the end when rows could fill them.
    pub fn offset_for(&self, height: usize) -> usize {
        if height == 0 || self.order.is_empty() {
            return 0;
        }
        let mut offset = self.offset.min(self.order.len().saturating_sub(height));
        if self.selected < offset {
            offset = self.selected;
        } else if self.selected >= offset + height {
            offset = self.selected + 1 - height;
        }
        offset
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Rows of (name, number) for table tests.
    pub(crate) struct Pairs(pub Vec<(String, u32)>);

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Col {
        Name,
        Number,
    }

    impl Rows for Pairs {
        type Column = Col;
        fn len(&self) -> usize {
            self.0.len()
        }
        fn key(&self, i: usize) -> &str {
            &self.0[i].0
        }
        fn keep(&self, i: usize, filter: &Filter) -> bool {
            filter.keeps([self.0[i].0.as_str()])
        }
        fn compare(&self, a: usize, b: usize, column: Col) -> Ordering {
            match column {
                Col::Name => self.0[a].0.cmp(&self.0[b].0),
                Col::Number => self.0[a].1.cmp(&self.0[b].1),
            }
        }
    }

    fn pairs(items: &[(&str, u32)]) -> Pairs {
        Pairs(items.iter().map(|(n, v)| (n.to_string(), *v)).collect())
    }

    fn names(view: &TableView<Col>, rows: &Pairs) -> Vec<String> {
        view.order().iter().map(|&i| rows.0[i].0.clone()).collect()
    }

    #[test]
    fn sorts_by_a_column_and_reverses_on_the_second_press() {
        let rows = pairs(&[("b", 1), ("c", 3), ("a", 2)]);
        let mut view = TableView::new(Col::Name);
        view.rebuild(&rows);
        assert_eq!(names(&view, &rows), ["a", "b", "c"]);
        view.sort_by(Col::Number, &rows);
        assert_eq!(names(&view, &rows), ["b", "a", "c"]);
        view.sort_by(Col::Number, &rows);
        assert_eq!(names(&view, &rows), ["c", "a", "b"]);
    }

    #[test]
    fn ties_are_broken_by_key_so_the_order_is_stable() {
        let rows = pairs(&[("z", 1), ("m", 1), ("a", 1)]);
        let mut view = TableView::new(Col::Number);
        view.rebuild(&rows);
        assert_eq!(names(&view, &rows), ["a", "m", "z"]);
    }

    #[test]
    fn filters_and_counts() {
        let rows = pairs(&[("orders:1", 1), ("batch", 2), ("orders:2", 3)]);
        let mut view = TableView::new(Col::Name);
        view.set_filter(Filter::parse("orders").unwrap(), &rows);
        assert_eq!(names(&view, &rows), ["orders:1", "orders:2"]);
        assert_eq!(view.total(), 3);
        view.set_filter(Filter::parse("!orders").unwrap(), &rows);
        assert_eq!(names(&view, &rows), ["batch"]);
        view.set_filter(Filter::parse("nothing-like-it").unwrap(), &rows);
        assert!(view.order().is_empty());
        assert_eq!(view.selected_row(), None);
    }

    #[test]
    fn the_selection_follows_its_key_across_refreshes() {
        let mut rows = pairs(&[("a", 1), ("b", 2), ("c", 3)]);
        let mut view = TableView::new(Col::Number);
        view.rebuild(&rows);
        view.move_by(1, 10, &rows);
        assert_eq!(view.selected_key(), Some("b"));
        // The next poll: "b" is now first by number.
        rows = pairs(&[("a", 5), ("b", 0), ("c", 3), ("d", 4)]);
        view.rebuild(&rows);
        assert_eq!(view.selected_key(), Some("b"));
        assert_eq!(view.selected_position(), Some(0));
        // "b" is gone: the selection stays at its position, clamped.
        rows = pairs(&[("a", 5)]);
        view.rebuild(&rows);
        assert_eq!(view.selected_key(), Some("a"));
    }

    #[test]
    fn moves_stop_at_the_ends_and_scrolling_keeps_the_selection_visible() {
        let rows = Pairs((0..1000).map(|i| (format!("r{i:04}"), i)).collect());
        let mut view = TableView::new(Col::Name);
        view.rebuild(&rows);
        view.move_by(-5, 10, &rows);
        assert_eq!(view.selected_position(), Some(0));
        view.move_by(25, 10, &rows);
        assert_eq!(view.selected_position(), Some(25));
        assert_eq!(view.offset_for(10), 16);
        view.move_by(-3, 10, &rows);
        // Still visible: no scroll.
        assert_eq!(view.offset_for(10), 16);
        view.bottom(10, &rows);
        assert_eq!(view.selected_position(), Some(999));
        assert_eq!(view.offset_for(10), 990);
        view.top(10, &rows);
        assert_eq!(view.selected_position(), Some(0));
        assert_eq!(view.offset_for(10), 0);
        // A taller window after a resize never leaves empty rows at the end.
        view.bottom(10, &rows);
        assert_eq!(view.offset_for(50), 950);
        assert_eq!(view.offset_for(0), 0);
    }
}
