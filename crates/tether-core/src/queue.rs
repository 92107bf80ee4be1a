//! The bounded per-conversation queue of messages waiting behind the running turn
//! (architecture.md §3): never silently dropped, acknowledged with a 1-based position.
//!
//! `/stop` cancels only the running turn; queued messages keep their place.

use std::collections::VecDeque;

use tether_proto::ErrorCode;

/// Default number of messages that may wait behind a running turn.
pub const DEFAULT_QUEUE_CAP: usize = 16;

/// The queue is full; the message was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the queue is full ({cap} messages are waiting already)")]
pub struct QueueFull {
    pub cap: usize,
}

impl QueueFull {
    /// The stable wire code.
    pub fn code(&self) -> ErrorCode {
        ErrorCode::QueueFull
    }
}

/// A FIFO queue holding at most `cap` items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnQueue<T> {
    items: VecDeque<T>,
    cap: usize,
}

impl<T> Default for TurnQueue<T> {
    fn default() -> Self {
        Self::new(DEFAULT_QUEUE_CAP)
    }
}

impl<T> TurnQueue<T> {
    /// An empty queue holding at most `cap` items (`0`: nothing can wait).
    pub fn new(cap: usize) -> Self {
        Self {
            items: VecDeque::new(),
            cap,
        }
    }

    /// Appends an item and returns its 1-based position, or [`QueueFull`].
    pub fn push(&mut self, item: T) -> Result<u32, QueueFull> {
        if self.is_full() {
            return Err(QueueFull { cap: self.cap });
        }
        self.items.push_back(item);
        Ok(u32::try_from(self.items.len()).unwrap_or(u32::MAX))
    }

    /// Takes the oldest item.
    pub fn pop(&mut self) -> Option<T> {
        self.items.pop_front()
    }

    /// The oldest item, without taking it.
    pub fn peek(&self) -> Option<&T> {
        self.items.front()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.items.len() >= self.cap
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.items.iter()
    }

    /// Takes every item, oldest first (e.g. when the conversation is archived or the
    /// session closed, to answer each waiting message).
    pub fn drain(&mut self) -> Vec<T> {
        self.items.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    enum Op {
        Push(&'static str, Result<u32, QueueFull>),
        Pop(Option<&'static str>),
        Len(usize),
    }

    #[test]
    fn operations_table() {
        use Op::*;
        let full = Err(QueueFull { cap: 3 });
        let ops = [
            Len(0),
            Pop(None),
            Push("a", Ok(1)),
            Push("b", Ok(2)),
            Push("c", Ok(3)),
            Push("d", full),
            Len(3),
            Pop(Some("a")),
            Push("e", Ok(3)),
            Push("f", full),
            Pop(Some("b")),
            Pop(Some("c")),
            Pop(Some("e")),
            Pop(None),
            Len(0),
            Push("g", Ok(1)),
        ];
        let mut q = TurnQueue::new(3);
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Push(item, expected) => assert_eq!(q.push(item), expected, "op {i}"),
                Pop(expected) => assert_eq!(q.pop(), expected, "op {i}"),
                Len(n) => {
                    assert_eq!(q.len(), n, "op {i}");
                    assert_eq!(q.is_empty(), n == 0, "op {i}");
                }
            }
        }
    }

    #[test]
    fn default_cap_drain_and_zero_cap() {
        let mut q = TurnQueue::default();
        assert_eq!(q.cap(), DEFAULT_QUEUE_CAP);
        for i in 1..=DEFAULT_QUEUE_CAP {
            assert_eq!(
                q.push(i),
                u32::try_from(i).map_err(|_| QueueFull { cap: 0 })
            );
        }
        assert!(q.is_full());
        assert_eq!(
            q.push(99),
            Err(QueueFull {
                cap: DEFAULT_QUEUE_CAP
            })
        );
        assert_eq!(q.peek(), Some(&1));
        assert_eq!(q.iter().count(), DEFAULT_QUEUE_CAP);
        assert_eq!(q.drain(), (1..=DEFAULT_QUEUE_CAP).collect::<Vec<_>>());
        assert!(q.is_empty());

        let mut none = TurnQueue::new(0);
        assert_eq!(none.push(()), Err(QueueFull { cap: 0 }));
    }

    #[test]
    fn queue_full_error() {
        let err = QueueFull { cap: 16 };
        assert_eq!(err.code(), ErrorCode::QueueFull);
        assert_eq!(
            err.to_string(),
            "the queue is full (16 messages are waiting already)"
        );
    }
}
