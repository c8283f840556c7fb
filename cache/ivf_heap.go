package cache

// cand is a slot (or a list) and its Hamming distance to the query.
type cand struct {
	d int
	s int32
}

// minHeap and maxHeap order candidates by distance.
type minHeap []cand

func (p *minHeap) push(c cand) {
	*p = append(*p, c)
	a := *p
	for j := len(a) - 1; j > 0; {
		i := (j - 1) / 2
		if a[i].d <= a[j].d {
			break
		}
		a[i], a[j] = a[j], a[i]
		j = i
	}
}

func (p *minHeap) pop() cand {
	a := *p
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	*p = a[:last]
	p.down()
	return top
}

// replaceTop puts c in place of the top: a pop and a push in one pass.
func (p *minHeap) replaceTop(c cand) {
	(*p)[0] = c
	p.down()
}

// down moves the top down to its place.
func (p *minHeap) down() {
	a := *p
	for j := 0; ; {
		l, m := 2*j+1, j
		if l < len(a) && a[l].d < a[m].d {
			m = l
		}
		if l+1 < len(a) && a[l+1].d < a[m].d {
			m = l + 1
		}
		if m == j {
			break
		}
		a[j], a[m] = a[m], a[j]
		j = m
	}
}

// maxHeap keeps the farthest on top: a minHeap of negated distances.
type maxHeap struct{ h minHeap }

func (p *maxHeap) push(c cand) { p.h.push(cand{-c.d, c.s}) }

func (p *maxHeap) pop() cand {
	c := p.h.pop()
	return cand{-c.d, c.s}
}

func (p *maxHeap) farthest() int { return -p.h[0].d }

// keep adds c to a heap of at most n and returns the distance a newcomer
// must beat: bound until the heap is full, then its farthest.
func (p *maxHeap) keep(c cand, n, bound int) int {
	if len(p.h) < n {
		p.push(c)
	} else {
		p.h.replaceTop(cand{-c.d, c.s})
	}
	if len(p.h) == n {
		return min(bound, p.farthest())
	}
	return bound
}
