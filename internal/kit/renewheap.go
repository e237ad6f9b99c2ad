package kit

// leaseHeap is a container/heap of leases by the time of their next
// renewal, each knowing its index (rs.idx; -1 once out).
type leaseHeap []*Lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].rs.at.Before(h[j].rs.at) }

func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].rs.idx, h[j].rs.idx = i, j
}

func (h *leaseHeap) Push(x any) {
	l := x.(*Lease)
	l.rs.idx = len(*h)
	*h = append(*h, l)
}

func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.rs.idx = -1
	return l
}
