package embed

import "sync"

// memo is a small LRU of text -> vector, safe for concurrent use.
type memo struct {
	mu         sync.Mutex
	capacity   int
	items      map[string]*memoEntry
	head, tail *memoEntry // most and least recently used
}

type memoEntry struct {
	text       string
	vec        []float32
	prev, next *memoEntry
}

func newMemo(capacity int) *memo {
	return &memo{capacity: capacity, items: make(map[string]*memoEntry, capacity)}
}

// get returns a copy of the vector for text and marks it recently used.
func (m *memo) get(text string) ([]float32, bool) {
	if m.capacity <= 0 {
		return nil, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.items[text]
	if !ok {
		return nil, false
	}
	m.unlink(e)
	m.pushFront(e)
	return clone(e.vec), true
}

// put stores vec for text, evicting the least recently used entry when full.
// The memo keeps vec: the caller must not change it afterwards.
func (m *memo) put(text string, vec []float32) {
	if m.capacity <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.items[text]; ok {
		e.vec = vec
		m.unlink(e)
		m.pushFront(e)
		return
	}
	if len(m.items) >= m.capacity {
		old := m.tail
		m.unlink(old)
		delete(m.items, old.text)
	}
	e := &memoEntry{text: text, vec: vec}
	m.items[text] = e
	m.pushFront(e)
}

func (m *memo) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items)
}

func (m *memo) unlink(e *memoEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		m.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		m.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (m *memo) pushFront(e *memoEntry) {
	e.next = m.head
	if m.head != nil {
		m.head.prev = e
	}
	m.head = e
	if m.tail == nil {
		m.tail = e
	}
}
