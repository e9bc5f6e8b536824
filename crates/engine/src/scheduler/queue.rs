//! [`WaitingQueue`]: requests waiting for admission, lower priority value first (vLLM's
//! convention), FIFO within a priority, with preempted requests put back at the *front* of
//! their priority class.
//!
//! Ordering key: `(priority, position)`. New arrivals take positions 0, 1, 2, ...;
//! requests pushed to the front take -1, -2, ..., so the most recently re-queued one runs first
//! within its class. All operations are O(log n).

use std::collections::{BTreeMap, HashMap};

use crate::request::RequestId;

type Key = (i32, i64);

/// Priority-ordered queue of waiting request ids.
#[derive(Debug, Clone, Default)]
pub struct WaitingQueue {
    order: BTreeMap<Key, RequestId>,
    keys: HashMap<RequestId, Key>,
    next_back: i64,
    next_front: i64,
}

impl WaitingQueue {
    /// An empty queue.
    pub fn new() -> Self {
        WaitingQueue {
            next_front: -1,
            ..Default::default()
        }
    }

    /// Queues `id` behind every request of the same priority.
    pub fn push_back(&mut self, id: RequestId, priority: i32) {
        let key = (priority, self.next_back);
        self.next_back += 1;
        self.insert(id, key);
    }

    /// Queues `id` ahead of every request of the same priority (used for preempted requests).
    pub fn push_front(&mut self, id: RequestId, priority: i32) {
        let key = (priority, self.next_front);
        self.next_front -= 1;
        self.insert(id, key);
    }

    /// The request to admit next.
    pub fn peek(&self) -> Option<RequestId> {
        self.order.first_key_value().map(|(_, &id)| id)
    }

    /// Removes and returns the request to admit next.
    pub fn pop(&mut self) -> Option<RequestId> {
        let (_, id) = self.order.pop_first()?;
        self.keys.remove(&id);
        Some(id)
    }

    /// Removes `id` wherever it is; false if it was not queued.
    pub fn remove(&mut self, id: RequestId) -> bool {
        match self.keys.remove(&id) {
            Some(key) => self.order.remove(&key).is_some(),
            None => false,
        }
    }

    /// Whether `id` is queued.
    pub fn contains(&self, id: RequestId) -> bool {
        self.keys.contains_key(&id)
    }

    /// Number of queued requests.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Queued ids in admission order.
    pub fn iter(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.order.values().copied()
    }

    fn insert(&mut self, id: RequestId, key: Key) {
        if let Some(old) = self.keys.insert(id, key) {
            self.order.remove(&old);
        }
        self.order.insert(key, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_then_fifo_then_front() {
        let mut q = WaitingQueue::new();
        q.push_back(1, 0);
        q.push_back(2, -5);
        q.push_back(3, 0);
        q.push_back(4, -5);
        q.push_front(5, 0);
        q.push_front(6, 0);
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![2, 4, 6, 5, 1, 3]);
        assert!(q.remove(4));
        assert!(!q.remove(4));
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.peek(), Some(6));
        assert_eq!(q.len(), 4);
    }
}
