package adapters

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioBatch runs many non-blocking socket reads and writes in one kernel
// entry through an io_uring. Each operation carries MSG_DONTWAIT, so it
// completes during the io_uring_enter that submits it, with what read(2)
// or write(2) would have returned, EAGAIN included: the loop keeps its
// readiness model and pays one system call per batch instead of one per
// operation (a system call costs about 1 µs on the virtual machines
// measured, docs/BENCHMARKS.md).
type ioBatch struct {
	fd      int
	sqTail  *uint32
	sqMask  uint32
	sqArray unsafe.Pointer
	sqes    unsafe.Pointer
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    unsafe.Pointer
	queued  uint32
	res     []int32 // results by index in the batch: a byte count, or -errno
	ringMem []byte
	sqeMem  []byte
}

const (
	sysIOUringSetup = 425
	sysIOUringEnter = 426
	uringOpSend     = 26
	uringOpRecv     = 27
	uringGetEvents  = 1
	uringOffSQEs    = 0x10000000
	uringFeatSingle = 1      // IORING_FEAT_SINGLE_MMAP
	uringSubmitAll  = 1 << 7 // IORING_SETUP_SUBMIT_ALL
	batchEntries    = 256    // operations in one batch at most
)

type uringSQOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type uringCQOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  uringSQOffsets
	cqOff                                                                  uringCQOffsets
}

// uringSQE is struct io_uring_sqe, 64 bytes.
type uringSQE struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	opFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFDIn  int32
	addr3       uint64
	pad         uint64
}

// uringCQE is struct io_uring_cqe, 16 bytes.
type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

var errOldRing = errors.New("io_uring: the kernel's ring lacks IORING_FEAT_SINGLE_MMAP or room for a batch")

// newIOBatch sets up a ring, or fails where the kernel has none or
// forbids it (io_uring_disabled, seccomp): the loop then makes plain
// system calls.
func newIOBatch() (*ioBatch, error) {
	// SUBMIT_ALL (Linux 5.18): an operation that fails before it starts
	// does not stop the ones after it from being submitted.
	p := uringParams{flags: uringSubmitAll}
	fd, _, errno := syscall.RawSyscall(sysIOUringSetup, batchEntries, uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	b := &ioBatch{fd: int(fd), res: make([]int32, p.sqEntries)}
	if p.features&uringFeatSingle == 0 || p.sqEntries < batchEntries || p.cqEntries < batchEntries {
		unix.Close(b.fd)
		return nil, errOldRing
	}
	size := max(p.sqOff.array+p.sqEntries*4, p.cqOff.cqes+p.cqEntries*uint32(unsafe.Sizeof(uringCQE{})))
	ring, err := unix.Mmap(b.fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(b.fd)
		return nil, fmt.Errorf("io_uring: mmap ring: %w", err)
	}
	sqes, err := unix.Mmap(b.fd, uringOffSQEs, int(p.sqEntries)*int(unsafe.Sizeof(uringSQE{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		_ = unix.Munmap(ring)
		unix.Close(b.fd)
		return nil, fmt.Errorf("io_uring: mmap sqes: %w", err)
	}
	base := unsafe.Pointer(&ring[0])
	b.ringMem, b.sqeMem = ring, sqes
	b.sqTail = (*uint32)(unsafe.Add(base, p.sqOff.tail))
	b.sqMask = *(*uint32)(unsafe.Add(base, p.sqOff.ringMask))
	b.sqArray = unsafe.Add(base, p.sqOff.array)
	b.cqHead = (*uint32)(unsafe.Add(base, p.cqOff.head))
	b.cqTail = (*uint32)(unsafe.Add(base, p.cqOff.tail))
	b.cqMask = *(*uint32)(unsafe.Add(base, p.cqOff.ringMask))
	b.cqes = unsafe.Add(base, p.cqOff.cqes)
	b.sqes = unsafe.Pointer(&sqes[0])
	return b, nil
}

func (b *ioBatch) close() {
	_ = unix.Munmap(b.sqeMem)
	_ = unix.Munmap(b.ringMem)
	unix.Close(b.fd)
}

// recv queues a read of fd into p and returns its index for res.
func (b *ioBatch) recv(fd int, p []byte) int { return b.add(uringOpRecv, fd, p) }

// send queues a write of p to fd and returns its index for res.
func (b *ioBatch) send(fd int, p []byte) int { return b.add(uringOpSend, fd, p) }

func (b *ioBatch) add(op uint8, fd int, p []byte) int {
	i := (*b.sqTail + b.queued) & b.sqMask
	e := (*uringSQE)(unsafe.Add(b.sqes, uintptr(i)*unsafe.Sizeof(uringSQE{})))
	*e = uringSQE{opcode: op, fd: int32(fd), addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p)))),
		len: uint32(len(p)), opFlags: unix.MSG_DONTWAIT | unix.MSG_NOSIGNAL, userData: uint64(b.queued)}
	*(*uint32)(unsafe.Add(b.sqArray, uintptr(i)*4)) = i
	b.queued++
	return int(b.queued - 1)
}

// run submits what is queued and waits for every result. The buffers
// given to recv and send must stay reachable until it returns.
func (b *ioBatch) run() {
	total := b.queued
	if total == 0 {
		return
	}
	atomic.StoreUint32(b.sqTail, *b.sqTail+total)
	b.queued = 0
	toSubmit := total
	for done := uint32(0); done < total; {
		n, errno := b.enter(toSubmit, total-done)
		switch errno {
		case 0:
			toSubmit -= n
		case unix.EINTR, unix.EAGAIN, unix.EBUSY:
		default:
			panic(fmt.Sprintf("io_uring_enter: %v", errno)) // a bad ring: a bug
		}
		head, tail := *b.cqHead, atomic.LoadUint32(b.cqTail)
		for ; head != tail; head++ {
			c := (*uringCQE)(unsafe.Add(b.cqes, uintptr(head&b.cqMask)*unsafe.Sizeof(uringCQE{})))
			b.res[c.userData] = c.res
			done++
		}
		atomic.StoreUint32(b.cqHead, head)
	}
}

func (b *ioBatch) enter(toSubmit, minComplete uint32) (uint32, syscall.Errno) {
	n, _, errno := syscall.RawSyscall6(sysIOUringEnter, uintptr(b.fd), uintptr(toSubmit), uintptr(minComplete), uringGetEvents, 0, 0)
	return uint32(n), errno
}

// sentResult turns a send's result into write(2)'s answer.
func sentResult(res int32) (int, error) {
	if res < 0 {
		return 0, syscall.Errno(-res)
	}
	return int(res), nil
}

// readResult turns a recv's result into sysRead's answer.
func readResult(res int32) (int, error) {
	if res == 0 {
		return 0, errEOF
	}
	return sentResult(res)
}
